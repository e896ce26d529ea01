/*
 * The region and its rings. Where a test damages the shared memory on
 * purpose it uses the layout documented in sp_ring.c (region header 128
 * bytes, slot header 192, head at +64, tail at +128, record stamp and
 * checksum as described there).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_test_child.h"
#include "sp_crc32c.h"
#include "sp_ring.h"

#define REGION_HEAD 128
#define SLOT_HEAD   192
#define STAMP_KEY   0x9e3779b97f4a7c00ull
#define HDR         SP_RING_HEADER_SIZE

typedef struct region_fx {
    void      *mem;
    size_t     size;
    size_t     ring_bytes;
    bool       shared;
    sp_region *region;
} region_fx;

/*
 * malloc'd memory unless shared (fork tests): under ASan an access past
 * the region then shows up as an overflow.
 */
static void
fx_open(region_fx *fx, uint32_t slots, size_t ring_bytes, bool shared)
{
    memset(fx, 0, sizeof(*fx));
    fx->size = sp_region_size(slots, ring_bytes);
    fx->ring_bytes = ring_bytes;
    fx->shared = shared;
    assert_true(fx->size > 0);
    if (shared) {
        fx->mem = mmap(NULL, fx->size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(fx->mem != MAP_FAILED);
    } else {
        assert_int_equal(posix_memalign(&fx->mem, 64, fx->size), 0);
        /* not zeroed: init must not rely on it for the data */
        memset(fx->mem, 0x5a, fx->size);
    }
    assert_int_equal(sp_region_init(fx->mem, fx->size, slots, ring_bytes),
                     SP_OK);
    assert_int_equal(sp_region_attach(fx->mem, fx->size, &fx->region),
                     SP_OK);
}

static void
fx_close(region_fx *fx)
{
    sp_region_detach(fx->region);
    if (fx->shared) {
        munmap(fx->mem, fx->size);
    } else {
        free(fx->mem);
    }
}

static unsigned char *
slot_mem(region_fx *fx, uint32_t i)
{
    return (unsigned char *)fx->mem + REGION_HEAD
           + (size_t)i * (SLOT_HEAD + fx->ring_bytes);
}

static unsigned char *
data_mem(region_fx *fx, uint32_t i)
{
    return slot_mem(fx, i) + SLOT_HEAD;
}

static uint64_t
get_u64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, 8);
    return v;
}

static void
set_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static sp_ring_counters
stats(sp_ring *r)
{
    sp_ring_counters c;

    sp_ring_stats(r, &c);
    return c;
}

/* ---- the checksum and stamp, as documented, to forge headers */

/* A committed header at pos with the given fields and a good checksum. */
static void
forge(unsigned char *data, size_t ring_bytes, uint64_t pos, uint32_t total,
    uint32_t used, uint16_t type, uint16_t flags)
{
    unsigned char *h = data + (pos & (ring_bytes - 1));
    uint32_t       check;
    uint64_t       stamp = (pos ^ STAMP_KEY) | 1;
    size_t         n = used;

    if (ring_bytes - (pos & (ring_bytes - 1)) < HDR) {
        return;     /* no header fits there */
    }
    memcpy(h + 12, &total, 4);
    memcpy(h + 16, &used, 4);
    memcpy(h + 20, &type, 2);
    memcpy(h + 22, &flags, 2);
    if (n > ring_bytes - (pos & (ring_bytes - 1)) - HDR) {
        n = 0;      /* a lie about the length: hash what is there */
    }
    /* CRC32C of bytes 12 .. 24 + used (test_crc32c checks it is CRC32C) */
    check = sp_crc32c(0, h + 12, HDR - 12 + n);
    memcpy(h + 8, &check, 4);
    memcpy(h, &stamp, 8);
}

/* ---- records with checkable content */

static void
fill(unsigned char *p, size_t len, uint32_t tag)
{
    size_t i;

    for (i = 0; i < len; i++) {
        p[i] = (unsigned char)(tag * 131 + i * 7 + (i >> 8));
    }
}

static bool
filled(const unsigned char *p, size_t len, uint32_t tag)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (p[i] != (unsigned char)(tag * 131 + i * 7 + (i >> 8))) {
            return false;
        }
    }
    return true;
}

static unsigned char scratch[1 << 17];

static sp_status
write_tagged(sp_ring *r, uint16_t type, size_t len, uint32_t tag)
{
    fill(scratch, len, tag);
    return sp_ring_write(r, type, scratch, len);
}

static void
read_tagged(sp_ring *r, uint16_t type, size_t len, uint32_t tag)
{
    sp_record_view v;

    assert_int_equal(sp_ring_read(r, &v), SP_OK);
    assert_int_equal(v.type, type);
    assert_int_equal(v.len, len);
    assert_int_equal((uintptr_t)v.body & 7, 0);
    assert_true(filled(v.body, len, tag));
    assert_int_equal(sp_ring_consume(r, &v), SP_OK);
}

static uint64_t rng_state;

static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void
randomize(unsigned char *p, size_t len)
{
    size_t   i;
    uint64_t w;

    for (i = 0; i + 8 <= len; i += 8) {
        w = rnd();
        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++) {
        p[i] = (unsigned char)rnd();
    }
}

/* ---- the region */

static void
region_size_follows_its_limits(void **state)
{
    (void)state;
    assert_int_equal(sp_region_size(1, 4096), 128 + 192 + 4096);
    assert_int_equal(sp_region_size(3, 65536), 128 + 3 * (192 + 65536));
    assert_int_equal(sp_region_size(SP_REGION_MAX_SLOTS, 4096),
                     128 + SP_REGION_MAX_SLOTS * (192 + 4096));
    assert_int_equal(sp_region_size(0, 4096), 0);
    assert_int_equal(sp_region_size(SP_REGION_MAX_SLOTS + 1, 4096), 0);
    assert_int_equal(sp_region_size(1, 2048), 0);
    assert_int_equal(sp_region_size(1, 4096 + 8), 0);
    assert_int_equal(sp_region_size(1, 3 * 4096), 0);
    assert_int_equal(sp_region_size(1, (size_t)SP_RING_MAX_BYTES * 2), 0);
    assert_int_equal(sp_region_size(1, SP_RING_MAX_BYTES),
                     128 + 192 + (size_t)SP_RING_MAX_BYTES);
}

static void
init_and_attach_check_their_arguments(void **state)
{
    size_t     size = sp_region_size(2, 4096);
    void      *mem;
    sp_region *region = NULL;

    (void)state;
    assert_int_equal(posix_memalign(&mem, 64, size + 64), 0);
    assert_int_equal(sp_region_init(mem, size - 1, 2, 4096),
                     SP_ERR_INVALID);
    assert_int_equal(sp_region_init(mem, size, 2, 5000), SP_ERR_INVALID);
    assert_int_equal(sp_region_init(mem, size, 0, 4096), SP_ERR_INVALID);
    assert_int_equal(sp_region_init(NULL, size, 2, 4096), SP_ERR_INVALID);
    assert_int_equal(sp_region_init((char *)mem + 4, size, 2, 4096),
                     SP_ERR_INVALID);
    assert_int_equal(sp_region_init(mem, size, 2, 4096), SP_OK);
    assert_int_equal(sp_region_attach(mem, size - 1, &region),
                     SP_ERR_INVALID);
    assert_int_equal(sp_region_attach(mem, 64, &region), SP_ERR_INVALID);
    assert_int_equal(sp_region_attach(NULL, size, &region), SP_ERR_INVALID);
    assert_int_equal(sp_region_attach((char *)mem + 4, size, &region),
                     SP_ERR_INVALID);
    assert_null(region);
    assert_int_equal(sp_region_attach(mem, size + 64, &region), SP_OK);
    assert_int_equal(sp_region_slot_count(region), 2);
    assert_int_equal(sp_region_ring_bytes(region), 4096);
    assert_non_null(sp_region_ring(region, 1));
    assert_null(sp_region_ring(region, 2));
    sp_region_detach(region);
    sp_region_detach(NULL);
    free(mem);
}

/* Each header field spoiled alone makes attach fail. */
static void
attach_rejects_each_bad_header_field(void **state)
{
    static const struct {
        size_t   off;
        unsigned width;
        uint64_t value;
        bool     fix_check;     /* recompute the check after */
    } bad[] = {
        { 0, 8, 0x474e495250535054ull, true },  /* magic */
        { 8, 4, SP_RING_LAYOUT_VERSION + 1, true },
        { 12, 4, 0, true },                     /* no slots */
        { 12, 4, 3, true },                     /* more slots than fit */
        { 12, 4, SP_REGION_MAX_SLOTS + 1, true },
        { 16, 8, 4096 + 64, true },             /* not a power of two */
        { 16, 8, 8192, true },                  /* too big for the memory */
        { 16, 8, 1ull << 40, true },
        { 24, 8, 0, true },                     /* size disagrees */
        { 32, 4, 0, false },                    /* check */
        { 12, 4, 1, false },                    /* any change, check kept */
    };
    size_t         size = sp_region_size(2, 4096), i;
    unsigned char *mem;
    sp_region     *region;
    uint32_t       check, u32;
    unsigned       b;

    (void)state;
    assert_int_equal(posix_memalign((void **)&mem, 64, size), 0);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(sp_region_init(mem, size, 2, 4096), SP_OK);
        if (bad[i].width == 8) {
            set_u64(mem + bad[i].off, bad[i].value);
        } else {
            u32 = (uint32_t)bad[i].value;
            memcpy(mem + bad[i].off, &u32, 4);
        }
        if (bad[i].fix_check) {
            check = 2166136261u;
            for (b = 0; b < 32; b++) {
                check = (check ^ mem[b]) * 16777619u;
            }
            memcpy(mem + 32, &check, 4);
        }
        region = NULL;
        assert_int_equal(sp_region_attach(mem, size, &region),
                         SP_ERR_INVALID);
        assert_null(region);
    }
    /* and with the check recomputed by the same rule, a sound one passes */
    assert_int_equal(sp_region_init(mem, size, 2, 4096), SP_OK);
    check = 2166136261u;
    for (b = 0; b < 32; b++) {
        check = (check ^ mem[b]) * 16777619u;
    }
    memcpy(mem + 32, &check, 4);
    assert_int_equal(sp_region_attach(mem, size, &region), SP_OK);
    sp_region_detach(region);
    free(mem);
}

/*
 * An exporter told apart a region of another spanprof version, which
 * attach refuses as any bad one, to say so.
 */
static void
layout_is_read_from_any_region_with_the_magic(void **state)
{
    size_t         size = sp_region_size(2, 4096);
    unsigned char *mem;
    sp_region     *region = NULL;
    uint32_t       other = SP_RING_LAYOUT_VERSION + 7;

    (void)state;
    assert_int_equal(posix_memalign((void **)&mem, 64, size), 0);
    memset(mem, 0, size);
    assert_int_equal(sp_region_layout(mem, size), 0);
    assert_int_equal(sp_region_init(mem, size, 2, 4096), SP_OK);
    assert_int_equal(sp_region_layout(mem, size), SP_RING_LAYOUT_VERSION);
    assert_int_equal(sp_region_layout(mem, 8), 0);
    assert_int_equal(sp_region_layout(NULL, size), 0);
    memcpy(mem + 8, &other, 4);
    assert_int_equal(sp_region_layout(mem, size), other);
    assert_int_equal(sp_region_attach(mem, size, &region), SP_ERR_INVALID);
    set_u64(mem, 0x474e495250535054ull);
    assert_int_equal(sp_region_layout(mem, size), 0);
    free(mem);
}

static void
attach_survives_random_headers(void **state)
{
    size_t         size = sp_region_size(2, 4096);
    unsigned char *mem;
    sp_region     *region;
    int            seed;

    (void)state;
    assert_int_equal(posix_memalign((void **)&mem, 64, size), 0);
    for (seed = 1; seed <= 2000; seed++) {
        rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)seed;
        randomize(mem, size);
        if (seed % 2 == 0) {
            /* past the magic and version, to reach the other checks */
            set_u64(mem, 0x474e495250535053ull);
            memcpy(mem + 8, &(uint32_t){ SP_RING_LAYOUT_VERSION }, 4);
        }
        assert_int_equal(sp_region_attach(mem, size, &region),
                         SP_ERR_INVALID);
    }
    free(mem);
}

/* ---- writing and reading */

static void
records_come_out_in_order_and_intact(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_counters c;
    sp_record_view   v;
    uint32_t         i;

    (void)state;
    fx_open(&fx, 2, 65536, false);
    r = sp_region_ring(fx.region, 1);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    for (i = 0; i < 100; i++) {
        assert_int_equal(write_tagged(r, (uint16_t)(1 + i % 3), i * 5, i),
                         SP_OK);
    }
    c = stats(r);
    assert_int_equal(c.written, 100);
    assert_true(c.pending_bytes > 0);
    for (i = 0; i < 100; i++) {
        read_tagged(r, (uint16_t)(1 + i % 3), i * 5, i);
    }
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    c = stats(r);
    assert_int_equal(c.written, 100);
    assert_int_equal(c.read, 100);
    assert_int_equal(c.dropped_full, 0);
    assert_int_equal(c.corrupt, 0);
    assert_int_equal(c.skipped_bytes, 0);
    assert_int_equal(c.pending_bytes, 0);
    /* the other slot saw nothing */
    c = stats(sp_region_ring(fx.region, 0));
    assert_int_equal(c.written + c.read, 0);
    fx_close(&fx);
}

static void
bad_types_are_refused_and_not_counted(void **state)
{
    region_fx     fx;
    sp_ring      *r;
    sp_ring_token t;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_null(sp_ring_reserve(r, 0, 8, &t));
    assert_null(sp_ring_reserve(r, SP_RECORD_OBJECTS + 1, 8, &t));
    assert_null(sp_ring_reserve(r, 0xffff, 8, &t));
    assert_int_equal(sp_ring_write(r, 7, "x", 1), SP_ERR_INVALID);
    assert_int_equal(stats(r).dropped_full, 0);
    assert_int_equal(stats(r).pending_bytes, 0);
    fx_close(&fx);
}

static void
consume_takes_only_the_next_record(void **state)
{
    region_fx      fx;
    sp_ring       *r;
    sp_record_view a, b;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 10, 1), SP_OK);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 10, 2), SP_OK);
    assert_int_equal(sp_ring_read(r, &a), SP_OK);
    /* reading again without consuming gives the same record */
    assert_int_equal(sp_ring_read(r, &b), SP_OK);
    assert_ptr_equal(a.body, b.body);
    assert_int_equal(sp_ring_consume(r, &a), SP_OK);
    assert_int_equal(sp_ring_consume(r, &a), SP_ERR_INVALID);
    assert_int_equal(stats(r).read, 1);
    read_tagged(r, SP_RECORD_SAMPLE, 10, 2);
    fx_close(&fx);
}

/* The record v is now, as write_tagged wrote it. */
static void
view_is(const sp_record_view *v, uint16_t type, size_t len, uint32_t tag)
{
    assert_int_equal(v->type, type);
    assert_int_equal(v->len, len);
    assert_true(filled(v->body, len, tag));
}

/*
 * Records read one after another with sp_ring_read_next stay the reader's
 * until one sp_ring_consume frees them all, and a run stops at 1/32 of
 * the ring (128 bytes of 4096: four records of 32).
 */
static void
a_run_holds_its_records_until_consumed(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t;
    sp_record_view   v;
    sp_ring_counters c;
    uint32_t         tag;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    for (tag = 1; tag <= 5; tag++) {
        assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 8, tag), SP_OK);
    }
    assert_int_equal(sp_ring_read(r, &v), SP_OK);
    view_is(&v, SP_RECORD_SPAN, 8, 1);
    for (tag = 2; tag <= 4; tag++) {
        assert_int_equal(sp_ring_read_next(r, &v), SP_OK);
        view_is(&v, SP_RECORD_SPAN, 8, tag);
    }
    assert_int_equal(sp_record_ring_bytes(&v), 4 * 32);
    c = stats(r);
    assert_int_equal(c.read, 0);
    assert_int_equal(c.pending_bytes, 5 * 32);
    /* a fifth would pass the bound: sp_ring_read's, after a consume */
    assert_int_not_equal(sp_ring_read_next(r, &v), SP_OK);
    assert_int_not_equal(sp_ring_read_next(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_ring_consume(r, &v), SP_OK);
    c = stats(r);
    assert_int_equal(c.read, 4);
    assert_int_equal(c.pending_bytes, 32);
    assert_int_equal(sp_ring_consume(r, &v), SP_ERR_INVALID);
    /* a consumed view holds nothing and reads on */
    assert_int_equal(sp_ring_read_next(r, &v), SP_OK);
    view_is(&v, SP_RECORD_SPAN, 8, 5);
    assert_int_equal(sp_ring_read_next(r, &v), SP_ERR_NOT_FOUND);
    /* reserved, not committed: not ready either */
    assert_non_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 8, &t));
    assert_int_equal(sp_ring_read_next(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_ring_consume(r, &v), SP_OK);
    c = stats(r);
    assert_int_equal(c.read, 5);
    assert_int_equal(c.pending_bytes, 32);
    assert_int_equal(c.corrupt, 0);
    fx_close(&fx);
}

/* How one ring's reader saw a record: where, what. */
typedef struct seen {
    uint16_t type;
    size_t   len;
    size_t   off;
} seen;

/*
 * Drains r, one record at a time or in runs (sp_ring_read_next, then
 * sp_ring_read for what it leaves, as the exporter does), into out.
 */
static size_t
drain_seen(region_fx *fx, sp_ring *r, bool runs, seen *out, size_t cap)
{
    sp_record_view v;
    size_t         n = 0;
    sp_status      st;

    while (sp_ring_read(r, &v) == SP_OK) {
        do {
            assert_true(n < cap);
            out[n].type = v.type;
            out[n].len = v.len;
            out[n].off = (size_t)((const unsigned char *)v.body
                                  - data_mem(fx, 0));
            n++;
            st = runs ? sp_ring_read_next(r, &v) : SP_ERR_NOT_FOUND;
        } while (st == SP_OK);
        assert_int_equal(sp_ring_consume(r, &v), SP_OK);
    }
    return n;
}

/*
 * Two rings given the same writes, laps of mixed sizes with cancelled
 * reservations (pads) and bits flipped anywhere in the data, one drained
 * a record at a time, the other in runs: the same records come out, and
 * the counters agree, round after round.
 */
static void
runs_read_what_single_reads_read(void **state)
{
    region_fx        fx[2];
    sp_ring         *r[2];
    sp_ring_counters c[2];
    seen             a[64], b[64];
    sp_ring_token    t;
    size_t           na, nb, len, k, off;
    uint32_t         tag = 0;
    unsigned         bit;
    int              round, i, n;

    (void)state;
    for (i = 0; i < 2; i++) {
        fx_open(&fx[i], 1, 8192, false);
        r[i] = sp_region_ring(fx[i].region, 0);
    }
    rng_state = 777;
    for (round = 0; round < 20000; round++) {
        n = 1 + (int)(rnd() % 8);
        for (k = 0; k < (size_t)n; k++) {
            len = (size_t)(rnd() % 600);
            if (rnd() % 16 == 0) {
                for (i = 0; i < 2; i++) {
                    if (sp_ring_reserve(r[i], SP_RECORD_SAMPLE, len, &t)) {
                        sp_ring_cancel(r[i], &t);
                    }
                }
                continue;
            }
            for (i = 0; i < 2; i++) {
                write_tagged(r[i], SP_RECORD_SAMPLE, len, tag);
            }
            tag++;
        }
        if (rnd() % 4 == 0) {
            off = (size_t)(rnd() % 8192);
            bit = (unsigned)(rnd() % 8);
            for (i = 0; i < 2; i++) {
                data_mem(&fx[i], 0)[off] ^= (unsigned char)(1u << bit);
            }
        }
        memset(a, 0, sizeof(a));    /* the padding too: compared whole */
        memset(b, 0, sizeof(b));
        na = drain_seen(&fx[0], r[0], false, a, 64);
        nb = drain_seen(&fx[1], r[1], true, b, 64);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof(a[0]));
        for (i = 0; i < 2; i++) {
            c[i] = stats(r[i]);
        }
        assert_int_equal(c[0].read, c[1].read);
        assert_int_equal(c[0].corrupt, c[1].corrupt);
        assert_int_equal(c[0].skipped_bytes, c[1].skipped_bytes);
        assert_int_equal(c[0].pending_bytes, c[1].pending_bytes);
        /* a flipped stamp looks uncommitted for good: the exporter skips
         * it once the writer is gone */
        for (i = 0; i < 2 && c[0].pending_bytes != 0; i++) {
            sp_ring_skip_pending(r[i]);
        }
    }
    /* the flips did their work: some records were damaged */
    assert_true(c[0].corrupt > 0);
    assert_true(c[0].read > 10000);
    for (i = 0; i < 2; i++) {
        fx_close(&fx[i]);
    }
}

static void
commit_publishes_only_the_used_length(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t;
    unsigned char   *p;
    sp_record_view   v;
    sp_ring_counters c;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    p = sp_ring_reserve(r, SP_RECORD_SAMPLE, 1000, &t);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p & 7, 0);
    fill(p, 1000, 9);
    sp_ring_commit(r, &t, 17);
    /* more than reserved is cut to what was reserved */
    p = sp_ring_reserve(r, SP_RECORD_SPAN, 40, &t);
    fill(p, 40, 10);
    sp_ring_commit(r, &t, 4000);
    assert_int_equal(write_tagged(r, SP_RECORD_OBJECTS, 5, 11), SP_OK);
    read_tagged(r, SP_RECORD_SAMPLE, 17, 9);
    read_tagged(r, SP_RECORD_SPAN, 40, 10);
    read_tagged(r, SP_RECORD_OBJECTS, 5, 11);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    c = stats(r);
    assert_int_equal(c.written, 3);
    assert_int_equal(c.read, 3);
    assert_int_equal(c.pending_bytes, 0);
    fx_close(&fx);
}

/*
 * The last reservation gives back what its commit did not use; one that
 * another was reserved after keeps its room (the reader skips it).
 */
static void
commit_gives_back_the_unused_room_of_the_last_reservation(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t, u;
    unsigned char   *p, *q;
    sp_ring_counters c;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    p = sp_ring_reserve(r, SP_RECORD_SPAN, 3000, &t);
    assert_non_null(p);
    fill(p, 21, 4);
    sp_ring_commit(r, &t, 21);
    assert_int_equal(stats(r).pending_bytes, HDR + 24);
    /* the room given back takes a second reservation of the same size */
    p = sp_ring_reserve(r, SP_RECORD_SPAN, 3000, &t);
    assert_non_null(p);
    q = sp_ring_reserve(r, SP_RECORD_SAMPLE, 40, &u);
    assert_non_null(q);
    fill(p, 16, 5);
    sp_ring_commit(r, &t, 16);
    fill(q, 40, 6);
    sp_ring_commit(r, &u, 40);
    assert_int_equal(stats(r).pending_bytes,
                     (HDR + 24) + (HDR + 3000) + (HDR + 40));
    read_tagged(r, SP_RECORD_SPAN, 21, 4);
    read_tagged(r, SP_RECORD_SPAN, 16, 5);
    read_tagged(r, SP_RECORD_SAMPLE, 40, 6);
    c = stats(r);
    assert_int_equal(c.read, 3);
    assert_int_equal(c.corrupt, 0);
    assert_int_equal(c.pending_bytes, 0);
    fx_close(&fx);
}

static void
cancelled_reservation_is_skipped(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t;
    sp_record_view   v;
    sp_ring_counters c;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_non_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 100, &t));
    assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 30, 3), SP_OK);
    /* the cancelled one is first: nothing readable until it is ended */
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    sp_ring_cancel(r, &t);
    read_tagged(r, SP_RECORD_SPAN, 30, 3);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    c = stats(r);
    assert_int_equal(c.written, 1);
    assert_int_equal(c.read, 1);
    assert_int_equal(c.corrupt, 0);
    assert_int_equal(c.pending_bytes, 0);
    fx_close(&fx);
}

static void
full_ring_drops_and_counts(void **state)
{
    region_fx      fx;
    sp_ring       *r;
    sp_ring_token  t;
    sp_record_view v;
    int            i, ok = 0;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    /* 104 bytes each with the header: 39 fit in 4096 */
    for (i = 0; i < 50; i++) {
        if (write_tagged(r, SP_RECORD_SAMPLE, 80, (uint32_t)i) == SP_OK) {
            assert_int_equal(i, ok);    /* no hole: drops come last */
            ok++;
        }
    }
    assert_int_equal(ok, 4096 / 104);
    assert_int_equal(stats(r).dropped_full, 50 - ok);
    assert_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 80, &t));
    assert_int_equal(stats(r).dropped_full, 50 - ok + 1);
    /* one read frees room for one more */
    read_tagged(r, SP_RECORD_SAMPLE, 80, 0);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 80, 99), SP_OK);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 80, 99),
                     SP_ERR_NOMEM);
    for (i = 1; i < ok; i++) {
        read_tagged(r, SP_RECORD_SAMPLE, 80, (uint32_t)i);
    }
    read_tagged(r, SP_RECORD_SAMPLE, 80, 99);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(stats(r).written, (uint64_t)ok + 1);
    assert_int_equal(stats(r).dropped_full, 50 - ok + 2);
    fx_close(&fx);
}

static void
a_record_larger_than_the_ring_is_dropped(void **state)
{
    region_fx     fx;
    sp_ring      *r;
    sp_ring_token t;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 4096 - HDR + 1, &t));
    assert_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, SIZE_MAX, &t));
    assert_int_equal(stats(r).dropped_full, 2);
    /* the largest body fits an empty ring at its start */
    assert_int_equal(write_tagged(r, SP_RECORD_OBJECTS, 4096 - HDR, 5),
                     SP_OK);
    read_tagged(r, SP_RECORD_OBJECTS, 4096 - HDR, 5);
    fx_close(&fx);
}

/*
 * A record that does not fit before the end starts again at the start of
 * the data: after a padding record when at least a header's worth remains
 * (24, 32 bytes), after nothing when less (8, 16 bytes).
 */
static void
records_wrap_with_padding(void **state)
{
    static const size_t rems[] = { 8, 16, 24, 32, 200 };
    region_fx           fx;
    sp_ring            *r;
    sp_record_view      v;
    sp_ring_counters    c;
    size_t              i;

    (void)state;
    for (i = 0; i < sizeof(rems) / sizeof(rems[0]); i++) {
        fx_open(&fx, 1, 4096, false);
        r = sp_region_ring(fx.region, 0);
        /* leave exactly rems[i] bytes before the end */
        assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE,
                                      4096 - rems[i] - HDR, 1), SP_OK);
        read_tagged(r, SP_RECORD_SAMPLE, 4096 - rems[i] - HDR, 1);
        assert_int_equal(write_tagged(r, SP_RECORD_SPAN, rems[i], 2), SP_OK);
        assert_int_equal(sp_ring_read(r, &v), SP_OK);
        assert_ptr_equal(v.body, data_mem(&fx, 0) + HDR);
        assert_int_equal(v.len, rems[i]);
        assert_true(filled(v.body, v.len, 2));
        assert_int_equal(sp_ring_consume(r, &v), SP_OK);
        assert_int_equal(get_u64(slot_mem(&fx, 0) + 128),
                         4096 + HDR + rems[i] + 7 - (rems[i] + 7) % 8);
        c = stats(r);
        assert_int_equal(c.read, 2);
        assert_int_equal(c.corrupt + c.skipped_bytes, 0);
        assert_int_equal(c.pending_bytes, 0);
        fx_close(&fx);
    }
}

/* Many laps of mixed sizes, a few records outstanding at a time. */
static void
many_laps_of_mixed_sizes_stay_intact(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_counters c;
    uint32_t         tag = 0, next = 0, n, k;
    size_t           len[8];
    int              round;

    (void)state;
    fx_open(&fx, 1, 8192, false);
    r = sp_region_ring(fx.region, 0);
    rng_state = 12345;
    for (round = 0; round < 20000; round++) {
        n = 1 + (uint32_t)(rnd() % 4);
        for (k = 0; k < n; k++) {
            len[k] = (size_t)(rnd() % 1500);
            assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, len[k],
                                          tag++), SP_OK);
        }
        for (k = 0; k < n; k++) {
            read_tagged(r, SP_RECORD_SAMPLE, len[k], next++);
        }
    }
    c = stats(r);
    assert_int_equal(c.written, tag);
    assert_int_equal(c.read, tag);
    assert_int_equal(c.dropped_full + c.corrupt + c.skipped_bytes, 0);
    fx_close(&fx);
}

static void
uncommitted_record_holds_back_the_reader(void **state)
{
    region_fx      fx;
    sp_ring       *r;
    sp_ring_token  t;
    unsigned char *p;
    sp_record_view v;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    p = sp_ring_reserve(r, SP_RECORD_SAMPLE, 64, &t);
    assert_non_null(p);
    assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 8, 2), SP_OK);
    fill(p, 64, 1);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(stats(r).corrupt, 0);
    sp_ring_commit(r, &t, 64);
    read_tagged(r, SP_RECORD_SAMPLE, 64, 1);
    read_tagged(r, SP_RECORD_SPAN, 8, 2);
    fx_close(&fx);
}

/*
 * What a signal handler does to the write it interrupts on its own thread:
 * reserves after it, commits first. Order in the ring is reservation
 * order.
 */
static void
nested_reservations_commit_in_any_order(void **state)
{
    region_fx      fx;
    sp_ring       *r;
    sp_ring_token  outer, inner;
    unsigned char *a, *b;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    a = sp_ring_reserve(r, SP_RECORD_SPAN, 100, &outer);
    b = sp_ring_reserve(r, SP_RECORD_SAMPLE, 300, &inner);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(b >= a + 100 || a >= b + 300);
    fill(b, 200, 2);
    sp_ring_commit(r, &inner, 200);
    fill(a, 100, 1);
    sp_ring_commit(r, &outer, 100);
    read_tagged(r, SP_RECORD_SPAN, 100, 1);
    read_tagged(r, SP_RECORD_SAMPLE, 200, 2);
    fx_close(&fx);
}

/* ---- damage */

static void
damaged_body_is_counted_and_skipped(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_record_view   v;
    sp_ring_counters c;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 40, 1), SP_OK);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 100, 2), SP_OK);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 40, 3), SP_OK);
    /* record 2 starts at 64 (24 + 40); flip one body bit */
    data_mem(&fx, 0)[64 + HDR + 77] ^= 0x10;
    read_tagged(r, SP_RECORD_SAMPLE, 40, 1);
    read_tagged(r, SP_RECORD_SAMPLE, 40, 3);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    c = stats(r);
    assert_int_equal(c.corrupt, 1);
    assert_int_equal(c.skipped_bytes, HDR + 104);
    assert_int_equal(c.read, 2);
    assert_int_equal(c.pending_bytes, 0);
    fx_close(&fx);
}

/*
 * Every single bit of what the check covers, flipped alone in a committed
 * record (the check itself, the lengths, type, flags and the body): the
 * record is counted corrupt and skipped, its neighbours come through.
 */
static void
every_bit_flip_in_a_record_is_caught(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_record_view   v;
    sp_ring_counters c;
    size_t           bit;

    (void)state;
    /* record 2 starts at 64 (24 + 40) and takes HDR + 104 bytes */
    for (bit = 8 * 8; bit < (HDR + 100) * 8; bit++) {
        fx_open(&fx, 1, 4096, false);
        r = sp_region_ring(fx.region, 0);
        assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 40, 1), SP_OK);
        assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 100, 2), SP_OK);
        assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 40, 3), SP_OK);
        data_mem(&fx, 0)[64 + bit / 8] ^= (unsigned char)(1u << bit % 8);
        read_tagged(r, SP_RECORD_SAMPLE, 40, 1);
        read_tagged(r, SP_RECORD_SAMPLE, 40, 3);
        assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
        c = stats(r);
        if (c.corrupt != 1 || c.skipped_bytes != HDR + 104 || c.read != 2) {
            fail_msg("bit %zu of the record: corrupt %llu skipped %llu", bit,
                     (unsigned long long)c.corrupt,
                     (unsigned long long)c.skipped_bytes);
        }
        fx_close(&fx);
    }
}

/* Header fields, each breaking one rule of the reader's. */
static const struct {
    uint32_t total, used;
    uint16_t type, flags;
} bad[] = {
    { 0x7ffffff8, 8, SP_RECORD_SAMPLE, 0 },     /* total past head */
    { 48 + 4096, 8, SP_RECORD_SAMPLE, 0 },      /* past the end */
    { 44, 8, SP_RECORD_SAMPLE, 0 },             /* not aligned */
    { 16, 0, SP_RECORD_SAMPLE, 0 },             /* under a header */
    { 48, 25, SP_RECORD_SAMPLE, 0 },            /* used > total - 24 */
    { 48, 8, 0, 0 },                            /* unknown types */
    { 48, 8, SP_RECORD_OBJECTS + 1, 0 },
    { 48, 8, 0x1234, 0 },
    { 48, 8, 0xffff, 0 },                       /* a pad with a body */
    { 48, 8, SP_RECORD_SAMPLE, 1 },             /* flags */
};

/*
 * Header rule i broken in the record of 48 bytes at `at` (0, or 32 after
 * a record read first, in a run when `run`): the reader counts it and
 * finds the next good record; sp_ring_read_next leaves it to sp_ring_read.
 */
static void
damaged_header_rule(size_t i, bool run)
{
    region_fx        fx;
    sp_ring         *r;
    sp_record_view   v;
    sp_ring_counters c;

    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    if (run) {
        assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 8, 0), SP_OK);
    }
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 24, 1), SP_OK);
    assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 16, 2), SP_OK);
    forge(data_mem(&fx, 0), 4096, run ? 32 : 0, bad[i].total, bad[i].used,
          bad[i].type, bad[i].flags);
    if (run) {
        assert_int_equal(sp_ring_read(r, &v), SP_OK);
        view_is(&v, SP_RECORD_SPAN, 8, 0);
        assert_int_not_equal(sp_ring_read_next(r, &v), SP_OK);
        assert_int_equal(sp_ring_consume(r, &v), SP_OK);
        assert_int_equal(stats(r).corrupt, 0);
    }
    read_tagged(r, SP_RECORD_SPAN, 16, 2);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    c = stats(r);
    assert_int_equal(c.corrupt, 1);
    assert_int_equal(c.skipped_bytes, 48);
    assert_int_equal(c.read, run ? 2 : 1);
    fx_close(&fx);
}

/*
 * Each header rule broken alone, with a checksum that matches what is
 * there, so that only the rule can catch it.
 */
static void
damaged_header_each_rule(void **state)
{
    region_fx fx;
    sp_ring  *r;
    size_t    i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        damaged_header_rule(i, false);
    }
    /* the forger itself is right: unchanged fields pass */
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 24, 1), SP_OK);
    forge(data_mem(&fx, 0), 4096, 0, 48, 24, SP_RECORD_SAMPLE, 0);
    read_tagged(r, SP_RECORD_SAMPLE, 24, 1);
    fx_close(&fx);
}

/* The same rules met in a run. */
static void
a_run_stops_at_each_damaged_header_rule(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        damaged_header_rule(i, true);
    }
}

static void
damaged_positions_are_repaired(void **state)
{
    static const uint64_t pos[][2] = {       /* head, tail */
        { 4, 0 },                   /* head not aligned */
        { 64, 3 },                  /* tail not aligned */
        { 8192, 0 },                /* more pending than the ring holds */
        { 0, 64 },                  /* tail past head */
        { 0xfffffffffffffff8ull, 0x10 },
    };
    region_fx        fx;
    sp_ring         *r;
    sp_record_view   v;
    sp_ring_token    t;
    sp_ring_counters c;
    size_t           i;

    (void)state;
    for (i = 0; i < sizeof(pos) / sizeof(pos[0]); i++) {
        fx_open(&fx, 1, 4096, false);
        r = sp_region_ring(fx.region, 0);
        set_u64(slot_mem(&fx, 0) + 64, pos[i][0]);
        set_u64(slot_mem(&fx, 0) + 128, pos[i][1]);
        /* writers drop rather than write where the positions point */
        assert_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 8, &t));
        assert_int_equal(stats(r).dropped_full, 1);
        assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
        c = stats(r);
        assert_int_equal(c.corrupt, 1);
        assert_true(c.skipped_bytes <= 4096);
        /* and the ring works again */
        assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 50, 7), SP_OK);
        read_tagged(r, SP_RECORD_SAMPLE, 50, 7);
        assert_int_equal(stats(r).corrupt, 1);
        fx_close(&fx);
    }
}

static bool
positions_sound(region_fx *fx)
{
    uint64_t head = get_u64(slot_mem(fx, 0) + 64);
    uint64_t tail = get_u64(slot_mem(fx, 0) + 128);

    return ((head | tail) & 7) == 0 && head - tail <= fx->ring_bytes;
}

/* Reads until nothing is left, checking what comes out is in bounds. */
static void
read_whatever_is_there(region_fx *fx, sp_ring *r)
{
    const unsigned char *data = data_mem(fx, 0);
    sp_record_view       v;
    sp_sample            s;
    sp_span_view         sp;
    sp_objects_record    o;
    int                  k;

    for (k = 0; k < 64; k++) {
        if (sp_ring_read(r, &v) != SP_OK) {
            continue;
        }
        assert_true((const unsigned char *)v.body >= data + HDR);
        assert_true((const unsigned char *)v.body + v.len
                    <= data + fx->ring_bytes);
        assert_true(v.type >= SP_RECORD_SAMPLE
                    && v.type <= SP_RECORD_OBJECTS);
        /* the decoders must survive it too */
        sp_sample_decode(v.body, v.len, &s);
        sp_span_decode(v.body, v.len, &sp);
        sp_objects_decode(v.body, v.len, &o);
        assert_int_equal(sp_ring_consume(r, &v), SP_OK);
    }
}

static void
random_ring_memory_is_survived(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t;
    sp_ring_counters before, after;
    unsigned char   *p, *data;
    uint64_t         tail;
    int              seed, k, moved = 0;
    bool             sound;

    (void)state;
    fx_open(&fx, 1, 4096, false);
    r = sp_region_ring(fx.region, 0);
    data = data_mem(&fx, 0);
    for (seed = 1; seed <= 500; seed++) {
        rng_state = 0x2545f4914f6cdd1dull * (uint64_t)seed;
        randomize(slot_mem(&fx, 0), SLOT_HEAD + 4096);
        if (seed % 2 == 0) {
            /*
             * Sound positions over random data, with committed stamps
             * planted at the tail and further on: the reader must check
             * every header it reaches.
             */
            tail = (rnd() & ~(uint64_t)7) % (1ull << 40);
            set_u64(slot_mem(&fx, 0) + 128, tail);
            set_u64(slot_mem(&fx, 0) + 64, tail + (rnd() % 513) * 8);
            for (k = 0; k < 8; k++) {
                forge(data, 4096, tail + (uint64_t)k * 8 * (rnd() % 64),
                      (uint32_t)rnd() & 0xff8, (uint32_t)(rnd() % 300),
                      (uint16_t)(1 + rnd() % 3), 0);
            }
            forge(data, 4096, tail, (uint32_t)rnd() & 0xfff8,
                  (uint32_t)(rnd() % 5000), (uint16_t)(rnd() % 4), 0);
        }
        sp_ring_stats(r, &before);
        sound = positions_sound(&fx);
        read_whatever_is_there(&fx, r);
        for (k = 0; k < 32; k++) {
            p = sp_ring_reserve(r, (uint16_t)(1 + k % 3), (size_t)k * 37,
                                &t);
            if (p != NULL) {
                assert_true(p >= data + HDR);
                assert_true(p + k * 37 <= data + 4096);
                memset(p, 0xab, (size_t)k * 37);
                sp_ring_commit(r, &t, (size_t)k * 37);
            }
        }
        read_whatever_is_there(&fx, r);
        sp_ring_stats(r, &after);
        if (!sound) {
            /* insane positions are always noticed */
            assert_true(after.corrupt > before.corrupt);
        }
        if (after.corrupt != before.corrupt
            || after.skipped_bytes != before.skipped_bytes)
        {
            moved++;
        }
        /* the exporter's last resort, then the ring works again */
        sp_ring_skip_pending(r);
        read_whatever_is_there(&fx, r);
        assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 33, 4), SP_OK);
        read_tagged(r, SP_RECORD_SPAN, 33, 4);
    }
    assert_true(moved > 400);
    fx_close(&fx);
}

/* The same region mapped twice: offsets, never pointers. */
static void
two_mappings_at_different_addresses(void **state)
{
    size_t         size = sp_region_size(2, 4096);
    int            fd = memfd_create("sp_ring_test", 0);
    void          *a, *b;
    sp_region     *ra, *rb;
    sp_record_view v;

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(a != MAP_FAILED && b != MAP_FAILED && a != b);
    assert_int_equal(sp_region_init(a, size, 2, 4096), SP_OK);
    assert_int_equal(sp_region_attach(a, size, &ra), SP_OK);
    assert_int_equal(sp_region_attach(b, size, &rb), SP_OK);
    assert_int_equal(write_tagged(sp_region_ring(ra, 1), SP_RECORD_SAMPLE,
                                  99, 5), SP_OK);
    assert_int_equal(sp_ring_read(sp_region_ring(rb, 1), &v), SP_OK);
    assert_true((const char *)v.body > (const char *)b
                && (const char *)v.body < (const char *)b + size);
    read_tagged(sp_region_ring(rb, 1), SP_RECORD_SAMPLE, 99, 5);
    assert_int_equal(stats(sp_region_ring(ra, 1)).read, 1);
    sp_region_detach(ra);
    sp_region_detach(rb);
    munmap(a, size);
    munmap(b, size);
    close(fd);
}

/* ---- concurrency: threads and signal handlers against one reader */

#define CW_THREADS      4
#define CW_IDS          (2 * CW_THREADS)  /* each thread, each handler */
#define CW_MAX_LEN      600

static sp_ring             *cw_ring;
static atomic_bool          cw_stop, cw_done;
static atomic_ulong         cw_mid_write;
static _Thread_local int    cw_thread = -1;
static _Thread_local volatile sig_atomic_t cw_in_write;
/* each written by its thread or that thread's handler only */
static uint64_t             cw_attempts[CW_IDS], cw_drops[CW_IDS];
/* the consumer's */
static uint64_t             cw_next[CW_IDS], cw_reads[CW_IDS];
static uint64_t             cw_gaps[CW_IDS], cw_bad;
static _Thread_local volatile int cw_spin;

static size_t
cw_len(uint32_t id, uint64_t seq)
{
    return 8 + (size_t)((seq * 37 + id * 11) % (CW_MAX_LEN - 8));
}

static void
cw_fill(volatile unsigned char *p, size_t len, uint32_t id, uint64_t seq)
{
    uint32_t s = (uint32_t)seq;
    size_t   i;

    memcpy((unsigned char *)p, &id, 4);
    memcpy((unsigned char *)p + 4, &s, 4);
    /* byte by byte: a long window for the handler to land in */
    for (i = 8; i < len; i++) {
        p[i] = (unsigned char)(id * 29 + seq * 13 + i);
    }
}

static void
cw_handler(int sig)
{
    int            saved = errno;
    uint32_t       id;
    uint64_t       seq;
    size_t         len;
    sp_ring_token  t;
    unsigned char *p;

    (void)sig;
    if (cw_thread >= 0) {
        id = (uint32_t)(CW_THREADS + cw_thread);
        if (cw_in_write) {
            atomic_fetch_add_explicit(&cw_mid_write, 1,
                                      memory_order_relaxed);
        }
        seq = cw_attempts[id]++;
        len = cw_len(id, seq);
        /* reserve for the most, commit what was produced */
        p = sp_ring_reserve(cw_ring, SP_RECORD_SAMPLE, CW_MAX_LEN, &t);
        if (p == NULL) {
            cw_drops[id]++;
        } else {
            cw_fill(p, len, id, seq);
            sp_ring_commit(cw_ring, &t, len);
        }
    }
    errno = saved;
}

static void *
cw_writer(void *arg)
{
    uint32_t          id = (uint32_t)(uintptr_t)arg;
    struct sigevent   sev;
    struct itimerspec its;
    timer_t           timer;
    uint64_t          seq;
    size_t            len;
    sp_ring_token     t;
    unsigned char    *p;
    int               spin;
    struct timespec   nap = { 0, 50000 };

    cw_thread = (int)id;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = gettid();
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) {
        return (void *)1;
    }
    memset(&its, 0, sizeof(its));
    its.it_interval.tv_nsec = 40000 + 5000 * id;
    its.it_value.tv_nsec = its.it_interval.tv_nsec;
    timer_settime(timer, 0, &its, NULL);

    while (!atomic_load(&cw_stop)) {
        seq = cw_attempts[id]++;
        len = cw_len(id, seq);
        p = sp_ring_reserve(cw_ring, SP_RECORD_SPAN, len, &t);
        if (p == NULL) {
            cw_drops[id]++;
        } else {
            cw_in_write = 1;
            cw_fill(p, len, id, seq);
            cw_in_write = 0;
            sp_ring_commit(cw_ring, &t, len);
        }
        /*
         * A worker does other things between records, and sleeps now and
         * then: with more runnable threads than CPUs, a writer preempted
         * between reserve and commit would hold the reader back for a
         * whole time slice and the test would mostly count drops.
         */
        for (spin = 0; spin < 500; spin++) {
            cw_spin++;
        }
        if (seq % 64 == 0) {
            nanosleep(&nap, NULL);
        }
    }
    timer_delete(timer);
    return NULL;
}

static bool
cw_check(const sp_record_view *v)
{
    const unsigned char *p = v->body;
    uint32_t             id, s;
    uint64_t             seq;
    size_t               i;

    if (v->len < 8) {
        return false;
    }
    memcpy(&id, p, 4);
    memcpy(&s, p + 4, 4);
    if (id >= CW_IDS || s < (uint32_t)cw_next[id]) {
        return false;
    }
    seq = s;
    if (v->len != cw_len(id, seq)
        || v->type != (id < CW_THREADS ? SP_RECORD_SPAN : SP_RECORD_SAMPLE))
    {
        return false;
    }
    for (i = 8; i < v->len; i++) {
        if (p[i] != (unsigned char)(id * 29 + seq * 13 + i)) {
            return false;
        }
    }
    cw_gaps[id] += seq - cw_next[id];
    cw_next[id] = seq + 1;
    cw_reads[id]++;
    return true;
}

static void *
cw_consumer(void *arg)
{
    sp_record_view  v;
    uint64_t        n = 0;
    struct timespec nap = { 0, 2000000 };

    (void)arg;
    for (;;) {
        if (sp_ring_read(cw_ring, &v) != SP_OK) {
            if (atomic_load(&cw_done)) {
                break;
            }
            sched_yield();
            continue;
        }
        if (!cw_check(&v)) {
            cw_bad++;
        }
        sp_ring_consume(cw_ring, &v);
        /* now and then fall behind, so the ring fills and writers drop */
        if (++n % 20000 == 0) {
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

static void
concurrent_threads_and_signal_handlers(void **state)
{
    region_fx        fx;
    pthread_t        writers[CW_THREADS], consumer;
    struct sigaction sa, old;
    struct timespec  run = { 1, 0 };
    sp_ring_counters c;
    uint64_t         reads = 0, drops = 0, attempts = 0;
    uint64_t         handler_reads = 0;
    void            *rc;
    uint32_t         i;

    (void)state;
    fx_open(&fx, 1, 65536, true);
    cw_ring = sp_region_claim(fx.region, (uint32_t)getpid());
    assert_non_null(cw_ring);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cw_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &sa, &old), 0);

    assert_int_equal(pthread_create(&consumer, NULL, cw_consumer, NULL), 0);
    for (i = 0; i < CW_THREADS; i++) {
        assert_int_equal(pthread_create(&writers[i], NULL, cw_writer,
                                        (void *)(uintptr_t)i), 0);
    }
    nanosleep(&run, NULL);
    atomic_store(&cw_stop, true);
    for (i = 0; i < CW_THREADS; i++) {
        assert_int_equal(pthread_join(writers[i], &rc), 0);
        assert_null(rc);
    }
    atomic_store(&cw_done, true);
    assert_int_equal(pthread_join(consumer, NULL), 0);
    sigaction(SIGPROF, &old, NULL);

    c = stats(cw_ring);
    assert_int_equal(cw_bad, 0);
    for (i = 0; i < CW_IDS; i++) {
        /* every attempt was read intact or counted as dropped */
        assert_int_equal(cw_reads[i] + cw_drops[i], cw_attempts[i]);
        assert_int_equal(cw_gaps[i] + (cw_attempts[i] - cw_next[i]),
                         cw_drops[i]);
        assert_true(cw_reads[i] > 0);
        reads += cw_reads[i];
        drops += cw_drops[i];
        attempts += cw_attempts[i];
    }
    assert_int_equal(c.written, reads);
    assert_int_equal(c.read, reads);
    assert_int_equal(c.dropped_full, drops);
    assert_int_equal(c.corrupt, 0);
    assert_int_equal(c.skipped_bytes, 0);
    assert_int_equal(c.pending_bytes, 0);
    /* the test did what it is for */
    assert_true(drops > 0);
    assert_true(atomic_load(&cw_mid_write) > 0);
    for (i = CW_THREADS; i < CW_IDS; i++) {
        handler_reads += cw_reads[i];
    }
    print_message("%llu attempts, %llu read (%llu from handlers), "
                  "%llu dropped, %lu handler writes inside a thread's "
                  "write\n",
                  (unsigned long long)attempts, (unsigned long long)reads,
                  (unsigned long long)handler_reads,
                  (unsigned long long)drops,
                  (unsigned long)atomic_load(&cw_mid_write));
    sp_region_release(cw_ring);
    fx_close(&fx);
}

/* ---- slots: claim, release, reclaim */

static void
claim_is_by_pid_and_idempotent(void **state)
{
    region_fx fx;
    sp_ring  *mine, *theirs;
    pid_t     child = spawn_sleeper(), other = spawn_sleeper();
    uint32_t  me = (uint32_t)getpid();

    (void)state;
    fx_open(&fx, 2, 4096, true);
    assert_null(sp_region_claim(fx.region, 0));
    mine = sp_region_claim(fx.region, me);
    assert_non_null(mine);
    assert_ptr_equal(sp_region_claim(fx.region, me), mine);
    assert_int_equal(sp_ring_owner(mine), me);
    theirs = sp_region_claim(fx.region, (uint32_t)child);
    assert_non_null(theirs);
    assert_ptr_not_equal(theirs, mine);
    assert_int_equal(stats(theirs).owner, (uint32_t)child);
    /* both slots held by live processes */
    assert_null(sp_region_claim(fx.region, (uint32_t)other));
    /* released: the next one takes it */
    sp_region_release(mine);
    assert_int_equal(sp_ring_owner(mine), 0);
    assert_ptr_equal(sp_region_claim(fx.region, (uint32_t)other), mine);
    assert_int_equal(sp_ring_owner(mine), (uint32_t)other);
    end_child(child);
    end_child(other);
    fx_close(&fx);
}

/*
 * The exporter visits only the slots it saw in use and looks at the others
 * again when this count moves: every claim that takes a slot must move it,
 * and nothing else need.
 */
static void
every_claim_that_takes_a_slot_is_counted(void **state)
{
    region_fx fx;
    sp_ring  *mine, *theirs;
    pid_t     child = spawn_sleeper(), other = spawn_sleeper();
    uint32_t  me = (uint32_t)getpid();

    (void)state;
    fx_open(&fx, 2, 4096, true);
    assert_int_equal(sp_region_claims(fx.region), 0);
    mine = sp_region_claim(fx.region, me);
    assert_int_equal(sp_region_claims(fx.region), 1);
    /* already ours: no slot taken */
    assert_ptr_equal(sp_region_claim(fx.region, me), mine);
    assert_int_equal(sp_region_claims(fx.region), 1);
    theirs = sp_region_claim(fx.region, (uint32_t)child);
    assert_non_null(theirs);
    assert_int_equal(sp_region_claims(fx.region), 2);
    /* every slot taken: nothing claimed, nothing counted */
    assert_null(sp_region_claim(fx.region, (uint32_t)other));
    assert_int_equal(sp_region_claims(fx.region), 2);
    /* a released slot taken again */
    sp_region_release(mine);
    assert_int_equal(sp_region_claims(fx.region), 2);
    assert_ptr_equal(sp_region_claim(fx.region, (uint32_t)other), mine);
    assert_int_equal(sp_region_claims(fx.region), 3);
    /* a dead owner's drained slot taken over */
    end_child(child);
    assert_ptr_equal(sp_region_claim(fx.region, me), theirs);
    assert_int_equal(sp_region_claims(fx.region), 4);
    /* a region laid out again starts from zero */
    assert_int_equal(sp_region_init(fx.mem, fx.size, 2, 4096), SP_OK);
    assert_int_equal(sp_region_claims(fx.region), 0);
    end_child(other);
    fx_close(&fx);
}

static void
dead_owner_slot_is_reclaimed_only_when_drained(void **state)
{
    region_fx      fx;
    sp_ring       *r;
    pid_t          child = spawn_sleeper();
    uint32_t       me = (uint32_t)getpid();
    sp_record_view v;

    (void)state;
    fx_open(&fx, 1, 4096, true);
    r = sp_region_claim(fx.region, (uint32_t)child);
    assert_non_null(r);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 20, 1), SP_OK);
    /* alive: not ours to take, nor the exporter's to reset */
    assert_null(sp_region_claim(fx.region, me));
    assert_int_equal(sp_ring_reset_if_abandoned(r, (uint32_t)getpid()), SP_ERR_NOT_FOUND);
    end_child(child);
    /* dead, but its record is unread */
    assert_null(sp_region_claim(fx.region, me));
    assert_int_equal(sp_ring_reset_if_abandoned(r, (uint32_t)getpid()), SP_ERR_INVALID);
    assert_int_equal(stats(r).skipped_bytes, 0);
    read_tagged(r, SP_RECORD_SAMPLE, 20, 1);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    /* drained: a worker may take it over */
    assert_ptr_equal(sp_region_claim(fx.region, me), r);
    assert_int_equal(sp_ring_owner(r), me);
    assert_int_equal(stats(r).written, 1);
    fx_close(&fx);
}

static void
exporter_resets_what_a_dead_owner_left_uncommitted(void **state)
{
    region_fx        fx;
    sp_ring         *r;
    sp_ring_token    t;
    pid_t            child = spawn_sleeper();
    sp_record_view   v;
    sp_ring_counters c;

    (void)state;
    fx_open(&fx, 1, 4096, true);
    r = sp_region_claim(fx.region, (uint32_t)child);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 20, 1), SP_OK);
    /* it dies between reserve and commit */
    assert_non_null(sp_ring_reserve(r, SP_RECORD_SAMPLE, 100, &t));
    assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 20, 2), SP_OK);
    end_child(child);
    read_tagged(r, SP_RECORD_SAMPLE, 20, 1);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    assert_null(sp_region_claim(fx.region, (uint32_t)getpid()));
    assert_int_equal(sp_ring_reset_if_abandoned(r, (uint32_t)getpid()), SP_OK);
    c = stats(r);
    assert_int_equal(c.skipped_bytes, (HDR + 104) + (HDR + 24));
    assert_int_equal(c.pending_bytes, 0);
    assert_int_equal(c.owner, 0);
    assert_int_equal(c.corrupt, 0);
    assert_int_equal(sp_ring_reset_if_abandoned(r, (uint32_t)getpid()), SP_ERR_NOT_FOUND);
    assert_ptr_equal(sp_region_claim(fx.region, (uint32_t)getpid()), r);
    assert_int_equal(write_tagged(r, SP_RECORD_SPAN, 20, 3), SP_OK);
    read_tagged(r, SP_RECORD_SPAN, 20, 3);
    fx_close(&fx);
}

/*
 * A prefork child exits from its signal handler, which can run between a
 * reserve and its commit: the slot is released with a record that will
 * never be committed. The exporter resets it, holding it meanwhile, and
 * the next owner's records are read; before, they waited behind the
 * unfinished one until the ring was full.
 */
static void
exporter_resets_a_released_slot_left_with_an_uncommitted_record(
    void **state)
{
    region_fx        fx;
    sp_ring         *r, *next;
    sp_ring_token    t;
    sp_record_view   v;
    sp_ring_counters c;
    uint32_t         me = (uint32_t)getpid();

    (void)state;
    fx_open(&fx, 1, 4096, true);
    r = sp_region_claim(fx.region, me);
    assert_non_null(r);
    assert_int_equal(write_tagged(r, SP_RECORD_SAMPLE, 20, 1), SP_OK);
    assert_non_null(sp_ring_reserve(r, SP_RECORD_SPAN, 100, &t));
    sp_region_release(r);
    /* free and empty rings, and committed records, come first */
    assert_int_equal(sp_ring_reset_if_abandoned(r, me), SP_ERR_INVALID);
    assert_int_equal(sp_ring_owner(r), 0);
    read_tagged(r, SP_RECORD_SAMPLE, 20, 1);
    assert_int_equal(sp_ring_read(r, &v), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_ring_reset_if_abandoned(r, me), SP_OK);
    c = stats(r);
    assert_int_equal(c.skipped_bytes, HDR + 104);
    assert_int_equal(c.pending_bytes, 0);
    assert_int_equal(c.owner, 0);
    assert_int_equal(sp_ring_reset_if_abandoned(r, me), SP_ERR_NOT_FOUND);
    /* the next owner's record is read at once */
    next = sp_region_claim(fx.region, me);
    assert_ptr_equal(next, r);
    assert_int_equal(write_tagged(next, SP_RECORD_SPAN, 20, 2), SP_OK);
    read_tagged(next, SP_RECORD_SPAN, 20, 2);
    /* a slot a live owner holds is never reset, pending or not */
    assert_non_null(sp_ring_reserve(next, SP_RECORD_SPAN, 100, &t));
    assert_int_equal(sp_ring_reset_if_abandoned(next, me), SP_ERR_NOT_FOUND);
    assert_int_equal(stats(next).pending_bytes, HDR + 104);
    fx_close(&fx);
}

static bool
is_zombie(pid_t pid)
{
    char  path[64], buf[512], *p;
    FILE *f;
    bool  z = false;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return false;
    }
    if (fgets(buf, sizeof(buf), f) != NULL) {
        p = strrchr(buf, ')');
        z = p != NULL && p[1] == ' ' && p[2] == 'Z';
    }
    fclose(f);
    return z;
}

static void
zombies_and_reused_pids_are_dead(void **state)
{
    region_fx fx;
    sp_ring  *r;
    pid_t     child;
    uint32_t  me = (uint32_t)getpid();
    int       i;

    (void)state;
    fx_open(&fx, 1, 4096, true);

    /* a child that exited and was not reaped yet */
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        _exit(0);
    }
    for (i = 0; i < 2000 && !is_zombie(child); i++) {
        usleep(1000);
    }
    assert_true(is_zombie(child));
    assert_non_null(sp_region_claim(fx.region, (uint32_t)child));
    r = sp_region_claim(fx.region, me);
    assert_non_null(r);
    assert_int_equal(sp_ring_owner(r), me);
    waitpid(child, NULL, 0);

    /*
     * The slot says our pid, but with another start time: an earlier
     * process that had our pid. It is dead, and the slot is ours to take.
     */
    set_u64(slot_mem(&fx, 0), (uint64_t)me | (uint64_t)0xdeadbeef << 32);
    assert_int_equal(sp_ring_reset_if_abandoned(r, me), SP_OK);
    set_u64(slot_mem(&fx, 0), (uint64_t)me | (uint64_t)0xdeadbeef << 32);
    assert_ptr_equal(sp_region_claim(fx.region, me), r);
    assert_true(get_u64(slot_mem(&fx, 0)) >> 32 != 0xdeadbeef);

    /* garbage in the owner word is no owner */
    set_u64(slot_mem(&fx, 0), 0xffffffffull);
    assert_ptr_equal(sp_region_claim(fx.region, me), r);
    fx_close(&fx);
}

static void
concurrent_claims_get_distinct_slots(void **state)
{
    enum { SLOTS = 6, KIDS = 9 };
    region_fx fx;
    pid_t     kids[KIDS];
    int       go[2], res[2], i, j, got[KIDS], taken = 0;
    char      c = 'g';
    sp_ring  *r;

    (void)state;
    fx_open(&fx, SLOTS, 4096, true);
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    for (i = 0; i < KIDS; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            int idx = -1;

            close(go[1]);
            if (read(go[0], &c, 1) != 1) {
                _exit(1);
            }
            r = sp_region_claim(fx.region, (uint32_t)getpid());
            for (j = 0; j < SLOTS; j++) {
                if (r == sp_region_ring(fx.region, (uint32_t)j)) {
                    idx = j;
                }
            }
            if (write(res[1], &idx, sizeof(idx)) != sizeof(idx)) {
                _exit(1);
            }
            for (;;) {
                pause();
            }
        }
    }
    close(go[0]);
    /* all at once */
    for (i = 0; i < KIDS; i++) {
        assert_int_equal(write(go[1], &c, 1), 1);
    }
    for (i = 0; i < KIDS; i++) {
        assert_int_equal(read(res[0], &got[i], sizeof(got[i])),
                         sizeof(got[i]));
    }
    for (i = 0; i < KIDS; i++) {
        if (got[i] >= 0) {
            taken++;
            for (j = 0; j < i; j++) {
                assert_int_not_equal(got[i], got[j]);
            }
        }
    }
    assert_int_equal(taken, SLOTS);
    for (i = 0; i < KIDS; i++) {
        end_child(kids[i]);
    }
    close(go[1]);
    close(res[0]);
    close(res[1]);
    fx_close(&fx);
}

static void
one_reader_per_region(void **state)
{
    region_fx fx;
    pid_t     child = spawn_sleeper();
    uint32_t  me = (uint32_t)getpid();

    (void)state;
    fx_open(&fx, 1, 4096, true);
    assert_int_equal(sp_region_claim_reader(fx.region, me), SP_OK);
    assert_int_equal(sp_region_claim_reader(fx.region, me), SP_OK);
    assert_int_equal(sp_region_claim_reader(fx.region, (uint32_t)child),
                     SP_ERR_NOT_FOUND);
    sp_region_release_reader(fx.region, (uint32_t)child);  /* not its */
    assert_int_equal(sp_region_claim_reader(fx.region, (uint32_t)child),
                     SP_ERR_NOT_FOUND);
    sp_region_release_reader(fx.region, me);
    assert_int_equal(sp_region_claim_reader(fx.region, (uint32_t)child),
                     SP_OK);
    assert_int_equal(sp_region_claim_reader(fx.region, me),
                     SP_ERR_NOT_FOUND);
    end_child(child);
    assert_int_equal(sp_region_claim_reader(fx.region, me), SP_OK);
    assert_int_equal(sp_region_claim_reader(fx.region, 0), SP_ERR_INVALID);
    fx_close(&fx);
}

/* A reader that waits says so; the reader sees it while the waiter lives,
 * not its own wish, and taking the region clears it. */
static void
a_waiting_reader_is_seen(void **state)
{
    region_fx fx;
    pid_t     child = spawn_sleeper();
    uint32_t  me = (uint32_t)getpid();

    (void)state;
    fx_open(&fx, 1, 4096, true);
    assert_int_equal(sp_region_claim_reader(fx.region, me), SP_OK);
    assert_false(sp_region_reader_wanted(fx.region, me));
    sp_region_want_reader(fx.region, (uint32_t)child);
    assert_true(sp_region_reader_wanted(fx.region, me));
    assert_false(sp_region_reader_wanted(fx.region, (uint32_t)child));
    sp_region_release_reader(fx.region, me);
    assert_int_equal(sp_region_claim_reader(fx.region, (uint32_t)child),
                     SP_OK);
    assert_false(sp_region_reader_wanted(fx.region, me));

    /* a waiter that died is no reason to hand over */
    sp_region_want_reader(fx.region, me);
    assert_true(sp_region_reader_wanted(fx.region, (uint32_t)child));
    end_child(child);
    sp_region_want_reader(fx.region, (uint32_t)child);
    assert_false(sp_region_reader_wanted(fx.region, me));
    fx_close(&fx);
}

/* Writers alive: a slot owned by a live process; none once released or
 * once its owner died. */
static void
writers_alive_follows_the_owners(void **state)
{
    region_fx fx;
    sp_ring  *r;

    (void)state;
    fx_open(&fx, 2, 4096, true);
    assert_false(sp_region_writers_alive(fx.region));
    r = sp_region_claim(fx.region, (uint32_t)getpid());
    assert_non_null(r);
    assert_true(sp_region_writers_alive(fx.region));
    sp_region_release(r);
    assert_false(sp_region_writers_alive(fx.region));
    fx_close(&fx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(region_size_follows_its_limits),
        cmocka_unit_test(init_and_attach_check_their_arguments),
        cmocka_unit_test(attach_rejects_each_bad_header_field),
        cmocka_unit_test(layout_is_read_from_any_region_with_the_magic),
        cmocka_unit_test(attach_survives_random_headers),
        cmocka_unit_test(records_come_out_in_order_and_intact),
        cmocka_unit_test(bad_types_are_refused_and_not_counted),
        cmocka_unit_test(consume_takes_only_the_next_record),
        cmocka_unit_test(a_run_holds_its_records_until_consumed),
        cmocka_unit_test(runs_read_what_single_reads_read),
        cmocka_unit_test(commit_publishes_only_the_used_length),
        cmocka_unit_test(
            commit_gives_back_the_unused_room_of_the_last_reservation),
        cmocka_unit_test(cancelled_reservation_is_skipped),
        cmocka_unit_test(full_ring_drops_and_counts),
        cmocka_unit_test(a_record_larger_than_the_ring_is_dropped),
        cmocka_unit_test(records_wrap_with_padding),
        cmocka_unit_test(many_laps_of_mixed_sizes_stay_intact),
        cmocka_unit_test(uncommitted_record_holds_back_the_reader),
        cmocka_unit_test(nested_reservations_commit_in_any_order),
        cmocka_unit_test(damaged_body_is_counted_and_skipped),
        cmocka_unit_test(every_bit_flip_in_a_record_is_caught),
        cmocka_unit_test(damaged_header_each_rule),
        cmocka_unit_test(a_run_stops_at_each_damaged_header_rule),
        cmocka_unit_test(damaged_positions_are_repaired),
        cmocka_unit_test(random_ring_memory_is_survived),
        cmocka_unit_test(two_mappings_at_different_addresses),
        cmocka_unit_test(concurrent_threads_and_signal_handlers),
        cmocka_unit_test(claim_is_by_pid_and_idempotent),
        cmocka_unit_test(every_claim_that_takes_a_slot_is_counted),
        cmocka_unit_test(dead_owner_slot_is_reclaimed_only_when_drained),
        cmocka_unit_test(exporter_resets_what_a_dead_owner_left_uncommitted),
        cmocka_unit_test(
            exporter_resets_a_released_slot_left_with_an_uncommitted_record),
        cmocka_unit_test(zombies_and_reused_pids_are_dead),
        cmocka_unit_test(concurrent_claims_get_distinct_slots),
        cmocka_unit_test(one_reader_per_region),
        cmocka_unit_test(a_waiting_reader_is_seen),
        cmocka_unit_test(writers_alive_follows_the_owners),
    };

    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
