/*
 * OTLP request builders of the exporter (SPEC section 5): serialized
 * ExportLogsServiceRequest for profiling logs and ExportTraceServiceRequest
 * for spans, in protobuf's wire format with the field numbers of proto/
 * (upstream's), ready for sp_otlp_export (sp_otlp_client.h): contiguous
 * (serialize) or as pieces that move the records' buffers (take).
 *
 * EXPORTER PROCESS ONLY. Not thread-safe: one thread uses a builder.
 *
 * A builder collects records grouped by worker process: one ResourceLogs
 * (ResourceSpans) per pid, in the order the pids first came, each with
 * the resource given when its pid first came, where process.pid is that
 * pid (replaced in place, or added at the end), and one ScopeLogs
 * (ScopeSpans) holding the records in the order they were added.
 *
 * Logs: scope "otel.profiling" "0.1.0". Every LogRecord has
 *   time_unix_nano, observed_time_unix_nano, a string body and the
 *   attributes com.splunk.sourcetype=otel.profiling, profiling.data.type=cpu,
 *   profiling.data.format, profiling.instrumentation.source
 *   (snapshot|continuous), and by format:
 *   pprof-gzip-base64: body = base64(gzip(serialized pprof Profile)),
 *     profiling.data.total.frame.count (int): frames in its samples
 *   text (deprecated, seeds 000/002): one LogRecord per stack, trace_id and
 *     span_id when the sample has a span, source.event.period (int, ms),
 *     thread.stack.truncated (bool true) when cut; the body is the call
 *     stack format of seed 002:
 *       "NAME" #TID prio=0 os_prio=0 cpu=0 elapsed=0 tid=0xTID nid=0xTID STATE
 *       (an empty thread state line: undefined for native threads)
 *       \tat FUNCTION(FILE:LINE)      one per frame, top of stack first,
 *                                     inlined calls before their caller
 *     every line ending in "\n"; FUNCTION and FILE "unknown" when not
 *     known, LINE 0; STATE "running", "blocked" or nothing.
 *
 * Traces: scope "spanprof" SP_VERSION. A Span has trace_id, span_id,
 *   trace_state (when not empty), parent_span_id (when not zero), name,
 *   kind, start and end times, attributes (string, int, bool), status
 *   (when not UNSET; no message), and flags: the W3C trace flags, with
 *   SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE set, and _IS_REMOTE when the span has
 *   a parent: spanprof records entry spans, whose parent, when there is
 *   one, came in a request.
 *
 * Strings are sent as valid UTF-8 (sp_encode.h).
 *
 * Bounds: max_bytes bounds the serialized request (default 4 MiB, the
 * default gRPC receive limit of the OpenTelemetry Collector): an add that
 * would make it larger fails with SP_ERR_TOO_LONG and adds nothing, so
 * the caller serializes, exports, resets and adds again. If that happens
 * on an empty builder the record alone is too large: drop it. At most
 * SP_OTLP_MAX_RESOURCES workers per request, likewise. The heap held is
 * at most about twice max_bytes (buffers grow by doubling), plus, for
 * logs, the gzip of the largest profile added.
 */
#ifndef SP_OTLP_H
#define SP_OTLP_H

#include "sp_common.h"
#include "sp_encode.h"
#include "sp_otlp_request.h"
#include "sp_pprof.h"
#include "sp_record.h"
#include "sp_resource.h"

#define SP_OTLP_PROFILING_SCOPE         "otel.profiling"
#define SP_OTLP_PROFILING_SCOPE_VERSION "0.1.0"
#define SP_OTLP_TRACES_SCOPE            "spanprof"
#define SP_OTLP_DEFAULT_MAX_BYTES       (4u << 20)
#define SP_OTLP_MIN_MAX_BYTES           (4u << 10)
#define SP_OTLP_MAX_RESOURCES           4096
/*
 * Profiles are gzipped at level 1: on profiles of 30-frame stacks it runs
 * twice as fast as zlib's default (6) for output about 3% larger.
 */
#define SP_OTLP_DEFAULT_GZIP_LEVEL      1

typedef struct sp_otlp_builder_options {
    size_t max_bytes;   /* 0: SP_OTLP_DEFAULT_MAX_BYTES; at least
                           SP_OTLP_MIN_MAX_BYTES */
    int    gzip_level;  /* logs: 1 (fastest) .. 9 (smallest); 0:
                           SP_OTLP_DEFAULT_GZIP_LEVEL */
} sp_otlp_builder_options;

/* ---- logs */

typedef struct sp_otlp_logs sp_otlp_logs;

/* options may be NULL. SP_ERR_INVALID, SP_ERR_NOMEM. */
SP_API sp_status sp_otlp_logs_create(const sp_otlp_builder_options *options,
                                     sp_otlp_logs **out);
SP_API void sp_otlp_logs_destroy(sp_otlp_logs *l);

/* Empty again; memory kept. */
SP_API void sp_otlp_logs_reset(sp_otlp_logs *l);

/* LogRecords held, and the bytes sp_otlp_logs_serialize would write. */
SP_API size_t sp_otlp_logs_count(const sp_otlp_logs *l);
SP_API size_t sp_otlp_logs_size(const sp_otlp_logs *l);

/*
 * One pprof-gzip-base64 LogRecord for the worker pid: body the base64 of
 * the gzip of profile[0..len) (a serialized pprof Profile,
 * sp_pprof_serialize), total_frames its frame count (sp_pprof_frame_count),
 * time_ns the time it covers from (e.g. its first sample), observed_ns
 * when it was made (0: time_ns). res is read, not kept; NULL gives a
 * resource of process.pid alone.
 *
 * SP_OK; SP_ERR_INVALID (NULL arguments, a source that is not an
 * sp_sample_source); SP_ERR_TOO_LONG (see above); SP_ERR_NOMEM. Nothing is
 * added on failure.
 */
SP_API sp_status sp_otlp_logs_add_pprof(sp_otlp_logs *l,
    const sp_resource *res, uint32_t pid, uint8_t source, uint64_t time_ns,
    uint64_t observed_ns, const void *profile, size_t len,
    uint64_t total_frames);

/*
 * One text LogRecord for the stack of s (worker s->pid, time s->time_ns;
 * s->frames is not read) whose symbolized frames are frames[0..n), top of
 * stack first. source.event.period is s->period_ns in ms (rounded), or
 * interval_ns, the configured sampling interval, when the sample has no
 * period. Errors as sp_otlp_logs_add_pprof, and SP_ERR_INVALID for n over
 * SP_PPROF_MAX_FRAMES.
 */
SP_API sp_status sp_otlp_logs_add_text(sp_otlp_logs *l,
    const sp_resource *res, const sp_sample *s, const sp_pprof_frame *frames,
    size_t n, uint64_t interval_ns, uint64_t observed_ns);

/*
 * Appends the ExportLogsServiceRequest to out. The builder is unchanged.
 * SP_OK or out's error (out's length back as it was).
 */
SP_API sp_status sp_otlp_logs_serialize(const sp_otlp_logs *l, sp_buf *out);

/*
 * The same request handed over without copying its records: *out gets a
 * new request (one reference, the caller's) of the bytes
 * sp_otlp_logs_serialize would write, as pieces that take the builder's
 * record buffers; the builder is then empty, as after sp_otlp_logs_reset.
 * An empty builder gives an empty request. SP_ERR_NOMEM: the builder is
 * unchanged.
 */
SP_API sp_status sp_otlp_logs_take(sp_otlp_logs *l, sp_otlp_request **out);

/* ---- traces */

typedef struct sp_otlp_traces sp_otlp_traces;

/* options may be NULL (gzip_level unused). */
SP_API sp_status sp_otlp_traces_create(
    const sp_otlp_builder_options *options, sp_otlp_traces **out);
SP_API void sp_otlp_traces_destroy(sp_otlp_traces *t);
SP_API void sp_otlp_traces_reset(sp_otlp_traces *t);
SP_API size_t sp_otlp_traces_count(const sp_otlp_traces *t);
SP_API size_t sp_otlp_traces_size(const sp_otlp_traces *t);

/*
 * One span as its worker recorded it (sp_span_decode): the Span message
 * is copied into the request as it is, under the resource of worker
 * v->pid. SP_ERR_TOO_LONG, SP_ERR_NOMEM; nothing is added on failure.
 */
SP_API sp_status sp_otlp_traces_add_span(sp_otlp_traces *t,
    const sp_resource *res, const sp_span_view *v);

/*
 * One span record's body (sp_record.h) as sp_span_decode then
 * sp_otlp_traces_add_span would take it, but cheaper: SP_ERR_INVALID for
 * a record sp_span_decode refuses, else as sp_otlp_traces_add_span.
 */
SP_API sp_status sp_otlp_traces_add_record(sp_otlp_traces *t,
    const sp_resource *res, const void *body, size_t len);

/*
 * Whether spans are copied with AVX2 (x86-64 with it and the system
 * saving its registers), and for tests, the copy used: AVX2 when on and
 * available, memcpy otherwise. Both give the same bytes.
 */
SP_API bool sp_otlp_avx2_available(void);
SP_API void sp_otlp_use_avx2(bool on);

/*
 * One span from its fields, through the worker's encoder (sp_span_encode):
 * for tests and tools. SP_ERR_INVALID for an all-zero trace or span id
 * (receivers reject them), a kind over 5, a status over 2, an attribute
 * of unknown type or without a key, NULL strings with a length; then as
 * sp_otlp_traces_add_span.
 */
SP_API sp_status sp_otlp_traces_add(sp_otlp_traces *t,
    const sp_resource *res, const sp_span_record *s,
    const sp_span_attr *attrs, size_t n);

SP_API sp_status sp_otlp_traces_serialize(const sp_otlp_traces *t,
                                          sp_buf *out);
/* As sp_otlp_logs_take. */
SP_API sp_status sp_otlp_traces_take(sp_otlp_traces *t,
                                     sp_otlp_request **out);

/* "snapshot", "continuous", or NULL for anything else. */
SP_API const char *sp_otlp_source_name(uint8_t source);

#endif
