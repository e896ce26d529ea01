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

sp_status
sp_utf8_sanitize(sp_buf *b, const char *s, size_t len)
{
    size_t n = sp_utf8_repaired_len(s, len);

    if (sp_buf_reserve(b, n) != SP_OK) {
        return b->err;
    }
    b->len += sp_utf8_repair(b->data + b->len, s, len);
    return SP_OK;
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
