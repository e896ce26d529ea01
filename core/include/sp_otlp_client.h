/*
 * The OTLP/gRPC client of the exporter process, on gRPC C core.
 *
 * EXPORTER PROCESS ONLY. gRPC starts threads and is not fork-safe: never
 * call anything here in a server's master, parent or workers, nor in a
 * process that forks afterwards. sp_otlp_init and sp_otlp_shutdown bracket
 * every use of clients.
 *
 * A client owns one gRPC channel to one endpoint with the settings of SPEC
 * section 1: http:// is plaintext, https:// is TLS with the system trust
 * store or the PEM trust anchors of OTEL_EXPORTER_OTLP_CERTIFICATE;
 * OTEL_EXPORTER_OTLP_HEADERS go as metadata on every call; every call has
 * a deadline of OTEL_EXPORTER_OTLP_TIMEOUT. The request bytes are opaque
 * here: the caller serializes an ExportLogsServiceRequest or an
 * ExportTraceServiceRequest and names the method. One client serves both
 * signals, so when the logs and traces endpoints are equal
 * (sp_otlp_endpoint_equal) the caller shares one client, and so one
 * channel, with sp_otlp_client_share.
 *
 * Nothing here prints. Results are returned; sp_otlp_result_format words
 * one for the operator's log. Header values are never part of any message
 * this module writes.
 */
#ifndef SP_OTLP_CLIENT_H
#define SP_OTLP_CLIENT_H

#include "sp_common.h"
#include "sp_endpoint.h"
#include "sp_otlp_request.h"

#define SP_OTLP_LOGS_METHOD \
    "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
#define SP_OTLP_TRACES_METHOD \
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

#define SP_OTLP_DEFAULT_ENDPOINT "http://localhost:4317"
#define SP_OTLP_DEFAULT_TIMEOUT_MS 10000
/*
 * gRPC waits before reconnecting to an endpoint that refused it; its own
 * default grows to 120 s, far longer than an export interval. Ours stays
 * at most this long, so data flows again soon after a collector returns.
 */
#define SP_OTLP_DEFAULT_RECONNECT_MS 1000

/* The gRPC status codes this module names (grpc/status.h). */
#define SP_GRPC_OK                  0
#define SP_GRPC_CANCELLED           1
#define SP_GRPC_UNKNOWN             2
#define SP_GRPC_INVALID_ARGUMENT    3
#define SP_GRPC_DEADLINE_EXCEEDED   4
#define SP_GRPC_PERMISSION_DENIED   7
#define SP_GRPC_RESOURCE_EXHAUSTED  8
#define SP_GRPC_UNIMPLEMENTED       12
#define SP_GRPC_INTERNAL            13
#define SP_GRPC_UNAVAILABLE         14
#define SP_GRPC_UNAUTHENTICATED     16

/* ---- endpoints */

/* OTEL_EXPORTER_OTLP_INSECURE: plaintext for an endpoint without a
 * scheme; a scheme wins over it. */
SP_API void sp_otlp_endpoint_insecure(sp_endpoint *e, bool insecure);

/*
 * Whether two parsed endpoints reach the same server the same way: same
 * scheme, port and host (host names compared without case), so
 * "http://Collector:4317/" equals "http://collector".
 */
SP_API bool sp_otlp_endpoint_equal(const sp_endpoint *a,
    const sp_endpoint *b);

/* "host:port", the gRPC target; returns the length snprintf would. */
SP_API size_t sp_otlp_endpoint_target(const sp_endpoint *e, char *buf,
    size_t size);

/* ---- metadata from OTEL_EXPORTER_OTLP_HEADERS */

typedef struct sp_otlp_metadata sp_otlp_metadata;

/*
 * Parses headers ("k=v,k2=v2", sp_kvlist.h: values percent-decoded) into
 * gRPC metadata: keys lowercased, as HTTP/2 requires. headers may be NULL
 * or empty (no metadata). SP_ERR_INVALID when the list breaks its grammar,
 * when a key is not a legal gRPC metadata key once lowercased
 * ([0-9a-z_.-], not starting with "grpc-"), or when a value holds a byte
 * gRPC cannot send in text metadata (outside 0x20-0x7E; keys ending in
 * "-bin" carry any bytes). err (may be NULL) then says why, naming the key
 * at most, never a value. SP_ERR_NOMEM.
 */
SP_API sp_status sp_otlp_metadata_parse(const char *headers,
    sp_otlp_metadata **out, char *err, size_t err_size);
SP_API void sp_otlp_metadata_destroy(sp_otlp_metadata *md);
SP_API size_t sp_otlp_metadata_count(const sp_otlp_metadata *md);
/* NUL-terminated, owned by md; NULL if i >= count. */
SP_API const char *sp_otlp_metadata_key(const sp_otlp_metadata *md,
    size_t i);
SP_API const char *sp_otlp_metadata_value(const sp_otlp_metadata *md,
    size_t i);

/* ---- the library */

/*
 * Receives one of gRPC's own log lines. severity is "error", "info" or
 * "debug". gRPC logs no metadata unless its tracers are switched on
 * (GRPC_TRACE=http and the like): never in production.
 */
typedef void (*sp_otlp_log_fn)(void *ctx, const char *severity,
                               const char *message);

/*
 * grpc_init and grpc_shutdown, for the exporter process only (see above).
 * Every client must be destroyed before sp_otlp_shutdown.
 *
 * log (may be NULL: dropped) receives gRPC's own log lines, which would
 * otherwise go to stderr; what matters of them reaches the caller in the
 * results anyway. Process-wide, like gRPC itself.
 *
 * Unless the environment says otherwise, sp_otlp_init sets gRPC's
 * GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS to 100: between calls no
 * thread of ours polls gRPC, and with its default of 5000 ms a collector
 * that comes back is noticed up to 5 s late even though a reconnect
 * attempt reached it.
 */
SP_API void sp_otlp_init(sp_otlp_log_fn log, void *ctx);
SP_API void sp_otlp_shutdown(void);

/* ---- clients */

typedef struct sp_otlp_client_config {
    const char *endpoint;     /* NULL: SP_OTLP_DEFAULT_ENDPOINT */
    const char *headers;      /* OTEL_EXPORTER_OTLP_HEADERS, or NULL */
    const char *certificate;  /* PEM file for https://, NULL: system roots;
                                 ignored for http:// */
    bool        insecure;     /* OTEL_EXPORTER_OTLP_INSECURE */
    uint64_t    timeout_ms;   /* per call; 0: SP_OTLP_DEFAULT_TIMEOUT_MS */
    uint64_t    reconnect_ms; /* 0: SP_OTLP_DEFAULT_RECONNECT_MS */
} sp_otlp_client_config;

typedef struct sp_otlp_client sp_otlp_client;

/*
 * Creates a client and its channel. gRPC connects lazily, so an absent
 * collector is no error here: the first export says UNAVAILABLE. Errors:
 * SP_ERR_INVALID (endpoint, headers, certificate content), SP_ERR_IO (the
 * certificate file cannot be read), SP_ERR_NOMEM; err (may be NULL) then
 * holds an operator-friendly reason without header values.
 */
SP_API sp_status sp_otlp_client_create(const sp_otlp_client_config *cfg,
    sp_otlp_client **out, char *err, size_t err_size);

/*
 * Another reference to the same client and channel, released with
 * sp_otlp_client_destroy like the first. Create, share and destroy from
 * one thread; exports may run concurrently on any thread.
 */
SP_API sp_otlp_client *sp_otlp_client_share(sp_otlp_client *c);

/* Releases one reference; the last closes the channel. Accepts NULL. */
SP_API void sp_otlp_client_destroy(sp_otlp_client *c);

SP_API const sp_endpoint *sp_otlp_client_endpoint(
    const sp_otlp_client *c);

/*
 * Ends every export of c in flight now, and every later one at once,
 * with CANCELLED and the message SP_OTLP_CANCELLED_TEXT: an exporter
 * whose fast stop's time is up does not wait for a collector that does
 * not answer. For every reference of a shared client. Thread-safe.
 */
#define SP_OTLP_CANCELLED_TEXT "cancelled: the exporter stops"
SP_API void sp_otlp_client_cancel(sp_otlp_client *c);

/* ---- exports */

#define SP_OTLP_MESSAGE_SIZE 256

typedef struct sp_otlp_result {
    int      code;          /* gRPC status; SP_GRPC_OK on success */
    bool     retryable;     /* sp_otlp_status_retryable(code) */
    /* The status text from the server or from gRPC (connection errors),
       truncated, NUL-terminated. */
    char     message[SP_OTLP_MESSAGE_SIZE];
    size_t   response_len;  /* bytes of the response message */
    /* partial_success of an OK answer (rejected log records or spans,
       and the server's error_message); 0 and "" without one. */
    int64_t  rejected;
    char     partial_message[SP_OTLP_MESSAGE_SIZE];
    uint32_t attempts;      /* 1 for sp_otlp_export */
    uint64_t elapsed_ms;    /* of all attempts and waits */
    char     method[128];   /* the method asked for, for messages */
} sp_otlp_result;

/*
 * One unary call of method (SP_OTLP_LOGS_METHOD, SP_OTLP_TRACES_METHOD)
 * with the serialized request bytes[0..len) (len 0 is a valid empty
 * request), the client's metadata and a deadline timeout_ms from now
 * (0: the client's timeout). Blocks until the answer or the deadline.
 * Always fills result; failures of our side are reported with a gRPC code
 * too (INTERNAL, INVALID_ARGUMENT). Returns SP_OK when the code is OK,
 * else SP_ERR_IO. Thread-safe.
 */
SP_API sp_status sp_otlp_export(sp_otlp_client *c, const char *method,
    const void *bytes, size_t len, sp_otlp_result *result);
SP_API sp_status sp_otlp_export_timeout(sp_otlp_client *c,
    const char *method, const void *bytes, size_t len, uint64_t timeout_ms,
    sp_otlp_result *result);

/*
 * As sp_otlp_export_timeout for a request held as pieces
 * (sp_otlp_request.h), sent without copying it: gRPC gets the pieces as
 * slices, each holding a reference to req, released when gRPC is done
 * with it, which can be after this returns. The caller keeps its own
 * reference (to send again on a retry, or drop). sp_otlp_export_timeout
 * copies its bytes into a request once and sends that.
 */
SP_API sp_status sp_otlp_export_request(sp_otlp_client *c,
    const char *method, sp_otlp_request *req, uint64_t timeout_ms,
    sp_otlp_result *result);

/* UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED (SPEC section 5). */
SP_API bool sp_otlp_status_retryable(int code);

/* "UNAVAILABLE" and the like; "UNKNOWN_STATUS" for codes beyond 16. */
SP_API const char *sp_otlp_status_name(int code);

/*
 * Reads the partial_success of an Export{Logs,Trace}ServiceResponse (both
 * have field 1 { int64 rejected = 1; string error_message = 2; }).
 * Unknown fields are skipped. SP_ERR_INVALID on malformed bytes; *rejected
 * and msg are then 0 and "".
 */
SP_API sp_status sp_otlp_parse_partial_success(const void *bytes,
    size_t len, int64_t *rejected, char *msg, size_t msg_size);

/* ---- retries */

/*
 * Exponential backoff with full jitter: the wait before retry n (n = 0
 * after the first failure) is uniform in [0, min(max_ms, base_ms * 2^n)].
 * Only retryable codes are retried. The defaults (a zero field) are
 * base_ms 1000 and max_ms 30000, so the ceilings run 1, 2, 4, 8, 16, 30,
 * 30 ... seconds.
 *
 * Bounds, whichever comes first: max_attempts calls in all (0: no count
 * limit), and max_elapsed_ms of total time from the first call (0: no
 * time limit). At least one must be set. Under a time limit no wait
 * starts that would end past it and each call's deadline is cut to what
 * remains, so sp_otlp_export_retry returns within max_elapsed_ms plus
 * scheduling noise: an exporter stopping gives it its export timeout.
 *
 * random (NULL: a PRNG seeded from the kernel) draws the jitter; a test
 * injects its own to make the schedule deterministic. sleep (NULL:
 * nanosleep) waits ms milliseconds; the exporter passes one that returns
 * false early when it is told to stop, which ends the retries with the
 * last result. on_attempt (may be NULL) sees every finished call, whether
 * a retry follows and after what wait, for logging and counters.
 */
typedef struct sp_otlp_retry_policy {
    uint32_t max_attempts;
    uint64_t max_elapsed_ms;
    uint64_t base_ms;
    uint64_t max_ms;
    uint64_t (*random)(void *ctx);
    void      *random_ctx;
    bool     (*sleep)(void *ctx, uint64_t ms);
    void      *sleep_ctx;
    void     (*on_attempt)(void *ctx, const sp_otlp_result *result,
                           bool retry, uint64_t delay_ms);
    void      *on_attempt_ctx;
} sp_otlp_retry_policy;

#define SP_OTLP_BACKOFF_BASE_MS 1000
#define SP_OTLP_BACKOFF_MAX_MS  30000

/*
 * The ceiling min(max_ms, base_ms * 2^retry) with the policy's defaults,
 * and the jittered wait r % (ceiling + 1) for one draw r of the random
 * source.
 */
SP_API uint64_t sp_otlp_backoff_ceiling(const sp_otlp_retry_policy *p,
    uint32_t retry);
SP_API uint64_t sp_otlp_backoff_delay(const sp_otlp_retry_policy *p,
    uint32_t retry, uint64_t r);

/*
 * sp_otlp_export_timeout until OK, a code that is not retryable, or a
 * bound of the policy. result holds the last call's status, the number of
 * calls and the total time. SP_ERR_INVALID (result code INVALID_ARGUMENT,
 * no call made) when the policy has neither bound.
 */
SP_API sp_status sp_otlp_export_retry(sp_otlp_client *c,
    const char *method, const void *bytes, size_t len,
    const sp_otlp_retry_policy *policy, sp_otlp_result *result);

/*
 * One line for the operator: endpoint, signal, status name and code, the
 * status text (quoted, unprintable bytes escaped), attempts and time, and
 * whether it was retryable; for an OK with partial success the rejected
 * count and message. Never any header value. Returns the length snprintf
 * would; the line is truncated to size.
 */
SP_API size_t sp_otlp_result_format(const sp_otlp_client *c,
    const sp_otlp_result *result, char *buf, size_t size);

#endif
