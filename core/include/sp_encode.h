/*
 * Byte encodings of the exporter: growable byte buffers with a size
 * limit, protobuf's wire format, gzip and base64.
 *
 * EXPORTER PROCESS ONLY (zlib, heap).
 *
 * Buffers carry a sticky error: once an append fails (the limit, or
 * memory), every later append to that buffer does nothing and returns the
 * same error, so an encoder writes a whole message and checks once at the
 * end. sp_buf_truncate and sp_buf_clear clear the error. The functions
 * that append one whole encoding (sp_gzip, sp_base64_*, sp_pprof_serialize)
 * leave the length as it was when they fail, and set the error too.
 *
 * The protobuf writers emit canonical wire format (shortest varints,
 * length-delimited fields with exact lengths); they never skip a field:
 * proto3's "zero is absent" is the caller's choice. Strings are written as
 * valid UTF-8 (receivers built on golang/protobuf reject a request with an
 * invalid proto3 string): each invalid sequence becomes U+FFFD.
 */
#ifndef SP_ENCODE_H
#define SP_ENCODE_H

#include "sp_common.h"
#include "sp_utf8.h"

/* ---- buffers */

typedef struct sp_buf {
    uint8_t   *data;
    size_t     len;
    size_t     cap;
    size_t     limit;   /* most bytes it may hold; 0: no limit */
    sp_status  err;     /* sticky: SP_OK, SP_ERR_TOO_LONG, SP_ERR_NOMEM */
} sp_buf;

#define SP_BUF_INIT(limit) { NULL, 0, 0, (limit), SP_OK }

/* An empty buffer that will hold at most limit bytes (0: no limit). */
SP_API void sp_buf_init(sp_buf *b, size_t limit);

/* Frees the memory; the buffer is empty and usable again. NULL is fine. */
SP_API void sp_buf_free(sp_buf *b);

/* Empty again, error cleared, memory kept for reuse. */
SP_API void sp_buf_clear(sp_buf *b);

/* Back to len bytes (len <= b->len), error cleared. */
SP_API void sp_buf_truncate(sp_buf *b, size_t len);

/*
 * Room for `more` bytes after len: SP_OK, or the sticky error
 * (SP_ERR_TOO_LONG past the limit, SP_ERR_NOMEM). Capacity grows by
 * doubling, capped at the limit.
 */
SP_API sp_status sp_buf_reserve(sp_buf *b, size_t more);

SP_API sp_status sp_buf_append(sp_buf *b, const void *p, size_t n);

/* SP_OK or the sticky error. */
SP_API sp_status sp_buf_status(const sp_buf *b);

/* ---- protobuf wire format */

/* Bytes of v as a varint (1..10); inline, as the exporter sizes every
 * record it adds to a request. */
static inline size_t
sp_pb_varint_size(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* v as a varint at p, which has room for 10 bytes; the bytes written. */
static inline size_t
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

/* A bare varint, no tag (packed repeated fields, lengths). */
SP_API sp_status sp_pb_put_varint(sp_buf *b, uint64_t v);

/*
 * A varint field: uint32/64, bool, enum, and int32/64 (pass the value cast
 * to uint64_t: negative numbers take 10 bytes, as protobuf says).
 */
SP_API sp_status sp_pb_uint(sp_buf *b, uint32_t field, uint64_t v);
SP_API sp_status sp_pb_fixed64(sp_buf *b, uint32_t field, uint64_t v);
SP_API sp_status sp_pb_fixed32(sp_buf *b, uint32_t field, uint32_t v);

/* A length-delimited field of raw bytes (bytes fields, nested messages
 * already encoded). */
SP_API sp_status sp_pb_bytes(sp_buf *b, uint32_t field, const void *p,
                             size_t len);

/* A string field: s[0..len), made valid UTF-8 (see above). */
SP_API sp_status sp_pb_string(sp_buf *b, uint32_t field, const char *s,
                              size_t len);
/* The same for a NUL-terminated string; NULL writes "". */
SP_API sp_status sp_pb_cstring(sp_buf *b, uint32_t field, const char *s);

/*
 * A nested message written in place: sp_pb_begin writes the tag and
 * returns a mark; write the message's fields; sp_pb_end(mark) fills in the
 * length (moving the body when its length needs more than one byte).
 * Nests freely. After an error sp_pb_end does nothing.
 */
SP_API size_t sp_pb_begin(sp_buf *b, uint32_t field);
SP_API sp_status sp_pb_end(sp_buf *b, size_t mark);

/*
 * Bytes s[0..len) as valid UTF-8 appended to b: valid input unchanged,
 * each maximal invalid subsequence replaced by U+FFFD (EF BF BD).
 */
SP_API sp_status sp_utf8_sanitize(sp_buf *b, const char *s, size_t len);


/* ---- gzip (RFC 1952) */

#define SP_GZIP_DEFAULT_LEVEL (-1)    /* zlib's default, 6 */

/*
 * Appends the gzip of in[0..len) to out, in one deflate pass (level -1 or
 * 0..9) into room reserved for zlib's deflateBound (len plus about 0.1%
 * and a few bytes): out's limit must allow that much. The header has no
 * name and mtime 0, so equal input gives equal output. SP_OK;
 * SP_ERR_INVALID for a bad level (out untouched); out's errors;
 * SP_ERR_NOMEM when zlib cannot get its state.
 */
SP_API sp_status sp_gzip(sp_buf *out, const void *in, size_t len,
                         int level);

/* ---- base64 (RFC 4648 section 4: standard alphabet, padding) */

/* Bytes of the encoding of len bytes: 4 * ceil(len / 3). */
SP_API size_t sp_base64_size(size_t len);

/* Appends the encoding of in[0..len) to out; no line breaks. */
SP_API sp_status sp_base64_encode(sp_buf *out, const void *in, size_t len);

/*
 * Appends the bytes in[0..len) encodes: the standard alphabet with the
 * required padding, nothing else (no whitespace, no URL alphabet, unused
 * bits zero). SP_ERR_INVALID otherwise, out unchanged.
 */
SP_API sp_status sp_base64_decode(sp_buf *out, const char *in, size_t len);

#endif
