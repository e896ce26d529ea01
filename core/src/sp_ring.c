/*
 * The region and its rings (sp_ring.h).
 *
 * Layout, all offsets from the region's start, native byte order:
 *
 *   0    region header, 128 bytes
 *          0  u64  magic           SP_REGION_MAGIC
 *          8  u32  version         SP_RING_LAYOUT_VERSION
 *         12  u32  slots
 *         16  u64  ring_bytes      power of two
 *         24  u64  size            sp_region_size(slots, ring_bytes)
 *         32  u32  check           FNV-1a of bytes 0..32
 *         40  u64  claims          atomic: successful claims so far
 *         64  u64  reader          atomic: the exporter's pid | start << 32
 *         72  u64  reader_wanted   atomic: a reader that waits for it
 *         80  u64  objects_wanted  atomic: grows when a reader asks every
 *                                  writer for its objects table again
 *   128  slot i at 128 + i * (192 + ring_bytes):
 *          0  u64  owner           atomic: pid | start << 32, 0 when free
 *         64  u64  head            atomic: producer position
 *         72  u64  written         atomic
 *         80  u64  dropped_full    atomic
 *        128  u64  tail            atomic: consumer position
 *        136  u64  read            atomic
 *        144  u64  corrupt         atomic
 *        152  u64  skipped         atomic
 *        192  ring data, ring_bytes
 *   The owner, the writers' line and the reader's line are 64 bytes apart
 *   so that the reader does not steal the writers' cache line.
 *
 * Positions count bytes since the ring began and only grow (modulo 2^64);
 * a position's place in the data is pos & (ring_bytes - 1). Writers own
 * [tail, head) until they commit, the reader owns what is committed from
 * tail on, and [head, tail + ring_bytes) is free. Each record:
 *
 *    0  u64  stamp      atomic, stored last with release: (pos ^ KEY) | 1
 *    8  u32  check      CRC32C of bytes 12 .. 24 + used
 *   12  u32  total      bytes reserved, header included, multiple of 8
 *   16  u32  used       body bytes written, <= total - 24
 *   20  u16  type       sp_record_type, or SP_RING_PAD
 *   22  u16  flags      0
 *   24  body
 *
 * The check comes before what it covers, so that it covers one run of
 * bytes: one pass, not a pass over the fields and another over the body.
 *
 * The stamp is the commit flag (bit 0) and names the position it was
 * written for: bytes left from an earlier lap, or anything else that is
 * not this very record, never equal it, so the reader needs nothing
 * cleared behind it. A record never crosses the end of the data: when it
 * does not fit, its reservation starts with the rest of the data, which
 * the writer marks with a committed SP_RING_PAD record; when fewer than
 * 24 bytes remain no header fits, and both sides skip them by the same
 * rule. A cancelled reservation becomes a pad too.
 *
 * Memory ordering:
 *   - A writer loads tail with acquire before it writes into the space it
 *     reserves: the reader's reads of that space, done before its release
 *     store of tail, happen before the writer's writes.
 *   - The reservation is a relaxed compare-and-swap on head: it orders
 *     nothing; it only hands out disjoint ranges. A signal handler that
 *     interrupts a writer inside its loop reserves with its own CAS and
 *     returns; the interrupted CAS then fails and is retried. No writer
 *     waits for another one.
 *   - The writer fills the header fields and body, then stores the stamp
 *     with release. The reader loads the stamp with acquire, and only if it
 *     is this position's does it read the rest: it sees the whole record.
 *     It loads head after the stamp, so the head it checks lengths against
 *     includes that record's reservation.
 *   - The reader frees space with a release store of tail after it has
 *     read the record (sp_ring_consume), or the records it read one after
 *     another (sp_ring_read_next): those past tail stay out of the
 *     writers' reach, [head, tail + ring_bytes), until that store.
 * The 64-bit atomics are lock-free (asserted below), so a signal handler
 * can use them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sp_ring.h"
#include "sp_ring_next.h"
#include "sp_procstat.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "the signal handler needs lock-free 64-bit atomics");
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 || sizeof(long) < 8,
               "the signal handler needs lock-free 64-bit atomics");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "atomics in shared memory");

#define SP_REGION_MAGIC     0x474e495250535053ull  /* "SPSPRING" */
#define SP_REGION_HEAD      128
#define SP_SLOT_HEAD        192
#define SP_RING_PAD         0xffff

/*
 * A reservation that loses its CAS this many times in a row gives up and
 * counts a drop, so that a writer's time stays bounded even if the ring's
 * memory were being scribbled on.
 */
#define SP_RESERVE_TRIES    1024

/*
 * sp_ring_read_next reads on while the records read and not freed take
 * less than this share of the ring: what the writers lose to the reader
 * while it works.
 */
#define SP_RUN_SHARE        32

struct sp_region_hdr {
    uint64_t         magic;
    uint32_t         version;
    uint32_t         slots;
    uint64_t         ring_bytes;
    uint64_t         size;
    uint32_t         check;
    uint32_t         reserved0;
    _Atomic uint64_t claims;
    unsigned char    pad0[16];
    _Atomic uint64_t reader;
    _Atomic uint64_t reader_wanted;     /* a reader that waits for it */
    _Atomic uint64_t objects_wanted;
    unsigned char    pad1[40];
};

_Static_assert(sizeof(sp_region_hdr) == SP_REGION_HEAD, "region header");
_Static_assert(offsetof(sp_region_hdr, check) == 32, "region header");
_Static_assert(offsetof(sp_region_hdr, claims) == 40, "region header");
_Static_assert(offsetof(sp_region_hdr, reader) == 64, "region header");
_Static_assert(offsetof(sp_region_hdr, objects_wanted) == 80,
               "region header");
_Static_assert(sizeof(sp_slot) == SP_SLOT_HEAD, "slot header");
_Static_assert(offsetof(sp_slot, head) == 64, "slot header");
_Static_assert(offsetof(sp_slot, tail) == 128, "slot header");

struct sp_region {
    sp_region_hdr *hdr;
    uint32_t       slots;
    uint64_t       ring_bytes;
    sp_ring        rings[];
};

/* ---- small helpers */

static uint64_t
sp_align8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

static _Atomic uint64_t *
sp_word(const sp_ring *r, uint64_t pos)
{
    return (_Atomic uint64_t *)(void *)(r->data + (pos & r->mask));
}

static bool
sp_type_ok(uint16_t type)
{
    return type >= SP_RECORD_SAMPLE && type <= SP_RECORD_OBJECTS;
}

static uint32_t
sp_fnv1a(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint32_t             h = 2166136261u;
    size_t               i;

    for (i = 0; i < len; i++) {
        h = (h ^ b[i]) * 16777619u;
    }
    return h;
}

/* ---- process liveness (not on the writer's path) */

/*
 * State letter and start time (clock ticks after boot) of pid, from
 * /proc/PID/stat; false when it cannot be read.
 */
static bool
sp_proc_stat(uint32_t pid, char *state, uint64_t *start)
{
    char     path[32], buf[1024], *p;
    int      field;
    uint64_t v = 0;

    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    p = sp_proc_stat_fields(path, buf, sizeof(buf));
    if (p == NULL) {
        return false;
    }
    *state = *p;
    /* field 3 is the state; starttime is field 22 */
    for (field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            return false;
        }
        p++;
    }
    if (*p < '0' || *p > '9') {
        return false;
    }
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    *start = v;
    return true;
}

/* pid | (low 32 bits of its start time) << 32; 0 for a bad pid */
static uint64_t
sp_owner_word(uint32_t pid)
{
    char     state;
    uint64_t start;

    if (pid == 0 || pid > INT_MAX) {
        return 0;
    }
    if (!sp_proc_stat(pid, &state, &start)) {
        start = 0;
    }
    return (uint64_t)pid | (start & 0xffffffffull) << 32;
}

/*
 * Whether the process an owner word names still runs. A zombie cannot
 * write; a process with the same pid but another start time is not the
 * one that claimed. Without /proc, kill alone decides.
 */
static bool
sp_owner_alive(uint64_t word)
{
    uint32_t pid = (uint32_t)word, token = (uint32_t)(word >> 32);
    char     state;
    uint64_t start;

    if (pid == 0 || pid > INT_MAX) {
        return false;
    }
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        return false;
    }
    if (sp_proc_stat(pid, &state, &start)) {
        if (state == 'Z' || state == 'X') {
            return false;
        }
        if (token != 0 && (uint32_t)start != token) {
            return false;
        }
    }
    return true;
}

/* ---- the region */

size_t
sp_region_size(uint32_t slots, size_t ring_bytes)
{
    if (slots < 1 || slots > SP_REGION_MAX_SLOTS
        || ring_bytes < SP_RING_MIN_BYTES || ring_bytes > SP_RING_MAX_BYTES
        || (ring_bytes & (ring_bytes - 1)) != 0
        || (SIZE_MAX - SP_REGION_HEAD) / slots < SP_SLOT_HEAD + ring_bytes)
    {
        return 0;
    }
    return SP_REGION_HEAD + (size_t)slots * (SP_SLOT_HEAD + ring_bytes);
}

static uint32_t
sp_region_check(const sp_region_hdr *h)
{
    return sp_fnv1a(h, offsetof(sp_region_hdr, check));
}

sp_status
sp_region_init(void *mem, size_t size, uint32_t slots, size_t ring_bytes)
{
    size_t         need = sp_region_size(slots, ring_bytes);
    sp_region_hdr *h = mem;
    sp_slot       *s;
    uint32_t       i;

    if (need == 0 || mem == NULL || size < need
        || ((uintptr_t)mem & 7) != 0)
    {
        return SP_ERR_INVALID;
    }
    memset(h, 0, sizeof(*h));
    h->version = SP_RING_LAYOUT_VERSION;
    h->slots = slots;
    h->ring_bytes = ring_bytes;
    h->size = need;
    atomic_init(&h->claims, 0);
    atomic_init(&h->reader, 0);
    for (i = 0; i < slots; i++) {
        s = (sp_slot *)(void *)((unsigned char *)mem + SP_REGION_HEAD
                                + (size_t)i * (SP_SLOT_HEAD + ring_bytes));
        memset(s, 0, sizeof(*s));
    }
    /*
     * The magic goes last, so a region half laid out never attaches; the
     * processes that attach are forked or started after this returns,
     * which orders the rest.
     */
    h->magic = SP_REGION_MAGIC;
    h->check = sp_region_check(h);
    atomic_thread_fence(memory_order_release);
    return SP_OK;
}

uint32_t
sp_region_layout(const void *mem, size_t size)
{
    sp_region_hdr h;

    if (mem == NULL || size < sizeof(h)) {
        return 0;
    }
    memcpy(&h, mem, offsetof(sp_region_hdr, slots));
    return h.magic == SP_REGION_MAGIC ? h.version : 0;
}

sp_status
sp_region_attach(void *mem, size_t size, sp_region **out)
{
    sp_region_hdr  h;
    sp_region     *region;
    unsigned char *slot;
    uint32_t       i;

    if (mem == NULL || size < sizeof(h) || ((uintptr_t)mem & 7) != 0) {
        return SP_ERR_INVALID;
    }
    /* the fixed fields only: claims and reader change under us */
    memcpy(&h, mem, offsetof(sp_region_hdr, claims));
    if (h.magic != SP_REGION_MAGIC || h.version != SP_RING_LAYOUT_VERSION
        || h.check != sp_region_check(&h)
        || (size_t)h.ring_bytes != h.ring_bytes
        || sp_region_size(h.slots, (size_t)h.ring_bytes) == 0
        || h.size != sp_region_size(h.slots, (size_t)h.ring_bytes)
        || h.size > size)
    {
        return SP_ERR_INVALID;
    }
    region = calloc(1, sizeof(*region) + h.slots * sizeof(sp_ring));
    if (region == NULL) {
        return SP_ERR_NOMEM;
    }
    region->hdr = mem;
    region->slots = h.slots;
    region->ring_bytes = h.ring_bytes;
    for (i = 0; i < h.slots; i++) {
        slot = (unsigned char *)mem + SP_REGION_HEAD
               + (size_t)i * (SP_SLOT_HEAD + h.ring_bytes);
        region->rings[i].hdr = mem;
        region->rings[i].slot = (sp_slot *)(void *)slot;
        region->rings[i].data = slot + SP_SLOT_HEAD;
        region->rings[i].size = h.ring_bytes;
        region->rings[i].mask = h.ring_bytes - 1;
        region->rings[i].run_max = h.ring_bytes / SP_RUN_SHARE;
    }
    *out = region;
    return SP_OK;
}

void
sp_region_detach(sp_region *region)
{
    free(region);
}

uint64_t
sp_region_claims(const sp_region *region)
{
    /* acquire: the owner words stored before the count are seen after */
    return atomic_load_explicit(&region->hdr->claims, memory_order_acquire);
}

uint32_t
sp_region_slot_count(const sp_region *region)
{
    return region->slots;
}

sp_ring *
sp_region_ring(sp_region *region, uint32_t i)
{
    return i < region->slots ? &region->rings[i] : NULL;
}

size_t
sp_region_ring_bytes(const sp_region *region)
{
    return (size_t)region->ring_bytes;
}

/* Nothing reserved is left unread, committed or not. */
static bool
sp_drained(const sp_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->slot->tail,
                                         memory_order_acquire);

    return atomic_load_explicit(&r->slot->head, memory_order_acquire)
           == tail;
}

/*
 * A claim just taken: counted in the region's header after the owner word
 * was stored (release), so a reader that sees the count move and then
 * looks at the owner words finds this slot taken (sp_region_claims).
 */
static sp_ring *
sp_claimed(sp_region *region, sp_ring *r, uint64_t want)
{
    r->claim = want;
    atomic_fetch_add_explicit(&region->hdr->claims, 1, memory_order_release);
    return r;
}

sp_ring *
sp_region_claim(sp_region *region, uint32_t pid)
{
    uint64_t want = sp_owner_word(pid), cur;
    sp_ring *r;
    uint32_t i;

    if (want == 0) {
        return NULL;
    }
    /* already ours: claiming twice must not take two slots */
    for (i = 0; i < region->slots; i++) {
        r = &region->rings[i];
        if (atomic_load_explicit(&r->slot->owner, memory_order_acquire)
            == want)
        {
            r->claim = want;
            return r;
        }
    }
    for (i = 0; i < region->slots; i++) {
        r = &region->rings[i];
        cur = 0;
        if (atomic_compare_exchange_strong_explicit(&r->slot->owner, &cur,
                want, memory_order_acq_rel, memory_order_relaxed))
        {
            return sp_claimed(region, r, want);
        }
    }
    /*
     * A dead owner's slot, once drained: its process can no longer write,
     * and nothing it reserved is left for the new owner to trip over.
     * The CAS fails if the exporter freed it or another worker took it
     * meanwhile.
     */
    for (i = 0; i < region->slots; i++) {
        r = &region->rings[i];
        cur = atomic_load_explicit(&r->slot->owner, memory_order_acquire);
        if (cur != 0 && !sp_owner_alive(cur) && sp_drained(r)
            && atomic_compare_exchange_strong_explicit(&r->slot->owner,
                   &cur, want, memory_order_acq_rel, memory_order_relaxed))
        {
            return sp_claimed(region, r, want);
        }
    }
    return NULL;
}

void
sp_region_release(sp_ring *ring)
{
    uint64_t cur = ring->claim;

    if (cur != 0) {
        /* release: our commits happen before the next owner's claim */
        atomic_compare_exchange_strong_explicit(&ring->slot->owner, &cur, 0,
            memory_order_acq_rel, memory_order_relaxed);
        ring->claim = 0;
    }
}

sp_status
sp_region_claim_reader(sp_region *region, uint32_t pid)
{
    uint64_t want = sp_owner_word(pid), cur;

    if (want == 0) {
        return SP_ERR_INVALID;
    }
    cur = atomic_load_explicit(&region->hdr->reader, memory_order_acquire);
    for (;;) {
        if (cur == want) {
            return SP_OK;
        }
        if (cur != 0 && sp_owner_alive(cur)) {
            return SP_ERR_NOT_FOUND;
        }
        if (atomic_compare_exchange_strong_explicit(&region->hdr->reader,
                &cur, want, memory_order_acq_rel, memory_order_acquire))
        {
            cur = want;
            atomic_compare_exchange_strong_explicit(
                &region->hdr->reader_wanted, &cur, 0, memory_order_acq_rel,
                memory_order_relaxed);
            return SP_OK;
        }
    }
}

void
sp_region_want_reader(sp_region *region, uint32_t pid)
{
    uint64_t want = sp_owner_word(pid);

    if (want != 0) {
        atomic_store_explicit(&region->hdr->reader_wanted, want,
                              memory_order_release);
    }
}

bool
sp_region_reader_wanted(const sp_region *region, uint32_t pid)
{
    uint64_t w = atomic_load_explicit(&region->hdr->reader_wanted,
                                      memory_order_acquire);

    return w != 0 && (uint32_t)w != pid && sp_owner_alive(w);
}

bool
sp_region_writers_alive(const sp_region *region)
{
    uint64_t owner;
    uint32_t i;

    for (i = 0; i < region->slots; i++) {
        owner = atomic_load_explicit(&region->rings[i].slot->owner,
                                     memory_order_acquire);
        if (owner != 0 && sp_owner_alive(owner)) {
            return true;
        }
    }
    return false;
}

void
sp_region_release_reader(sp_region *region, uint32_t pid)
{
    uint64_t cur = atomic_load_explicit(&region->hdr->reader,
                                        memory_order_acquire);

    if ((uint32_t)cur == pid) {
        atomic_compare_exchange_strong_explicit(&region->hdr->reader, &cur,
            0, memory_order_acq_rel, memory_order_relaxed);
    }
}

void
sp_region_want_objects(sp_region *region)
{
    atomic_fetch_add_explicit(&region->hdr->objects_wanted, 1,
                              memory_order_release);
}

/* ---- writers: async-signal-safe from here to sp_ring_write */

uint64_t
sp_ring_objects_wanted(const sp_ring *r)
{
    return atomic_load_explicit(&r->hdr->objects_wanted,
                                memory_order_acquire);
}

static void
sp_drop(sp_ring *r)
{
    atomic_fetch_add_explicit(&r->slot->dropped_full, 1,
                              memory_order_relaxed);
}

/* A header's type and its flags, 0. One store where the machine's order
 * allows: gcc stored the two halves apart (2 instructions more a record,
 * callgrind). */
static inline void
sp_put_type(unsigned char *h, uint16_t type)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t w = type;

    memcpy(h + 20, &w, 4);
#else
    uint16_t flags = 0;

    memcpy(h + 20, &type, 2);
    memcpy(h + 22, &flags, 2);
#endif
}

/*
 * Fills in the header of the record reserved at pos and publishes it.
 * pos & mask + total <= size was made sure of when it was reserved.
 * Inline in sp_ring_commit, every record's: the call and the registers saved
 * twice cost ~10 instructions a record (callgrind).
 */
static inline __attribute__((always_inline)) void
sp_seal_inline(sp_ring *r, uint64_t pos, uint32_t total, uint32_t used,
    uint16_t type)
{
    unsigned char *h = r->data + (pos & r->mask);
    uint32_t       check;

    memcpy(h + 12, &total, 4);
    memcpy(h + 16, &used, 4);
    sp_put_type(h, type);
    check = sp_checksum(h, used);
    memcpy(h + 8, &check, 4);
    /* The stamp's word is h: sp_word() here reloaded the ring's data and
     * mask after the call (3 instructions more a record, callgrind). */
    atomic_store_explicit((_Atomic uint64_t *)(void *)h, sp_stamp(pos),
                          memory_order_release);
}

static __attribute__((noinline)) void
sp_seal(sp_ring *r, uint64_t pos, uint32_t total, uint32_t used,
    uint16_t type)
{
    sp_seal_inline(r, pos, total, used, type);
}

/*
 * The end of a reservation that begins after a pad record, out of line:
 * with the pad's seal (a call) in sp_ring_reserve, every reservation
 * saved and restored five registers for it (~14 instructions,
 * callgrind).
 */
static __attribute__((noinline)) void *
sp_reserve_padded(sp_ring *r, uint64_t head, uint64_t pad, sp_ring_token *t)
{
    sp_seal(r, head, (uint32_t)pad, 0, SP_RING_PAD);
    t->pos = head + pad;
    return r->data + ((head + pad) & r->mask) + SP_HDR;
}

/*
 * sp_ring_reserve's loop: every case, the pad before a record that does
 * not fit at the end, a CAS lost to another writer, a full or damaged
 * ring. need: the record's bytes, header included.
 */
static __attribute__((noinline)) void *
sp_reserve_slow(sp_ring *r, uint64_t need, sp_ring_token *t)
{
    sp_slot *s = r->slot;
    uint64_t head, tail, pad, rem;
    unsigned tries;

    for (tries = 0; tries < SP_RESERVE_TRIES; tries++) {
        /*
         * tail first: the head loaded after it is at least the head the
         * reader saw when it stored that tail, so head - tail cannot go
         * negative in a sound ring.
         */
        tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        head = atomic_load_explicit(&s->head, memory_order_relaxed);
        if (((head | tail) & 7) != 0 || head - tail > r->size) {
            break;      /* damaged positions: the reader repairs them */
        }
        rem = r->size - (head & r->mask);
        pad = rem < need ? rem : 0;
        if (pad + need > r->size - (head - tail)) {
            break;      /* full */
        }
        if (atomic_compare_exchange_weak_explicit(&s->head, &head,
                head + pad + need, memory_order_relaxed,
                memory_order_relaxed))
        {
            if (pad >= SP_HDR) {
                return sp_reserve_padded(r, head, pad, t);
            }
            t->pos = head + pad;
            return r->data + ((head + pad) & r->mask) + SP_HDR;
        }
    }
    sp_drop(r);
    return NULL;
}

/*
 * No wrapper between the writers and these: every symbol is hidden
 * (sp_common.h), so sp_ring_write and the writers in other files call
 * them directly, never through a PLT whose lazy binding would run inside
 * a signal handler; a wrapper's jump cost 3 instructions a span
 * (callgrind).
 */
void *
sp_ring_reserve(sp_ring *r, uint16_t type, size_t len, sp_ring_token *t)
{
    sp_slot *s = r->slot;
    uint64_t head, tail, need, off, size = r->size;

    if (!sp_type_ok(type)) {
        return NULL;
    }
    if (len > SP_RING_MAX_BODY(size)) {
        sp_drop(r);
        return NULL;
    }
    /* Before the CAS, which then keeps fewer values in registers; a
     * caller reads the token only when this returns a record. */
    t->cap = (uint32_t)len;
    t->type = type;
    need = sp_align8(SP_HDR + len);
    /*
     * The usual case once, with the loop's checks (tail first, as there):
     * a sound ring with room, no pad before the record, the CAS won. With
     * few values live it saves no registers (the loop here saved and
     * restored three: -13 instructions a record, callgrind); anything
     * else is the loop's, from the start.
     */
    tail = atomic_load_explicit(&s->tail, memory_order_acquire);
    head = atomic_load_explicit(&s->head, memory_order_relaxed);
    off = head & r->mask;
    if (((head | tail) & 7) == 0 && head - tail <= size
        && need <= size - off && need <= size - (head - tail)
        && atomic_compare_exchange_weak_explicit(&s->head, &head,
               head + need, memory_order_relaxed, memory_order_relaxed))
    {
        t->pos = head;
        return r->data + off + SP_HDR;
    }
    return sp_reserve_slow(r, need, t);
}

/*
 * A reservation that is still the ring's last gives back what it did not
 * use, so a writer that reserves for its worst case (a span, written in
 * place) takes only what it wrote. The head moves back before the seal:
 * a reader that sees the stamp sees the new head too.
 */
void
sp_ring_commit(sp_ring *r, sp_ring_token *t, size_t used_len)
{
    sp_slot *s = r->slot;       /* once: not loaded again after the call */
    uint64_t total, used_total, end;

    if (used_len > t->cap) {
        used_len = t->cap;
    }
    total = sp_align8(SP_HDR + (uint64_t)t->cap);
    used_total = sp_align8(SP_HDR + (uint64_t)used_len);
    end = t->pos + total;
    if (used_total < total
        && atomic_compare_exchange_strong_explicit(&s->head, &end,
               t->pos + used_total, memory_order_relaxed,
               memory_order_relaxed))
    {
        total = used_total;
    }
    sp_seal_inline(r, t->pos, (uint32_t)total, (uint32_t)used_len,
                   t->type);
    atomic_fetch_add_explicit(&s->written, 1, memory_order_relaxed);
}

void
sp_ring_cancel(sp_ring *r, sp_ring_token *t)
{
    sp_seal(r, t->pos, (uint32_t)sp_align8(SP_HDR + (uint64_t)t->cap), 0,
            SP_RING_PAD);
}

sp_status
sp_ring_write(sp_ring *r, uint16_t type, const void *body, size_t len)
{
    sp_ring_token t;
    void         *dst;

    if (!sp_type_ok(type)) {
        return SP_ERR_INVALID;
    }
    dst = sp_ring_reserve(r, type, len, &t);
    if (dst == NULL) {
        return SP_ERR_NOMEM;
    }
    if (len > 0) {
        memcpy(dst, body, len);
    }
    sp_ring_commit(r, &t, len);
    return SP_OK;
}

/* ---- the reader */

typedef struct sp_hdr {
    uint32_t total;
    uint32_t used;
    uint16_t type;
} sp_hdr;

/*
 * Whether the record at pos, whose stamp matched, holds together with
 * head: checked before any of its lengths is used.
 */
static bool
sp_header_ok(const sp_ring *r, uint64_t pos, uint64_t head, sp_hdr *out)
{
    const unsigned char *h = r->data + (pos & r->mask);
    uint64_t             rem = r->size - (pos & r->mask);
    uint16_t             flags;
    uint32_t             check;

    memcpy(&check, h + 8, 4);
    memcpy(&out->total, h + 12, 4);
    memcpy(&out->used, h + 16, 4);
    memcpy(&out->type, h + 20, 2);
    memcpy(&flags, h + 22, 2);
    if (out->total < SP_HDR || (out->total & 7) != 0 || out->total > rem
        || out->total > head - pos || out->used > out->total - SP_HDR
        || flags != 0
        || (out->type == SP_RING_PAD ? out->used != 0
                                     : !sp_type_ok(out->type)))
    {
        return false;
    }
    return check == sp_checksum(h, out->used);
}

static void
sp_set_tail(sp_ring *r, uint64_t tail)
{
    atomic_store_explicit(&r->slot->tail, tail, memory_order_release);
}

static void
sp_count(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/*
 * head and tail no longer make sense (the memory was overwritten): start
 * again, empty, at an aligned head. Writers drop while the positions are
 * like this, so none of them moves head under us; if one did, the CAS
 * fails and the next read tries again.
 */
static void
sp_repair(sp_ring *r, uint64_t head, uint64_t tail)
{
    uint64_t fresh = sp_align8(head), lost = head - tail;

    sp_count(&r->slot->corrupt, 1);
    if (fresh != head
        && !atomic_compare_exchange_strong_explicit(&r->slot->head, &head,
               fresh, memory_order_relaxed, memory_order_relaxed))
    {
        return;
    }
    sp_count(&r->slot->skipped, lost > r->size ? r->size : lost);
    sp_set_tail(r, fresh);
}

/*
 * The record at tail is damaged: find the next position before head that
 * holds a committed record that checks out, never following a length read
 * from the damage, and skip to it (or to head).
 */
static void
sp_resync(sp_ring *r, uint64_t tail, uint64_t head)
{
    uint64_t pos;
    sp_hdr   h;

    sp_count(&r->slot->corrupt, 1);
    for (pos = tail + 8; pos != head; pos += 8) {
        if (r->size - (pos & r->mask) >= SP_HDR
            && head - pos >= SP_HDR
            && atomic_load_explicit(sp_word(r, pos), memory_order_acquire)
               == sp_stamp(pos)
            && sp_header_ok(r, pos, head, &h))
        {
            break;
        }
    }
    sp_count(&r->slot->skipped, pos - tail);
    sp_set_tail(r, pos);
}

/*
 * sp_ring_read, every case: empty, not committed, pads, the wrap, damage.
 * sp_ring_read tries the usual case first and comes here for the rest,
 * having changed nothing.
 */
static __attribute__((noinline)) sp_status
sp_ring_read_any(sp_ring *r, sp_record_view *out)
{
    sp_slot *s = r->slot;
    uint64_t head, tail, rem;
    sp_hdr   h;

    for (;;) {
        tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
        head = atomic_load_explicit(&s->head, memory_order_acquire);
        if (((head | tail) & 7) != 0 || head - tail > r->size) {
            sp_repair(r, head, tail);
            return SP_ERR_NOT_FOUND;
        }
        if (head == tail) {
            return SP_ERR_NOT_FOUND;
        }
        rem = r->size - (tail & r->mask);
        if (rem < SP_HDR) {
            /* too short for a header: the reservation here wrapped */
            if (head - tail < rem) {
                sp_resync(r, tail, head);
            } else {
                sp_set_tail(r, tail + rem);
            }
            continue;
        }
        if (atomic_load_explicit(sp_word(r, tail), memory_order_acquire)
            != sp_stamp(tail))
        {
            return SP_ERR_NOT_FOUND;      /* not committed yet */
        }
        /* after the stamp: this head covers the record's reservation */
        head = atomic_load_explicit(&s->head, memory_order_acquire);
        if (head - tail > r->size || !sp_header_ok(r, tail, head, &h)) {
            if (head - tail > r->size || head == tail) {
                sp_count(&s->corrupt, 1);
                return SP_ERR_NOT_FOUND;
            }
            sp_resync(r, tail, head);
            continue;
        }
        if (h.type == SP_RING_PAD) {
            sp_set_tail(r, tail + h.total);
            continue;
        }
        out->type = h.type;
        out->body = r->data + (tail & r->mask) + SP_HDR;
        out->len = h.used;
        out->pos = tail;
        out->next = tail + h.total;
        out->held = 1;
        return SP_OK;
    }
}

/*
 * The usual case, at the start of each of the exporter's runs: a
 * committed record at tail, not a pad, its header sound. The same checks
 * as sp_header_ok on the same head, loaded after the stamp as there, the
 * type and flags compared as one (sp_hdr_words). Anything else, passed or
 * failed, is left to sp_ring_read_any, which starts over.
 */
sp_status
sp_ring_read(sp_ring *r, sp_record_view *out)
{
    uint64_t             tail = atomic_load_explicit(&r->slot->tail,
                                                     memory_order_relaxed);
    uint64_t             head = atomic_load_explicit(&r->slot->head,
                                                     memory_order_acquire);
    uint64_t             off = tail & r->mask;
    const unsigned char *h = r->data + off;
    uint32_t             check, total, used, type;

    /*
     * Empty: the word at tail may never have been written (valgrind
     * reads that as undefined in a ring on the heap). The stamp as
     * sp_ring_read_next_inline compares it, right for an aligned tail; a
     * tail not aligned goes to sp_ring_read_any whatever the word is.
     */
    if (head == tail || r->size - off < SP_HDR
        || (atomic_load_explicit((_Atomic uint64_t *)(void *)h,
                                 memory_order_acquire) ^ tail)
           != (SP_STAMP_KEY | 1))
    {
        return sp_ring_read_any(r, out);
    }
    /* after the stamp: this head covers the record's reservation */
    head = atomic_load_explicit(&r->slot->head, memory_order_acquire);
    sp_hdr_words(h, &check, &total, &used, &type);
    if (((head | tail) & 7) != 0 || head - tail > r->size
        || total < SP_HDR || (total & 7) != 0 || total > r->size - off
        || total > head - tail || (uint64_t)used + SP_HDR > total
        || type - SP_RECORD_SAMPLE > SP_RECORD_OBJECTS - SP_RECORD_SAMPLE)
    {
        return sp_ring_read_any(r, out);
    }
    /* filled before the checksum: fewer values to keep across its call */
    out->type = (uint16_t)type;
    out->body = h + SP_HDR;
    out->len = used;
    out->pos = tail;
    out->next = tail + total;
    out->held = 1;
    return check == sp_checksum(h, used) ? SP_OK : sp_ring_read_any(r, out);
}

/* Its body is sp_ring_next.h's, which the exporter's drain loop inlines. */
sp_status
sp_ring_read_next(sp_ring *r, sp_record_view *v)
{
    return sp_ring_read_next_inline(r, v);
}

sp_status
sp_ring_consume(sp_ring *r, sp_record_view *view)
{
    if (view->held == 0
        || view->pos != atomic_load_explicit(&r->slot->tail,
                                             memory_order_relaxed)
        || view->next - view->pos > r->size)
    {
        return SP_ERR_INVALID;
    }
    sp_set_tail(r, view->next);
    sp_count(&r->slot->read, view->held);
    view->pos = view->next;
    view->held = 0;
    return SP_OK;
}

void
sp_ring_skip_pending(sp_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->slot->tail,
                                         memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->slot->head,
                                         memory_order_acquire);

    if (((head | tail) & 7) != 0 || head - tail > r->size) {
        sp_repair(r, head, tail);
        return;
    }
    if (head != tail) {
        sp_count(&r->slot->skipped, head - tail);
        sp_set_tail(r, head);
    }
}

sp_status
sp_ring_reset_if_abandoned(sp_ring *r, uint32_t reader)
{
    uint64_t       owner = atomic_load_explicit(&r->slot->owner,
                                                memory_order_acquire);
    uint64_t       hold;
    bool           held = false;
    sp_record_view v;

    if (owner != 0 && sp_owner_alive(owner)) {
        return SP_ERR_NOT_FOUND;
    }
    if (owner == 0) {
        if (sp_drained(r)) {
            return SP_ERR_NOT_FOUND;
        }
        /*
         * Released while something was reserved: it stays uncommitted,
         * unless a record only waits to be read. Held for the reset, so
         * that no worker claims the slot and writes behind the skip.
         */
        hold = sp_owner_word(reader);
        if (hold == 0
            || !atomic_compare_exchange_strong_explicit(&r->slot->owner,
                   &owner, hold, memory_order_acq_rel,
                   memory_order_relaxed))
        {
            return SP_ERR_NOT_FOUND;
        }
        owner = hold;
        held = true;
    }
    /*
     * The owner is gone (or we hold the slot) and nobody else may claim
     * it before it is drained, so no writer can run here any more: what
     * is left and not committed never will be.
     */
    if (sp_ring_read(r, &v) == SP_OK) {
        if (held) {
            atomic_store_explicit(&r->slot->owner, 0, memory_order_release);
        }
        return SP_ERR_INVALID;
    }
    sp_ring_skip_pending(r);
    atomic_compare_exchange_strong_explicit(&r->slot->owner, &owner, 0,
        memory_order_acq_rel, memory_order_relaxed);
    return SP_OK;
}

void
sp_ring_stats(const sp_ring *r, sp_ring_counters *out)
{
    sp_slot *s = r->slot;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);

    out->written = atomic_load_explicit(&s->written, memory_order_relaxed);
    out->dropped_full = atomic_load_explicit(&s->dropped_full,
                                             memory_order_relaxed);
    out->read = atomic_load_explicit(&s->read, memory_order_relaxed);
    out->corrupt = atomic_load_explicit(&s->corrupt, memory_order_relaxed);
    out->skipped_bytes = atomic_load_explicit(&s->skipped,
                                              memory_order_relaxed);
    out->pending_bytes = atomic_load_explicit(&s->head,
                                              memory_order_relaxed) - tail;
    out->owner = (uint32_t)atomic_load_explicit(&s->owner,
                                                memory_order_relaxed);
}

uint32_t
sp_ring_owner(const sp_ring *r)
{
    return (uint32_t)atomic_load_explicit(&r->slot->owner,
                                          memory_order_relaxed);
}
