/*
 * The sampler's cost, two ways (issue 4):
 *
 *  1. One sample: a thread 30 frames deep sends the signal to itself
 *     (tgkill), which the kernel delivers before the call returns, so the
 *     time around tgkill is delivery + unwind of the 30-frame stack + ring
 *     write + return. Median and p99 over many samples.
 *  2. Overhead: the same CPU-bound work timed on the thread's CPU clock
 *     unsampled, sampled at 10 ms and at 1 ms, in interleaved rounds; the
 *     medians are compared.
 *  3. enter + leave, the calls nginx makes many times per request: a pair
 *     on a thread whose timer already runs (the common case: no system
 *     call), and the first pair on a new thread (timer_create +
 *     timer_settime).
 *
 *   build/bench/sampler_bench [rounds]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sp_ring.h"
#include "sp_sampler.h"
#include "sp_clock.h"

#define RING_BYTES   (64u << 20)
#define SAMPLES      20000
#define DEPTH        30

static volatile uint64_t sink;
static sp_region *region;
static sp_ring   *ring;
static sp_sampler *active;

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

static void
drain(void)
{
    sp_record_view v;

    while (sp_ring_read(ring, &v) == SP_OK) {
        sp_ring_consume(ring, &v);
    }
}

static uint64_t times[SAMPLES];
static uint64_t sample_median_ns;

static void __attribute__((noinline))
measure_at_depth(int depth)
{
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    int   i;

    if (depth > 1) {
        measure_at_depth(depth - 1);
        sink++;
        return;
    }
    for (i = 0; i < SAMPLES; i++) {
        uint64_t t0 = sp_clock_ns(CLOCK_MONOTONIC);

        syscall(SYS_tgkill, pid, tid, SIGPROF);
        times[i] = sp_clock_ns(CLOCK_MONOTONIC) - t0;
        if (i % 1000 == 999) {
            drain();
        }
    }
}

/* The continuous sweep's signal is what tgkill from our own pid looks
 * like, so the handler takes a full sample for it. */
static void
one_sample_cost(void)
{
    sp_sampler_options o = { .continuous_interval_ms = 3600000 };
    sp_sampler        *s;
    uint64_t           base[SAMPLES];
    int                i;

    if (sp_sampler_create(&o, ring, &s) != SP_OK
        || sp_sampler_start(s) != SP_OK)
    {
        fprintf(stderr, "sampler did not start\n");
        exit(1);
    }
    drain();
    measure_at_depth(DEPTH);
    sp_sampler_stop(s);
    sp_sampler_destroy(s);
    drain();

    /* The cost of the timing itself and of tgkill with the signal
     * ignored, to subtract nothing but show it. */
    signal(SIGPROF, SIG_IGN);
    for (i = 0; i < SAMPLES; i++) {
        uint64_t t0 = sp_clock_ns(CLOCK_MONOTONIC);

        syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGPROF);
        base[i] = sp_clock_ns(CLOCK_MONOTONIC) - t0;
    }
    qsort(times, SAMPLES, sizeof(uint64_t), cmp_u64);
    qsort(base, SAMPLES, sizeof(uint64_t), cmp_u64);
    sample_median_ns = times[SAMPLES / 2];
    printf("one sample, %d-frame stack (signal + unwind + ring write), "
           "%d samples:\n", DEPTH + 4, SAMPLES);
    printf("  median %llu ns, p99 %llu ns  (tgkill of an ignored signal: "
           "median %llu ns)\n",
           (unsigned long long)times[SAMPLES / 2],
           (unsigned long long)times[SAMPLES * 99 / 100],
           (unsigned long long)base[SAMPLES / 2]);
}

/* CPU-bound work of a fixed size. */
static uint64_t __attribute__((noinline))
work(uint64_t n)
{
    uint64_t h = 1469598103934665603ull, i;

    for (i = 0; i < n; i++) {
        h = (h ^ i) * 1099511628211ull;
    }
    return h;
}
/* The pair nginx's event loop calls around every handler it runs. */
static void *
first_enter_thread(void *arg)
{
    static const uint8_t trace[16] = { 3 }, span[8] = { 4 };
    uint64_t            *out = arg, t0;

    t0 = sp_clock_ns(CLOCK_MONOTONIC);
    sp_sampler_enter(active, trace, span);
    sp_sampler_leave(active);
    *out = sp_clock_ns(CLOCK_MONOTONIC) - t0;
    return NULL;
}

static void
enter_leave_cost(void)
{
    static const uint8_t trace[16] = { 1 }, span_a[8] = { 2 },
                         span_b[8] = { 5 };
    sp_sampler_options   o = { .snapshot_interval_ms = 10 };
    uint64_t             t0, t, firsts[101];
    const long           n = 10000000;
    pthread_t            th;
    long                 i;
    int                  k;

    sp_sampler_create(&o, ring, &active);
    sp_sampler_start(active);
    sp_sampler_enter(active, trace, span_a);    /* creates the timer */
    sp_sampler_leave(active);
    t0 = sp_clock_ns(CLOCK_MONOTONIC);
    for (i = 0; i < n; i++) {
        sp_sampler_enter(active, trace, (i & 1) ? span_a : span_b);
        sp_sampler_leave(active);
    }
    t = sp_clock_ns(CLOCK_MONOTONIC) - t0;
    for (k = 0; k < 101; k++) {
        pthread_create(&th, NULL, first_enter_thread, &firsts[k]);
        pthread_join(th, NULL);
    }
    qsort(firsts, 101, sizeof(uint64_t), cmp_u64);
    printf("enter + leave (snapshot at 10 ms), %ld pairs: %.1f ns per pair; "
           "first pair on a new thread (timer_create + settime): "
           "median %llu ns\n", n, (double)t / (double)n,
           (unsigned long long)firsts[50]);
    sp_sampler_destroy(active);
    active = NULL;
    drain();
}

static uint64_t taken_total[3];

static uint64_t
timed_work(uint32_t interval_ms, uint64_t n, uint64_t *taken)
{
    sp_sampler_stats st;
    static const uint8_t trace[16] = { 1 }, span[8] = { 2 };
    sp_sampler_options   o = { .snapshot_interval_ms = interval_ms };
    sp_sampler          *s = NULL;
    uint64_t             t0, t;

    if (interval_ms > 0) {
        sp_sampler_create(&o, ring, &s);
        sp_sampler_start(s);
        sp_sampler_enter(s, trace, span);
    }
    t0 = sp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    sink += work(n);
    t = sp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    if (s != NULL) {
        sp_sampler_leave(s);
        sp_sampler_stats_get(s, &st);
        *taken += st.taken;
        sp_sampler_destroy(s);
    }
    drain();
    return t;
}

static void
overhead(int rounds)
{
    static const uint32_t intervals[3] = { 0, 10, 1 };
    uint64_t *t[3], n = 400000000ull, med[3], cpu[3] = { 0 };
    int       r, k;

    for (k = 0; k < 3; k++) {
        t[k] = calloc((size_t)rounds, sizeof(uint64_t));
    }
    for (r = 0; r < rounds; r++) {
        for (k = 0; k < 3; k++) {
            /* Rotate the order each round: no mode always runs first. */
            int m = (k + r) % 3;

            t[m][r] = timed_work(intervals[m], n, &taken_total[m]);
        }
    }
    for (k = 0; k < 3; k++) {
        qsort(t[k], (size_t)rounds, sizeof(uint64_t), cmp_u64);
        for (r = 0; r < rounds; r++) {
            cpu[k] += t[k][r];
        }
        med[k] = t[k][rounds / 2];
    }
    printf("CPU-bound thread, %d interleaved rounds, median thread CPU time:\n",
           rounds);
    printf("  unsampled      %8.1f ms\n", med[0] / 1e6);
    for (k = 1; k < 3; k++) {
        double rate = (double)taken_total[k] / ((double)cpu[k] / 1e9);

        printf("  sampled %2u ms  %8.1f ms  measured %+.3f %%; "
               "%.0f samples per CPU-second x median sample cost = %.3f %%\n",
               intervals[k], med[k] / 1e6,
               100.0 * ((double)med[k] - (double)med[0]) / (double)med[0],
               rate, 100.0 * rate * (double)sample_median_ns / 1e9);
    }
    for (k = 0; k < 3; k++) {
        free(t[k]);
    }
}

int
main(int argc, char **argv)
{
    int   rounds = argc > 1 ? atoi(argv[1]) : 11;
    void *mem = aligned_alloc(64, sp_region_size(1, RING_BYTES));

    if (mem == NULL
        || sp_region_init(mem, sp_region_size(1, RING_BYTES), 1, RING_BYTES)
           != SP_OK
        || sp_region_attach(mem, sp_region_size(1, RING_BYTES), &region)
           != SP_OK
        || (ring = sp_region_claim(region, (uint32_t)getpid())) == NULL)
    {
        fprintf(stderr, "no ring\n");
        return 1;
    }
    one_sample_cost();
    overhead(rounds < 3 ? 3 : rounds);
    enter_leave_cost();
    return 0;
}
