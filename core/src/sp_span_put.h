/*
 * Writing a span record's OTLP Span (opentelemetry.proto.trace.v1.Span)
 * field by field. Two writers use these: sp_span_encode (sp_record.c), for
 * any list of attributes, and the entry span's (sp_entry.c), which passes
 * its attribute keys as constants, so that once inlined a key is a few
 * stores and its length a constant: a span is written for every traced
 * request.
 *
 * A string is cut to its limit (never inside a UTF-8 sequence) and copied
 * as it is, the copy noting whether it was ASCII, as nearly every one is.
 * A field with a string that was not, or that needs lengths of more than
 * one byte, is written again from its start by a function out of line that
 * repairs the string (sp_utf8.h). So what is written is valid UTF-8 with
 * no pass that reads the strings first, and a field never takes more than
 * SP_SPAN_TEXT_MAX of its strings' cut lengths.
 */
#ifndef SP_SPAN_PUT_H
#define SP_SPAN_PUT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sp_record.h"
#include "sp_tracecontext.h"

/* The record's own head: u32 pid, u32 reserved. */
#define SP_SPAN_HEAD            8

/*
 * Tags (field << 3 | wire type) of opentelemetry.proto.trace.v1.Span and
 * of the messages inside it. Span.flags is field 16: two bytes of tag.
 */
#define SP_TAG_SPAN_TRACE_ID    0x0a
#define SP_TAG_SPAN_SPAN_ID     0x12
#define SP_TAG_SPAN_TRACE_STATE 0x1a
#define SP_TAG_SPAN_PARENT      0x22
#define SP_TAG_SPAN_NAME        0x2a
#define SP_TAG_SPAN_KIND        0x30
#define SP_TAG_SPAN_START       0x39
#define SP_TAG_SPAN_END         0x41
#define SP_TAG_SPAN_ATTR        0x4a
#define SP_TAG_SPAN_STATUS      0x7a
#define SP_TAG_SPAN_FLAGS0      0x85
#define SP_TAG_SPAN_FLAGS1      0x01
#define SP_TAG_STATUS_CODE      0x18
#define SP_TAG_KV_KEY           0x0a
#define SP_TAG_KV_VALUE         0x12
#define SP_TAG_ANY_STRING       0x0a
#define SP_TAG_ANY_BOOL         0x10
#define SP_TAG_ANY_INT          0x18

/* Span.flags: bits 0-7 the W3C trace flags, then whether the parent is
 * known to be remote, and whether it is. */
#define SP_SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define SP_SPAN_FLAGS_IS_REMOTE     0x200u

/*
 * The most a string of len bytes (cut) takes with its tag and length:
 * repair writes U+FFFD, three bytes, for each byte it cannot keep.
 */
#define SP_SPAN_TEXT_MAX(len)   (1 + 3 + 3 * (len))

/* The most a span takes besides its strings' SP_SPAN_TEXT_MAX and its
 * attributes' tags and lengths (SP_SPAN_ATTR_EXTRA each). */
#define SP_SPAN_FIXED_MAX \
    (SP_SPAN_HEAD + 18 + 10 + 10 + 11 + 9 + 9 + 13 + 6)
#define SP_SPAN_ATTR_EXTRA      (1 + 3 + 1 + 3 + 11)

static inline size_t
sp_varint_size(uint64_t v)
{
    size_t n = 3;

    /* lengths here are nearly all under 128, the rest under 16384 */
    if (v < 0x80) {
        return 1;
    }
    if (v < 0x4000) {
        return 2;
    }
    v >>= 21;
    while (v != 0) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *
sp_put_varint(unsigned char *p, uint64_t v)
{
    /* a status code takes two bytes, a port two or three: without the
     * loop, ~20 instructions fewer a span (callgrind) */
    if (v < 0x4000) {
        if (v < 0x80) {
            p[0] = (unsigned char)v;
            return p + 1;
        }
        p[0] = (unsigned char)(v | 0x80);
        p[1] = (unsigned char)(v >> 7);
        return p + 2;
    }
    if (v < 0x200000) {
        p[0] = (unsigned char)(v | 0x80);
        p[1] = (unsigned char)((v >> 7) | 0x80);
        p[2] = (unsigned char)(v >> 14);
        return p + 3;
    }
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* Bytes of a length-delimited field with a one-byte tag. */
static inline size_t
sp_field_size(size_t body)
{
    return 1 + sp_varint_size(body) + body;
}

/*
 * The length s[0..len) keeps when cut to max bytes. The cut never splits a
 * UTF-8 sequence, so what reaches OTLP's string fields stays valid UTF-8 if
 * it was: it backs off over at most three continuation bytes.
 */
static inline size_t
sp_cut(const char *s, size_t len, size_t max)
{
    size_t back = 0;

    if (len <= max) {
        return len;
    }
    len = max;
    while (len > 0 && back < 3 && ((unsigned char)s[len] & 0xC0) == 0x80) {
        len--;
        back++;
    }
    return len;
}

/* A cut tracestate would not be valid: too long means none at all. */
static inline size_t
sp_tracestate_len(const sp_span_record *s)
{
    return s->tracestate_len <= SP_TRACESTATE_MAX_LEN ? s->tracestate_len
                                                      : 0;
}

static inline bool
sp_span_has_parent(const sp_span_record *s)
{
    uint64_t w;

    memcpy(&w, s->parent_span_id, 8);
    return w != 0;
}

/*
 * Copies len bytes and gives the high bits of what it copied: the words a
 * copy loads anyway tell whether the string was ASCII. Two overlapping
 * words cover 8 to 16 bytes, the length of most values here. Always
 * inline: gcc's estimates of sp_entry_finish()'s size decide otherwise
 * at a small change there, and a call for the span name's route cost ~25
 * instructions a request (callgrind).
 */
static inline __attribute__((always_inline)) uint64_t
sp_copy_ascii(unsigned char *d, const char *src, size_t len)
{
    const unsigned char *s = (const unsigned char *)src;
    uint64_t             a, b, acc = 0;
    uint32_t             x, y;
    size_t               i;

    /* 8 to 16 bytes first: the values' usual length */
    if (len - 8 <= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + len - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + len - 8, &b, 8);
        return (a | b) & 0x8080808080808080ull;
    }
    if (len > 16) {
        for (i = 0; i + 16 < len; i += 16) {
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            memcpy(d + i, &a, 8);
            memcpy(d + i + 8, &b, 8);
            acc |= a | b;
        }
        s += len - 16;
        d += len - 16;
        len = 16;
    }
    if (len >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + len - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + len - 8, &b, 8);
        return (acc | a | b) & 0x8080808080808080ull;
    }
    if (len >= 4) {
        memcpy(&x, s, 4);
        memcpy(&y, s + len - 4, 4);
        memcpy(d, &x, 4);
        memcpy(d + len - 4, &y, 4);
        return (x | y) & 0x80808080u;
    }
    /* 1 to 3 bytes (a route of "/", twice in a span: its name's and
     * http.route): a byte alone, or two 16-bit words that overlap, where
     * first, middle and last byte took ~7 instructions more (callgrind) */
    if (len >= 2) {
        uint16_t u, v;

        memcpy(&u, s, 2);
        memcpy(&v, s + len - 2, 2);
        memcpy(d, &u, 2);
        memcpy(d + len - 2, &v, 2);
        return (uint64_t)((u | v) & 0x8080u);
    }
    if (len > 0) {
        d[0] = s[0];
        return s[0] & 0x80u;
    }
    return 0;
}

/* Out of line (sp_record.c): a field written with its strings repaired
 * and lengths of any size. len is already cut. */
unsigned char *sp_put_text_repaired(unsigned char *p, uint8_t tag,
    const char *s, size_t len);
unsigned char *sp_put_attr_repaired(unsigned char *p, const sp_span_attr *a);

static inline __attribute__((always_inline)) unsigned char *
sp_put_text(unsigned char *p, uint8_t tag, const char *s, size_t len,
    size_t max)
{
    len = sp_cut(s, len, max);
    if (len < 0x80) {
        p[0] = tag;
        p[1] = (unsigned char)len;
        if (sp_copy_ascii(p + 2, s, len) == 0) {
            return p + 2 + len;
        }
    }
    return sp_put_text_repaired(p, tag, s, len);
}

/*
 * The four bytes before a string value under 0x7e bytes: the value's tag
 * and length, the AnyValue's string tag and length. One store on a
 * little-endian machine (two lengths in the bytes of a multiply), where
 * the four byte stores took ~2 instructions more an attribute.
 */
static inline void
sp_put_value_head(unsigned char *q, size_t v_len)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t w = (uint32_t)v_len * 0x01000100u
                 + (SP_TAG_KV_VALUE | 2u << 8 | SP_TAG_ANY_STRING << 16);

    memcpy(q, &w, 4);
#else
    q[0] = SP_TAG_KV_VALUE;
    q[1] = (unsigned char)(v_len + 2);
    q[2] = SP_TAG_ANY_STRING;
    q[3] = (unsigned char)v_len;
#endif
}

/* A KeyValue of a string; the value is already cut to its limit. */
static inline __attribute__((always_inline)) unsigned char *
sp_put_attr_string(unsigned char *p, const char *key, size_t key_len,
    const char *v, size_t v_len)
{
    unsigned char *q;
    uint64_t       high;

    if (key_len + v_len + 6 < 0x80) {
        p[0] = SP_TAG_SPAN_ATTR;
        p[1] = (unsigned char)(key_len + v_len + 6);
        p[2] = SP_TAG_KV_KEY;
        p[3] = (unsigned char)key_len;
        high = sp_copy_ascii(p + 4, key, key_len);
        q = p + 4 + key_len;
        sp_put_value_head(q, v_len);
        high |= sp_copy_ascii(q + 4, v, v_len);
        if (high == 0) {
            return q + 4 + v_len;
        }
    }
    return sp_put_attr_repaired(p, &(sp_span_attr){ key, key_len,
                                    SP_VALUE_STRING, v, v_len, 0 });
}

/* A KeyValue of an int (type SP_VALUE_INT) or a bool (SP_VALUE_BOOL). */
static inline __attribute__((always_inline)) unsigned char *
sp_put_attr_number(unsigned char *p, const char *key, size_t key_len,
    uint8_t type, int64_t v)
{
    size_t any = type == SP_VALUE_BOOL ? 2 : 1 + sp_varint_size((uint64_t)v);

    if (key_len + any + 4 < 0x80) {
        p[0] = SP_TAG_SPAN_ATTR;
        p[1] = (unsigned char)(key_len + any + 4);
        p[2] = SP_TAG_KV_KEY;
        p[3] = (unsigned char)key_len;
        if (sp_copy_ascii(p + 4, key, key_len) == 0) {
            p += 4 + key_len;
            p[0] = SP_TAG_KV_VALUE;
            p[1] = (unsigned char)any;
            if (type == SP_VALUE_BOOL) {
                p[2] = SP_TAG_ANY_BOOL;
                p[3] = v != 0 ? 1 : 0;
                return p + 4;
            }
            p[2] = SP_TAG_ANY_INT;
            return sp_put_varint(p + 3, (uint64_t)v);
        }
    }
    return sp_put_attr_repaired(p, &(sp_span_attr){ key, key_len, type,
                                                    NULL, 0, v });
}

/* Whether the 8 bytes of a parent span id name one (zeros: none). */
static inline bool
sp_span_id_set(const uint8_t *id)
{
    uint64_t w;

    memcpy(&w, id, 8);
    return w != 0;
}

/*
 * The record's head and the Span's fields before its name, from the
 * fields themselves (the entry span's writer passes its own, with no
 * sp_span_record to fill and read back): ids of 16 and 8 bytes, parent
 * of 8 (zeros: none), tracestate of ts_len bytes (sp_tracestate_len).
 */
static inline __attribute__((always_inline)) unsigned char *
sp_put_span_ids_of(unsigned char *p, uint32_t pid, const uint8_t *trace_id,
    const uint8_t *span_id, const char *tracestate, size_t ts_len,
    const uint8_t *parent)
{
    uint64_t head = pid;

    /*
     * pid in host order, then 4 bytes reserved, zero: one store. The
     * decoder reads the pid from bytes 0-3, so on a big-endian host it
     * goes in the number's high half (as sp_otlp.c's sp_traces_room
     * compares it).
     */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    head <<= 32;
#endif
    memcpy(p, &head, 8);
    p += SP_SPAN_HEAD;
    p[0] = SP_TAG_SPAN_TRACE_ID;
    p[1] = 16;
    memcpy(p + 2, trace_id, 16);
    p[18] = SP_TAG_SPAN_SPAN_ID;
    p[19] = 8;
    memcpy(p + 20, span_id, 8);
    p += 28;
    if (ts_len > 0) {
        p = sp_put_text(p, SP_TAG_SPAN_TRACE_STATE, tracestate, ts_len,
                        SP_TRACESTATE_MAX_LEN);
    }
    if (sp_span_id_set(parent)) {
        p[0] = SP_TAG_SPAN_PARENT;
        p[1] = 8;
        memcpy(p + 2, parent, 8);
        p += 10;
    }
    return p;
}

static inline __attribute__((always_inline)) unsigned char *
sp_put_span_ids(unsigned char *p, const sp_span_record *s)
{
    return sp_put_span_ids_of(p, s->pid, s->trace_id, s->span_id,
                              s->tracestate, sp_tracestate_len(s),
                              s->parent_span_id);
}

/* The Span's fields between its name and its attributes. */
static inline __attribute__((always_inline)) unsigned char *
sp_put_span_times_of(unsigned char *p, uint32_t kind, uint64_t start_ns,
    uint64_t end_ns)
{
    if (kind != 0) {
        *p++ = SP_TAG_SPAN_KIND;
        p = sp_put_varint(p, kind);
    }
    *p++ = SP_TAG_SPAN_START;
    memcpy(p, &start_ns, 8);
    p += 8;
    *p++ = SP_TAG_SPAN_END;
    memcpy(p, &end_ns, 8);
    return p + 8;
}

static inline __attribute__((always_inline)) unsigned char *
sp_put_span_times(unsigned char *p, const sp_span_record *s)
{
    return sp_put_span_times_of(p, s->kind, s->start_ns, s->end_ns);
}

/* The record's head and the Span's fields before its attributes. */
static inline __attribute__((always_inline)) unsigned char *
sp_put_span_head(unsigned char *p, const sp_span_record *s)
{
    p = sp_put_span_ids(p, s);
    p = sp_put_text(p, SP_TAG_SPAN_NAME, s->name, s->name_len,
                    SP_SPAN_STRING_MAX);
    return sp_put_span_times(p, s);
}

/* The Span's fields after its attributes: the status of status_code,
 * the flags of trace_flags and of whether the span has a parent. */
static inline __attribute__((always_inline)) unsigned char *
sp_put_span_tail_of(unsigned char *p, uint32_t status_code,
    uint8_t trace_flags, bool has_parent)
{
    uint32_t flags;

    if (status_code != SP_STATUS_UNSET) {
        *p++ = SP_TAG_SPAN_STATUS;
        *p++ = (unsigned char)(1 + sp_varint_size(status_code));
        *p++ = SP_TAG_STATUS_CODE;
        p = sp_put_varint(p, status_code);
    }
    flags = trace_flags | SP_SPAN_FLAGS_HAS_IS_REMOTE
            | (has_parent ? SP_SPAN_FLAGS_IS_REMOTE : 0);
    p[0] = SP_TAG_SPAN_FLAGS0;
    p[1] = SP_TAG_SPAN_FLAGS1;
    memcpy(p + 2, &flags, 4);
    return p + 6;
}

static inline __attribute__((always_inline)) unsigned char *
sp_put_span_tail(unsigned char *p, const sp_span_record *s)
{
    return sp_put_span_tail_of(p, s->status_code, s->trace_flags,
                               sp_span_has_parent(s));
}

#endif
