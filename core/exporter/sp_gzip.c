#include "sp_encode.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>

/*
 * deflateBound gives the most bytes the stream can take, so one deflate
 * call with Z_FINISH writes all of it into space reserved up front: no
 * loop, no copy. zlib counts in uInt, so larger inputs are refused.
 */
sp_status
sp_gzip(sp_buf *out, const void *in, size_t len, int level)
{
    z_stream  z;
    size_t    bound, start;
    int       rc;

    if (level < -1 || level > 9) {
        return SP_ERR_INVALID;
    }
    if (out->err != SP_OK) {
        return out->err;
    }
    if (len > UINT_MAX / 2) {
        out->err = SP_ERR_TOO_LONG;
        return out->err;
    }
    memset(&z, 0, sizeof(z));
    /* windowBits 15 + 16: a gzip header and trailer instead of zlib's. */
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
    {
        out->err = SP_ERR_NOMEM;
        return out->err;
    }
    bound = deflateBound(&z, (uLong)len);
    start = out->len;
    if (sp_buf_reserve(out, bound) != SP_OK) {
        deflateEnd(&z);
        return out->err;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    z.next_out = out->data + start;
    z.avail_out = (uInt)bound;
    rc = deflate(&z, Z_FINISH);
    if (rc != Z_STREAM_END) {
        deflateEnd(&z);
        out->err = rc == Z_MEM_ERROR ? SP_ERR_NOMEM : SP_ERR_TOO_LONG;
        return out->err;
    }
    out->len = start + z.total_out;
    deflateEnd(&z);
    return SP_OK;
}
