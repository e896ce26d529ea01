/*
 * The sampler: native stacks of a server process's threads, written as
 * sample records (sp_record.h) into the process's ring.
 *
 * One per process, driven by the server adapter:
 *
 *   sp_sampler_create()   master/parent or worker, before start
 *   sp_sampler_start()    in the worker, after fork: installs the signal
 *                         handler, publishes the object table, starts the
 *                         continuous sampler's thread
 *   sp_sampler_enter()    "this thread now works for span S of trace T"
 *   sp_sampler_enter_unselected()  the same for a recorded span that is
 *                         not selected: only continuous samples carry it
 *   sp_sampler_leave()    "this thread stopped working for it"
 *   sp_sampler_admit()    "this thread may be sampled": it unblocks the
 *                         signal, which servers block in worker threads
 *   sp_sampler_poll()     now and then, outside any handler: republishes
 *                         the object table when it changed, and returns
 *                         the count of dropped samples at most once a
 *                         minute for the adapter's warning
 *   sp_sampler_stop()     idempotent; no timer or thread is left behind
 *
 * Snapshot mode: a thread between enter and leave is sampled every
 * snapshot interval by a per-thread POSIX timer that sends the signal to
 * that thread only (SIGEV_THREAD_ID). Clocks:
 *   SP_SAMPLER_CLOCK_CPU (nginx): the thread's CPU-time clock. It advances
 *     only while the thread runs, so a worker that waits in epoll_wait is
 *     never interrupted (nginx logs epoll_wait's EINTR) and an idle worker
 *     is never woken. On this kernel it fires on the scheduler tick: the
 *     real elapsed time is recorded in each sample's period.
 *   SP_SAMPLER_CLOCK_WALL (httpd): CLOCK_MONOTONIC, so a request's thread
 *     is sampled also while it is blocked (a slow backend behind mod_proxy
 *     shows as the thread blocked in mod_proxy). The handler is installed
 *     with SA_RESTART; calls the kernel does not restart (poll, epoll_wait,
 *     select, nanosleep, and socket calls under a timeout) can return EINTR
 *     in such a thread. A poll or epoll_wait that its caller calls again
 *     the same, with its whole timeout (APR), returns 0 once that timeout
 *     has passed since the first tick cut it short; a sleep (nanosleep,
 *     clock_nanosleep with rem or absolute, select, pselect6, ppoll with a
 *     timeout) is restarted for the time left: see README, "Sampling and
 *     EINTR".
 * leave() is a few stores: the timer is disarmed lazily, by the handler
 * the next time it fires on a thread that works for no span.
 *
 * Continuous mode: a thread of the sampler's own (never sampled, all
 * signals blocked) wakes every continuous interval, lists the process's
 * threads in thread-id order and sends the signal (tgkill) to each one that
 * is running, so a blocked or idle thread is never interrupted. Its
 * samples carry the ids of the span the thread works for, if any,
 * selected or not (sp_sampler_enter_unselected).
 *
 * A sample carries a span's ids only if, at the instant it was taken, the
 * thread was between enter and leave for that span: the handler reads the
 * thread's ids under a sequence counter, and a sample that interrupts
 * enter/leave itself carries no ids.
 *
 * Spans that end on another thread (httpd): enter and leave act on the
 * calling thread, but httpd logs and frees a request when its last bucket
 * is destroyed, which may be on another thread (HTTP/2 streams, write
 * completion). With spans_end_anywhere the adapter opens the span before
 * enter and closes it from whichever thread ends it; a sample carries only
 * an open span's ids, and a thread whose span was closed elsewhere is
 * treated as working for none (its timer stops at its next tick).
 */
#ifndef SP_SAMPLER_H
#define SP_SAMPLER_H

#include "sp_common.h"
#include "sp_ring.h"

/* Returned by sp_sampler_start when another handler owns the signal. */
#define SP_ERR_SIGNAL_BUSY  SP_ERR_NOT_FOUND

typedef enum sp_sampler_clock {
    SP_SAMPLER_CLOCK_CPU = 0,
    SP_SAMPLER_CLOCK_WALL = 1
} sp_sampler_clock;

typedef struct sp_sampler_options {
    uint32_t         snapshot_interval_ms;   /* 0: snapshot off */
    uint32_t         continuous_interval_ms; /* 0: continuous off */
    uint16_t         max_depth;              /* 0: 128 */
    sp_sampler_clock clock;
    int              signo;                  /* 0: SIGPROF */
    bool             spans_end_anywhere;     /* see above */
} sp_sampler_options;

typedef struct sp_sampler_stats {
    uint64_t taken;         /* samples written */
    uint64_t dropped;       /* samples the ring had no room for */
    uint64_t no_stack;      /* the unwinder did not reach the thread */
    uint64_t signals;       /* signals handled */
} sp_sampler_stats;

typedef struct sp_sampler sp_sampler;

/* SP_ERR_INVALID (both modes off, bad interval), SP_ERR_NOMEM. */
SP_API sp_status sp_sampler_create(const sp_sampler_options *o,
                                   sp_ring *ring, sp_sampler **out);

/*
 * SP_ERR_SIGNAL_BUSY when a handler other than spanprof's owns the signal
 * (it is left alone and nothing is sampled); SP_ERR_IO when the thread or
 * the handler cannot be set up; SP_ERR_INVALID when another sampler runs
 * in this process.
 */
SP_API sp_status sp_sampler_start(sp_sampler *s);
SP_API void sp_sampler_stop(sp_sampler *s);
SP_API void sp_sampler_destroy(sp_sampler *s);

/*
 * Cheap per-thread calls (no allocation; a system call only when the
 * thread's timer must be created or armed). Safe to call with s == NULL
 * or a stopped sampler: they do nothing then.
 */
SP_API void sp_sampler_enter(sp_sampler *s, const uint8_t trace_id[16],
                             const uint8_t span_id[8]);
SP_API void sp_sampler_leave(sp_sampler *s);

/*
 * As enter, for a span that is recorded but not selected: continuous
 * samples taken until leave (or the next enter) carry its ids, as every
 * sample taken while a thread works for a recorded span must (SPEC 4);
 * the snapshot timer takes no sample of it. With continuous sampling off
 * it is leave.
 */
SP_API void sp_sampler_enter_unselected(sp_sampler *s,
                                        const uint8_t trace_id[16],
                                        const uint8_t span_id[8]);

/*
 * With continuous sampling on: the calling thread unblocks the signal,
 * once, so that the continuous sampler reaches it. httpd's threaded MPMs
 * block every signal in their threads after child_init; a thread that
 * never calls this is signalled in vain (the signal stays pending). Call
 * it where a thread starts work (a connection, a request). A thread
 * given a snapshot timer by enter unblocks it then. Both unwind once,
 * outside the handler, before the signal comes: the handler unwinds only
 * a thread that did (or that started the sampler), so that the unwinder's
 * one-time set-up (libgcc's, under pthread_once; libunwind's, the one
 * before, allocated thread-local caches with malloc) never first runs in
 * the handler. A thread signalled before gives no sample.
 */
SP_API void sp_sampler_admit(sp_sampler *s);

/*
 * With spans_end_anywhere, from any thread, no allocation, no system call.
 * open: SP_OK, or SP_ERR_TOO_LONG when SP_SAMPLER_OPEN_SPANS spans are open
 * already (then do not enter: the span is not sampled). close: once, when
 * the span ends; a span that is not open is ignored. A search of the open
 * spans (the signal handler's, close's from another thread) looks first
 * where the calling thread opened its last span, then goes as far as the
 * most spans that were open at once. The bound is far above what an httpd
 * child keeps open (a request of each connection, with continuous
 * profiling on; 256 was too few for a child of 300 threads).
 */
#define SP_SAMPLER_OPEN_SPANS  16384
SP_API sp_status sp_sampler_span_open(sp_sampler *s,
                                      const uint8_t span_id[8]);
SP_API void sp_sampler_span_close(sp_sampler *s, const uint8_t span_id[8]);

/*
 * Outside any handler. Returns the samples dropped since the last
 * warning, at most once per minute (0 otherwise): log them.
 */
SP_API uint64_t sp_sampler_poll(sp_sampler *s);

SP_API void sp_sampler_stats_get(const sp_sampler *s, sp_sampler_stats *out);

#endif
