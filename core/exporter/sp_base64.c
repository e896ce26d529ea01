#include "sp_encode.h"

static const char sp_b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
sp_base64_size(size_t len)
{
    return (len + 2) / 3 * 4;
}

sp_status
sp_base64_encode(sp_buf *out, const void *in, size_t len)
{
    const uint8_t *p = in;
    uint8_t       *o;
    size_t         i, need;
    uint32_t       v;

    if (len > (SIZE_MAX - 2) / 4 * 3) {
        out->err = out->err != SP_OK ? out->err : SP_ERR_TOO_LONG;
        return out->err;
    }
    need = sp_base64_size(len);
    if (sp_buf_reserve(out, need) != SP_OK) {
        return out->err;
    }
    o = out->data + out->len;
    for (i = 0; i + 3 <= len; i += 3) {
        v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = (uint8_t)sp_b64_alphabet[v >> 18];
        *o++ = (uint8_t)sp_b64_alphabet[(v >> 12) & 63];
        *o++ = (uint8_t)sp_b64_alphabet[(v >> 6) & 63];
        *o++ = (uint8_t)sp_b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        v = (uint32_t)p[i] << 16;
        *o++ = (uint8_t)sp_b64_alphabet[v >> 18];
        *o++ = (uint8_t)sp_b64_alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (len - i == 2) {
        v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = (uint8_t)sp_b64_alphabet[v >> 18];
        *o++ = (uint8_t)sp_b64_alphabet[(v >> 12) & 63];
        *o++ = (uint8_t)sp_b64_alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
    out->len += need;
    return SP_OK;
}

static int
sp_b64_value(char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+') {
        return 62;
    }
    if (c == '/') {
        return 63;
    }
    return -1;
}

sp_status
sp_base64_decode(sp_buf *out, const char *in, size_t len)
{
    size_t   i, j, start, pad = 0;
    int      d[4];
    uint32_t v;

    if (out->err != SP_OK) {
        return out->err;
    }
    if (len % 4 != 0) {
        return SP_ERR_INVALID;
    }
    if (len > 0 && in[len - 1] == '=') {
        pad = len > 1 && in[len - 2] == '=' ? 2 : 1;
    }
    start = out->len;
    if (sp_buf_reserve(out, len / 4 * 3) != SP_OK) {
        return out->err;
    }
    for (i = 0; i < len; i += 4) {
        for (j = 0; j < 4; j++) {
            if (i + 4 == len && j >= 4 - pad) {
                d[j] = 0;
                continue;
            }
            d[j] = sp_b64_value(in[i + j]);
            if (d[j] < 0) {
                out->len = start;
                return SP_ERR_INVALID;
            }
        }
        v = (uint32_t)d[0] << 18 | (uint32_t)d[1] << 12
            | (uint32_t)d[2] << 6 | (uint32_t)d[3];
        /* Bits the padding leaves over must be zero (RFC 4648 3.5). */
        if (i + 4 == len && ((pad == 2 && (v & 0xFFFF) != 0)
                             || (pad == 1 && (v & 0xFF) != 0)))
        {
            out->len = start;
            return SP_ERR_INVALID;
        }
        out->data[out->len++] = (uint8_t)(v >> 16);
        if (i + 4 < len || pad < 2) {
            out->data[out->len++] = (uint8_t)(v >> 8);
        }
        if (i + 4 < len || pad < 1) {
            out->data[out->len++] = (uint8_t)v;
        }
    }
    return SP_OK;
}
