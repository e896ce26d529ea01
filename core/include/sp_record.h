/*
 * The records that travel from a server's workers to its exporter through
 * shared memory (sp_ring.h), in their decoded form.
 *
 * Three kinds: a stack sample, a finished span, and the table of objects
 * (executable, shared libraries) loaded in a worker, so the exporter can
 * symbolize the worker's addresses. Writers encode into ring memory;
 * the exporter decodes, and treats every byte as untrusted: a decoder
 * checks every length against the record's size and fails with
 * SP_ERR_INVALID rather than read past it.
 *
 * Decoded views point into the record's bytes (no copy): they are valid
 * while those bytes are. A span record's body is the OTLP Span message
 * itself, which the exporter sends on without decoding it.
 */
#ifndef SP_RECORD_H
#define SP_RECORD_H

#include "sp_common.h"

#define SP_RECORD_MAX_FRAMES      1024
#define SP_THREAD_NAME_SIZE       16    /* as prctl(PR_GET_NAME) */
#define SP_BUILD_ID_MAX           20    /* GNU build id: SHA-1 */
/* A sample's weight is at most this: a timer whose signal was held back
 * for longer (masked, or its thread not scheduled) saturates here rather
 * than pin the time of thousands of intervals on one stack. */
#define SP_SAMPLE_WEIGHT_MAX      1024

typedef enum sp_record_type {
    SP_RECORD_SAMPLE = 1,
    SP_RECORD_SPAN = 2,
    SP_RECORD_OBJECTS = 3
} sp_record_type;

typedef enum sp_sample_source {
    SP_SOURCE_SNAPSHOT = 1,     /* a thread working for a selected span */
    SP_SOURCE_CONTINUOUS = 2    /* the always-on profiler */
} sp_sample_source;

/* What the thread was doing when sampled (pprof label thread.state). */
typedef enum sp_thread_state {
    SP_THREAD_RUNNING = 1,      /* on CPU, interrupted by the sampler */
    SP_THREAD_BLOCKED = 2,      /* inside a system call */
    SP_THREAD_UNKNOWN = 3
} sp_thread_state;

typedef struct sp_sample {
    uint64_t        time_ns;        /* CLOCK_REALTIME, unix epoch */
    uint64_t        period_ns;      /* real time since this thread's
                                       previous sample of this source */
    uint32_t        pid;
    uint32_t        tid;
    char            thread_name[SP_THREAD_NAME_SIZE]; /* NUL-terminated */
    uint8_t         state;          /* sp_thread_state */
    uint8_t         source;         /* sp_sample_source */
    bool            truncated;      /* deeper than the max stack depth */
    bool            has_span;       /* trace_id/span_id are set */
    uint8_t         trace_id[16];
    uint8_t         span_id[8];
    uint16_t        frame_count;    /* <= SP_RECORD_MAX_FRAMES */
    uint16_t        weight;         /* sampling intervals this sample
                                       stands for: 1 + the expirations
                                       its timer missed before it (a
                                       CPU-time timer fires only on the
                                       kernel's tick), <=
                                       SP_SAMPLE_WEIGHT_MAX; encoding
                                       takes 0 as 1, decoding gives >= 1 */
    const uint64_t *frames;         /* return addresses, top of stack
                                       first (frames[0] is the PC) */
} sp_sample;

typedef enum sp_value_type {
    SP_VALUE_STRING = 1,
    SP_VALUE_INT = 2,
    SP_VALUE_BOOL = 3
} sp_value_type;

typedef struct sp_span_attr {
    const char *key;
    size_t      key_len;
    uint8_t     type;           /* sp_value_type */
    const char *str;            /* SP_VALUE_STRING */
    size_t      str_len;
    int64_t     integer;        /* SP_VALUE_INT; SP_VALUE_BOOL: 0 or 1 */
} sp_span_attr;

/* OTLP's SpanKind and Status.StatusCode numbers. */
#define SP_SPAN_KIND_SERVER     2
#define SP_STATUS_UNSET         0
#define SP_STATUS_OK            1
#define SP_STATUS_ERROR         2

typedef struct sp_span_record {
    uint8_t     trace_id[16];
    uint8_t     span_id[8];
    uint8_t     parent_span_id[8];  /* all zero for a root span */
    uint8_t     trace_flags;
    uint8_t     kind;
    uint8_t     status_code;
    uint32_t    pid;                /* the worker that served it */
    uint64_t    start_ns;           /* CLOCK_REALTIME, unix epoch */
    uint64_t    end_ns;
    const char *name;
    size_t      name_len;
    const char *tracestate;         /* as received and validated */
    size_t      tracestate_len;
} sp_span_record;

/* A decoded span record: the Span message the worker wrote, to be sent as
 * it is, and where its ids lie in it. */
typedef struct sp_span_view {
    uint32_t       pid;
    const uint8_t *otlp;            /* opentelemetry.proto.trace.v1.Span */
    size_t         otlp_len;
    const uint8_t *trace_id;        /* 16 bytes inside otlp */
    const uint8_t *span_id;         /* 8 bytes inside otlp */
} sp_span_view;

typedef struct sp_object {
    uint64_t    start;          /* executable mapping [start, end) in the */
    uint64_t    end;            /* worker's address space */
    uint64_t    load_bias;      /* dl_iterate_phdr's dlpi_addr */
    uint64_t    file_offset;    /* file offset of the mapping's start */
    uint8_t     build_id[SP_BUILD_ID_MAX];
    uint8_t     build_id_len;   /* 0: none found */
    const char *path;
    size_t      path_len;
} sp_object;

typedef struct sp_objects_record {
    uint32_t    pid;
    uint32_t    generation;     /* grows when the set of objects changes */
    uint16_t    count;
    const void *objects;        /* encoded; read with sp_object_at */
    size_t      objects_len;
} sp_objects_record;

/*
 * Encoding. Each *_size gives the exact bytes *_encode writes, so a writer
 * can reserve ring space first; encode never writes more. Encoders are
 * async-signal-safe (no allocation, no locks, no library calls but
 * memcpy). Strings longer than their limit are cut, never inside a UTF-8
 * sequence (span name, attribute keys and values at SP_SPAN_STRING_MAX
 * bytes, object paths at SP_OBJECT_PATH_MAX); a tracestate longer than
 * the longest valid one (SP_TRACESTATE_MAX_LEN) is left out, as a cut one
 * would not be valid. A span's strings are written as valid UTF-8 (each
 * invalid sequence becomes U+FFFD), as OTLP's string fields must be. A
 * sample with more than SP_RECORD_MAX_FRAMES frames
 * keeps the first ones and is marked truncated. The byte layout is
 * described in sp_record.c.
 */
#define SP_SPAN_STRING_MAX 1024
#define SP_OBJECT_PATH_MAX 4096

SP_API size_t sp_sample_size(uint16_t frame_count);
SP_API size_t sp_sample_encode(void *dst, const sp_sample *s);

SP_API size_t sp_span_size(const sp_span_record *s,
    const sp_span_attr *attrs, uint16_t attr_count);
SP_API size_t sp_span_encode(void *dst, const sp_span_record *s,
    const sp_span_attr *attrs, uint16_t attr_count);

SP_API size_t sp_objects_size(const sp_object *objects, uint16_t count);
SP_API size_t sp_objects_encode(void *dst, uint32_t pid,
    uint32_t generation, const sp_object *objects, uint16_t count);

/*
 * Decoding, from the body of one record of len bytes. SP_OK, or
 * SP_ERR_INVALID for anything that does not hold together (lengths past
 * the end, counts over their limits, unknown enum values, a thread name
 * without NUL, an all-zero trace or span id where one is required, bytes
 * the layout reserves that are not zero). The views point into body. A
 * sample's body must be 8-byte
 * aligned (ring records are), since its frames are pointed at, not
 * copied. sp_object_at checks the entry again and gives SP_ERR_NOT_FOUND
 * for i >= the count.
 */
SP_API sp_status sp_sample_decode(const void *body, size_t len,
    sp_sample *out);
/* A span record: its framing checked, the Span message pointed at. */
SP_API sp_status sp_span_decode(const void *body, size_t len,
    sp_span_view *out);

/*
 * A span record's body: its worker's pid (u32) and 4 reserved bytes, zero,
 * then the Span message (the layout is in sp_record.c).
 */
#define SP_SPAN_RECORD_HEAD 8

/*
 * sp_span_decode's usual case (an entry span's form, of kind SERVER) on a
 * copy of a span record's Span message (the body past
 * SP_SPAN_RECORD_HEAD) of otlp_len bytes followed by SP_SPAN_COPY_PAD
 * zero bytes: SP_OK only when sp_span_decode takes the record, if the
 * record's reserved bytes are zero; SP_ERR_NOT_FOUND when it cannot tell
 * (another form or kind, or a bad one), and sp_span_decode must. The
 * padding lets it walk the attributes without a bound check at each one:
 * the exporter checks the copy it puts into a request.
 */
#define SP_SPAN_COPY_PAD 256
SP_API sp_status sp_span_check_copy(const void *otlp, size_t otlp_len);
SP_API sp_status sp_objects_decode(const void *body, size_t len,
    sp_objects_record *out);
SP_API sp_status sp_object_at(const sp_objects_record *r, uint16_t i,
    sp_object *out);

#endif
