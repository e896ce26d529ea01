/*
 * The exporter loop (sp_exporter.h): a drain thread (the caller's) that
 * turns ring records into encoded OTLP requests, and a sender thread per
 * signal that exports them, so a slow or absent collector never stops the
 * draining and the rings keep their room for the workers, and one that
 * does not take a signal (down, stalled, or another endpoint) never holds
 * up the other.
 */
#include "sp_exporter.h"
#include "sp_clock.h"
#include "sp_exporter_launch.h"
#include "sp_otlp.h"
#include "sp_otlp_client.h"
#include "sp_otlp_json.h"
#include "sp_pprof.h"
#include "sp_resource.h"
#include "sp_ring_next.h"
#include "sp_symbolizer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SP_DRAIN_BUDGET      4096    /* records per ring per pass */
/*
 * Sleep between passes unless a pass left records behind
 * (sp_exporter_backlog). Stepping again at once after any record meant,
 * under a trickle, one wake-up and one pass per record; sleeping batches
 * them. What the sleep costs is room: a 1 MiB ring (both modules') must
 * hold 10 ms of writes plus a pass. 100k spans/s of ~650 bytes is ~650 KB
 * in 10 ms, samples of 64 threads every 1 ms ~260 KB more: it fits, not
 * by much, so a pass that drained more than SP_BACKLOG_SHARE of a ring
 * does not sleep either, and under such a rate the loop runs as it did
 * before.
 */
#define SP_PASS_SLEEP_MS     10
#define SP_BACKLOG_SHARE     4       /* 1/4 of a ring's bytes */
/*
 * A ring's owner is checked for death at most this often: the check reads
 * /proc/PID/stat (kill, open, read, a start-time parse), which per ring
 * per pass was most of an idle exporter's cost. A dead worker's ring is
 * freed up to this much later; a new worker can take it over before that
 * (sp_region_claim checks for itself).
 */
#define SP_OWNER_CHECK_MS    500
/*
 * Slots nobody claimed are not visited (sp_region_claims tells when to
 * look again); all of them are looked at this often anyway, for records
 * in a slot no claim announced.
 */
#define SP_RESCAN_MS         1000
#define SP_CLAIM_RETRY_MS    50
/* Records unread this long while an exporter holds the region: it does
 * not read them (a live one drains every SP_PASS_SLEEP_MS). */
#define SP_READER_IDLE_MS    200
#define SP_ARENA_BYTES       (256u << 10)
#define SP_MAX_WORKERS       (2 * SP_REGION_MAX_SLOTS)
#define SP_GRPC_CODES        17

/* ---- the objects of one worker, copied out of the ring */

typedef struct sp_worker {
    uint32_t          pid;
    uint32_t          generation;
    uint16_t          count;
    sp_object        *objects;
    sp_pprof_mapping *mappings;
    char             *paths;
    uint64_t          used_ms;
} sp_worker;

/* ---- a profile being built for one (worker, source) */

/*
 * The addresses a profile already has a location for, and the object of
 * each (-1: none). pprof keeps the first names given for an address, so
 * a known one needs no symbolizing: on a busy server most frames are.
 */
#define SP_MEMO_EMPTY  INT16_MIN
#define SP_MEMO_MAX    32768

typedef struct sp_addr_memo {
    uint64_t *keys;
    int16_t  *obj;
    uint32_t  cap;      /* power of two, 0: not allocated */
    uint32_t  count;
} sp_addr_memo;

typedef struct sp_profile_slot {
    bool      used;
    uint32_t  pid;
    uint8_t   source;
    uint64_t  period_ns;     /* the builder's */
    sp_pprof *pprof;
    uint64_t  first_ns;
    uint64_t  opened_seq;
    uint64_t  samples;
    sp_addr_memo memo;
} sp_profile_slot;

/* ---- a ring the drain visits */

typedef struct sp_ring_watch {
    sp_ring *ring;      /* the region's, set at create (it stays) */
    bool     watched;   /* in the drain's list */
    uint64_t check_ms;  /* when to check its owner for death next */
} sp_ring_watch;

/*
 * The counts the drain thread keeps between two publishes (sp_publish):
 * only those it adds to, so that each step's publish clears 64 bytes,
 * not a whole sp_exporter_counters (288 bytes: a rep stos, 44
 * instructions under callgrind, one a word).
 */
typedef struct sp_drain_counts {
    uint64_t received;
    uint64_t samples;
    uint64_t spans;
    uint64_t objects;
    uint64_t dropped_corrupt;
    uint64_t dropped_queue_full;
    uint64_t dropped_too_large;
    uint64_t dropped_disabled;
} sp_drain_counts;

/* ---- an encoded request waiting for the sender */

/*
 * The item holds a reference to its request; a call that gave up on it
 * (deadline) may leave gRPC holding others, so its memory goes when the
 * last of them does, possibly after the item.
 */
typedef struct sp_item {
    struct sp_item  *next;
    sp_otlp_signal   signal;
    uint64_t         records;
    size_t           len;
    sp_otlp_request *req;
} sp_item;

typedef struct sp_sink {
    sp_exporter      kind;     /* sp_config's exporter */
    sp_otlp_client  *client;   /* otlp */
    const char      *method;
} sp_sink;

/*
 * A signal's sender: its own thread, retry and backoff. With one sender
 * for both, a logs request retried against a logs endpoint that was down
 * or stalled stayed at the head of the queue and no span went out. Its
 * failure log too: a collector may take one signal and refuse the other
 * (traces only, as Jaeger's), and one signal's successes must not make
 * each failure of the other look new.
 */
typedef struct sp_lane {
    struct sp_exporter_loop *e;
    sp_otlp_signal   signal;
    pthread_t        thread;
    bool             started;
    /*
     * Its signal's queue changed, or quit. One per lane, so a push wakes
     * the one sender it is for (with one for both, every spans batch
     * woke the logs sender too, which found nothing and slept again).
     */
    pthread_cond_t   cond;
    sp_item         *inflight;     /* under the loop's lock */
    uint32_t         retry;
    uint64_t         next_attempt_ms;
    int              last_logged_code;
    uint64_t         last_failure_log_ms;
} sp_lane;

struct sp_exporter_loop {
    sp_exporter_options o;
    uint32_t            pid;
    sp_log_level        max_level;

    /* settings */
    uint64_t            export_interval_ms;
    uint64_t            bsp_delay_ms;
    uint64_t            bsp_batch;
    uint64_t            bsp_queue;
    uint64_t            timeout_ms;
    uint64_t            fast_ms;    /* a fast stop's time */
    uint64_t            snapshot_period_ns;
    uint64_t            continuous_period_ns;

    /* drain thread */
    sp_ring_watch      *ring_watch; /* per slot of the region */
    uint32_t           *watch;      /* the slots in use, to drain */
    uint32_t            watch_count;
    uint64_t            claims_seen;
    size_t              backlog_bytes; /* a ring's SP_BACKLOG_SHARE, set
                                          at create */
    uint64_t            next_rescan_ms; /* 0: at the next pass */
    bool                backlog;    /* the last pass left records */
    sp_symbolizer      *symbolizer;
    sp_resource        *resource;
    sp_worker          *workers;
    size_t              worker_count;
    size_t              worker_cap;
    size_t              last_worker;
    sp_profile_slot    *slots;
    uint64_t            slot_seq;
    sp_otlp_logs       *logs;
    uint64_t            logs_records;
    sp_otlp_traces     *traces;
    uint64_t            traces_first_ms;
    size_t              traces_count; /* sp_otlp_traces_count's, kept */
    sp_buf              scratch;    /* a serialized profile */
    char               *arena;
    size_t              arena_used;
    sp_pprof_frame     *frames;
    sp_pprof_line      *lines;      /* SP_SYMBOL_MAX_INLINE per frame */
    uint64_t            next_logs_ms;
    uint64_t            next_counters_ms;
    sp_drain_counts     local;      /* the drain thread's, published */
    uint64_t            held_build; /* records in builders */
    bool                drain_pushed; /* a push the drain loop was not told */
    uint64_t            ring_full_base;
    uint64_t            ring_corrupt_base;

    /* shared with the sender, under lock */
    /* The rings' totals when the region was given up: what they count
     * after it is the next reader's time, not this one's. */
    bool                rings_released;
    uint64_t            ring_full_end;
    uint64_t            ring_corrupt_end;
    pthread_mutex_t     lock;
    pthread_cond_t      idle_cond;
    sp_exporter_counters shared;
    sp_item            *head, *tail;
    size_t              queue_bytes;
    uint64_t            queue_records;
    uint64_t            queue_spans;
    bool                quit;
    bool                flushing;   /* the stop's last phase: no retry, and
                                       nothing sent from stop_end_ms on */
    bool                cancelled;  /* the calls in flight, its time up */
    uint64_t            stop_end_ms; /* stopping: no call outlives it */
    uint64_t            rng;

    sp_sink             sinks[3];   /* indexed by sp_otlp_signal */
    sp_lane             lanes[3];   /* indexed by sp_otlp_signal */
    int                 console_fd;
    bool                console_owned;
    pthread_mutex_t     console_lock; /* a line at a time from both lanes */
    atomic_bool         stop;
    _Atomic uint64_t    fast_at_ms; /* a fast stop asked then; 0: none */
    uint64_t            stop_seen_ms; /* by the claim, or run; 0: not */
};

/* ---- small helpers */

static uint64_t
sp_now_ms(sp_exporter_loop *e)
{
    return e->o.now_ms != NULL ? e->o.now_ms(e->o.clock_ctx)
                               : sp_monotonic_ms();
}

static void sp_log(sp_exporter_loop *e, sp_log_level level,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
sp_log(sp_exporter_loop *e, sp_log_level level, const char *fmt, ...)
{
    char    line[1024];
    va_list ap;

    if (e->o.log == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    e->o.log(e->o.log_ctx, level, line);
}

static uint64_t
sp_random(void *ctx)
{
    sp_exporter_loop *e = ctx;
    uint64_t     x = e->rng;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e->rng = x;
    return x;
}

/* ---- the address memo of a profile */

static uint32_t
sp_memo_hash(uint64_t a)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdull;
    a ^= a >> 33;
    return (uint32_t)a;
}

static void
sp_memo_clear(sp_addr_memo *m)
{
    uint32_t i;

    for (i = 0; i < m->cap; i++) {
        m->obj[i] = SP_MEMO_EMPTY;
    }
    m->count = 0;
}

static void
sp_memo_free(sp_addr_memo *m)
{
    free(m->keys);
    free(m->obj);
    memset(m, 0, sizeof(*m));
}

/* The object index remembered for a, or SP_MEMO_EMPTY. */
static int
sp_memo_find(const sp_addr_memo *m, uint64_t a)
{
    uint32_t i;

    if (m->cap == 0) {
        return SP_MEMO_EMPTY;
    }
    for (i = sp_memo_hash(a) & (m->cap - 1); m->obj[i] != SP_MEMO_EMPTY;
         i = (i + 1) & (m->cap - 1))
    {
        if (m->keys[i] == a) {
            return m->obj[i];
        }
    }
    return SP_MEMO_EMPTY;
}

static bool
sp_memo_grow(sp_addr_memo *m)
{
    uint32_t  cap = m->cap ? m->cap * 2 : 1024, i, j;
    uint64_t *keys;
    int16_t  *obj;

    if (cap > SP_MEMO_MAX) {
        return false;
    }
    keys = malloc(cap * sizeof(*keys));
    obj = malloc(cap * sizeof(*obj));
    if (keys == NULL || obj == NULL) {
        free(keys);
        free(obj);
        return false;
    }
    for (i = 0; i < cap; i++) {
        obj[i] = SP_MEMO_EMPTY;
    }
    for (i = 0; i < m->cap; i++) {
        if (m->obj[i] == SP_MEMO_EMPTY) {
            continue;
        }
        for (j = sp_memo_hash(m->keys[i]) & (cap - 1);
             obj[j] != SP_MEMO_EMPTY; j = (j + 1) & (cap - 1))
        {
        }
        keys[j] = m->keys[i];
        obj[j] = m->obj[i];
    }
    free(m->keys);
    free(m->obj);
    m->keys = keys;
    m->obj = obj;
    m->cap = cap;
    return true;
}

/* Remembers a (absent); full past SP_MEMO_MAX: then nothing is kept. */
static void
sp_memo_put(sp_addr_memo *m, uint64_t a, int obj)
{
    uint32_t i;

    if ((m->count + 1) * 2 > m->cap && !sp_memo_grow(m)) {
        return;
    }
    for (i = sp_memo_hash(a) & (m->cap - 1); m->obj[i] != SP_MEMO_EMPTY;
         i = (i + 1) & (m->cap - 1))
    {
    }
    m->keys[i] = a;
    m->obj[i] = (int16_t)obj;
    m->count++;
}

/* ---- workers' objects */

static sp_worker *
sp_worker_find(sp_exporter_loop *e, uint32_t pid)
{
    size_t i;

    if (e->last_worker < e->worker_count
        && e->workers[e->last_worker].pid == pid)
    {
        return &e->workers[e->last_worker];
    }
    for (i = 0; i < e->worker_count; i++) {
        if (e->workers[i].pid == pid) {
            e->last_worker = i;
            return &e->workers[i];
        }
    }
    return NULL;
}

static void
sp_worker_clear(sp_worker *w)
{
    free(w->objects);
    free(w->mappings);
    free(w->paths);
    w->objects = NULL;
    w->mappings = NULL;
    w->paths = NULL;
    w->count = 0;
}

static void
sp_worker_forget(sp_exporter_loop *e, uint32_t pid)
{
    sp_worker *w = sp_worker_find(e, pid);

    if (w == NULL) {
        return;
    }
    sp_worker_clear(w);
    *w = e->workers[--e->worker_count];
    e->last_worker = 0;
}

static sp_status
sp_objects_take(sp_exporter_loop *e, const sp_objects_record *r)
{
    sp_worker *w = sp_worker_find(e, r->pid);
    sp_object *objs;
    sp_pprof_mapping *maps;
    char      *paths;
    size_t     bytes = 0, used = 0;
    uint16_t   i;

    if (w != NULL && w->generation == r->generation && w->count == r->count
        && w->objects != NULL)
    {
        return SP_OK;
    }
    for (i = 0; i < r->count; i++) {
        sp_object o;
        if (sp_object_at(r, i, &o) != SP_OK) {
            return SP_ERR_INVALID;
        }
        bytes += o.path_len + 1;
    }
    objs = calloc(r->count ? r->count : 1, sizeof(*objs));
    maps = calloc(r->count ? r->count : 1, sizeof(*maps));
    paths = malloc(bytes ? bytes : 1);
    if (objs == NULL || maps == NULL || paths == NULL) {
        free(objs);
        free(maps);
        free(paths);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < r->count; i++) {
        sp_object_at(r, i, &objs[i]);
        memcpy(paths + used, objs[i].path, objs[i].path_len);
        paths[used + objs[i].path_len] = '\0';
        objs[i].path = paths + used;
        used += objs[i].path_len + 1;
    }
    for (i = 0; i < r->count; i++) {
        maps[i].start = objs[i].start;
        maps[i].limit = objs[i].end;
        maps[i].file_offset = objs[i].file_offset;
        maps[i].path = objs[i].path;
        maps[i].build_id = objs[i].build_id;
        maps[i].build_id_len = objs[i].build_id_len;
    }

    if (w == NULL) {
        if (e->worker_count == e->worker_cap) {
            size_t     cap = e->worker_cap ? e->worker_cap * 2 : 16;
            sp_worker *nw;

            if (cap > SP_MAX_WORKERS) {
                /* More pids than slots can ever have claimed: the least
                 * recently used one is long gone. */
                size_t lru = 0, j;
                for (j = 1; j < e->worker_count; j++) {
                    if (e->workers[j].used_ms < e->workers[lru].used_ms) {
                        lru = j;
                    }
                }
                sp_worker_forget(e, e->workers[lru].pid);
            } else {
                nw = realloc(e->workers, cap * sizeof(*nw));
                if (nw == NULL) {
                    free(objs);
                    free(maps);
                    free(paths);
                    return SP_ERR_NOMEM;
                }
                e->workers = nw;
                e->worker_cap = cap;
            }
        }
        w = &e->workers[e->worker_count++];
        memset(w, 0, sizeof(*w));
        w->pid = r->pid;
    } else {
        uint32_t k;

        sp_worker_clear(w);
        /* Object indexes remembered for this pid meant the old table. */
        for (k = 0; k < e->o.max_profiles; k++) {
            if (e->slots[k].pid == r->pid) {
                sp_memo_clear(&e->slots[k].memo);
            }
        }
    }
    w->generation = r->generation;
    w->count = r->count;
    w->objects = objs;
    w->mappings = maps;
    w->paths = paths;
    w->used_ms = sp_now_ms(e);
    return SP_OK;
}

/* ---- the queue (sender side of the hand-over) */

static void
sp_item_free(sp_item *it)
{
    sp_otlp_request_unref(it->req);
    free(it);
}

static void
sp_item_drop_locked(sp_exporter_loop *e, sp_item *it, uint64_t *counter)
{
    *counter += it->records;
    e->queue_bytes -= it->len;
    e->queue_records -= it->records;
    if (it->signal == SP_OTLP_SIGNAL_TRACES) {
        e->queue_spans -= it->records;
    }
    sp_item_free(it);
}

/* Evicts the oldest item (of signal, or any when 0). */
static bool
sp_evict_oldest_locked(sp_exporter_loop *e, int signal)
{
    sp_item **pp = &e->head, *prev = NULL;

    while (*pp != NULL && signal != 0 && (int)(*pp)->signal != signal) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL) {
        return false;
    }
    sp_item *it = *pp;
    *pp = it->next;
    if (e->tail == it) {
        e->tail = prev;
    }
    sp_item_drop_locked(e, it, &e->shared.dropped_queue_full);
    return true;
}

static void sp_publish(sp_exporter_loop *e);

/* After quit or a deadline: every sender looks again. */
static void
sp_lanes_wake_locked(sp_exporter_loop *e)
{
    int i;

    for (i = 0; i < 3; i++) {
        pthread_cond_broadcast(&e->lanes[i].cond);
    }
}

/*
 * Hands the request of signal's builder (records samples or spans) over
 * to a new queue item without copying it: the item takes the builder's
 * buffers as the request's pieces (sp_otlp_*_take), and the client gives
 * gRPC those same pieces (callgrind: a copy costs ~400 instructions a
 * span, a memcpy is an instruction a byte there). The builder is empty
 * afterwards either way.
 */
static void
sp_queue_push(sp_exporter_loop *e, sp_otlp_signal signal, uint64_t records)
{
    sp_otlp_request *req = NULL;
    sp_item         *it;
    sp_status        st;
    size_t           len;

    /*
     * Records leave the drain thread here: those read so far are freed as
     * soon as the record being taken is (sp_exporter_step), so that an
     * exporter that dies once the sender has sent them does not leave
     * them for the next one to read and send again. Not before: a push
     * can come before the record's own span or sample is copied out of
     * the ring (it did not fit), and writers may reuse what is freed.
     */
    e->drain_pushed = true;
    e->held_build -= records;
    if (e->sinks[signal].kind == SP_EXPORTER_NONE) {
        e->local.dropped_disabled += records;
        return;
    }
    it = malloc(sizeof(*it));
    if (it == NULL) {
        e->local.dropped_queue_full += records;
        return;
    }
    st = signal == SP_OTLP_SIGNAL_LOGS ? sp_otlp_logs_take(e->logs, &req)
                                       : sp_otlp_traces_take(e->traces, &req);
    if (st != SP_OK) {
        free(it);
        e->local.dropped_queue_full += records;
        return;
    }
    len = sp_otlp_request_len(req);
    it->next = NULL;
    it->signal = signal;
    it->records = records;
    it->len = len;
    it->req = req;

    pthread_mutex_lock(&e->lock);
    while (e->head != NULL && e->queue_bytes + len > e->o.max_queue_bytes) {
        sp_evict_oldest_locked(e, 0);
    }
    if (signal == SP_OTLP_SIGNAL_TRACES) {
        while (e->queue_spans + records > e->bsp_queue
               && sp_evict_oldest_locked(e, SP_OTLP_SIGNAL_TRACES))
        {
        }
    }
    if (len > e->o.max_queue_bytes) {
        pthread_mutex_unlock(&e->lock);
        sp_item_free(it);
        e->local.dropped_queue_full += records;
        return;
    }
    if (e->tail != NULL) {
        e->tail->next = it;
    } else {
        e->head = it;
    }
    e->tail = it;
    e->queue_bytes += len;
    e->queue_records += records;
    if (signal == SP_OTLP_SIGNAL_TRACES) {
        e->queue_spans += records;
    }
    pthread_mutex_unlock(&e->lock);
    /*
     * After the unlock: signalled under it, the sender woke only to wait
     * for the lock this thread still held, a second sleep and wake-up
     * per batch. It cannot miss the item: it looks at the queue under
     * the lock before each wait.
     */
    pthread_cond_signal(&e->lanes[signal].cond);
}

static void
sp_logs_push(sp_exporter_loop *e)
{
    if (sp_otlp_logs_count(e->logs) == 0) {
        return;
    }
    sp_queue_push(e, SP_OTLP_SIGNAL_LOGS, e->logs_records);
    /* taken, or dropped: either way not sent from this builder again */
    sp_otlp_logs_reset(e->logs);
    e->logs_records = 0;
}

static void
sp_traces_push(sp_exporter_loop *e)
{
    uint64_t n = e->traces_count;

    if (n == 0) {
        return;
    }
    sp_queue_push(e, SP_OTLP_SIGNAL_TRACES, n);
    sp_otlp_traces_reset(e->traces);
    e->traces_count = 0;
}

/* ---- profiles */

static void
sp_slot_close(sp_exporter_loop *e, sp_profile_slot *s)
{
    sp_status st;

    if (!s->used) {
        return;
    }
    s->used = false;
    if (s->samples == 0) {
        return;
    }
    sp_buf_clear(&e->scratch);
    st = sp_pprof_serialize(s->pprof, &e->scratch);
    if (st == SP_OK) {
        for (int attempt = 0; attempt < 2; attempt++) {
            st = sp_otlp_logs_add_pprof(e->logs, e->resource, s->pid,
                                        s->source, s->first_ns,
                                        sp_realtime_ns(),
                                        e->scratch.data, e->scratch.len,
                                        sp_pprof_frame_count(s->pprof));
            if (st != SP_ERR_TOO_LONG || sp_otlp_logs_count(e->logs) == 0) {
                break;
            }
            sp_logs_push(e);
        }
    }
    if (st == SP_OK) {
        e->logs_records += s->samples;
    } else {
        e->held_build -= s->samples;
        e->local.dropped_too_large += s->samples;
    }
    sp_pprof_reset(s->pprof);
    sp_memo_clear(&s->memo);
    s->samples = 0;
}

static void
sp_profiles_close_all(sp_exporter_loop *e)
{
    uint32_t i;

    for (i = 0; i < e->o.max_profiles; i++) {
        sp_slot_close(e, &e->slots[i]);
    }
    sp_logs_push(e);
}

static sp_profile_slot *
sp_slot_for(sp_exporter_loop *e, uint32_t pid, uint8_t source)
{
    sp_profile_slot *free_slot = NULL, *oldest = NULL;
    uint64_t         period = source == SP_SOURCE_SNAPSHOT
                              ? e->snapshot_period_ns
                              : e->continuous_period_ns;
    uint32_t         i;

    for (i = 0; i < e->o.max_profiles; i++) {
        sp_profile_slot *s = &e->slots[i];

        if (s->used && s->pid == pid && s->source == source) {
            return s;
        }
        if (!s->used && free_slot == NULL) {
            free_slot = s;
        }
        if (s->used && (oldest == NULL || s->opened_seq < oldest->opened_seq))
        {
            oldest = s;
        }
    }
    if (free_slot == NULL) {
        sp_slot_close(e, oldest);
        free_slot = oldest;
    }
    if (free_slot->pprof == NULL || free_slot->period_ns != period) {
        sp_pprof_options po = { period, e->o.profile_bytes };

        sp_pprof_destroy(free_slot->pprof);
        free_slot->pprof = NULL;
        sp_memo_clear(&free_slot->memo);
        if (sp_pprof_create(&po, &free_slot->pprof) != SP_OK) {
            return NULL;
        }
        free_slot->period_ns = period;
    }
    free_slot->used = true;
    free_slot->pid = pid;
    free_slot->source = source;
    free_slot->first_ns = 0;
    free_slot->samples = 0;
    free_slot->opened_seq = ++e->slot_seq;
    return free_slot;
}

/* ---- samples */

static const char *
sp_arena_copy(sp_exporter_loop *e, const char *s)
{
    size_t n;
    char  *p;

    if (s == NULL) {
        return NULL;
    }
    n = strlen(s) + 1;
    if (e->arena_used + n > SP_ARENA_BYTES) {
        return NULL;    /* unnamed rather than wrong */
    }
    p = e->arena + e->arena_used;
    memcpy(p, s, n);
    e->arena_used += n;
    return p;
}

static void
sp_line_copy(sp_exporter_loop *e, sp_pprof_line *dst, const sp_symbol_line *src)
{
    dst->function = sp_arena_copy(e, src->function);
    dst->file = sp_arena_copy(e, src->file);
    dst->line = src->line;
}

static void
sp_symbolize(sp_exporter_loop *e, const sp_sample *s, sp_addr_memo *memo)
{
    sp_worker *w = sp_worker_find(e, s->pid);
    size_t     i, count = w != NULL ? w->count : 0;
    sp_symbol  sym;

    e->arena_used = 0;
    if (w != NULL) {
        w->used_ms = sp_now_ms(e);
    }
    for (i = 0; i < s->frame_count; i++) {
        sp_pprof_frame *f = &e->frames[i];
        sp_pprof_line  *inl = &e->lines[i * SP_SYMBOL_MAX_INLINE];
        sp_status       st;
        uint8_t         k;

        memset(f, 0, sizeof(*f));
        f->address = s->frames[i];
        if (memo != NULL) {
            int known = sp_memo_find(memo, f->address);

            if (known != SP_MEMO_EMPTY) {
                f->mapping = known >= 0 && (size_t)known < count
                             ? &w->mappings[known] : NULL;
                continue;
            }
        }
        st = sp_symbolizer_lookup(e->symbolizer,
                                  w != NULL ? w->objects : NULL, count,
                                  s->frames[i], i > 0, &sym);
        if ((st != SP_OK && st != SP_ERR_NOMEM) || sym.object_index < 0) {
            if (memo != NULL) {
                sp_memo_put(memo, f->address, -1);
            }
            continue;
        }
        if (memo != NULL && sym.object_index <= INT16_MAX) {
            sp_memo_put(memo, f->address, sym.object_index);
        }
        f->mapping = &w->mappings[sym.object_index];
        sp_line_copy(e, &f->frame, &sym.frame);
        for (k = 0; k < sym.inline_count; k++) {
            sp_line_copy(e, &inl[k], &sym.inlined[k]);
        }
        f->inlined = inl;
        f->inline_count = sym.inline_count;
    }
}

/* SP_ERR_INVALID when the record does not decode; otherwise SP_OK, the
 * sample being held or counted as dropped. */
static sp_status
sp_sample_take(sp_exporter_loop *e, const sp_record_view *v)
{
    sp_sample  smp;
    sp_sample *s = &smp;
    sp_status  st;

    if (sp_sample_decode(v->body, v->len, s) != SP_OK) {
        return SP_ERR_INVALID;
    }

    if (e->o.text_format) {
        sp_symbolize(e, s, NULL);
        for (int attempt = 0; attempt < 2; attempt++) {
            uint64_t interval = s->source == SP_SOURCE_SNAPSHOT
                                ? e->snapshot_period_ns
                                : e->continuous_period_ns;
            st = sp_otlp_logs_add_text(e->logs, e->resource, s, e->frames,
                                       s->frame_count, interval,
                                       sp_realtime_ns());
            if (st != SP_ERR_TOO_LONG || sp_otlp_logs_count(e->logs) == 0) {
                break;
            }
            sp_logs_push(e);
        }
        if (st == SP_OK) {
            e->held_build++;
            e->logs_records++;
        } else {
            e->local.dropped_too_large++;
        }
        return SP_OK;
    }

    for (int attempt = 0; attempt < 2; attempt++) {
        sp_profile_slot *slot = sp_slot_for(e, s->pid, s->source);

        if (slot == NULL) {
            e->local.dropped_too_large++;
            return SP_OK;
        }
        sp_symbolize(e, s, &slot->memo);
        st = sp_pprof_add(slot->pprof, s, e->frames, s->frame_count);
        if (st == SP_OK) {
            if (slot->samples == 0 || s->time_ns < slot->first_ns) {
                slot->first_ns = s->time_ns;
            }
            slot->samples++;
            e->held_build++;
            return SP_OK;
        }
        if (st != SP_ERR_TOO_LONG || slot->samples == 0) {
            /* Locations may be missing that the memo says are there. */
            sp_memo_clear(&slot->memo);
            break;
        }
        sp_slot_close(e, slot);
    }
    e->local.dropped_too_large++;
    return SP_OK;
}

/* ---- spans */

/* As sp_sample_take, for a span: the worker wrote it as the Span message
 * that goes out, so it is checked and copied, not decoded and encoded
 * (sp_otlp_traces_add_record). A bad record is counted here. Returns
 * whether the take pushed a request (sp_record_take). */
static bool
sp_span_take(sp_exporter_loop *e, const sp_record_view *v)
{
    sp_status st;
    size_t    n;

    /*
     * The spans held before this one: a span added makes it n + 1. The
     * builder never holds more than the queue may (the BSP's queue size):
     * it is pushed at bsp_batch spans, and bsp_queue is at least that
     * (sp_exporter_create); the queue's own bound is sp_queue_push's.
     */
    n = e->traces_count;
    /*
     * The first span's time set before its add (it is read only while
     * spans are held), so that n need not be kept across the call, and
     * SP_OK tested first: 4 instructions fewer a span (callgrind).
     */
    if (n == 0) {
        e->traces_first_ms = sp_now_ms(e);
    }
    st = sp_otlp_traces_add_record(e->traces, e->resource, v->body, v->len);
    if (st != SP_OK) {
        if (st == SP_ERR_INVALID) {
            e->local.dropped_corrupt++;
            return e->drain_pushed;
        }
        if (st == SP_ERR_TOO_LONG && n > 0) {
            sp_traces_push(e);
            n = 0;
            e->traces_first_ms = sp_now_ms(e);
            st = sp_otlp_traces_add_record(e->traces, e->resource, v->body,
                                           v->len);
        }
        if (st != SP_OK) {
            e->local.dropped_too_large++;
            return e->drain_pushed;
        }
    }
    e->held_build++;
    e->traces_count = n + 1;
    if (n + 1 >= e->bsp_batch) {
        sp_traces_push(e);
        return e->drain_pushed;
    }
    /* the usual case: nothing pushed, which the drain loop then knows
     * without a load of the flag */
    return false;
}

/*
 * Takes one record out of the ring into the builders, or counts it as
 * dropped. Returns whether a request was pushed meanwhile (drain_pushed,
 * false when the take began: the drain loop clears it at each run's start
 * and once it was reported).
 */
static bool
sp_record_take(sp_exporter_loop *e, const sp_record_view *v)
{
    sp_status st;

    /* spans first: a server that traces reads one or more a request */
    if (v->type == SP_RECORD_SPAN) {
        e->local.received++;
        e->local.spans++;
        return sp_span_take(e, v);
    }
    if (v->type == SP_RECORD_OBJECTS) {
        sp_objects_record r;

        if (sp_objects_decode(v->body, v->len, &r) == SP_OK
            && sp_objects_take(e, &r) != SP_ERR_INVALID)
        {
            e->local.objects++;
        } else {
            e->local.received++;
            e->local.dropped_corrupt++;
        }
        return e->drain_pushed;
    }
    e->local.received++;
    if (v->type == SP_RECORD_SAMPLE) {
        e->local.samples++;
        st = sp_sample_take(e, v);
    } else {
        st = SP_ERR_INVALID;
    }
    if (st == SP_ERR_INVALID) {
        e->local.dropped_corrupt++;
    }
    return e->drain_pushed;
}

/* ---- the sender thread */

/* Not hot (a debugging aid): the request is made contiguous for the JSON
 * rewrite, which reads one buffer. */
static bool
sp_console_write(sp_exporter_loop *e, const sp_item *it)
{
    sp_buf    flat = SP_BUF_INIT(0), out = SP_BUF_INIT(0);
    size_t    off = 0;
    bool      ok;

    ok = sp_otlp_request_flatten(it->req, &flat) == SP_OK
         && sp_otlp_json_append(&out, it->signal, flat.data, flat.len)
            == SP_OK;
    sp_buf_free(&flat);
    pthread_mutex_lock(&e->console_lock);
    while (ok && off < out.len) {
        ssize_t n = write(e->console_fd, out.data + off, out.len - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            ok = false;
            break;
        }
        off += (size_t)n;
    }
    pthread_mutex_unlock(&e->console_lock);
    sp_buf_free(&out);
    return ok;
}

/*
 * A plaintext endpoint whose collector accepted the connection and closed
 * it before any answer: what a TLS port does with the HTTP/2 preface it
 * cannot read. gRPC says only "Socket closed", which sends operators
 * looking at the network. Other causes look the same (a proxy, a
 * collector restarting), hence "may".
 */
static bool
sp_maybe_tls_port(const sp_otlp_client *client, const sp_otlp_result *r)
{
    return r->code == SP_GRPC_UNAVAILABLE && client != NULL
           && !sp_otlp_client_endpoint(client)->tls
           && (strstr(r->message, "Socket closed") != NULL
               || strstr(r->message, "reset by peer") != NULL);
}

/*
 * The reverse: a TLS endpoint whose collector answered the handshake with
 * bytes that are not TLS (OpenSSL's "wrong version number" or "packet
 * length too long": a plaintext HTTP/2 server's frames) or closed the
 * connection without a word. Most often "collector:4317" written without
 * a scheme, which OpenTelemetry makes TLS, for a plaintext port. A
 * certificate the exporter does not trust fails otherwise, and is not
 * hinted at.
 */
static bool
sp_maybe_plaintext_port(const sp_otlp_client *client,
                        const sp_otlp_result *r)
{
    return r->code == SP_GRPC_UNAVAILABLE && client != NULL
           && sp_otlp_client_endpoint(client)->tls
           && (strstr(r->message, "wrong version number") != NULL
               || strstr(r->message, "packet length too long") != NULL
               || strstr(r->message, "Socket closed") != NULL);
}

/*
 * What an operator can do about a status that is not retried: the data is
 * dropped, and the status alone does not say which setting to look at.
 */
static const char *
sp_failure_hint(const sp_otlp_client *client, sp_otlp_signal signal,
                const sp_otlp_result *r)
{
    bool logs = signal == SP_OTLP_SIGNAL_LOGS;

    if (sp_maybe_tls_port(client, r)) {
        return "; the collector closed the connection at once: if its port "
               "expects TLS, the endpoint must begin with https://";
    }
    if (sp_maybe_plaintext_port(client, r)) {
        return sp_otlp_client_endpoint(client)->scheme
               ? "; the collector did not answer TLS: if its port is "
                 "plaintext, the endpoint must begin with http://"
               : "; the collector did not answer TLS: an endpoint without "
                 "a scheme is TLS; if its port is plaintext, write "
                 "http://host:port or set OTEL_EXPORTER_OTLP_INSECURE=true";
    }
    if (r->code == SP_GRPC_UNAVAILABLE
        && strstr(r->message, "http1.x server") != NULL)
    {
        return "; the collector answered HTTP/1.x: the endpoint must be "
               "its OTLP/gRPC port (4317 by default), not OTLP/HTTP's (4318)";
    }
    if (r->retryable) {
        return "";
    }
    switch (r->code) {
    case SP_GRPC_UNIMPLEMENTED:
        return logs ? "; the collector does not take OTLP logs over gRPC: "
                      "profiling data is dropped (send it to one that does "
                      "with SPLUNK_PROFILER_LOGS_ENDPOINT, or stop it with "
                      "OTEL_LOGS_EXPORTER=none)"
                    : "; the collector does not take OTLP traces over gRPC: "
                      "spans are dropped (send them to one that does with "
                      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or stop them with "
                      "OTEL_TRACES_EXPORTER=none)";
    case SP_GRPC_UNAUTHENTICATED:
    case SP_GRPC_PERMISSION_DENIED:
        return logs ? "; profiling data is dropped: check the token in "
                      "OTEL_EXPORTER_OTLP_HEADERS (values are never logged)"
                    : "; spans are dropped: check the token in "
                      "OTEL_EXPORTER_OTLP_HEADERS (values are never logged)";
    default:
        return logs ? "; profiling data is dropped" : "; spans are dropped";
    }
}

static void
sp_sender_result_locked(sp_exporter_loop *e, sp_lane *lane, sp_item *it,
                        const sp_otlp_result *r)
{
    uint64_t now = sp_monotonic_ms();
    bool     ours;

    /* Ended by our fast stop, not by the collector: no failure of its. */
    ours = r->code == SP_GRPC_CANCELLED && e->cancelled;
    if (r->code == SP_GRPC_OK) {
        e->shared.exported += it->records;
        e->shared.requests++;
        e->queue_records -= it->records;
        if (it->signal == SP_OTLP_SIGNAL_TRACES) {
            e->queue_spans -= it->records;
        }
        if (lane->last_logged_code != SP_GRPC_OK) {
            sp_log(e, SP_LOG_INFO, "export recovered: %s accepted again",
                   it->signal == SP_OTLP_SIGNAL_LOGS ? "logs" : "traces");
            lane->last_logged_code = SP_GRPC_OK;
        }
        lane->retry = 0;
        lane->next_attempt_ms = 0;
        sp_item_free(it);
        return;
    }

    if (!ours) {
        e->shared.failures[r->code >= 0 && r->code < SP_GRPC_CODES
                           ? r->code : SP_GRPC_UNKNOWN]++;
    }
    if (!ours
        && (r->code != lane->last_logged_code
            || now - lane->last_failure_log_ms
               >= SP_EXPORTER_COUNTERS_INTERVAL_MS))
    {
        char line[640];

        sp_otlp_result_format(e->sinks[it->signal].client, r, line,
                              sizeof(line));
        sp_log(e, SP_LOG_WARN, "export failed: %s%s", line,
               sp_failure_hint(e->sinks[it->signal].client, it->signal,
                               r));
        lane->last_logged_code = r->code;
        lane->last_failure_log_ms = now;
    }
    /* Stopping (flushing): no retry. A collector that refuses now is not
     * waited for, and the server's stop waits for the exporter (nginx's
     * manager does). */
    if (r->retryable && !e->quit && !e->flushing) {
        sp_otlp_retry_policy p;

        memset(&p, 0, sizeof(p));
        /* Waits never longer than an export interval: a collector that
         * returns gets data within about two intervals, and one request
         * per interval is what a healthy exporter sends anyway. */
        p.max_ms = e->export_interval_ms < 100 ? 100
                   : e->export_interval_ms > SP_OTLP_BACKOFF_MAX_MS
                   ? SP_OTLP_BACKOFF_MAX_MS : e->export_interval_ms;
        p.base_ms = p.max_ms < SP_OTLP_BACKOFF_BASE_MS
                    ? p.max_ms / 2 : SP_OTLP_BACKOFF_BASE_MS;
        /* Put back in front: its signal's order kept, and it is still
         * the oldest, so the first to go when newer data needs the
         * room. */
        it->next = e->head;
        e->head = it;
        if (e->tail == NULL) {
            e->tail = it;
        }
        e->queue_bytes += it->len;
        lane->next_attempt_ms = now + sp_otlp_backoff_delay(&p, lane->retry,
                                                            sp_random(e));
        if (lane->retry < 16) {
            lane->retry++;
        }
        return;
    }
    e->queue_records -= it->records;
    if (it->signal == SP_OTLP_SIGNAL_TRACES) {
        e->queue_spans -= it->records;
    }
    if (r->retryable || ours) {
        e->shared.dropped_shutdown += it->records;
    } else {
        e->shared.dropped_export_failed += it->records;
    }
    sp_item_free(it);
}

/* The oldest queued item of signal, and the one before it (NULL: none). */
static sp_item *
sp_queue_first_locked(sp_exporter_loop *e, sp_otlp_signal signal,
                      sp_item **prev)
{
    sp_item *it;

    *prev = NULL;
    for (it = e->head; it != NULL && it->signal != signal; it = it->next) {
        *prev = it;
    }
    return it;
}

static void *
sp_sender_main(void *arg)
{
    sp_lane          *lane = arg;
    sp_exporter_loop *e = lane->e;

    /* Told apart in top -H, perf and /proc/PID/task: a name per signal
     * (at most 15 bytes), like the sampler's spanprof-sample. */
    (void)pthread_setname_np(pthread_self(),
                             lane->signal == SP_OTLP_SIGNAL_LOGS
                             ? "spanprof-logs" : "spanprof-traces");
    pthread_mutex_lock(&e->lock);
    while (!e->quit) {
        sp_item       *prev, *it;
        sp_otlp_result r;
        uint64_t       now = sp_monotonic_ms(), timeout, left;

        it = sp_queue_first_locked(e, lane->signal, &prev);
        if (it == NULL) {
            pthread_cond_broadcast(&e->idle_cond);
            pthread_cond_wait(&lane->cond, &e->lock);
            continue;
        }
        if (lane->next_attempt_ms > now
            && (!e->flushing || lane->next_attempt_ms < e->stop_end_ms))
        {
            struct timespec ts;
            uint64_t        wait = lane->next_attempt_ms - now;

            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&lane->cond, &e->lock, &ts);
            continue;
        }
        if (e->flushing && now >= e->stop_end_ms) {
            pthread_cond_broadcast(&e->idle_cond);
            pthread_cond_wait(&lane->cond, &e->lock);
            continue;
        }
        if (prev != NULL) {
            prev->next = it->next;
        } else {
            e->head = it->next;
        }
        if (e->tail == it) {
            e->tail = prev;
        }
        it->next = NULL;
        e->queue_bytes -= it->len;
        lane->inflight = it;
        timeout = e->timeout_ms;
        if (e->stop_end_ms != 0) {
            left = now < e->stop_end_ms ? e->stop_end_ms - now : 1;
            if (left < timeout) {
                timeout = left;
            }
        }
        pthread_mutex_unlock(&e->lock);

        memset(&r, 0, sizeof(r));
        if (e->sinks[it->signal].kind == SP_EXPORTER_CONSOLE) {
            r.code = sp_console_write(e, it) ? SP_GRPC_OK : SP_GRPC_INTERNAL;
            if (r.code != SP_GRPC_OK) {
                snprintf(r.message, sizeof(r.message),
                         "console output failed");
            }
        } else {
            sp_otlp_export_request(e->sinks[it->signal].client,
                                   e->sinks[it->signal].method, it->req,
                                   timeout ? timeout : 1, &r);
        }

        pthread_mutex_lock(&e->lock);
        lane->inflight = NULL;
        sp_sender_result_locked(e, lane, it, &r);
    }
    pthread_cond_broadcast(&e->idle_cond);
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- counters */

static void
sp_ring_totals(sp_exporter_loop *e, uint64_t *full, uint64_t *corrupt)
{
    uint32_t i, n = sp_region_slot_count(e->o.region);

    *full = 0;
    *corrupt = 0;
    for (i = 0; i < n; i++) {
        sp_ring_counters c;

        sp_ring_stats(sp_region_ring(e->o.region, i), &c);
        *full += c.dropped_full;
        *corrupt += c.corrupt;
    }
}

/* Moves the drain thread's counts into the shared ones. */
static void
sp_publish(sp_exporter_loop *e)
{
    sp_drain_counts      *l = &e->local;
    sp_exporter_counters *s = &e->shared;

    pthread_mutex_lock(&e->lock);
    s->received += l->received;
    s->samples += l->samples;
    s->spans += l->spans;
    s->objects += l->objects;
    s->dropped_corrupt += l->dropped_corrupt;
    s->dropped_queue_full += l->dropped_queue_full;
    s->dropped_too_large += l->dropped_too_large;
    s->dropped_disabled += l->dropped_disabled;
    s->held = e->held_build;    /* the queue's part is added on read */
    pthread_mutex_unlock(&e->lock);
    memset(l, 0, sizeof(*l));
}

void
sp_exporter_counters_get(sp_exporter_loop *e, sp_exporter_counters *out)
{
    uint64_t full, corrupt;
    int      i;

    sp_ring_totals(e, &full, &corrupt);
    pthread_mutex_lock(&e->lock);
    if (e->rings_released) {
        full = e->ring_full_end;
        corrupt = e->ring_corrupt_end;
    }
    *out = e->shared;
    out->held = e->shared.held + e->queue_records;
    out->queue_bytes = e->queue_bytes;
    for (i = 0; i < 3; i++) {
        if (e->lanes[i].inflight != NULL) {
            out->queue_bytes += e->lanes[i].inflight->len;
        }
    }
    pthread_mutex_unlock(&e->lock);
    out->ring_full = full - e->ring_full_base;
    out->ring_corrupt = corrupt - e->ring_corrupt_base;
}

size_t
sp_exporter_counters_format(const sp_exporter_counters *c, char *buf,
                            size_t size)
{
    size_t n;
    int    i;

    n = (size_t)snprintf(buf, size,
        "counters: received=%llu samples=%llu spans=%llu objects=%llu "
        "exported=%llu held=%llu dropped.corrupt=%llu "
        "dropped.queue_full=%llu dropped.export_failed=%llu "
        "dropped.too_large=%llu dropped.disabled=%llu "
        "dropped.shutdown=%llu ring.full=%llu "
        "ring.corrupt=%llu requests=%llu queue_bytes=%llu "
        "symbolizer.resets=%llu symbolizer.debug_bytes=%llu "
        "symbolizer.over_cap_objects=%llu",
        (unsigned long long)c->received, (unsigned long long)c->samples,
        (unsigned long long)c->spans, (unsigned long long)c->objects,
        (unsigned long long)c->exported, (unsigned long long)c->held,
        (unsigned long long)c->dropped_corrupt,
        (unsigned long long)c->dropped_queue_full,
        (unsigned long long)c->dropped_export_failed,
        (unsigned long long)c->dropped_too_large,
        (unsigned long long)c->dropped_disabled,
        (unsigned long long)c->dropped_shutdown,
        (unsigned long long)c->ring_full,
        (unsigned long long)c->ring_corrupt,
        (unsigned long long)c->requests,
        (unsigned long long)c->queue_bytes,
        (unsigned long long)c->symbolizer_resets,
        (unsigned long long)c->symbolizer_debug_bytes,
        (unsigned long long)c->symbolizer_over_cap);
    for (i = 0; i < SP_GRPC_CODES; i++) {
        if (c->failures[i] != 0) {
            n += (size_t)snprintf(n < size ? buf + n : NULL,
                                  n < size ? size - n : 0,
                                  " failures.%s=%llu",
                                  sp_otlp_status_name(i),
                                  (unsigned long long)c->failures[i]);
        }
    }
    return n;
}

static void
sp_log_counters(sp_exporter_loop *e, const char *when)
{
    sp_exporter_counters c;
    sp_symbolizer_stats  ss;
    char                 line[1100];

    /* This thread is the symbolizer's: its figures go through the lock
       to whoever else reads the counters. */
    sp_symbolizer_stats_get(e->symbolizer, &ss);
    pthread_mutex_lock(&e->lock);
    e->shared.symbolizer_resets = ss.debug_resets;
    e->shared.symbolizer_debug_bytes = ss.debug_bytes;
    e->shared.symbolizer_over_cap = ss.over_cap_objects;
    pthread_mutex_unlock(&e->lock);
    sp_exporter_counters_get(e, &c);
    sp_exporter_counters_format(&c, line, sizeof(line));
    sp_log(e, SP_LOG_INFO, "%s%s", line, when);
}

/* ---- the drain thread */

/*
 * Rebuilds the list of slots to drain: those owned or holding records.
 * claims is sp_region_claims, loaded before the owners are: a claim that
 * this scan misses moves it, and the next pass scans again.
 */
static void
sp_rings_rescan(sp_exporter_loop *e, uint64_t claims, uint64_t now)
{
    uint32_t i, n = sp_region_slot_count(e->o.region), count = 0;

    for (i = 0; i < n; i++) {
        sp_ring_watch   *w = &e->ring_watch[i];
        sp_ring_counters c;

        sp_ring_stats(sp_region_ring(e->o.region, i), &c);
        if (c.owner == 0 && c.pending_bytes == 0) {
            w->watched = false;
            continue;
        }
        if (!w->watched) {
            w->watched = true;
            w->check_ms = now + SP_OWNER_CHECK_MS;
        }
        e->watch[count++] = i;
    }
    e->watch_count = count;
    e->claims_seen = claims;
    e->next_rescan_ms = now + SP_RESCAN_MS;
}

/*
 * After a ring was drained (within its budget): frees it if its owner is
 * dead, or resets it if it was released with a record never committed,
 * when the check is due; returns whether the slot is free and empty, so
 * no longer worth a visit.
 */
static bool
sp_ring_settle(sp_exporter_loop *e, sp_ring *ring, sp_ring_watch *w,
    uint64_t now)
{
    uint32_t         owner = sp_ring_owner(ring);
    sp_ring_counters c;

    if (now >= w->check_ms) {
        w->check_ms = now + SP_OWNER_CHECK_MS;
        switch (sp_ring_reset_if_abandoned(ring, e->pid)) {
        case SP_OK:
            if (owner != 0) {
                sp_worker_forget(e, owner);
            }
            owner = 0;
            break;
        case SP_ERR_INVALID:
            /* records came after this pass read: dead or not, next pass */
            w->check_ms = now;
            break;
        default:
            break;
        }
    }
    if (owner != 0) {
        return false;
    }
    /* released or freed: left once nothing is in it, not even uncommitted */
    sp_ring_stats(ring, &c);
    return c.owner == 0 && c.pending_bytes == 0;
}

size_t
sp_exporter_step(sp_exporter_loop *e)
{
    size_t   total = 0;
    uint64_t now = sp_now_ms(e), claims = sp_region_claims(e->o.region);
    uint32_t j;

    if (claims != e->claims_seen || now >= e->next_rescan_ms) {
        sp_rings_rescan(e, claims, now);
    }
    e->backlog = false;
    for (j = 0; j < e->watch_count;) {
        uint32_t       i = e->watch[j];
        sp_ring_watch *w = &e->ring_watch[i];
        sp_ring       *ring = w->ring;
        sp_record_view v;
        size_t         k = 0, bytes = 0;
        sp_status      st = sp_ring_read(ring, &v);

        /*
         * In runs (sp_ring_read_next, inline), freed once per run: at its
         * end, or once a record whose take pushed a request is taken.
         * The flag cleared once a run and after each push reported, not
         * before each take: the usual span's take knows it pushed nothing.
         */
        e->drain_pushed = false;
        while (st == SP_OK) {
            bool pushed = sp_record_take(e, &v);

            if (++k < SP_DRAIN_BUDGET && !pushed) {
                st = sp_ring_read_next_inline(ring, &v);
                if (st == SP_OK) {
                    continue;
                }
            }
            e->drain_pushed = false;
            bytes += sp_record_ring_bytes(&v);
            sp_ring_consume(ring, &v);
            if (k == SP_DRAIN_BUDGET || st == SP_ERR_NOT_FOUND) {
                break;
            }
            st = sp_ring_read(ring, &v);
        }
        total += k;
        if (k == SP_DRAIN_BUDGET || bytes > e->backlog_bytes) {
            e->backlog = true;
        } else if (sp_ring_settle(e, ring, w, now)) {
            /* free and empty: a new claim brings it back (rescan) */
            w->watched = false;
            e->watch[j] = e->watch[--e->watch_count];
            continue;
        }
        j++;
    }

    now = sp_now_ms(e);
    if (now >= e->next_logs_ms) {
        sp_profiles_close_all(e);
        e->next_logs_ms = now + e->export_interval_ms;
    }
    if (e->traces_count > 0
        && now - e->traces_first_ms >= e->bsp_delay_ms)
    {
        sp_traces_push(e);
    }
    sp_publish(e);
    return total;
}

bool
sp_exporter_backlog(const sp_exporter_loop *e)
{
    return e->backlog;
}

void
sp_exporter_flush(sp_exporter_loop *e)
{
    sp_profiles_close_all(e);
    sp_traces_push(e);
    sp_publish(e);
}

bool
sp_exporter_wait_idle(sp_exporter_loop *e, uint64_t timeout_ms)
{
    uint64_t end = sp_monotonic_ms() + timeout_ms;
    bool     idle;

    pthread_mutex_lock(&e->lock);
    for (;;) {
        struct timespec ts;
        uint64_t        now = sp_monotonic_ms();

        idle = e->head == NULL
               && e->lanes[SP_OTLP_SIGNAL_LOGS].inflight == NULL
               && e->lanes[SP_OTLP_SIGNAL_TRACES].inflight == NULL;
        if (idle || now >= end) {
            break;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&e->idle_cond, &e->lock, &ts);
    }
    pthread_mutex_unlock(&e->lock);
    return idle;
}

static void
sp_sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };

    nanosleep(&ts, NULL);
}

/*
 * When the stop's time ends: the export timeout from the stop, or the fast
 * stop's from a fast stop if that comes first. half: when reading ends
 * (waiting for the region, reading what the workers still write), which
 * leaves the rest for the final flush.
 */
static uint64_t
sp_stop_end(const sp_exporter_loop *e, bool half)
{
    uint64_t fast = atomic_load(&e->fast_at_ms);
    uint64_t end, f;

    end = e->stop_seen_ms + (half ? e->timeout_ms / 2 : e->timeout_ms);
    if (fast != 0) {
        f = fast + (half ? e->fast_ms / 2 : e->fast_ms);
        end = f < end ? f : end;
    }
    return end;
}

/*
 * Tells the senders the stop's end (a fast stop may have brought it
 * closer): no call they make outlives it. Returns it.
 */
static uint64_t
sp_stop_publish(sp_exporter_loop *e)
{
    uint64_t end = sp_stop_end(e, false);

    pthread_mutex_lock(&e->lock);
    if (e->stop_end_ms != end) {
        e->stop_end_ms = end;
        sp_lanes_wake_locked(e);
    }
    pthread_mutex_unlock(&e->lock);
    return end;
}

/*
 * What the rings hold unread (bytes), and how many records their reader
 * consumed ever: the reader's progress, seen from outside.
 */
static uint64_t
sp_rings_unread(sp_exporter_loop *e, uint64_t *consumed)
{
    uint32_t         i, n = sp_region_slot_count(e->o.region);
    uint64_t         unread = 0;
    sp_ring_counters c;

    *consumed = 0;
    for (i = 0; i < n; i++) {
        sp_ring_stats(sp_region_ring(e->o.region, i), &c);
        unread += c.pending_bytes;
        *consumed += c.read;
    }
    return unread;
}

/*
 * Stopped, it gives the region up to the exporter that holds it. That one
 * may be reading on (a live one: everything the workers write is
 * exported) or not (it went on to its own last flush, or hangs): only
 * then is what the workers wrote lost, and then the rings hold records
 * that nobody has consumed for a while (a reader drains them every 10
 * ms). unread: the bytes they hold now (sp_rings_unread).
 */
static void
sp_claim_give_up(sp_exporter_loop *e, uint64_t unread, uint64_t idle_ms)
{
    if (unread > 0 && idle_ms >= SP_READER_IDLE_MS) {
        sp_log(e, SP_LOG_WARN, "stopped while another exporter holds the "
               "region but has read nothing for %llu ms: what the workers "
               "wrote (%llu bytes now) is not exported while it reads "
               "nothing", (unsigned long long)idle_ms,
               (unsigned long long)unread);
    } else {
        sp_log(e, SP_LOG_INFO, "stopped while another exporter holds the "
               "region and reads it: what the workers write is left to "
               "it");
    }
}

sp_status
sp_exporter_claim(sp_exporter_loop *e)
{
    bool     waited = false;
    uint64_t consumed, unread, seen = 0, progress_ms = 0, now;

    /* Once at least: asked to stop before it ran, it still reads and
     * exports what the workers wrote. */
    for (;;) {
        if (sp_region_claim_reader(e->o.region, e->pid) == SP_OK) {
            /* The objects the workers told went to the reader before. */
            sp_region_want_objects(e->o.region);
            if (waited) {
                sp_log(e, SP_LOG_INFO, "previous exporter gone: reading");
            }
            return SP_OK;
        }
        /*
         * Stopped while the previous exporter still reads (a stop soon
         * after a reload): that one saw our wish, read the rings a last
         * time and goes without reading on, so what the workers wrote
         * since is ours to read, unless another waits too (reloads in a
         * row): that one reads it, and a stopped one never takes the wish
         * from a live one, so one of them always stays. Waited for, for
         * half of the stop's time; sp_exporter_run leaves us the rest
         * for our own flush. The holder's reads are watched meanwhile.
         */
        if (atomic_load(&e->stop)) {
            if (sp_region_reader_wanted(e->o.region, e->pid)) {
                return SP_ERR_NOT_FOUND;
            }
            now = sp_monotonic_ms();
            unread = sp_rings_unread(e, &consumed);
            if (unread == 0 || consumed != seen || progress_ms == 0) {
                seen = consumed;
                progress_ms = now;
            }
            if (e->stop_seen_ms == 0) {
                e->stop_seen_ms = now;
            } else if (now >= sp_stop_end(e, true)) {
                sp_claim_give_up(e, unread, now - progress_ms);
                return SP_ERR_NOT_FOUND;
            }
        }
        if (!waited) {
            sp_log(e, SP_LOG_INFO,
                   "another exporter still reads the region: waiting");
            waited = true;
        }
        /* again each time: a wish of a reader that died is not ours */
        sp_region_want_reader(e->o.region, e->pid);
        sp_sleep_ms(SP_CLAIM_RETRY_MS);
    }
}

static void
sp_sender_stop(sp_exporter_loop *e)
{
    int i;

    pthread_mutex_lock(&e->lock);
    e->quit = true;
    sp_lanes_wake_locked(e);
    pthread_mutex_unlock(&e->lock);
    for (i = 0; i < 3; i++) {
        if (e->lanes[i].started) {
            pthread_join(e->lanes[i].thread, NULL);
            e->lanes[i].started = false;
        }
    }
}

/* Ends the calls in flight: a fast stop's time is up. */
static void
sp_sinks_cancel(sp_exporter_loop *e)
{
    int i;

    pthread_mutex_lock(&e->lock);
    e->cancelled = true;
    pthread_mutex_unlock(&e->lock);
    for (i = 0; i < 3; i++) {
        if (e->sinks[i].kind == SP_EXPORTER_OTLP
            && e->sinks[i].client != NULL)
        {
            sp_otlp_client_cancel(e->sinks[i].client);
        }
    }
}

sp_status
sp_exporter_run(sp_exporter_loop *e)
{
    uint64_t             end, now;
    uint64_t             full, corrupt;
    int                  pass;
    bool                 fast;
    sp_exporter_counters c;

    if (sp_exporter_claim(e) != SP_OK) {
        return SP_ERR_NOT_FOUND;
    }
    e->next_counters_ms = sp_now_ms(e) + e->o.counters_interval_ms;
    while (!atomic_load(&e->stop)) {
        sp_exporter_step(e);
        if (!e->backlog) {
            sp_sleep_ms(SP_PASS_SLEEP_MS);
        }
        if (sp_now_ms(e) >= e->next_counters_ms) {
            sp_log_counters(e, "");
            e->next_counters_ms = sp_now_ms(e) + e->o.counters_interval_ms;
        }
    }

    /*
     * Stopping, within the export timeout from the stop (which the claim
     * may have spent part of, waiting), or the fast stop's time.
     * Workers that finish their requests after a graceful stop began
     * write spans after this: read on while one lives, for half of it,
     * unless another exporter waits for the region (a reload, a reopened
     * log: it reads their rings). Then what the workers wrote until now
     * (every slot looked at, not only the claimed ones), then everything
     * held. A call made meanwhile ends by the stop's end too, not a whole
     * timeout after it began: the servers wait for the exporter the
     * timeout from the stop and a second, then give up on what it holds.
     */
    if (e->stop_seen_ms == 0) {
        e->stop_seen_ms = sp_monotonic_ms();
    }
    sp_stop_publish(e);
    while (sp_monotonic_ms() < sp_stop_end(e, true)
           && !sp_region_reader_wanted(e->o.region, e->pid)
           && sp_region_writers_alive(e->o.region))
    {
        if (sp_exporter_step(e) == 0) {
            sp_sleep_ms(SP_PASS_SLEEP_MS);
        }
        sp_stop_publish(e);
    }
    e->next_rescan_ms = 0;
    for (pass = 0; pass < 64 && sp_exporter_step(e) > 0; pass++) {
    }
    /* What is written from here on is the next reader's, which does not
     * know the objects this one read: the workers tell them again. */
    sp_region_want_objects(e->o.region);
    /*
     * Given up now, after the last read, not once the last export ends:
     * what follows touches no ring. Held through an export to a slow
     * collector (up to the timeout), it kept a new exporter waiting; one
     * stopped fast (half a second) gave up waiting, and what the workers
     * wrote since this one's last read was never read.
     */
    sp_ring_totals(e, &full, &corrupt);
    pthread_mutex_lock(&e->lock);
    e->ring_full_end = full;
    e->ring_corrupt_end = corrupt;
    e->rings_released = true;
    pthread_mutex_unlock(&e->lock);
    sp_region_release_reader(e->o.region, e->pid);
    sp_exporter_flush(e);
    pthread_mutex_lock(&e->lock);
    e->flushing = true;
    /* one attempt each, now: no backoff is waited out */
    e->lanes[SP_OTLP_SIGNAL_LOGS].next_attempt_ms = 0;
    e->lanes[SP_OTLP_SIGNAL_TRACES].next_attempt_ms = 0;
    sp_lanes_wake_locked(e);
    pthread_mutex_unlock(&e->lock);
    /* In short waits: a fast stop may come meanwhile. */
    for (;;) {
        end = sp_stop_publish(e);
        now = sp_monotonic_ms();
        if (sp_exporter_wait_idle(e, now >= end ? 0
                                     : end - now < SP_CLAIM_RETRY_MS
                                     ? end - now : SP_CLAIM_RETRY_MS)
            || now >= end)
        {
            break;
        }
    }
    fast = atomic_load(&e->fast_at_ms) != 0;
    if (fast) {
        sp_sinks_cancel(e);
    }

    sp_sender_stop(e);
    pthread_mutex_lock(&e->lock);
    while (e->head != NULL) {
        sp_item *it = e->head;
        e->head = it->next;
        sp_item_drop_locked(e, it, &e->shared.dropped_shutdown);
    }
    e->tail = NULL;
    pthread_mutex_unlock(&e->lock);
    sp_log_counters(e, " (at exit)");
    sp_exporter_counters_get(e, &c);
    if (fast && c.dropped_shutdown > 0) {
        sp_log(e, SP_LOG_WARN, "fast stop: %llu spans or samples not sent "
               "within %llu ms are dropped (dropped.shutdown)",
               (unsigned long long)c.dropped_shutdown,
               (unsigned long long)e->fast_ms);
    }
    return SP_OK;
}

void
sp_exporter_stop(sp_exporter_loop *e)
{
    atomic_store(&e->stop, true);
}

void
sp_exporter_stop_fast(sp_exporter_loop *e)
{
    uint64_t none = 0;

    /* The first asked is kept: a second INT does not put it off. */
    atomic_compare_exchange_strong(&e->fast_at_ms, &none,
                                   sp_monotonic_ms());
    atomic_store(&e->stop, true);
}

/* ---- creation */

static sp_status
sp_sink_create(sp_exporter_loop *e, sp_otlp_signal signal, sp_setting exporter,
               sp_setting endpoint, char *err, size_t err_size)
{
    const sp_config      *c = e->o.config;
    sp_sink              *k = &e->sinks[signal];
    sp_sink              *other = &e->sinks[signal == SP_OTLP_SIGNAL_LOGS
                                            ? SP_OTLP_SIGNAL_TRACES
                                            : SP_OTLP_SIGNAL_LOGS];
    sp_otlp_client_config cc;
    sp_endpoint           ep;

    k->kind = (sp_exporter)sp_config_integer(c, exporter);
    k->method = signal == SP_OTLP_SIGNAL_LOGS ? SP_OTLP_LOGS_METHOD
                                              : SP_OTLP_TRACES_METHOD;
    if (k->kind != SP_EXPORTER_OTLP) {
        return SP_OK;
    }
    memset(&cc, 0, sizeof(cc));
    cc.endpoint = sp_config_text(c, endpoint);
    cc.headers = sp_config_text(c, SP_SETTING_OTLP_HEADERS);
    cc.certificate = sp_config_text(c, SP_SETTING_OTLP_CERTIFICATE);
    cc.insecure = sp_config_flag(c, SP_SETTING_OTLP_INSECURE);
    cc.timeout_ms = e->timeout_ms;
    if (other->client != NULL && cc.endpoint != NULL
        && sp_endpoint_parse(cc.endpoint, strlen(cc.endpoint), &ep)
           == SP_OK)
    {
        sp_otlp_endpoint_insecure(&ep, cc.insecure);
        if (sp_otlp_endpoint_equal(&ep,
                                   sp_otlp_client_endpoint(other->client)))
        {
            k->client = sp_otlp_client_share(other->client);
            return SP_OK;
        }
    }
    return sp_otlp_client_create(&cc, &k->client, err, err_size);
}

/*
 * Once per file: from now on its frames have no files, lines or inlined
 * calls, which the operator sees in the profiles, so the log says why.
 */
static void
sp_symbolizer_over_cap(void *ctx, const char *path, const char *debug_path,
                       size_t first_bytes)
{
    sp_exporter_loop *e = ctx;
    size_t            cap = e->o.max_debug_bytes > 0
                            ? e->o.max_debug_bytes
                            : SP_SYMBOLIZER_DEFAULT_DEBUG_BYTES;

    sp_log(e, SP_LOG_WARN, "symbolizer: the debug info of %s%s%s%s takes "
           "%zu bytes to name one address, too much for "
           "SPANPROF_DEBUG_MAX_BYTES=%zu: its frames are named from its "
           "symbol table from now on, without files, lines or inlined "
           "calls", path, debug_path != NULL ? " (" : "",
           debug_path != NULL ? debug_path : "",
           debug_path != NULL ? ")" : "", first_bytes, cap);
}

sp_status
sp_exporter_create(const sp_exporter_options *o, sp_exporter_loop **out,
                   char *err, size_t err_size)
{
    sp_exporter_loop     *e;
    sp_symbolizer_options so;
    sp_otlp_builder_options bo;
    sp_resource_input     ri;
    const sp_config      *c;
    sp_status             st;
    int                   i;

    if (err != NULL && err_size > 0) {
        err[0] = '\0';
    }
    if (o == NULL || out == NULL || o->config == NULL || o->region == NULL) {
        return SP_ERR_INVALID;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return SP_ERR_NOMEM;
    }
    e->o = *o;
    c = o->config;
    if (e->o.max_queue_bytes == 0) {
        e->o.max_queue_bytes = SP_EXPORTER_DEFAULT_QUEUE_BYTES;
    }
    if (e->o.max_profiles == 0) {
        e->o.max_profiles = SP_EXPORTER_DEFAULT_PROFILES;
    }
    if (e->o.profile_bytes == 0) {
        e->o.profile_bytes = SP_EXPORTER_DEFAULT_PROFILE_BYTES;
    }
    if (e->o.counters_interval_ms == 0) {
        e->o.counters_interval_ms = SP_EXPORTER_COUNTERS_INTERVAL_MS;
    }
    e->pid = o->pid != 0 ? o->pid : (uint32_t)getpid();
    e->console_fd = -1;
    e->rng = ((uint64_t)e->pid << 32) ^ sp_realtime_ns() ^ 0x9e3779b97f4a7c15u;
    e->lanes[SP_OTLP_SIGNAL_LOGS].last_logged_code = SP_GRPC_OK;
    e->lanes[SP_OTLP_SIGNAL_TRACES].last_logged_code = SP_GRPC_OK;
    atomic_init(&e->stop, false);
    pthread_mutex_init(&e->lock, NULL);
    for (i = 0; i < 3; i++) {
        pthread_cond_init(&e->lanes[i].cond, NULL);
    }
    pthread_cond_init(&e->idle_cond, NULL);
    pthread_mutex_init(&e->console_lock, NULL);
    sp_buf_init(&e->scratch, 0);

    e->export_interval_ms = sp_config_integer(c,
        SP_SETTING_PROFILER_EXPORT_INTERVAL);
    e->bsp_delay_ms = sp_config_integer(c, SP_SETTING_BSP_SCHEDULE_DELAY);
    e->bsp_batch = sp_config_integer(c, SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE);
    e->bsp_queue = sp_config_integer(c, SP_SETTING_BSP_MAX_QUEUE_SIZE);
    e->timeout_ms = sp_config_integer(c, SP_SETTING_OTLP_TIMEOUT);
    e->snapshot_period_ns = sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL) * 1000000u;
    e->continuous_period_ns = sp_config_integer(c,
        SP_SETTING_PROFILER_CALL_STACK_INTERVAL) * 1000000u;
    if (e->export_interval_ms == 0) {
        e->export_interval_ms = 1000;
    }
    if (e->bsp_batch == 0) {
        e->bsp_batch = 512;
    }
    if (e->bsp_queue < e->bsp_batch) {
        e->bsp_queue = e->bsp_batch;
    }
    if (e->timeout_ms == 0) {
        e->timeout_ms = SP_OTLP_DEFAULT_TIMEOUT_MS;
    }
    e->fast_ms = e->timeout_ms < SP_EXPORTER_FAST_STOP_MS
                 ? e->timeout_ms : SP_EXPORTER_FAST_STOP_MS;
    if (e->snapshot_period_ns == 0) {
        e->snapshot_period_ns = 10000000u;
    }
    if (e->continuous_period_ns == 0) {
        e->continuous_period_ns = 1000000000u;
    }
    e->next_logs_ms = sp_now_ms(e) + e->export_interval_ms;

    memset(&so, 0, sizeof(so));
    so.debug_dirs = o->debug_dirs;
    so.max_debug_bytes = o->max_debug_bytes;
    so.over_cap = sp_symbolizer_over_cap;
    so.over_cap_ctx = e;
    so.max_addresses = SP_EXPORTER_SYMBOL_CACHE;
    memset(&bo, 0, sizeof(bo));
    memset(&ri, 0, sizeof(ri));
    ri.server = o->server;
    ri.server_version = o->server_version;
    ri.exe_path = o->server_exe != NULL && o->server_exe[0] != '\0'
                  ? o->server_exe : NULL;
    ri.service_name = sp_config_text(c, SP_SETTING_SERVICE_NAME);
    ri.resource_attributes = sp_config_text(c,
        SP_SETTING_RESOURCE_ATTRIBUTES);

    e->arena = malloc(SP_ARENA_BYTES);
    e->frames = calloc(SP_RECORD_MAX_FRAMES, sizeof(*e->frames));
    e->lines = calloc((size_t)SP_RECORD_MAX_FRAMES * SP_SYMBOL_MAX_INLINE,
                      sizeof(*e->lines));
    e->slots = calloc(e->o.max_profiles, sizeof(*e->slots));
    e->ring_watch = calloc(sp_region_slot_count(o->region),
                           sizeof(*e->ring_watch));
    e->watch = calloc(sp_region_slot_count(o->region), sizeof(*e->watch));
    if (e->arena == NULL || e->frames == NULL || e->lines == NULL
        || e->slots == NULL || e->ring_watch == NULL || e->watch == NULL)
    {
        st = SP_ERR_NOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < sp_region_slot_count(o->region); i++) {
        e->ring_watch[i].ring = sp_region_ring(o->region, i);
    }
    e->backlog_bytes = sp_region_ring_bytes(o->region) / SP_BACKLOG_SHARE;
    st = sp_symbolizer_create(&so, &e->symbolizer);
    if (st == SP_OK) {
        st = sp_resource_detect(&ri, &e->resource);
    }
    if (st == SP_OK) {
        st = sp_otlp_logs_create(&bo, &e->logs);
    }
    if (st == SP_OK) {
        st = sp_otlp_traces_create(&bo, &e->traces);
    }
    if (st == SP_OK) {
        st = sp_sink_create(e, SP_OTLP_SIGNAL_LOGS, SP_SETTING_LOGS_EXPORTER,
                            SP_SETTING_PROFILER_LOGS_ENDPOINT, err, err_size);
    }
    if (st == SP_OK) {
        st = sp_sink_create(e, SP_OTLP_SIGNAL_TRACES,
                            SP_SETTING_TRACES_EXPORTER,
                            SP_SETTING_OTLP_TRACES_ENDPOINT, err, err_size);
    }
    if (st != SP_OK) {
        goto fail;
    }
    if (e->sinks[SP_OTLP_SIGNAL_LOGS].kind == SP_EXPORTER_CONSOLE
        || e->sinks[SP_OTLP_SIGNAL_TRACES].kind == SP_EXPORTER_CONSOLE)
    {
        if (o->console_path != NULL && o->console_path[0] != '\0') {
            e->console_fd = open(o->console_path,
                                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                                 0644);
            if (e->console_fd < 0) {
                if (err != NULL) {
                    snprintf(err, err_size, "cannot open %s: %s",
                             o->console_path, strerror(errno));
                }
                st = SP_ERR_IO;
                goto fail;
            }
            e->console_owned = true;
        } else {
            e->console_fd = STDERR_FILENO;
        }
    }
    sp_ring_totals(e, &e->ring_full_base, &e->ring_corrupt_base);
    for (i = SP_OTLP_SIGNAL_LOGS; i <= SP_OTLP_SIGNAL_TRACES; i++) {
        sp_lane *lane = &e->lanes[i];

        /* none: nothing of it is ever queued */
        if (e->sinks[i].kind == SP_EXPORTER_NONE) {
            continue;
        }
        lane->e = e;
        lane->signal = (sp_otlp_signal)i;
        if (pthread_create(&lane->thread, NULL, sp_sender_main, lane) != 0) {
            st = SP_ERR_NOMEM;
            goto fail;
        }
        lane->started = true;
    }
    *out = e;
    return SP_OK;

fail:
    sp_exporter_destroy(e);
    return st;
}

void
sp_exporter_destroy(sp_exporter_loop *e)
{
    uint32_t i;

    if (e == NULL) {
        return;
    }
    sp_sender_stop(e);
    while (e->head != NULL) {
        sp_item *it = e->head;
        e->head = it->next;
        sp_item_free(it);
    }
    for (i = 0; i < e->worker_count; i++) {
        sp_worker_clear(&e->workers[i]);
    }
    free(e->workers);
    if (e->slots != NULL) {
        for (i = 0; i < e->o.max_profiles; i++) {
            sp_pprof_destroy(e->slots[i].pprof);
            sp_memo_free(&e->slots[i].memo);
        }
    }
    free(e->slots);
    free(e->ring_watch);
    free(e->watch);
    sp_otlp_client_destroy(e->sinks[SP_OTLP_SIGNAL_LOGS].client);
    sp_otlp_client_destroy(e->sinks[SP_OTLP_SIGNAL_TRACES].client);
    if (e->console_owned) {
        close(e->console_fd);
    }
    sp_otlp_logs_destroy(e->logs);
    sp_otlp_traces_destroy(e->traces);
    sp_resource_destroy(e->resource);
    sp_symbolizer_destroy(e->symbolizer);
    sp_buf_free(&e->scratch);
    free(e->arena);
    free(e->frames);
    free(e->lines);
    pthread_mutex_destroy(&e->lock);
    for (i = 0; i < 3; i++) {
        pthread_cond_destroy(&e->lanes[i].cond);
    }
    pthread_cond_destroy(&e->idle_cond);
    pthread_mutex_destroy(&e->console_lock);
    free(e);
}
