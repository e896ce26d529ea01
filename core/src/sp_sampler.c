/*
 * The sampler; see sp_sampler.h for the model. Everything reachable from
 * sp_sampler_on_signal is async-signal-safe: no allocation, no lock,
 * errno preserved.
 */
#include "sp_sampler.h"
#include "sp_clock.h"
#include "sp_objects.h"
#include "sp_procstat.h"
#include "sp_record.h"
#include "sp_threads.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#define SP_DEFAULT_DEPTH        128
#define SP_HANDLER_FRAMES       32      /* the handler's own, skipped */
#define SP_MAX_THREADS          4096
#define SP_WARN_EVERY_NS        (60ull * 1000000000ull)
#define SP_MAX_INTERVAL_MS      3600000u
#define SP_UNWINDER_SCAN        1024    /* bytes of stack sp_in_unwinder
                                           looks at */
#define SP_PAGE_MIN             4096
#define SP_UNWINDER_FRAMES      3072    /* bytes of stack an unwind
                                           leaves below, cleared */

/*
 * One per thread, in static TLS (initial-exec): the handler must not be
 * the first to touch a thread's TLS, which for dynamic TLS could allocate.
 * Kept small: a dlopen'ed module shares a small static TLS surplus.
 */
typedef struct sp_thread_slot {
    _Atomic uint32_t seq;           /* odd while the ids change */
    bool             has_span;
    bool             snapshot;      /* the span is selected: the snapshot
                                       timer samples it */
    bool             armed;         /* the snapshot timer runs */
    bool             in_handler;
    bool             primed;        /* unwound once, outside the
                                       handler */
    uint8_t          trace_id[16];
    uint8_t          span_id[8];
    uint32_t         generation;    /* sampler whose timer this is */
    uint32_t         admitted;      /* sampler whose signal this thread
                                       unblocked */
    uint32_t         open_slot;     /* where this thread last opened a
                                       span: looked at first */
    timer_t          timer;
    uintptr_t        stack_low;     /* this thread's stack, as pthread */
    uintptr_t        stack_high;    /* knows it (0: unknown) */
    /* CLOCK_MONOTONIC of this thread's previous sample, per source
     * (SP_SOURCE_SNAPSHOT - 1, SP_SOURCE_CONTINUOUS - 1): each source's
     * period is the time since its own previous sample, not since the
     * other source's. */
    uint64_t         last_sample_ns[2];
    /* The timed wait a signal of ours last cut short on this thread
     * (sp_keep_timeout): where, with what, its voluntary context switches
     * then, when its timeout ends. wait_pc 0: none. */
    uintptr_t        wait_pc;
    uintptr_t        wait_sp;
    uint64_t         wait_args[3];
    long             wait_switches;
    uint64_t         wait_end_ns;
} sp_thread_slot;

static __thread sp_thread_slot sp_tls
    __attribute__((tls_model("initial-exec")));

/*
 * The objects record written last, kept to be written again from a
 * signal handler when a new exporter asks (sp_region_want_objects). One
 * replaced when objects are loaded may still be read by a handler on
 * another thread: it stays, chained from its successor, until destroy.
 */
typedef struct sp_objects_table {
    struct sp_objects_table *older;
    size_t                   len;
    void                    *body;
} sp_objects_table;

struct sp_sampler {
    sp_sampler_options  o;
    sp_ring            *ring;
    uint32_t            pid;
    uint32_t            generation;
    uint32_t            objects_generation;
    uint64_t            objects_changes;
    _Atomic(sp_objects_table *) objects;
    _Atomic uint64_t    objects_answered;   /* sp_ring_objects_wanted's */
    bool                running;
    bool                handler_installed;
    struct sigaction    previous;

    /* Timers created for threads, so stop can delete them all. */
    pthread_mutex_t     timers_lock;
    timer_t             timers[SP_MAX_THREADS];
    pid_t               timer_tids[SP_MAX_THREADS];
    uint32_t            timer_count;
    pthread_key_t       thread_key;
    bool                key_created;

    /* The continuous sampler's thread. */
    pthread_t           thread;
    bool                thread_started;
    pthread_mutex_t     stop_lock;
    pthread_cond_t      stop_cond;
    bool                stopping;
    pid_t               thread_tid;

    /* Spans open with spans_end_anywhere, by span id; 0 is a free slot
     * (a valid span id is never zero). Only slots below open_top were
     * ever used: a search goes no further than the most spans open at
     * once so far, not the whole table. */
    _Atomic uint64_t    open_spans[SP_SAMPLER_OPEN_SPANS];
    _Atomic uint32_t    open_top;

    _Atomic uint64_t    taken;
    _Atomic uint64_t    dropped;
    _Atomic uint64_t    no_stack;
    _Atomic uint64_t    signals;
    uint64_t            warned_dropped;
    uint64_t            warned_at_ns;
};

/* The handler's way to the sampler: one per process. */
static _Atomic(sp_sampler *) sp_active;
static _Atomic uint32_t sp_generations;

static pid_t
sp_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static void
sp_timer_disarm(timer_t timer)
{
    struct itimerspec off;

    memset(&off, 0, sizeof(off));
    timer_settime(timer, 0, &off, NULL);
}

/*
 * The handler's unwinder is libgcc's: it finds a code address's unwind
 * table with glibc's _dl_find_object, which takes no lock and is
 * async-signal-safe, so a sample never waits for glibc's loader lock,
 * whatever the thread it interrupted holds (dlopen, dlclose,
 * dl_iterate_phdr: glibc's NSS and iconv load modules on first use).
 * libunwind asked the loader (dl_iterate_phdr) for every address it had
 * not cached, under its own global cache lock: a thread inside the loader
 * could then wait for good in the handler. Both functions are taken from
 * libgcc_s itself: libunwind, when loaded, exports the same names for an
 * unwinder of its own with another context.
 */
typedef _Unwind_Reason_Code (*sp_unwind_backtrace_fn)(_Unwind_Trace_Fn,
                                                      void *);
typedef _Unwind_Ptr (*sp_unwind_get_ip_fn)(struct _Unwind_Context *);

static _Atomic(sp_unwind_backtrace_fn) sp_unwind_backtrace;
static _Atomic(sp_unwind_get_ip_fn)    sp_unwind_get_ip;

typedef struct sp_unwind_walk {
    void **raw;
    int    n;
    int    cap;
} sp_unwind_walk;

/* libgcc's code, where sp_in_unwinder looks for the interrupted thread. */
static _Atomic uintptr_t sp_unwinder_text_low;
static _Atomic uintptr_t sp_unwinder_text_size;

/* From libgcc's program headers, mapped with its first page. */
static void
sp_unwinder_find_text(void *handle, void *in_text)
{
    const ElfW(Ehdr) *eh;
    const ElfW(Phdr) *ph;
    struct link_map  *map;
    Dl_info           info;
    uintptr_t         at = (uintptr_t)in_text, low, high;
    int               i;

    if (dladdr(in_text, &info) == 0 || info.dli_fbase == NULL
        || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0)
    {
        return;
    }
    eh = info.dli_fbase;
    ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
    for (i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X)) {
            continue;
        }
        low = map->l_addr + ph[i].p_vaddr;
        high = low + ph[i].p_memsz;
        if (at >= low && at < high) {
            atomic_store(&sp_unwinder_text_size, high - low);
            atomic_store(&sp_unwinder_text_low, low);
            return;
        }
    }
}

/* Outside any handler: dlopen takes the loader lock. The handle is kept
 * for the process's life. */
static bool
sp_unwinder_load(void)
{
    void *h, *bt, *ip;

    if (atomic_load(&sp_unwind_backtrace) != NULL) {
        return true;
    }
    h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        return false;
    }
    bt = dlsym(h, "_Unwind_Backtrace");
    ip = dlsym(h, "_Unwind_GetIP");
    if (bt == NULL || ip == NULL) {
        return false;
    }
    sp_unwinder_find_text(h, bt);
    atomic_store(&sp_unwind_get_ip, (sp_unwind_get_ip_fn)ip);
    atomic_store(&sp_unwind_backtrace, (sp_unwind_backtrace_fn)bt);
    return true;
}

/*
 * Whether the interrupted thread is inside libgcc's unwinder: its
 * program counter, or a return address near the top of its stack, in
 * libgcc's code. Once code is registered with libgcc (__register_frame:
 * LuaJIT's and other JITs' code), libgcc looks up every frame under its
 * own lock, also for a C++ throw or a Lua error; a sample there whose
 * unwind took the lock again would wait for good. Such samples are not
 * taken. The lock's holder is in libgcc or in what libgcc calls under it
 * (pthread_mutex_*, malloc, free), whose frames fit in the words looked
 * at. A stale word that happens to point into libgcc costs a sample, no
 * more. Words are read only within the thread's stack, or the page of
 * the stack pointer when that is elsewhere (sigaltstack, coroutines);
 * any of them, a frame's unused words too (ASan's redzones, valgrind's
 * undefined: core/tests/valgrind.supp).
 */
static __attribute__((noinline, no_sanitize_address)) bool
sp_in_unwinder(const sp_thread_slot *t, const ucontext_t *uc)
{
    uintptr_t        low = atomic_load_explicit(&sp_unwinder_text_low,
                                                memory_order_relaxed);
    uintptr_t        size = atomic_load_explicit(&sp_unwinder_text_size,
                                                 memory_order_relaxed);
    uintptr_t        pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t        sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    uintptr_t        end;
    const uintptr_t *w;

    if (pc - low < size) {
        return true;
    }
    if (sp >= t->stack_low && sp < t->stack_high) {
        end = t->stack_high - sp < SP_UNWINDER_SCAN ? t->stack_high
                                                    : sp + SP_UNWINDER_SCAN;
    } else {
        end = (sp | (SP_PAGE_MIN - 1)) + 1;
    }
    for (w = (const uintptr_t *)sp; (uintptr_t)(w + 1) <= end; w++) {
        if (*w - low < size) {
            return true;
        }
    }
    return false;
}

/* libgcc reports one frame past the outermost (_start, a thread's
 * clone3), of address 0: the end. */
static _Unwind_Reason_Code
sp_unwind_frame(struct _Unwind_Context *ctx, void *arg)
{
    sp_unwind_walk *w = arg;
    _Unwind_Ptr     ip;

    if (w->n >= w->cap) {
        return _URC_END_OF_STACK;
    }
    ip = atomic_load_explicit(&sp_unwind_get_ip, memory_order_relaxed)(ctx);
    if (ip == 0) {
        return _URC_END_OF_STACK;
    }
    w->raw[w->n++] = (void *)ip;
    return _URC_NO_REASON;
}

/*
 * libgcc's frames leave return addresses into libgcc in the stack below;
 * where the thread's own frames come later, their unused words would
 * make sp_in_unwinder take the thread for one inside libgcc, and lose its
 * samples. Cleared at the depth the unwind ran at, a little more than it
 * uses (about 1.5 KiB, measured with a painted stack).
 */
static __attribute__((noinline)) void
sp_clear_unwinder_frames(void)
{
    volatile uintptr_t below[SP_UNWINDER_FRAMES / sizeof(uintptr_t)];
    size_t             i;

    for (i = 0; i < sizeof(below) / sizeof(below[0]); i++) {
        below[i] = 0;
    }
}

static int
sp_backtrace(void **raw, int cap)
{
    sp_unwind_walk         w = { raw, 0, cap };
    sp_unwind_backtrace_fn bt = atomic_load(&sp_unwind_backtrace);

    if (bt == NULL) {
        return 0;
    }
    (void)bt(sp_unwind_frame, &w);
    sp_clear_unwinder_frames();
    return w.n;
}

/*
 * The interrupted thread's stack, top first, without the handler's own
 * frames: the unwinder goes through the signal frame, and the first frame
 * whose address is the interrupted program counter is the thread's.
 */
static int
sp_unwind(const ucontext_t *uc, uint64_t *frames, int max, bool *truncated)
{
    void     *raw[SP_DEFAULT_DEPTH * 8 + SP_HANDLER_FRAMES + 1];
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    int       cap = max + SP_HANDLER_FRAMES + 1, n, i, start = -1, k;

    if (cap > (int)(sizeof(raw) / sizeof(raw[0]))) {
        cap = (int)(sizeof(raw) / sizeof(raw[0]));
    }
    n = sp_backtrace(raw, cap);
    for (i = 0; i < n && i < SP_HANDLER_FRAMES + 1; i++) {
        if ((uintptr_t)raw[i] == pc) {
            start = i;
            break;
        }
    }
    if (start < 0) {
        return 0;
    }
    for (k = 0; start + k < n && k < max; k++) {
        frames[k] = (uint64_t)(uintptr_t)raw[start + k];
    }
    /* Not all of it was kept, or the buffer was full: there was more. */
    *truncated = start + k < n || n == cap;
    return k;
}

/*
 * BLOCKED when the signal interrupted a system call that waited: the
 * kernel either rewound pc to the syscall instruction (0f 05) to restart
 * it (SA_RESTART), or left pc after it with -EINTR in rax (calls it never
 * restarts: poll, epoll_wait, nanosleep). A call that completed on CPU
 * (the CPU-time clock's own clock_gettime) leaves its result in rax and
 * counts as RUNNING. pc - 2 is read only within pc's page, which is mapped.
 */
static uint8_t
sp_thread_state_at(const ucontext_t *uc)
{
    const unsigned char *pc =
        (const unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
    long long            rax = (long long)uc->uc_mcontext.gregs[REG_RAX];

    if (pc == NULL) {
        return SP_THREAD_RUNNING;
    }
    if (pc[0] == 0x0f && pc[1] == 0x05) {
        return SP_THREAD_BLOCKED;
    }
    if (((uintptr_t)pc & 4095u) >= 2 && pc[-2] == 0x0f && pc[-1] == 0x05
        && rax == -EINTR)
    {
        return SP_THREAD_BLOCKED;
    }
    return SP_THREAD_RUNNING;
}

static uint64_t
sp_span_key(const uint8_t span_id[8])
{
    uint64_t key;

    memcpy(&key, span_id, 8);
    return key;
}

static bool
sp_open_slot_swap(sp_sampler *s, uint32_t i, uint64_t from, uint64_t to)
{
    uint64_t expected = from;

    return atomic_compare_exchange_strong_explicit(&s->open_spans[i],
               &expected, to, memory_order_acq_rel, memory_order_relaxed);
}

/*
 * The calling thread's slot first: the span it opened last is the one it
 * works for, or the one it closes, unless the span ends on another thread.
 */
static bool
sp_span_is_open(sp_sampler *s, const uint8_t span_id[8])
{
    uint64_t key = sp_span_key(span_id);
    uint32_t i, top;

    if (key == 0) {
        return false;
    }
    i = sp_tls.open_slot;
    if (i < SP_SAMPLER_OPEN_SPANS
        && atomic_load_explicit(&s->open_spans[i], memory_order_acquire)
           == key)
    {
        return true;
    }
    top = atomic_load_explicit(&s->open_top, memory_order_acquire);
    for (i = 0; i < top; i++) {
        if (atomic_load_explicit(&s->open_spans[i], memory_order_acquire)
            == key)
        {
            return true;
        }
    }
    return false;
}

/* The first slot below open_top that holds from now holds to. */
static bool
sp_open_spans_swap(sp_sampler *s, uint64_t from, uint64_t to, uint32_t *at)
{
    uint32_t i, top;

    top = atomic_load_explicit(&s->open_top, memory_order_acquire);
    for (i = 0; i < top; i++) {
        if (sp_open_slot_swap(s, i, from, to)) {
            *at = i;
            return true;
        }
    }
    return false;
}

sp_status
sp_sampler_span_open(sp_sampler *s, const uint8_t span_id[8])
{
    uint64_t key = sp_span_key(span_id);
    uint32_t at, top;

    if (s == NULL || key == 0) {
        return SP_ERR_INVALID;
    }
    for ( ;; ) {
        if (sp_open_spans_swap(s, 0, key, &at)) {
            break;
        }
        /* Every slot used so far is taken: one more. Another thread may
         * take the new one first, found free by its search: then again. */
        top = atomic_load_explicit(&s->open_top, memory_order_acquire);
        if (top >= SP_SAMPLER_OPEN_SPANS) {
            return SP_ERR_TOO_LONG;
        }
        if (atomic_compare_exchange_strong_explicit(&s->open_top, &top,
                top + 1, memory_order_acq_rel, memory_order_relaxed)
            && sp_open_slot_swap(s, top, 0, key))
        {
            at = top;
            break;
        }
    }
    sp_tls.open_slot = at;
    return SP_OK;
}

void
sp_sampler_span_close(sp_sampler *s, const uint8_t span_id[8])
{
    uint64_t key = sp_span_key(span_id);
    uint32_t at = sp_tls.open_slot;

    if (s == NULL || key == 0) {
        return;
    }
    if (at >= SP_SAMPLER_OPEN_SPANS || !sp_open_slot_swap(s, at, key, 0)) {
        (void)sp_open_spans_swap(s, key, 0, &at);
    }
}

/*
 * A new exporter knows no worker's objects: the one before it read them.
 * The table goes before the first sample it may read, or its addresses
 * name nothing (no mapping, no function) until the objects change.
 */
static void
sp_objects_answer(sp_sampler *s)
{
    uint64_t          want = sp_ring_objects_wanted(s->ring);
    uint64_t          seen = atomic_load_explicit(&s->objects_answered,
                                                  memory_order_relaxed);
    sp_objects_table *t;

    if (want == seen
        || !atomic_compare_exchange_strong(&s->objects_answered, &seen,
                                           want))
    {
        return;
    }
    t = atomic_load_explicit(&s->objects, memory_order_acquire);
    if (t == NULL
        || sp_ring_write(s->ring, SP_RECORD_OBJECTS, t->body, t->len)
           != SP_OK)
    {
        /* the next sample tries again */
        atomic_compare_exchange_strong(&s->objects_answered, &want, seen);
    }
}

/* Outside any handler: builds the table and writes it. */
static void
sp_objects_publish(sp_sampler *s)
{
    sp_objects_table *t;
    uint64_t          want = sp_ring_objects_wanted(s->ring);

    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return;
    }
    t->body = sp_objects_build(s->pid, ++s->objects_generation, &t->len);
    if (t->body == NULL) {
        free(t);
        return;
    }
    t->older = atomic_exchange_explicit(&s->objects, t, memory_order_acq_rel);
    atomic_store_explicit(&s->objects_answered, want, memory_order_relaxed);
    (void)sp_ring_write(s->ring, SP_RECORD_OBJECTS, t->body, t->len);
}

static void
sp_take_sample(sp_sampler *s, sp_thread_slot *t, const ucontext_t *uc,
               bool has_span, const uint8_t *trace_id, const uint8_t *span_id,
               uint8_t source, uint16_t weight)
{
    uint64_t      frames[SP_DEFAULT_DEPTH * 8];
    sp_sample     smp;
    sp_ring_token tok;
    uint64_t      now = sp_clock_ns(CLOCK_MONOTONIC);
    uint64_t      real = sp_clock_ns(CLOCK_REALTIME);
    uint64_t      interval_ms, *last;
    void         *dst;
    int           n, max = s->o.max_depth;
    bool          truncated = false;

    if (max > (int)(sizeof(frames) / sizeof(frames[0]))) {
        max = (int)(sizeof(frames) / sizeof(frames[0]));
    }
    /* Unprimed (sp_thread_prime), the unwind could call malloc. */
    n = t->primed && !sp_in_unwinder(t, uc)
        ? sp_unwind(uc, frames, max, &truncated) : 0;
    if (n == 0) {
        atomic_fetch_add_explicit(&s->no_stack, 1, memory_order_relaxed);
        return;
    }

    memset(&smp, 0, sizeof(smp));
    /* Both clocks read before the unwind, which can take milliseconds (a
     * cold cache, a preemption): the sample's time is the instant the
     * stack is of, and the difference of two samples' times is their
     * period. */
    smp.time_ns = real;
    interval_ms = source == SP_SOURCE_SNAPSHOT ? s->o.snapshot_interval_ms
                                               : s->o.continuous_interval_ms;
    /* The real time since this thread's previous sample of this source,
     * idle time included. A first snapshot sample counts from the arming
     * of the thread's timer (sp_sampler_enter); a first continuous one
     * counts one interval, the round before. */
    last = &t->last_sample_ns[source == SP_SOURCE_SNAPSHOT ? 0 : 1];
    smp.period_ns = *last != 0 && now > *last ? now - *last
                                              : interval_ms * 1000000ull;
    *last = now;
    smp.pid = s->pid;
    smp.tid = (uint32_t)sp_gettid();
    (void)prctl(PR_GET_NAME, smp.thread_name);
    smp.thread_name[SP_THREAD_NAME_SIZE - 1] = '\0';
    /* A CPU-time clock expires only while its thread runs. Guessing from
     * registers would be wrong where the tick landed on a syscall
     * instruction about to run, which looks like one the kernel rewound. */
    smp.state = source == SP_SOURCE_SNAPSHOT
                && s->o.clock == SP_SAMPLER_CLOCK_CPU
                ? SP_THREAD_RUNNING : sp_thread_state_at(uc);
    smp.source = source;
    smp.truncated = truncated;
    smp.has_span = has_span;
    if (has_span) {
        memcpy(smp.trace_id, trace_id, 16);
        memcpy(smp.span_id, span_id, 8);
    }
    smp.frame_count = (uint16_t)n;
    smp.weight = weight;
    smp.frames = frames;

    sp_objects_answer(s);
    dst = sp_ring_reserve(s->ring, SP_RECORD_SAMPLE,
                          sp_sample_size(smp.frame_count), &tok);
    if (dst == NULL) {
        atomic_fetch_add_explicit(&s->dropped, 1, memory_order_relaxed);
        return;
    }
    sp_ring_commit(s->ring, &tok, sp_sample_encode(dst, &smp));
    atomic_fetch_add_explicit(&s->taken, 1, memory_order_relaxed);
}

/*
 * How many intervals a timer's sample stands for: 1 + the expirations
 * the timer missed before this signal. A CPU-time timer is checked only
 * on the kernel's tick (250 Hz here), so at 1 ms each signal comes ~4 ms
 * of CPU apart and si_overrun says 3; counting it keeps the profile's
 * CPU time right. Saturates at SP_SAMPLE_WEIGHT_MAX.
 */
static uint16_t
sp_timer_weight(const siginfo_t *si)
{
    int overrun = si->si_overrun;

    if (overrun <= 0) {
        return 1;
    }
    return overrun >= SP_SAMPLE_WEIGHT_MAX - 1 ? SP_SAMPLE_WEIGHT_MAX
                                               : (uint16_t)(overrun + 1);
}

/*
 * The system call a signal of ours just cut short (-EINTR in rax), if it
 * is glibc's inline one: mov $nr,%eax (b8 imm32) then syscall (0f 05)
 * right before pc, read back within pc's page, which is mapped. A bare
 * EINTR elsewhere is left as it is.
 */
static bool
sp_cut_call(const ucontext_t *uc, uint32_t *nr)
{
    const greg_t        *g = uc->uc_mcontext.gregs;
    const unsigned char *pc = (const unsigned char *)g[REG_RIP];

    if (g[REG_RAX] != -EINTR || ((uintptr_t)pc & 4095u) < 7
        || pc[-2] != 0x0f || pc[-1] != 0x05 || pc[-7] != 0xb8)
    {
        return false;
    }
    memcpy(nr, pc - 6, sizeof(*nr));
    return true;
}

/*
 * The time left the kernel wrote into a sleep's rem counts from the
 * sleep's latest end, its timer slack (50 us) after the end asked for:
 * slept again, each cut would add that much (10 ms in 200 cuts). prctl
 * is a bare system call.
 */
static void
sp_less_slack(struct timespec *rem)
{
    long     slack = (long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    uint64_t left;

    if (slack <= 0 || rem->tv_sec < 0 || rem->tv_nsec < 0) {
        return;
    }
    left = (uint64_t)rem->tv_sec * 1000000000ull + (uint64_t)rem->tv_nsec;
    left = left > (uint64_t)slack ? left - (uint64_t)slack : 0;
    rem->tv_sec = (time_t)(left / 1000000000ull);
    rem->tv_nsec = (long)(left % 1000000000ull);
}

/*
 * glibc's sleep, usleep, nanosleep, clock_nanosleep, and select (APR's
 * apr_sleep), do not call again on EINTR: a tick made a selected httpd
 * request's sleep of a second end within the interval, the request
 * behaving otherwise because it was profiled. Where the kernel left what
 * the call needs to go on, the handler restarts it as the kernel restarts
 * a call with SA_RESTART: pc back on the syscall, rax its number, with
 * the time left. nanosleep and a relative clock_nanosleep sleep for what
 * the kernel wrote into rem (none without rem: left cut short, as glibc's
 * usleep is); an absolute clock_nanosleep keeps its deadline; select,
 * pselect6 and ppoll had their timeout updated by the kernel (none: their
 * callers loop). glibc reads none of the argument registers after the
 * call (2.36), so changing one is safe.
 */
static bool
sp_restart_sleep(ucontext_t *uc, uint32_t nr)
{
    greg_t *g = uc->uc_mcontext.gregs;

    switch (nr) {
    case SYS_nanosleep:
        if (g[REG_RSI] == 0) {
            return false;
        }
        g[REG_RDI] = g[REG_RSI];
        sp_less_slack((struct timespec *)g[REG_RSI]);
        break;
    case SYS_clock_nanosleep:
        if ((g[REG_RSI] & TIMER_ABSTIME) == 0) {
            if (g[REG_R10] == 0) {
                return false;
            }
            g[REG_RDX] = g[REG_R10];
            sp_less_slack((struct timespec *)g[REG_R10]);
        }
        break;
    case SYS_select:
    case SYS_pselect6:
        if (g[REG_R8] == 0) {
            return false;
        }
        break;
    case SYS_ppoll:
        if (g[REG_RDX] == 0) {
            return false;
        }
        break;
    default:
        return false;
    }
    g[REG_RAX] = (greg_t)nr;
    g[REG_RIP] -= 2;
    return true;
}

/*
 * A signal that lands while the thread waits in poll() or epoll_wait()
 * with a timeout makes the call return EINTR, and callers call it again
 * with their whole timeout: APR does (apr_wait_for_io_or_timeout, where
 * mod_proxy waits for a backend and httpd for a client's bytes), and so
 * does mod_proxy's tunnel. Wall-clock ticks closer than the timeout kept
 * it from ever ending: a selected request whose backend never answered
 * waited for good, ProxyTimeout or not, sampled all the while. The
 * handler keeps the timeout: the same call cut short again (its pc, stack
 * pointer and arguments, the thread asleep but once since, in that call
 * restarted) once its timeout has passed, counted from the first cut,
 * returns 0 as a call that timed out does (on EINTR too the kernel leaves
 * no event: revents are 0, no epoll event is written). A thread woken by
 * its data sleeps again in a new call: counted from there. nr is the call
 * sp_cut_call found.
 */
static void
sp_keep_timeout(sp_thread_slot *t, ucontext_t *uc, uint32_t nr)
{
    greg_t              *g = uc->uc_mcontext.gregs;
    uintptr_t            at = (uintptr_t)g[REG_RIP];
    uint64_t             args[3], now;
    long long            ms;
    struct rusage        ru;

    if (nr == SYS_poll) {
        ms = (int)g[REG_RDX];
    } else if (nr == SYS_epoll_wait || nr == SYS_epoll_pwait) {
        ms = (int)g[REG_R10];
    } else {
        ms = 0;
    }
    if (ms <= 0 || getrusage(RUSAGE_THREAD, &ru) != 0) {
        t->wait_pc = 0;
        return;
    }
    args[0] = (uint64_t)g[REG_RDI];
    args[1] = (uint64_t)g[REG_RSI];
    args[2] = (uint64_t)ms;
    now = sp_clock_ns(CLOCK_MONOTONIC);
    if (t->wait_pc == at && t->wait_sp == (uintptr_t)g[REG_RSP]
        && memcmp(t->wait_args, args, sizeof(args)) == 0
        && ru.ru_nvcsw == t->wait_switches + 1)
    {
        if (now >= t->wait_end_ns) {
            g[REG_RAX] = 0;
            t->wait_pc = 0;
            return;
        }
    } else {
        t->wait_pc = at;
        t->wait_sp = (uintptr_t)g[REG_RSP];
        memcpy(t->wait_args, args, sizeof(args));
        t->wait_end_ns = now + (uint64_t)ms * 1000000ull;
    }
    t->wait_switches = ru.ru_nvcsw;
}

/*
 * Whether a signal other than ours waits to be taken by the thread once
 * our handler returns (it blocks all of them while it runs): the call's
 * EINTR is then that signal's too, which its handler may have come to
 * break (httpd's graceful stop), and is left as it is. A signal taken
 * before ours has run its handler already, and ours then saw that
 * handler's start, not the call.
 */
static bool
sp_other_signal_pending(int ours, const ucontext_t *uc)
{
    sigset_t pending;
    int      sig;

    if (sigpending(&pending) != 0) {
        return true;
    }
    for (sig = 1; sig < NSIG; sig++) {
        if (sig != ours && sigismember(&pending, sig) == 1
            && sigismember(&uc->uc_sigmask, sig) != 1)
        {
            return true;
        }
    }
    return false;
}

/* What a signal of ours does to the call it cut short, after the sample,
 * which reads the thread's state from the call's EINTR. */
static void
sp_after_cut(sp_thread_slot *t, int signo, ucontext_t *uc)
{
    uint32_t nr;

    if (!sp_cut_call(uc, &nr) || sp_other_signal_pending(signo, uc)
        || sp_restart_sleep(uc, nr))
    {
        t->wait_pc = 0;
        return;
    }
    sp_keep_timeout(t, uc, nr);
}

static void
sp_sampler_on_signal(int signo, siginfo_t *si, void *ucv)
{
    sp_thread_slot *t = &sp_tls;
    sp_sampler     *s;
    uint8_t         trace_id[16], span_id[8];
    uint32_t        before, after;
    bool            has_span, snapshot, from_timer, from_sampler;
    int             saved = errno;

    (void)signo;
    s = atomic_load_explicit(&sp_active, memory_order_acquire);
    if (s == NULL || t->in_handler) {
        errno = saved;
        return;
    }
    t->in_handler = true;
    atomic_signal_fence(memory_order_seq_cst);
    atomic_fetch_add_explicit(&s->signals, 1, memory_order_relaxed);

    from_timer = si->si_code == SI_TIMER;
    from_sampler = si->si_code == SI_TKILL && si->si_pid == (pid_t)s->pid;

    /* The ids as they are at this instant; none when enter or leave was
     * interrupted half-way. */
    before = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_signal_fence(memory_order_acquire);
    has_span = t->has_span;
    snapshot = t->snapshot;
    memcpy(trace_id, t->trace_id, 16);
    memcpy(span_id, t->span_id, 8);
    atomic_signal_fence(memory_order_acquire);
    after = atomic_load_explicit(&t->seq, memory_order_relaxed);
    if ((before & 1) != 0 || before != after) {
        has_span = false;
    }
    /* Its request ended on another thread: this one works for no span. */
    if (has_span && s->o.spans_end_anywhere && !sp_span_is_open(s, span_id)) {
        has_span = false;
    }

    if (from_timer) {
        if (has_span && snapshot) {
            sp_take_sample(s, t, ucv, true, trace_id, span_id,
                           SP_SOURCE_SNAPSHOT, sp_timer_weight(si));
        } else if (t->generation == s->generation && t->armed) {
            /* leave() left the timer running, or the thread went on to a
             * span that is not selected: stop it now. */
            sp_timer_disarm(t->timer);
            t->armed = false;
        }
    } else if (from_sampler) {
        /* One signal per round, sent by our thread: nothing missed. */
        sp_take_sample(s, t, ucv, has_span, trace_id, span_id,
                       SP_SOURCE_CONTINUOUS, 1);
    }
    if (from_timer || from_sampler) {
        sp_after_cut(t, signo, ucv);
    }

    atomic_signal_fence(memory_order_seq_cst);
    t->in_handler = false;
    errno = saved;
}

/* ---- per-thread timers */

/*
 * A server may end a process from a signal handler through the clean-up
 * that stops the sampler and takes this lock (httpd's prefork: SIGTERM's
 * just_die destroys the child's pool): taken with this thread's lock held,
 * it would wait on itself until the parent's SIGKILL. No signal comes in
 * while it is held. Once per thread and sampler: the cost does not count.
 */
static void
sp_timers_lock(sp_sampler *s, sigset_t *held)
{
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, held);
    pthread_mutex_lock(&s->timers_lock);
}

static void
sp_timers_unlock(sp_sampler *s, const sigset_t *held)
{
    pthread_mutex_unlock(&s->timers_lock);
    pthread_sigmask(SIG_SETMASK, held, NULL);
}

static void
sp_forget_thread_timer(sp_sampler *s, pid_t tid, bool delete_it)
{
    uint32_t i;
    sigset_t held;

    sp_timers_lock(s, &held);
    for (i = 0; i < s->timer_count; i++) {
        if (s->timer_tids[i] == tid) {
            if (delete_it) {
                timer_delete(s->timers[i]);
            }
            s->timer_count--;
            s->timers[i] = s->timers[s->timer_count];
            s->timer_tids[i] = s->timer_tids[s->timer_count];
            break;
        }
    }
    sp_timers_unlock(s, &held);
}

/* A thread that ends leaves no timer behind. */
static void
sp_thread_exits(void *arg)
{
    sp_sampler *s = atomic_load(&sp_active);

    (void)arg;
    if (s != NULL && sp_tls.generation == s->generation) {
        sp_forget_thread_timer(s, sp_gettid(), true);
        sp_tls.generation = 0;
        sp_tls.armed = false;
    }
}

/*
 * libgcc's unwinder sets itself up at its first unwind in the process,
 * under pthread_once: not in a handler that interrupted that. (libunwind,
 * the unwinder before, allocated its thread-local caches with malloc at a
 * thread's first unwind, which in the handler over an interrupted malloc
 * hung the thread.) So a thread unwinds once here, outside any handler,
 * before it can take our signal.
 */
static void
sp_thread_prime(sp_thread_slot *t)
{
    void          *frames[4], *stack;
    size_t         size;
    pthread_attr_t a;

    if (!t->primed) {
        /* The main thread's from /proc/self/maps: not in a handler. */
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            if (pthread_attr_getstack(&a, &stack, &size) == 0) {
                t->stack_low = (uintptr_t)stack;
                t->stack_high = (uintptr_t)stack + size;
            }
            pthread_attr_destroy(&a);
        }
        (void)sp_backtrace(frames, 4);
        atomic_signal_fence(memory_order_seq_cst);
        t->primed = true;
    }
}

/*
 * Servers block signals in their worker threads (httpd's threaded MPMs
 * block them all in the child after child_init, so every thread it makes
 * inherits that): such a thread takes ours only once it unblocks it.
 */
static void
sp_unblock_signal(sp_sampler *s, sp_thread_slot *t)
{
    sigset_t ours;

    sp_thread_prime(t);
    sigemptyset(&ours);
    sigaddset(&ours, s->o.signo);
    pthread_sigmask(SIG_UNBLOCK, &ours, NULL);
    t->admitted = s->generation;
}

static bool
sp_thread_timer(sp_sampler *s, sp_thread_slot *t)
{
    struct sigevent ev;
    timer_t         timer;
    clockid_t       clock;
    sigset_t        held;
    bool            ok = false;

    if (t->generation == s->generation) {
        return true;
    }
    clock = s->o.clock == SP_SAMPLER_CLOCK_WALL ? CLOCK_MONOTONIC
                                                 : CLOCK_THREAD_CPUTIME_ID;
    memset(&ev, 0, sizeof(ev));
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = s->o.signo;
    ev._sigev_un._tid = sp_gettid();

    sp_timers_lock(s, &held);
    if (s->running && s->timer_count < SP_MAX_THREADS
        && timer_create(clock, &ev, &timer) == 0)
    {
        s->timers[s->timer_count] = timer;
        s->timer_tids[s->timer_count] = ev._sigev_un._tid;
        s->timer_count++;
        ok = true;
    }
    sp_timers_unlock(s, &held);
    if (!ok) {
        return false;
    }
    pthread_setspecific(s->thread_key, s);
    /* A thread that works for a selected span must take ours. */
    sp_unblock_signal(s, t);
    t->timer = timer;
    t->armed = false;
    t->generation = s->generation;
    return true;
}

/* The thread's ids from now on, under its sequence counter. */
static void
sp_slot_set(sp_thread_slot *t, const uint8_t trace_id[16],
            const uint8_t span_id[8], bool snapshot)
{
    uint32_t seq;

    seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_release);
    memcpy(t->trace_id, trace_id, 16);
    memcpy(t->span_id, span_id, 8);
    t->has_span = true;
    t->snapshot = snapshot;
    atomic_signal_fence(memory_order_release);
    atomic_store_explicit(&t->seq, seq + 2, memory_order_relaxed);
}

void
sp_sampler_enter(sp_sampler *s, const uint8_t trace_id[16],
                 const uint8_t span_id[8])
{
    sp_thread_slot   *t = &sp_tls;
    struct itimerspec its;

    if (s == NULL || !s->running) {
        return;
    }
    sp_slot_set(t, trace_id, span_id, true);

    if (s->o.snapshot_interval_ms == 0 || t->armed
        || !sp_thread_timer(s, t))
    {
        return;
    }
    /* The thread's first snapshot sample counts the real time since its
     * sampling began here, as every later one counts the time since the
     * one before: not one interval, which a CPU-time timer (the tick, a
     * thread that waited first) may be far past. */
    if (t->last_sample_ns[SP_SOURCE_SNAPSHOT - 1] == 0) {
        t->last_sample_ns[SP_SOURCE_SNAPSHOT - 1] =
            sp_clock_ns(CLOCK_MONOTONIC);
    }
    t->armed = true;
    atomic_signal_fence(memory_order_seq_cst);
    its.it_interval.tv_sec = s->o.snapshot_interval_ms / 1000;
    its.it_interval.tv_nsec = (long)(s->o.snapshot_interval_ms % 1000)
                              * 1000000L;
    its.it_value = its.it_interval;
    if (timer_settime(t->timer, 0, &its, NULL) != 0) {
        t->armed = false;
    }
}

void
sp_sampler_enter_unselected(sp_sampler *s, const uint8_t trace_id[16],
                            const uint8_t span_id[8])
{
    if (s == NULL || !s->running) {
        return;
    }
    /* Only continuous samples carry such a span; without them the thread
     * must still stop carrying a selected one it worked for before. A
     * snapshot timer still armed for that one stops at its next tick. */
    if (s->o.continuous_interval_ms == 0) {
        sp_sampler_leave(s);
        return;
    }
    sp_slot_set(&sp_tls, trace_id, span_id, false);
}

void
sp_sampler_admit(sp_sampler *s)
{
    sp_thread_slot *t = &sp_tls;

    /* Once per thread: a check of its slot after that. */
    if (s == NULL || !s->running || s->o.continuous_interval_ms == 0
        || t->admitted == s->generation)
    {
        return;
    }
    sp_unblock_signal(s, t);
}

void
sp_sampler_leave(sp_sampler *s)
{
    sp_thread_slot *t = &sp_tls;
    uint32_t        seq;

    /* Only this thread writes its slot: nothing to undo without a span. */
    if (s == NULL || !t->has_span) {
        return;
    }
    seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_release);
    t->has_span = false;
    memset(t->trace_id, 0, 16);
    memset(t->span_id, 0, 8);
    atomic_signal_fence(memory_order_release);
    atomic_store_explicit(&t->seq, seq + 2, memory_order_relaxed);
}

/* ---- the continuous sampler's thread */

static int
sp_compare_tids(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

    return (x > y) - (x < y);
}

/* 'R' (running or runnable) from /proc/self/task/TID/stat. */
static bool
sp_thread_is_running(pid_t tid)
{
    char  path[64], buf[512], *state;

    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
    state = sp_proc_stat_fields(path, buf, sizeof(buf));
    return state != NULL && *state == 'R';
}

size_t
sp_threads_list(pid_t except, pid_t *tids, size_t cap)
{
    DIR           *dir;
    struct dirent *e;
    size_t         n = 0;

    dir = opendir("/proc/self/task");
    if (dir == NULL) {
        return 0;
    }
    while ((e = readdir(dir)) != NULL && n < cap) {
        pid_t tid = (pid_t)atoi(e->d_name);

        if (tid > 0 && tid != except) {
            tids[n++] = tid;
        }
    }
    closedir(dir);
    qsort(tids, n, sizeof(pid_t), sp_compare_tids);
    return n;
}

/* One round: every running thread but ours, in thread-id order. */
static void
sp_sample_all_threads(sp_sampler *s, pid_t *tids)
{
    size_t i, n = sp_threads_list(s->thread_tid, tids, SP_MAX_THREADS);

    for (i = 0; i < n; i++) {
        if (sp_thread_is_running(tids[i])) {
            syscall(SYS_tgkill, (pid_t)s->pid, tids[i], s->o.signo);
        }
    }
}

uint64_t
sp_sweep_next_due(uint64_t due_ns, uint64_t interval_ns, uint64_t end_ns,
                  uint64_t cpu_ns)
{
    uint64_t next = due_ns + interval_ns;
    uint64_t rested = end_ns + SP_SWEEP_REST * cpu_ns;

    return rested > next ? rested : next;
}

static void *
sp_continuous_main(void *arg)
{
    sp_sampler     *s = arg;
    struct timespec due_at;
    uint64_t        due, cpu, interval;
    pid_t          *tids;

    s->thread_tid = sp_gettid();
    (void)prctl(PR_SET_NAME, "spanprof-sample");
    tids = malloc(sizeof(pid_t) * SP_MAX_THREADS);
    if (tids == NULL) {
        return NULL;
    }
    interval = s->o.continuous_interval_ms * 1000000ull;
    due = sp_clock_ns(CLOCK_MONOTONIC) + interval;
    pthread_mutex_lock(&s->stop_lock);
    while (!s->stopping) {
        due_at.tv_sec = (time_t)(due / 1000000000ull);
        due_at.tv_nsec = (long)(due % 1000000000ull);
        while (!s->stopping
               && pthread_cond_timedwait(&s->stop_cond, &s->stop_lock,
                                         &due_at) != ETIMEDOUT)
        {
        }
        if (s->stopping) {
            break;
        }
        pthread_mutex_unlock(&s->stop_lock);
        cpu = sp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        sp_sample_all_threads(s, tids);
        cpu = sp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
        due = sp_sweep_next_due(due, interval, sp_clock_ns(CLOCK_MONOTONIC),
                                cpu);
        pthread_mutex_lock(&s->stop_lock);
    }
    pthread_mutex_unlock(&s->stop_lock);
    free(tids);
    return NULL;
}

/* ---- life cycle */

sp_status
sp_sampler_create(const sp_sampler_options *o, sp_ring *ring,
                  sp_sampler **out)
{
    sp_sampler *s;

    if (o == NULL || ring == NULL
        || (o->snapshot_interval_ms == 0 && o->continuous_interval_ms == 0)
        || o->snapshot_interval_ms > SP_MAX_INTERVAL_MS
        || o->continuous_interval_ms > SP_MAX_INTERVAL_MS
        || o->max_depth > SP_DEFAULT_DEPTH * 8
        || (o->clock != SP_SAMPLER_CLOCK_CPU
            && o->clock != SP_SAMPLER_CLOCK_WALL)
        || o->signo < 0 || o->signo >= NSIG)
    {
        return SP_ERR_INVALID;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return SP_ERR_NOMEM;
    }
    s->o = *o;
    if (s->o.max_depth == 0) {
        s->o.max_depth = SP_DEFAULT_DEPTH;
    }
    if (s->o.signo == 0) {
        s->o.signo = SIGPROF;
    }
    s->ring = ring;
    pthread_mutex_init(&s->timers_lock, NULL);
    pthread_mutex_init(&s->stop_lock, NULL);
    *out = s;
    return SP_OK;
}

static bool
sp_signal_is_free(int signo, struct sigaction *previous)
{
    if (sigaction(signo, NULL, previous) != 0) {
        return false;
    }
    if (previous->sa_flags & SA_SIGINFO) {
        return previous->sa_sigaction == sp_sampler_on_signal;
    }
    return previous->sa_handler == SIG_DFL || previous->sa_handler == SIG_IGN;
}

sp_status
sp_sampler_start(sp_sampler *s)
{
    struct sigaction   sa;
    pthread_condattr_t ca;
    sigset_t           all, old;
    sp_sampler        *expected = NULL;

    if (s == NULL) {
        return SP_ERR_INVALID;
    }
    if (s->running) {
        return SP_OK;
    }
    if (!sp_signal_is_free(s->o.signo, &s->previous)) {
        return SP_ERR_SIGNAL_BUSY;
    }
    if (!sp_unwinder_load()) {
        return SP_ERR_IO;
    }
    if (!atomic_compare_exchange_strong(&sp_active, &expected, s)) {
        return SP_ERR_INVALID;
    }
    if (!s->key_created) {
        if (pthread_key_create(&s->thread_key, sp_thread_exits) != 0) {
            atomic_store(&sp_active, NULL);
            return SP_ERR_IO;
        }
        s->key_created = true;
    }

    s->pid = (uint32_t)getpid();
    s->generation = atomic_fetch_add(&sp_generations, 1) + 1;
    s->stopping = false;

    sp_thread_prime(&sp_tls);

    s->objects_changes = sp_objects_change_count();
    sp_objects_publish(s);

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = sp_sampler_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(s->o.signo, &sa, NULL) != 0) {
        atomic_store(&sp_active, NULL);
        return SP_ERR_IO;
    }
    s->handler_installed = true;
    s->running = true;

    if (s->o.continuous_interval_ms > 0) {
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->stop_cond, &ca);
        pthread_condattr_destroy(&ca);
        /* The sampler's own thread takes no signal of ours. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        s->thread_started =
            pthread_create(&s->thread, NULL, sp_continuous_main, s) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (!s->thread_started) {
            sp_sampler_stop(s);
            return SP_ERR_IO;
        }
    }
    return SP_OK;
}

void
sp_sampler_stop(sp_sampler *s)
{
    struct sigaction sa;
    uint32_t         i;

    if (s == NULL || !s->running) {
        return;
    }
    s->running = false;
    if (s->thread_started) {
        pthread_mutex_lock(&s->stop_lock);
        s->stopping = true;
        pthread_cond_signal(&s->stop_cond);
        pthread_mutex_unlock(&s->stop_lock);
        pthread_join(s->thread, NULL);
        pthread_cond_destroy(&s->stop_cond);
        s->thread_started = false;
    }
    /* Deleting a timer also discards its pending signal. */
    pthread_mutex_lock(&s->timers_lock);
    for (i = 0; i < s->timer_count; i++) {
        timer_delete(s->timers[i]);
    }
    s->timer_count = 0;
    pthread_mutex_unlock(&s->timers_lock);
    sp_tls.generation = 0;
    sp_tls.armed = false;

    /* A signal still in flight must not take the default action
     * (termination): leave it ignored rather than restore SIG_DFL. */
    if (s->handler_installed) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = (s->previous.sa_flags & SA_SIGINFO)
                        || s->previous.sa_handler == SIG_DFL
                        ? SIG_IGN : s->previous.sa_handler;
        sigaction(s->o.signo, &sa, NULL);
        s->handler_installed = false;
    }
    atomic_store(&sp_active, NULL);
}

void
sp_sampler_destroy(sp_sampler *s)
{
    sp_objects_table *t, *older;

    if (s == NULL) {
        return;
    }
    sp_sampler_stop(s);
    if (s->key_created) {
        pthread_key_delete(s->thread_key);
    }
    pthread_mutex_destroy(&s->timers_lock);
    pthread_mutex_destroy(&s->stop_lock);
    for (t = atomic_load(&s->objects); t != NULL; t = older) {
        older = t->older;
        free(t->body);
        free(t);
    }
    free(s);
}

uint64_t
sp_sampler_poll(sp_sampler *s)
{
    uint64_t changes, dropped, now, count = 0;

    if (s == NULL || !s->running) {
        return 0;
    }
    changes = sp_objects_change_count();
    if (changes != s->objects_changes) {
        s->objects_changes = changes;
        sp_objects_publish(s);
    }
    dropped = atomic_load(&s->dropped);
    now = sp_clock_ns(CLOCK_MONOTONIC);
    if (dropped > s->warned_dropped
        && (s->warned_at_ns == 0 || now - s->warned_at_ns >= SP_WARN_EVERY_NS))
    {
        count = dropped - s->warned_dropped;
        s->warned_dropped = dropped;
        s->warned_at_ns = now;
    }
    return count;
}

void
sp_sampler_stats_get(const sp_sampler *s, sp_sampler_stats *out)
{
    out->taken = atomic_load(&((sp_sampler *)s)->taken);
    out->dropped = atomic_load(&((sp_sampler *)s)->dropped);
    out->no_stack = atomic_load(&((sp_sampler *)s)->no_stack);
    out->signals = atomic_load(&((sp_sampler *)s)->signals);
}
