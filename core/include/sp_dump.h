/*
 * The reader behind spanprof-dump: collects the profiles and spans of
 * OTLP/JSON lines (what the console exporter, the demo's receiver and the
 * Collector's file exporter write: one ExportLogsServiceRequest or
 * ExportTraceServiceRequest per line, ids as hex, enums as numbers) and
 * answers questions about them: folded stacks, top functions, which
 * traces have profiles, the spans of a trace.
 *
 * EXPORTER SIDE ONLY (heap, zlib, protobuf-c). Not thread-safe.
 *
 * A profiling LogRecord (SPEC 5) has the attribute
 * profiling.data.format=pprof-gzip-base64 and a string body: base64 of
 * gzip of a pprof Profile. Each of its samples is kept, aggregated by
 * (trace id, span id, service.name, profiling.instrumentation.source,
 * stack), with its samples/count and cpu/nanoseconds values. A stack is
 * the frames' function names, leaf first, inlined functions before the
 * function they were inlined into (as pprof shows them). LogRecords of
 * other formats are skipped and counted.
 *
 * All input is untrusted: a line that is not JSON, or not an OTLP request,
 * is refused whole; a profile that does not decode (bad base64, gzip or
 * protobuf, an index out of range) is skipped and counted, the rest of
 * its line is kept. Memory is bounded by the options.
 */
#ifndef SP_DUMP_H
#define SP_DUMP_H

#include "sp_common.h"
#include "sp_encode.h"

#define SP_DUMP_DEFAULT_MAX_PROFILE (64u << 20)
#define SP_DUMP_DEFAULT_MAX_MEMORY  ((size_t)1 << 30)

typedef struct sp_dump_options {
    size_t max_profile_bytes;   /* one gunzipped Profile; 0: default */
    size_t max_memory;          /* everything kept; 0: default */
} sp_dump_options;

typedef struct sp_dump sp_dump;

typedef enum sp_dump_source {
    SP_DUMP_SOURCE_ANY = 0,
    SP_DUMP_SOURCE_SNAPSHOT = 1,
    SP_DUMP_SOURCE_CONTINUOUS = 2
} sp_dump_source;

typedef enum sp_dump_value {
    SP_DUMP_VALUE_SAMPLES = 0,  /* samples/count */
    SP_DUMP_VALUE_CPU_NS = 1    /* cpu/nanoseconds */
} sp_dump_value;

typedef struct sp_dump_stats {
    uint64_t lines;             /* lines added (SP_OK) */
    uint64_t records;           /* LogRecords seen */
    uint64_t records_skipped;   /* not pprof-gzip-base64 */
    uint64_t profiles;          /* profiles read */
    uint64_t profiles_bad;      /* profiles that did not decode */
    uint64_t samples;           /* samples kept */
    uint64_t spans;             /* spans kept */
} sp_dump_stats;

/* options may be NULL. SP_ERR_NOMEM. */
SP_API sp_status sp_dump_create(const sp_dump_options *options,
                                sp_dump **out);
SP_API void sp_dump_destroy(sp_dump *d);

/*
 * One line (without its newline; whitespace only: SP_OK, nothing added).
 * SP_OK; SP_ERR_INVALID (not JSON, or neither resourceLogs nor
 * resourceSpans at the top); SP_ERR_TOO_LONG (max_memory reached: what
 * the line had added so far stays); SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_add_line(sp_dump *d, const char *line, size_t len);

/*
 * One serialized pprof Profile (not gzipped), as if it came in a
 * LogRecord of service and source. SP_OK; SP_ERR_INVALID (it does not
 * decode; counted); SP_ERR_TOO_LONG; SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_add_profile(sp_dump *d, const void *profile,
    size_t len, const char *service, sp_dump_source source);

SP_API void sp_dump_get_stats(const sp_dump *d, sp_dump_stats *out);

/* Which samples a question is about. A zeroed filter: every sample,
   counted in samples. */
typedef struct sp_dump_filter {
    const char    *trace_id;    /* 32 hex digits; NULL: any */
    const char    *span_id;     /* 16 hex digits; NULL: any */
    const char    *service;     /* service.name; NULL: any */
    sp_dump_source source;
    sp_dump_value  value;
    bool           service_root; /* each stack under a root frame named
                                    after its service */
} sp_dump_filter;

/*
 * Folded stacks ("root;...;leaf VALUE\n", the flame graph tools' input),
 * appended to out: one line per distinct stack with a value above 0,
 * sorted by stack. A ';' or a control character in a function name is
 * written as '_'. SP_OK; SP_ERR_INVALID (a bad id in the filter); out's
 * error; SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_folded(const sp_dump *d, const sp_dump_filter *f,
                                sp_buf *out);

/* A function's share: self (it was the leaf) and total (it was on the
   stack, once per sample however often). */
typedef struct sp_dump_row {
    const char *name;           /* valid while d lives */
    int64_t     self;
    int64_t     total;
} sp_dump_row;

/*
 * Every function of the samples the filter takes, sorted by self, then
 * total (both descending), then name; *sum is the value of all those
 * samples. *rows is the caller's to free(). SP_OK; SP_ERR_INVALID;
 * SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_top(const sp_dump *d, const sp_dump_filter *f,
                             sp_dump_row **rows, size_t *n, int64_t *sum);

typedef struct sp_dump_trace {
    char    trace_id[33];
    int64_t samples;            /* samples/count with this trace id */
    int64_t cpu_ns;
    size_t  spans;              /* spans of the trace that were read */
} sp_dump_trace;

/*
 * The traces that have samples (among those the filter takes: its
 * trace_id and span_id are ignored), most samples first, then by id.
 * *out is the caller's to free(). SP_OK; SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_traces(const sp_dump *d, const sp_dump_filter *f,
                                sp_dump_trace **out, size_t *n);

typedef struct sp_dump_span {
    char        span_id[17];
    char        parent_span_id[17];     /* "" for a root */
    const char *name;                   /* valid while d lives */
    const char *service;
    uint64_t    start_ns, end_ns;
    int64_t     samples;                /* samples with this span id */
} sp_dump_span;

/*
 * The spans read for trace_id (32 hex digits), by start time, then id.
 * *out is the caller's to free(). SP_OK; SP_ERR_INVALID (a bad id);
 * SP_ERR_NOMEM.
 */
SP_API sp_status sp_dump_spans(const sp_dump *d, const char *trace_id,
                               sp_dump_span **out, size_t *n);

#endif
