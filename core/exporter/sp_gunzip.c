#include "sp_gunzip.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>

#define SP_GUNZIP_CHUNK (64u << 10)

sp_status
sp_gunzip(sp_buf *out, const void *in, size_t len)
{
    z_stream  z;
    size_t    start = out->len, room;
    sp_status rc = SP_OK;
    int       zrc;

    if (out->err != SP_OK) {
        return out->err;
    }
    if (len > UINT_MAX) {
        return SP_ERR_TOO_LONG;
    }
    memset(&z, 0, sizeof(z));
    /* 16 + 15: a gzip header, never raw deflate or zlib. */
    if (inflateInit2(&z, 16 + 15) != Z_OK) {
        return SP_ERR_NOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    do {
        room = out->limit != 0 && out->limit - out->len < SP_GUNZIP_CHUNK
               ? out->limit - out->len : SP_GUNZIP_CHUNK;
        if (room == 0) {
            rc = SP_ERR_TOO_LONG;
            break;
        }
        if (sp_buf_reserve(out, room) != SP_OK) {
            rc = out->err;
            break;
        }
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)room;
        zrc = inflate(&z, Z_NO_FLUSH);
        out->len += room - z.avail_out;
        if (zrc == Z_STREAM_END) {
            break;
        }
        if (zrc == Z_MEM_ERROR) {
            rc = SP_ERR_NOMEM;
        } else if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
            rc = SP_ERR_INVALID;
        } else if (z.avail_in == 0 && z.avail_out != 0) {
            rc = SP_ERR_INVALID;    /* the input ended inside the member */
        }
    } while (rc == SP_OK);
    if (rc == SP_OK && z.avail_in != 0) {
        rc = SP_ERR_INVALID;        /* something after the member */
    }
    inflateEnd(&z);
    if (rc != SP_OK) {
        sp_buf_truncate(out, start);
        out->err = rc == SP_ERR_INVALID ? SP_OK : rc;
    }
    return rc;
}
