/*
 * The check of an entry span's framing (sp_span_decode's usual case), in
 * line: sp_record.c's decoder and the exporter's builder (sp_otlp.c),
 * which checks the copy it puts into a request with no call.
 */
#ifndef SP_SPAN_CHECK_H
#define SP_SPAN_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sp_record.h"
#include "sp_span_put.h"

#define SP_SPAN_KIND_MAX        5   /* CONSUMER */

static inline uint16_t
sp_get16(const unsigned char *p, size_t off)
{
    uint16_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

static inline uint64_t
sp_get64(const unsigned char *p, size_t off)
{
    uint64_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

/* Two bytes, the first the low one, whatever the machine's order. */
static inline uint16_t
sp_get16le(const unsigned char *p, size_t off)
{
    uint16_t v = sp_get16(p, off);

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = (uint16_t)(v >> 8 | v << 8);
#endif
    return v;
}

/* Word by word: the ids it checks are read for every record. */
static inline bool
sp_all_zero(const unsigned char *p, size_t len)
{
    uint64_t acc = 0;
    size_t   i;

    for (i = 0; i + 8 <= len; i += 8) {
        acc |= sp_get64(p, i);
    }
    for (; i < len; i++) {
        acc |= p[i];
    }
    return acc == 0;
}

/*
 * Whether the Span p of n bytes ends right from the pair w at p[i], where
 * the attributes stopped: the status's tag and length or the flags' two
 * tags (a status of another length fails at the flags). i <= n - 6.
 */
static inline __attribute__((always_inline)) bool
sp_span_end_ok(const unsigned char *p, size_t n, size_t i, uint32_t w)
{
    if (w == (SP_TAG_SPAN_STATUS | 2 << 8)) {
        w = sp_get16le(p, i + 2);
        if ((w & 0xff) != SP_TAG_STATUS_CODE || w >> 8 > SP_STATUS_ERROR) {
            return false;
        }
        i += 4;
        w = sp_get16le(p, i);
    }
    return n - i == 6 && w == (SP_TAG_SPAN_FLAGS0 | SP_TAG_SPAN_FLAGS1 << 8);
}

/* What sp_span_entry found. */
typedef enum sp_span_form {
    SP_FORM_ENTRY,  /* an entry span's form, its attributes ending at *at */
    SP_FORM_LONG,   /* that form but an attribute's length is longer than
                     * a byte: the attributes begin at *at */
    SP_FORM_OTHER,  /* another form, or too short for the entry one */
    SP_FORM_BAD     /* that form, and it does not hold together */
} sp_span_form;

/*
 * The form an entry span has, in the Span message p of n bytes: ids and a
 * parent at fixed offsets, a name and attributes whose lengths take one
 * byte, a kind of one byte. It is checked up to where the attributes stop
 * (sp_span_end_ok checks the rest). Its bound checks are fewer than the
 * fields: the message is at least as long as the smallest such span, and
 * after the name one check covers the kind, the times and the flags.
 *
 * The attributes' lengths are each taken as one byte and or-ed together:
 * one with the high bit set (a longer varint) makes it SP_FORM_LONG once
 * the walk ended, rather than a test at each attribute (7 instructions an
 * attribute, not 8: callgrind, eleven attributes in an nginx span). A
 * length misread so only leads the walk astray. The walk is bounded at
 * each step by the flags' room (sp_span_check_padded needs no bound).
 * A pointer walks, not an index: with an index the compiler keeps p + i
 * apart for after the loop, an instruction more an attribute.
 */
static inline __attribute__((always_inline)) sp_span_form
sp_span_entry(const unsigned char *p, size_t n, size_t *at)
{
    const unsigned char *q;
    size_t               m = n - 6, i, w, lens = 0;

    /* ids, name tag and length, kind, times, flags: 28 + 2 + 2 + 18 + 6 */
    if (n < 56 || sp_get16le(p, 0) != (SP_TAG_SPAN_TRACE_ID | 16 << 8)
        || sp_get16le(p, 18) != (SP_TAG_SPAN_SPAN_ID | 8 << 8))
    {
        return SP_FORM_OTHER;
    }
    if (sp_all_zero(p + 2, 16) || sp_all_zero(p + 20, 8)) {
        return SP_FORM_BAD;
    }
    /* 28 + 10 + 2 <= n - 6: the parent and the name's pair are inside */
    w = sp_get16le(p, 28);
    i = 28;
    if (w == (SP_TAG_SPAN_PARENT | 8 << 8)) {
        i = 38;
        w = sp_get16le(p, 38);
    }
    if ((w & 0x80ff) != SP_TAG_SPAN_NAME) {
        return SP_FORM_OTHER;
    }
    /* the name, then a kind of one byte and the times, before the flags */
    i += (size_t)(w >> 8) + 2;
    if (i + 20 > m) {
        return SP_FORM_OTHER;
    }
    w = sp_get16le(p, i);
    if ((w & 0xff) != SP_TAG_SPAN_KIND || w >> 8 > SP_SPAN_KIND_MAX
        || p[i + 2] != SP_TAG_SPAN_START || p[i + 11] != SP_TAG_SPAN_END)
    {
        return SP_FORM_OTHER;
    }
    i += 20;
    *at = i;
    q = p + i;
    while (*q == SP_TAG_SPAN_ATTR) {
        w = q[1];
        lens |= w;
        q += w + 2;
        if (q > p + m) {
            return lens < 0x80 ? SP_FORM_BAD : SP_FORM_LONG;
        }
    }
    if (lens >= 0x80) {
        return SP_FORM_LONG;
    }
    *at = (size_t)(q - p);
    return SP_FORM_ENTRY;
}

/*
 * sp_span_check_copy (sp_record.h), in line: sp_span_entry's form, of
 * the kind every entry span has (SERVER: one compare rather than a tag
 * and a range, 3 instructions; another kind goes to sp_span_decode),
 * then sp_span_end_ok, on a message followed by SP_SPAN_COPY_PAD zero
 * bytes, which no read passes: so no bound is looked at before the end.
 * The name's length byte is under 0x80, so the kind and the times are read
 * at most 178 bytes in (n >= 56: inside the message or its padding),
 * and the attributes' walk starts at most 187 bytes in. A step past the
 * end lands in the padding and stops on a zero tag: a step is at most
 * 257 bytes, from a length byte inside the message, and the farthest,
 * from n - 2, ends at n + 255; from n - 1 the length byte is the
 * padding's first, zero (5 instructions an attribute). A field that ran
 * past the end then leaves the walk elsewhere than where the status or
 * the flags must be (n - 10 or n - 6), which is all the end looks at: the
 * flags' word is read at n - 6 only.
 */
static inline __attribute__((always_inline)) bool
sp_span_check_padded(const unsigned char *p, size_t n)
{
    const unsigned char *q, *flags = p + n - 6;
    size_t               w, lens = 0;

    if (n < 56 || sp_get16le(p, 0) != (SP_TAG_SPAN_TRACE_ID | 16 << 8)
        || sp_get16le(p, 18) != (SP_TAG_SPAN_SPAN_ID | 8 << 8)
        || sp_all_zero(p + 2, 16) || sp_all_zero(p + 20, 8))
    {
        return false;
    }
    q = p + 28;
    w = sp_get16le(q, 0);
    if (w == (SP_TAG_SPAN_PARENT | 8 << 8)) {
        q += 10;
        w = sp_get16le(q, 0);
    }
    if ((w & 0x80ff) != SP_TAG_SPAN_NAME) {
        return false;
    }
    q += (w >> 8) + 2;
    if (sp_get16le(q, 0) != (SP_TAG_SPAN_KIND | SP_SPAN_KIND_SERVER << 8)
        || q[2] != SP_TAG_SPAN_START || q[11] != SP_TAG_SPAN_END)
    {
        return false;
    }
    for (q += 20; *q == SP_TAG_SPAN_ATTR; q += w + 2) {
        w = q[1];
        lens |= w;
    }
    if (lens >= 0x80) {
        return false;
    }
    if (q != flags) {
        /* the status: its tag and length, the code's tag and a code */
        if (q + 4 != flags
            || sp_get16le(q, 0) != (SP_TAG_SPAN_STATUS | 2 << 8)
            || q[2] != SP_TAG_STATUS_CODE || q[3] > SP_STATUS_ERROR)
        {
            return false;
        }
    }
    return sp_get16le(flags, 0)
           == (SP_TAG_SPAN_FLAGS0 | SP_TAG_SPAN_FLAGS1 << 8);
}

#endif
