/*
 * Fuzzes the ring reader (sp_ring.h) over shared memory whose bytes come
 * from the fuzzer, and region attach over a fuzzed header.
 *
 * Input: one mode byte, then the bytes laid over slot 0 (its 192-byte
 * header, then its 4096 bytes of data; the layout is in sp_ring.c).
 *   mode & 3 == 3: the bytes are laid over the region header instead, and
 *                  attach must refuse it or give a region that works;
 *   mode & 1:      the positions are made sound (tail from the input,
 *                  head = tail + a multiple of 8 up to the ring's size),
 *                  so that the reader gets past them to the records;
 *   mode & 4:      writers run between reads;
 *   mode & 8:      the exporter's dead-owner reset runs too;
 *   mode & 16:     writers run first, before the reader has seen the
 *                  ring (they must refuse positions that make no sense);
 *   mode & 32:     the reader reads in runs (sp_ring_read_next), freeing
 *                  each run with one consume, as the exporter does.
 * Invariants beyond "no crash, nothing touched outside the region" (it is
 * malloc'd, so ASan sees any access past it):
 * - a record read lies inside the ring's data, with a known type, and the
 *   decoders survive its body;
 * - the read counter moves by exactly the records consumed, and a run
 *   holds no more than the ring;
 * - a reservation lies inside the data;
 * - after sp_ring_skip_pending the ring works: a record written is read
 *   back intact.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sp_ring.h"

#define RING_BYTES  4096
#define SLOTS       2
#define REGION_HEAD 128
#define SLOT_HEAD   192

static const unsigned char *data_lo, *data_hi;
static bool                 runs;

static void
check_view(const sp_record_view *v)
{
    sp_sample         s;
    sp_span_view      sp;
    sp_objects_record o;

    if ((const unsigned char *)v->body < data_lo + SP_RING_HEADER_SIZE
        || (const unsigned char *)v->body > data_hi
        || v->len > (size_t)(data_hi - (const unsigned char *)v->body)
        || ((uintptr_t)v->body & 7) != 0
        || v->type < SP_RECORD_SAMPLE || v->type > SP_RECORD_OBJECTS
        || sp_record_ring_bytes(v) > (size_t)(data_hi - data_lo))
    {
        abort();
    }
    sp_sample_decode(v->body, v->len, &s);
    sp_span_decode(v->body, v->len, &sp);
    sp_objects_decode(v->body, v->len, &o);
}

static void
drain(sp_ring *r, int max)
{
    sp_record_view    v;
    sp_ring_counters  before, after;
    uint64_t          consumed = 0, held;
    int               i;

    sp_ring_stats(r, &before);
    for (i = 0; i < max; i++) {
        if (sp_ring_read(r, &v) != SP_OK) {
            continue;
        }
        check_view(&v);
        for (held = 1; runs && i < max && sp_ring_read_next(r, &v) == SP_OK;
             held++, i++)
        {
            check_view(&v);
        }
        if (sp_ring_consume(r, &v) != SP_OK) {
            abort();
        }
        consumed += held;
    }
    sp_ring_stats(r, &after);
    if (after.read - before.read != consumed) {
        abort();
    }
}

static void
write_some(sp_ring *r, const uint8_t *data, size_t size)
{
    sp_ring_token  t;
    unsigned char *p;
    size_t         i, len;

    for (i = 0; i < 4 && i < size; i++) {
        len = (size_t)data[i] * 9;
        p = sp_ring_reserve(r, (uint16_t)(1 + data[i] % 3), len, &t);
        if (p == NULL) {
            continue;
        }
        if (p < data_lo + SP_RING_HEADER_SIZE || p > data_hi
            || len > (size_t)(data_hi - p))
        {
            abort();
        }
        memset(p, (int)i, len);
        if (data[i] & 1) {
            sp_ring_cancel(r, &t);
        } else {
            sp_ring_commit(r, &t, len / 2);
        }
    }
}

/* Whatever state the ring is in, the exporter can get it back. */
static void
recover(sp_ring *r)
{
    static const char msg[] = "ring works again";
    sp_record_view    v;

    sp_ring_skip_pending(r);
    sp_ring_skip_pending(r);    /* the first may only repair positions */
    if (sp_ring_write(r, SP_RECORD_SPAN, msg, sizeof(msg)) != SP_OK
        || sp_ring_read(r, &v) != SP_OK || v.type != SP_RECORD_SPAN
        || v.len != sizeof(msg) || memcmp(v.body, msg, sizeof(msg)) != 0
        || sp_ring_consume(r, &v) != SP_OK
        || sp_ring_read(r, &v) != SP_ERR_NOT_FOUND)
    {
        abort();
    }
}

static void
fuzz_header(unsigned char *mem, size_t size, const uint8_t *data,
    size_t len)
{
    sp_region *region;
    sp_ring   *r;
    uint32_t   i;

    memcpy(mem, data, len < REGION_HEAD ? len : REGION_HEAD);
    if (sp_region_attach(mem, size, &region) != SP_OK) {
        return;
    }
    /* it passed every check: it must describe memory we have */
    if (sp_region_slot_count(region) > SLOTS
        || sp_region_size(sp_region_slot_count(region),
                          sp_region_ring_bytes(region)) > size)
    {
        abort();
    }
    for (i = 0; i < sp_region_slot_count(region); i++) {
        r = sp_region_ring(region, i);
        data_lo = mem + REGION_HEAD
                  + i * (SLOT_HEAD + sp_region_ring_bytes(region))
                  + SLOT_HEAD;
        data_hi = data_lo + sp_region_ring_bytes(region);
        drain(r, 8);
        recover(r);
    }
    sp_region_detach(region);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t         rsize = sp_region_size(SLOTS, RING_BYTES), n;
    unsigned char *mem, *slot;
    sp_region     *region;
    sp_ring       *r;
    uint8_t        mode;
    uint64_t       tail, head;

    if (size < 1) {
        return 0;
    }
    mode = data[0];
    runs = (mode & 32) != 0;
    data++;
    size--;
    if (posix_memalign((void **)&mem, 64, rsize) != 0) {
        return 0;
    }
    memset(mem, 0, rsize);     /* deterministic runs */
    if (sp_region_init(mem, rsize, SLOTS, RING_BYTES) != SP_OK) {
        abort();
    }
    if ((mode & 3) == 3) {
        fuzz_header(mem, rsize, data, size);
        free(mem);
        return 0;
    }
    if (sp_region_attach(mem, rsize, &region) != SP_OK) {
        abort();
    }
    slot = mem + REGION_HEAD;
    n = size < SLOT_HEAD + RING_BYTES ? size : SLOT_HEAD + RING_BYTES;
    memcpy(slot, data, n);
    if (mode & 1) {
        memcpy(&tail, slot + 128, 8);
        tail &= ~(uint64_t)7;
        memcpy(&head, slot + 64, 8);
        head = tail + (head % (RING_BYTES / 8 + 1)) * 8;
        memcpy(slot + 64, &head, 8);
        memcpy(slot + 128, &tail, 8);
    }
    data_lo = slot + SLOT_HEAD;
    data_hi = data_lo + RING_BYTES;
    r = sp_region_ring(region, 0);

    if (mode & 16) {
        write_some(r, data, size);
    }
    drain(r, 64);
    if (mode & 4) {
        write_some(r, data, size);
        drain(r, 64);
        write_some(r, data + (size > 4 ? 4 : size), size > 4 ? size - 4 : 0);
        drain(r, 64);
    }
    if (mode & 8) {
        sp_ring_reset_if_abandoned(r, (uint32_t)getpid());
        drain(r, 8);
    }
    recover(r);
    /* the other slot was never touched and still works */
    data_lo = slot + SLOT_HEAD + RING_BYTES + SLOT_HEAD;
    data_hi = data_lo + RING_BYTES;
    recover(sp_region_ring(region, 1));
    sp_region_detach(region);
    free(mem);
    return 0;
}
