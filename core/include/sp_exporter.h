/*
 * The exporter loop: drains the rings of a region (sp_ring.h), symbolizes
 * and groups samples into pprof profiles, batches spans, encodes OTLP and
 * exports it (otlp, console or none; SPEC section 5).
 *
 * EXPORTER PROCESS ONLY (gRPC, elfutils).
 *
 * Threads: the caller's runs sp_exporter_run (drain, symbolize, encode:
 * it never waits on the network), and a sender thread per signal (logs,
 * traces) takes that signal's encoded requests from a queue and exports
 * them one at a time, retrying retryable failures (UNAVAILABLE,
 * RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED) with backoff and jitter while
 * newer data keeps arriving; an endpoint that is down or stalls for one
 * signal never holds up the other.
 *
 * What it holds is bounded (defaults in brackets):
 *   - the queue of encoded requests: max_queue_bytes [16 MiB]; spans in it
 *     also at most OTEL_BSP_MAX_QUEUE_SIZE. When a new request would pass
 *     a bound the oldest queued ones are dropped (counted queue_full):
 *     the newest data is kept.
 *   - profiles being built: at most max_profiles [8] (worker, source)
 *     pairs at a time, each at most profile_bytes [1 MiB]; a full one, or
 *     one more pair, sends the oldest off early.
 *   - one logs and one traces request being built: 4 MiB each, with
 *     buffers that may double that.
 *   - the symbolizer: sp_symbolizer.h's bound, 64 open files,
 *     SP_EXPORTER_SYMBOL_CACHE addresses (8 MiB of caches) and what libdw
 *     holds of their debug info, max_debug_bytes [64 MiB].
 *   - one table of loaded objects per live worker.
 * Peak RSS with the defaults, collector down, rings flooded: see README.
 *
 * Counters (sp_exporter_counters): every sample or span record read from
 * the rings is received; each then is exported, dropped for a reason, or
 * still held, so received = exported + dropped + held at any quiet moment.
 * Records the rings could not take (full) never reach the exporter: they
 * are counted by the rings and reported beside.
 */
#ifndef SP_EXPORTER_H
#define SP_EXPORTER_H

#include "sp_common.h"
#include "sp_config.h"
#include "sp_ring.h"

typedef struct sp_exporter_loop sp_exporter_loop;

typedef enum sp_log_level {
    SP_LOG_ERROR,
    SP_LOG_WARN,
    SP_LOG_INFO,
    SP_LOG_DEBUG
} sp_log_level;

typedef void (*sp_exporter_log_fn)(void *ctx, sp_log_level level,
                                   const char *message);

#define SP_EXPORTER_DEFAULT_QUEUE_BYTES   (16u << 20)
#define SP_EXPORTER_DEFAULT_PROFILES      8
#define SP_EXPORTER_DEFAULT_PROFILE_BYTES (1u << 20)
#define SP_EXPORTER_COUNTERS_INTERVAL_MS  60000
/*
 * Addresses the symbolizer caches (8 MiB): with its default of 16384 the
 * inlined frames of a server's few thousand hot addresses overflow its
 * ring and are looked up again and again (10x slower on libc's code).
 */
#define SP_EXPORTER_SYMBOL_CACHE          65536

typedef struct sp_exporter_options {
    const sp_config *config;        /* effective; kept, not copied */
    sp_region       *region;        /* attached; kept */
    const char      *server;        /* "nginx" / "httpd" */
    const char      *server_version;
    const char      *server_exe;
    uint32_t         pid;           /* the reader's pid (0: getpid()) */
    /* Where console output goes: a path (appended), NULL: stderr. */
    const char      *console_path;
    bool             text_format;   /* deprecated text profiling logs */
    size_t           max_queue_bytes;   /* 0: default */
    uint32_t         max_profiles;      /* 0: default */
    size_t           profile_bytes;     /* 0: default */
    const char      *debug_dirs;        /* NULL: the symbolizer's */
    size_t           max_debug_bytes;   /* 0: the symbolizer's */
    uint64_t         counters_interval_ms; /* 0: default */
    sp_exporter_log_fn log;         /* NULL: nothing logged */
    void            *log_ctx;
    /* Test seam: monotonic milliseconds (NULL: CLOCK_MONOTONIC). */
    uint64_t       (*now_ms)(void *ctx);
    void            *clock_ctx;
} sp_exporter_options;

typedef struct sp_exporter_counters {
    uint64_t received;          /* sample and span records read */
    uint64_t samples;           /* of which samples */
    uint64_t spans;             /* of which spans */
    uint64_t objects;           /* objects tables read (not in received) */
    uint64_t exported;          /* samples and spans the collector took */
    uint64_t held;              /* in builders, queue or in flight */
    uint64_t dropped_corrupt;   /* records that did not decode */
    uint64_t dropped_queue_full;/* evicted for newer data */
    uint64_t dropped_export_failed; /* refused with a final status */
    uint64_t dropped_too_large; /* could not be encoded within a bound */
    uint64_t dropped_disabled;  /* the signal's exporter is "none" */
    uint64_t dropped_shutdown;  /* still unsent when the stop timed out */
    uint64_t ring_full;         /* dropped by writers: rings full */
    uint64_t ring_corrupt;      /* damaged ring headers skipped */
    uint64_t requests;          /* requests exported */
    uint64_t failures[17];      /* failed calls by gRPC status */
    uint64_t queue_bytes;       /* now */
    /* The symbolizer's, as of the last counters line logged. */
    uint64_t symbolizer_resets; /* libdw's state dropped: max_debug_bytes */
    uint64_t symbolizer_debug_bytes; /* what libdw held */
    uint64_t symbolizer_over_cap; /* files named without DWARF: the bound */
} sp_exporter_counters;

/*
 * Creates the exporter: the clients (no connection yet), symbolizer and
 * builders, and the sender threads. sp_otlp_init must have been called when
 * either exporter is otlp. SP_ERR_INVALID (a client's configuration;
 * err says why, without secrets), SP_ERR_IO (console file), SP_ERR_NOMEM.
 */
SP_API sp_status sp_exporter_create(const sp_exporter_options *o,
    sp_exporter_loop **out, char *err, size_t err_size);

/*
 * Claims the region's reader role for the pid, waiting while another
 * live exporter (the previous generation on reload) holds it. Stopped
 * before or during the call, it still waits for that one, for half of
 * the export timeout from the stop: an exporter stopped right after its
 * start, or right after a reload, reads what the workers wrote after the
 * previous one's last read. SP_OK, or SP_ERR_NOT_FOUND when the other
 * still holds it then: logged at info when that one reads on (it exports
 * what the workers write), at warn when records wait in the rings that
 * it has not read for SP_READER_IDLE_MS (it reads nothing: hung, or in
 * its own last flush).
 */
SP_API sp_status sp_exporter_claim(sp_exporter_loop *e);

/*
 * One pass: drain every ring in use, and encode and queue what is due.
 * Returns the records read. For tests and sp_exporter_run.
 *
 * A ring in use is one owned or holding records. Free slots are not
 * visited: a claim (sp_region_claims) makes the next pass look at every
 * slot again, and so does every second that passes. A ring's owner is
 * checked for death at most every half second (of the clock in the
 * options); a dead owner's ring is drained, then freed.
 */
SP_API size_t sp_exporter_step(sp_exporter_loop *e);

/*
 * Whether the last step left records behind: a ring gave it its whole
 * budget, or more than a quarter of its bytes (the ring may be filling
 * faster than a sleep allows for).
 */
SP_API bool sp_exporter_backlog(const sp_exporter_loop *e);

/*
 * Claims, then steps until sp_exporter_stop, sleeping 10 ms after each
 * pass that left no backlog (so records are drained in batches, not one
 * wake-up each); then drains every slot once more, queues everything held
 * and gives the sender up to OTEL_EXPORTER_OTLP_TIMEOUT from the stop to
 * send it, or a fast stop's time (what is left is counted
 * dropped_shutdown). Logs the counters every
 * counters_interval_ms and at the end.
 */
SP_API sp_status sp_exporter_run(sp_exporter_loop *e);

/* Asks run to finish. Async-signal-safe. */
SP_API void sp_exporter_stop(sp_exporter_loop *e);

/*
 * Asks run to finish within SP_EXPORTER_FAST_STOP_MS from now, or the
 * export timeout if shorter (sp_exporter_launch.h), also after
 * sp_exporter_stop: it reads on and sends for half of that at most, then
 * ends the calls still in flight; what it still held is counted
 * dropped_shutdown and logged at warn. Async-signal-safe.
 */
SP_API void sp_exporter_stop_fast(sp_exporter_loop *e);

/*
 * Queues everything held now (profiles, spans), as an export interval
 * ending would. For tests.
 */
SP_API void sp_exporter_flush(sp_exporter_loop *e);

/* Waits until the queue is empty and nothing in flight, or timeout_ms. */
SP_API bool sp_exporter_wait_idle(sp_exporter_loop *e, uint64_t timeout_ms);

SP_API void sp_exporter_counters_get(sp_exporter_loop *e,
    sp_exporter_counters *out);

/* The counters as one log line (no secrets). */
SP_API size_t sp_exporter_counters_format(const sp_exporter_counters *c,
    char *buf, size_t size);

/* Stops the sender, releases the reader role, frees everything. */
SP_API void sp_exporter_destroy(sp_exporter_loop *e);

#endif
