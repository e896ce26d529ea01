/*
 * The ring's read of the next record in a run (sp_ring_read_next), inline
 * for the exporter's drain loop, which calls it for nearly every span: the
 * call and the registers it saved cost 12.7 instructions a span
 * (callgrind). Core-internal: the slot's layout and the process's handle
 * are sp_ring.c's (its comment at the top has the layout and the memory
 * ordering); they are here only so that this one function can be inlined.
 * Nothing else outside sp_ring.c may use them.
 */
#ifndef SP_RING_NEXT_H
#define SP_RING_NEXT_H

#include <stdatomic.h>
#include <string.h>

#include "sp_ring.h"
#include "sp_crc32c.h"

#define SP_STAMP_KEY        0x9e3779b97f4a7c00ull  /* low 3 bits zero */
#define SP_HDR              SP_RING_HEADER_SIZE

typedef struct sp_region_hdr sp_region_hdr;

typedef struct sp_slot {
    _Atomic uint64_t owner;
    unsigned char    pad0[56];
    _Atomic uint64_t head;
    _Atomic uint64_t written;
    _Atomic uint64_t dropped_full;
    unsigned char    pad1[40];
    _Atomic uint64_t tail;
    _Atomic uint64_t read;
    _Atomic uint64_t corrupt;
    _Atomic uint64_t skipped;
    unsigned char    pad2[32];
} sp_slot;

/* Process-local: sizes here were checked at attach and never reread. */
struct sp_ring {
    sp_region_hdr *hdr;
    sp_slot       *slot;
    unsigned char *data;
    uint64_t       size;
    uint64_t       mask;
    uint64_t       claim;       /* the owner word this handle stored */
    uint64_t       run_max;     /* sp_ring_read_next's bound */
};

static inline uint64_t
sp_stamp(uint64_t pos)
{
    return (pos ^ SP_STAMP_KEY) | 1;
}

/*
 * The check of the record whose header is at h with used body bytes. A
 * CRC rather than the FNV-style hash it replaced: with the crc32
 * instruction it takes half the instructions, on both sides of the ring,
 * and it catches every short burst and every few-bit error outright.
 */
static inline uint32_t
sp_checksum(const unsigned char *h, uint32_t used)
{
    return sp_crc32c(0, h + 12, SP_HDR - 12 + (size_t)used);
}

/*
 * A header's fields as the usual case checks them: the type and the flags
 * as one word, the flags above (they must be zero, so any flag set puts
 * the word out of the types' range).
 */
static inline __attribute__((always_inline)) void
sp_hdr_words(const unsigned char *h, uint32_t *check, uint32_t *total,
    uint32_t *used, uint32_t *type)
{
    memcpy(check, h + 8, 4);
    memcpy(total, h + 12, 4);
    memcpy(used, h + 16, 4);
    memcpy(type, h + 20, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    *type = *type >> 16 | *type << 16;
#endif
}

/*
 * sp_ring_read's usual case at the end of v, tail left where it is: the
 * records read so are freed together, one release of tail for them all.
 * Its checks are sp_ring_read's with the record's position for tail, so
 * that it returns what sp_ring_read would once v were consumed, or leaves
 * the record to it; and v may hold no more than run_max bytes with it,
 * which keeps what v holds within the ring. Damage in the positions
 * (head) met where no record is ready is left to the next sp_ring_read
 * too, which looks at them first. The record's position needs no
 * alignment check: a view's end is an aligned tail plus lengths checked
 * to be multiples of 8. sp_ring_read_next (sp_ring.h) is this.
 */
static inline __attribute__((always_inline)) sp_status
sp_ring_read_next_inline(sp_ring *r, sp_record_view *v)
{
    uint64_t             at = v->next;
    uint64_t             head = atomic_load_explicit(&r->slot->head,
                                                     memory_order_acquire);
    uint64_t             off = at & r->mask;
    const unsigned char *h = r->data + off;
    uint64_t             room;
    uint32_t             check, total, used, type;

    if (r->size - off < SP_HDR) {
        return SP_ERR_INVALID;      /* the wrap: sp_ring_read's */
    }
    /* at is aligned (a view's end, above), so its stamp, (at ^ KEY) | 1,
     * is at ^ (KEY | 1): the word xor at compared with a constant */
    if (head == at
        || (atomic_load_explicit((_Atomic uint64_t *)(void *)h,
                                 memory_order_acquire) ^ at)
           != (SP_STAMP_KEY | 1))
    {
        return SP_ERR_NOT_FOUND;
    }
    /* after the stamp: this head covers the record's reservation */
    head = atomic_load_explicit(&r->slot->head, memory_order_acquire);
    sp_hdr_words(h, &check, &total, &used, &type);
    room = head - at;
    if (((head | total) & 7) != 0 || room > r->size
        || total < SP_HDR || total > r->size - off
        || total > room || (uint64_t)used + SP_HDR > total
        || type - SP_RECORD_SAMPLE > SP_RECORD_OBJECTS - SP_RECORD_SAMPLE)
    {
        return SP_ERR_INVALID;
    }
    at += total;
    if (at - v->pos > r->run_max) {
        return SP_ERR_INVALID;
    }
    /* the record's part filled before the checksum, as in sp_ring_read;
     * what v holds only once it passed */
    v->type = (uint16_t)type;
    v->body = h + SP_HDR;
    v->len = used;
    if (check != sp_checksum(h, used)) {
        return SP_ERR_INVALID;
    }
    v->next = at;
    v->held++;
    return SP_OK;
}

#endif
