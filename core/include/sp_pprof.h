/*
 * The pprof profile builder of the exporter (SPEC section 5): collects
 * stack samples whose frames are already symbolized and serializes them
 * as a perftools.profiles.Profile (proto/perftools/profiles/profile.proto)
 * that Google's pprof reads.
 *
 * EXPORTER PROCESS ONLY. Not thread-safe: one thread uses a builder.
 *
 * What a profile holds:
 *   sample_type   samples/count, cpu/nanoseconds
 *   period_type   cpu/nanoseconds; period: the sampling interval in ns
 *   sample.value  [1, weight * period]: samples/count counts the samples
 *                 taken; cpu/nanoseconds is the CPU time the sample
 *                 stands for, sp_sample.weight sampling intervals (1 +
 *                 the expirations its timer missed: a CPU-time timer
 *                 fires only on the kernel's tick), so pprof's "cpu"
 *                 view sums to the time sampled, as in Go's CPU
 *                 profiles, even where the tick is coarser than the
 *                 interval
 *   sample.location_id  the leaf (top of the stack) first
 *   sample.label  per SPEC section 5, in this order:
 *     source.event.time   num: unix time of the sample, ms
 *     source.event.period num: ms since the thread's previous sample
 *                         of the same source
 *                         (sp_sample.period_ns rounded; the profile's
 *                         period when the sample says 0)
 *     trace_id, span_id   str: 32 and 16 lowercase hex digits, only when
 *                         the sample has a span
 *     thread.id           num: the thread id (the OS's: the servers run
 *     thread.os.id        num: native threads, so both are the tid)
 *     thread.name         str: only when not empty
 *     thread.state        str: "running" or "blocked"; none if unknown
 *     thread.stack.truncated  str "true", only when cut
 *   string_table  deduplicated; entry 0 is ""
 *   function      one per (name, file); system_name = name; a frame the
 *                 symbolizer could not name is "unknown" (never guessed
 *                 from a nearby symbol), a file not known is "unknown"
 *   location      one per (mapping, address), first one wins; its lines
 *                 are the inlined calls innermost first, then the
 *                 function containing the address; line 0 when not known
 *   mapping       one per object (start, limit, file offset, path, build
 *                 id as lowercase hex); has_functions / has_filenames /
 *                 has_line_numbers only when every location in it has
 *                 them, has_inline_frames when one has inlined lines. A
 *                 frame named "unknown" keeps its mapping and address, so
 *                 `pprof -symbolize=force` or a backend can name it later
 *                 from the build id
 *   time_nanos    the earliest sample's time; duration_nanos: to the
 *                 latest
 *
 * Memory is bounded: every table and the encoded samples count against
 * max_bytes (their allocated capacity, so what the builder holds on the
 * heap is max_bytes plus a fixed struct; the default 2 MiB holds about
 * 8000 samples of 30 frames drawn from 5000 distinct addresses). An add
 * that would pass the bound fails with SP_ERR_TOO_LONG and adds no
 * sample: serialize, reset, add again. Strings, functions and locations
 * it had already added stay (unreferenced entries are valid pprof), so a
 * failed add costs nothing but space. A reset keeps the memory for the
 * next profile.
 */
#ifndef SP_PPROF_H
#define SP_PPROF_H

#include "sp_common.h"
#include "sp_encode.h"
#include "sp_record.h"

#define SP_PPROF_DEFAULT_MAX_BYTES  (2u << 20)
#define SP_PPROF_MIN_MAX_BYTES      (64u << 10)
#define SP_PPROF_MAX_FRAMES         SP_RECORD_MAX_FRAMES
#define SP_PPROF_UNKNOWN            "unknown"
#define SP_PPROF_BUILD_ID_MAX       64  /* bytes: a GNU build id is 20 */

/* One function at one position, as the symbolizer reports it. */
typedef struct sp_pprof_line {
    const char *function;   /* NULL or "": not known ("unknown") */
    const char *file;       /* NULL or "": not known ("unknown") */
    uint32_t    line;       /* 0: not known */
} sp_pprof_line;

/* The object a frame's address is in: sp_object's fields. */
typedef struct sp_pprof_mapping {
    uint64_t       start;       /* [start, limit) in the worker */
    uint64_t       limit;
    uint64_t       file_offset;
    const char    *path;        /* NULL: "" */
    const uint8_t *build_id;    /* raw bytes; NULL or length 0: none */
    size_t         build_id_len;
} sp_pprof_mapping;

/*
 * One symbolized frame. From an sp_symbol: address = sym.address,
 * mapping = sym.object's fields (NULL when sym.object is NULL), frame =
 * sym.frame, inlined = sym.inlined, inline_count = sym.inline_count.
 */
typedef struct sp_pprof_frame {
    uint64_t                address;
    const sp_pprof_mapping *mapping;      /* NULL: in no known object */
    sp_pprof_line           frame;        /* the function containing it */
    const sp_pprof_line    *inlined;      /* innermost first; may be NULL */
    uint8_t                 inline_count; /* entries of inlined */
} sp_pprof_frame;

typedef struct sp_pprof_options {
    uint64_t period_ns;     /* the sampling interval; must be > 0 */
    size_t   max_bytes;     /* 0: SP_PPROF_DEFAULT_MAX_BYTES; at least
                               SP_PPROF_MIN_MAX_BYTES */
} sp_pprof_options;

typedef struct sp_pprof sp_pprof;

/* SP_ERR_INVALID (period 0, max_bytes too small), SP_ERR_NOMEM. */
SP_API sp_status sp_pprof_create(const sp_pprof_options *options,
                                 sp_pprof **out);

/* NULL is fine. */
SP_API void sp_pprof_destroy(sp_pprof *p);

/* Empty again (no samples), memory kept for the next profile. */
SP_API void sp_pprof_reset(sp_pprof *p);

/*
 * Adds one sample: its labels from s (time, period, pid unused, tid,
 * thread name, state, truncated, span ids; s->frames and s->frame_count
 * are not read) and its stack from frames[0..n), top of stack first.
 * n may be 0 (a sample with an empty stack).
 *
 * SP_OK; SP_ERR_INVALID (NULL arguments, n over SP_PPROF_MAX_FRAMES, a
 * weight over SP_SAMPLE_WEIGHT_MAX (0 counts as 1), an
 * inline count with NULL inlined, a build id over SP_PPROF_BUILD_ID_MAX
 * bytes); SP_ERR_TOO_LONG (max_bytes reached: no sample added);
 * SP_ERR_NOMEM (no sample added).
 */
SP_API sp_status sp_pprof_add(sp_pprof *p, const sp_sample *s,
                              const sp_pprof_frame *frames, size_t n);

SP_API size_t sp_pprof_sample_count(const sp_pprof *p);

/*
 * Frames in all samples added: the sum of their n (a frame with inlined
 * calls counts once). profiling.data.total.frame.count.
 */
SP_API uint64_t sp_pprof_frame_count(const sp_pprof *p);

/* Bytes held against max_bytes. */
SP_API size_t sp_pprof_memory(const sp_pprof *p);

/*
 * Bytes sp_pprof_serialize would write now, exactly. With the default
 * max_bytes it stays under 3 MiB, which gzip and base64 keep under a
 * default logs request (SP_OTLP_DEFAULT_MAX_BYTES, 4 MiB); a caller with
 * other bounds cuts profiles by this size.
 */
SP_API size_t sp_pprof_size(const sp_pprof *p);

/*
 * Appends the serialized Profile to out (which has its own limit). The
 * builder is unchanged. SP_OK, or out's error (out back to its length
 * before the call).
 */
SP_API sp_status sp_pprof_serialize(const sp_pprof *p, sp_buf *out);

/* The thread.state label of a sp_thread_state: "running", "blocked", or
   NULL (unknown: no label). */
SP_API const char *sp_pprof_thread_state(uint8_t state);

#endif
