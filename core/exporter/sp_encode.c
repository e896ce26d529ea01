#include "sp_encode.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers */

void
sp_buf_init(sp_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = limit;
    b->err = SP_OK;
}

void
sp_buf_free(sp_buf *b)
{
    if (b == NULL) {
        return;
    }
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->err = SP_OK;
}

void
sp_buf_clear(sp_buf *b)
{
    b->len = 0;
    b->err = SP_OK;
}

void
sp_buf_truncate(sp_buf *b, size_t len)
{
    if (len < b->len) {
        b->len = len;
    }
    b->err = SP_OK;
}

sp_status
sp_buf_status(const sp_buf *b)
{
    return b->err;
}

sp_status
sp_buf_reserve(sp_buf *b, size_t more)
{
    size_t   limit, need, cap;
    uint8_t *p;

    if (b->err != SP_OK) {
        return b->err;
    }
    if (more <= b->cap - b->len) {
        return SP_OK;
    }
    limit = b->limit != 0 ? b->limit : SIZE_MAX;
    if (more > limit || b->len > limit - more) {
        b->err = SP_ERR_TOO_LONG;
        return b->err;
    }
    need = b->len + more;
    cap = b->cap != 0 ? b->cap : 256;
    while (cap < need) {
        cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    }
    if (cap > limit) {
        cap = limit;
    }
    p = realloc(b->data, cap);
    if (p == NULL) {
        b->err = SP_ERR_NOMEM;
        return b->err;
    }
    b->data = p;
    b->cap = cap;
    return SP_OK;
}

sp_status
sp_buf_append(sp_buf *b, const void *p, size_t n)
{
    if (n == 0) {
        return b->err;
    }
    if (sp_buf_reserve(b, n) != SP_OK) {
        return b->err;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return SP_OK;
}

/* ---- protobuf wire format */

#define SP_WIRE_VARINT  0
#define SP_WIRE_I64     1
#define SP_WIRE_LEN     2
#define SP_WIRE_I32     5

size_t
sp_pb_varint_size(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t
sp_pb_varint_write(uint8_t *p, uint64_t v)
{
    size_t n = 0;

    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

sp_status
sp_pb_put_varint(sp_buf *b, uint64_t v)
{
    if (sp_buf_reserve(b, 10) != SP_OK) {
        return b->err;
    }
    b->len += sp_pb_varint_write(b->data + b->len, v);
    return SP_OK;
}

static sp_status
sp_pb_tag(sp_buf *b, uint32_t field, unsigned wire)
{
    return sp_pb_put_varint(b, ((uint64_t)field << 3) | wire);
}

sp_status
sp_pb_uint(sp_buf *b, uint32_t field, uint64_t v)
{
    sp_pb_tag(b, field, SP_WIRE_VARINT);
    return sp_pb_put_varint(b, v);
}

sp_status
sp_pb_fixed64(sp_buf *b, uint32_t field, uint64_t v)
{
    uint8_t le[8];
    int     i;

    for (i = 0; i < 8; i++) {
        le[i] = (uint8_t)(v >> (8 * i));
    }
    sp_pb_tag(b, field, SP_WIRE_I64);
    return sp_buf_append(b, le, sizeof(le));
}

sp_status
sp_pb_fixed32(sp_buf *b, uint32_t field, uint32_t v)
{
    uint8_t le[4];
    int     i;

    for (i = 0; i < 4; i++) {
        le[i] = (uint8_t)(v >> (8 * i));
    }
    sp_pb_tag(b, field, SP_WIRE_I32);
    return sp_buf_append(b, le, sizeof(le));
}

sp_status
sp_pb_bytes(sp_buf *b, uint32_t field, const void *p, size_t len)
{
    sp_pb_tag(b, field, SP_WIRE_LEN);
    sp_pb_put_varint(b, len);
    return sp_buf_append(b, p, len);
}

/* Length of the UTF-8 sequence starting at s[0] if it is valid, else 0. */
static size_t
sp_utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        return len >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (len < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) {
            return 0;
        }
        /* Overlong (E0 80..9F) and surrogates (ED A0..BF). */
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F)) {
            return 0;
        }
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (len < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80
            || (s[3] & 0xC0) != 0x80)
        {
            return 0;
        }
        /* Overlong (F0 80..8F) and past U+10FFFF (F4 90..BF). */
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F)) {
            return 0;
        }
        return 4;
    }
    return 0;
}

/*
 * How many bytes an invalid sequence at s[0] spans: the lead byte and the
 * continuation bytes that could still have belonged to it (the "maximal
 * subpart" of Unicode's U+FFFD substitution practice), at least one.
 */
static size_t
sp_utf8_bad(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];
    size_t  want, n;
    uint8_t lo = 0x80, hi = 0xBF;

    if (c >= 0xC2 && c <= 0xDF) {
        want = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        want = 3;
        if (c == 0xE0) {
            lo = 0xA0;
        } else if (c == 0xED) {
            hi = 0x9F;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        want = 4;
        if (c == 0xF0) {
            lo = 0x90;
        } else if (c == 0xF4) {
            hi = 0x8F;
        }
    } else {
        return 1;
    }
    for (n = 1; n < want && n < len; n++) {
        if (s[n] < lo || s[n] > hi) {
            break;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return n;
}

bool
sp_utf8_valid(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t         i = 0, n;
    uint64_t       w;

    while (i < len) {
        /* Eight ASCII bytes at a time: most attribute values are ASCII. */
        if (len - i >= 8) {
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        } else if (len >= 8) {
            /* A short tail: the last eight bytes at once, overlapping
             * what is already known valid, instead of a byte loop. */
            memcpy(&w, p + len - 8, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                return true;
            }
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        n = sp_utf8_seq(p + i, len - i);
        if (n == 0) {
            return false;
        }
        i += n;
    }
    return true;
}

sp_status
sp_utf8_sanitize(sp_buf *b, const char *s, size_t len)
{
    static const uint8_t fffd[3] = { 0xEF, 0xBF, 0xBD };
    const uint8_t       *p = (const uint8_t *)s;
    size_t               i = 0, start = 0, n;

    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        n = sp_utf8_seq(p + i, len - i);
        if (n != 0) {
            i += n;
            continue;
        }
        sp_buf_append(b, p + start, i - start);
        sp_buf_append(b, fffd, sizeof(fffd));
        i += sp_utf8_bad(p + i, len - i);
        start = i;
    }
    return sp_buf_append(b, p + start, len - start);
}

sp_status
sp_pb_string(sp_buf *b, uint32_t field, const char *s, size_t len)
{
    size_t mark;

    if (len == 0 || sp_utf8_valid(s, len)) {
        return sp_pb_bytes(b, field, s, len);
    }
    mark = sp_pb_begin(b, field);
    sp_utf8_sanitize(b, s, len);
    return sp_pb_end(b, mark);
}

sp_status
sp_pb_cstring(sp_buf *b, uint32_t field, const char *s)
{
    return sp_pb_string(b, field, s != NULL ? s : "",
                        s != NULL ? strlen(s) : 0);
}

/*
 * One byte is reserved for the length: most messages are shorter than 128
 * bytes, and the longer ones pay a memmove of their body.
 */
size_t
sp_pb_begin(sp_buf *b, uint32_t field)
{
    sp_pb_tag(b, field, SP_WIRE_LEN);
    if (sp_buf_reserve(b, 1) == SP_OK) {
        b->data[b->len++] = 0;
    }
    return b->len;
}

sp_status
sp_pb_end(sp_buf *b, size_t mark)
{
    size_t body, n;

    if (b->err != SP_OK) {
        return b->err;
    }
    body = b->len - mark;
    n = sp_pb_varint_size(body);
    if (n > 1) {
        if (sp_buf_reserve(b, n - 1) != SP_OK) {
            return b->err;
        }
        memmove(b->data + mark + n - 1, b->data + mark, body);
        b->len += n - 1;
    }
    sp_pb_varint_write(b->data + mark - 1, body);
    return SP_OK;
}
