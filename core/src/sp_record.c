/*
 * The records' bytes. Writer and reader are processes of one server on one
 * machine, so integers are in the machine's native byte order; every field
 * sits at a fixed offset and is read and written with memcpy, never through
 * a cast struct, so neither padding nor alignment of a C struct can change
 * the format. Reserved bytes are written as zero and must read as zero: a
 * decoder that finds anything else is looking at garbage.
 *
 * Sample (SP_RECORD_SAMPLE), 72 + 8 * frame_count bytes:
 *    0  u64  time_ns
 *    8  u64  period_ns
 *   16  u32  pid
 *   20  u32  tid
 *   24  u8   thread_name[16]    NUL-terminated, zero after the NUL
 *   40  u8   state              sp_thread_state
 *   41  u8   source             sp_sample_source
 *   42  u8   flags              bit 0 truncated, bit 1 has_span
 *   43  u8   reserved
 *   44  u16  frame_count        <= SP_RECORD_MAX_FRAMES
 *   46  u16  extra_weight       weight - 1, < SP_SAMPLE_WEIGHT_MAX; stored
 *                               less one so that a zero here (the byte
 *                               this was reserved as) still reads as
 *                               one sample
 *   48  u8   trace_id[16]       zero unless has_span, never zero with it
 *   64  u8   span_id[8]         likewise
 *   72  u64  frames[frame_count]
 * frames is 8-byte aligned in the body, so a decoded sample points at it.
 *
 * Span (SP_RECORD_SPAN), 8 + the Span message's bytes:
 *    0  u32  pid                the worker that served it
 *    4  u32  reserved
 *    8  the opentelemetry.proto.trace.v1.Span message, exactly as it goes
 *       into an ExportTraceServiceRequest (its fields in number order,
 *       strings valid UTF-8), so the exporter sends it on as it is.
 *
 * Objects (SP_RECORD_OBJECTS), exactly 16 + 64 * count + the paths:
 *    0  u32  pid
 *    4  u32  generation
 *    8  u16  count
 *   10  u16  reserved
 *   12  u32  reserved
 *   16  object entries, 64 bytes each:
 *          0  u64  start        start <= end
 *          8  u64  end
 *         16  u64  load_bias
 *         24  u64  file_offset
 *         32  u8   build_id[20] zero past build_id_len
 *         52  u8   build_id_len <= SP_BUILD_ID_MAX
 *         53  u8   reserved
 *         54  u16  path_len     <= SP_OBJECT_PATH_MAX
 *         56  u32  path_off     from the start of the body
 *         60  u32  reserved
 *   then the paths.
 */
#include <string.h>

#include "sp_copy.h"
#include "sp_record.h"
#include "sp_tracecontext.h"
#include "sp_span_check.h"
#include "sp_span_put.h"
#include "sp_utf8.h"

#define SP_SAMPLE_HEAD          72
#define SP_SAMPLE_TRUNCATED     0x01
#define SP_SAMPLE_HAS_SPAN      0x02

#define SP_OBJECTS_HEAD         16
#define SP_OBJECT_SIZE          64

_Static_assert(SP_SAMPLE_HEAD % 8 == 0, "frames must stay aligned");
_Static_assert(SP_SPAN_RECORD_HEAD == SP_SPAN_HEAD, "one span head");
_Static_assert(SP_TRACESTATE_MAX_LEN <= UINT16_MAX, "u16 length");
_Static_assert(SP_SPAN_STRING_MAX <= UINT16_MAX, "u16 length");
_Static_assert(SP_OBJECT_PATH_MAX <= UINT16_MAX, "u16 length");
_Static_assert(SP_SAMPLE_WEIGHT_MAX <= UINT16_MAX, "u16 weight");

/* ---- little helpers, all async-signal-safe (memcpy only) */

static void
sp_put8(unsigned char *p, size_t off, uint8_t v)
{
    p[off] = v;
}

static void
sp_put16(unsigned char *p, size_t off, uint16_t v)
{
    memcpy(p + off, &v, sizeof(v));
}

static void
sp_put32(unsigned char *p, size_t off, uint32_t v)
{
    memcpy(p + off, &v, sizeof(v));
}

static void
sp_put64(unsigned char *p, size_t off, uint64_t v)
{
    memcpy(p + off, &v, sizeof(v));
}

static void
sp_put_bytes(unsigned char *p, size_t off, const void *src, size_t len)
{
    /* sp_copy reads nothing for 0 bytes: a NULL source is fine */
    sp_copy(p + off, src, len);
}

static uint32_t
sp_get32(const unsigned char *p, size_t off)
{
    uint32_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

/* ---- samples */

static uint16_t
sp_frames_kept(uint16_t frame_count)
{
    return frame_count > SP_RECORD_MAX_FRAMES ? SP_RECORD_MAX_FRAMES
                                              : frame_count;
}

/* 0 means one sample; more than the maximum saturates. */
static uint16_t
sp_weight_kept(uint16_t weight)
{
    return weight == 0 ? 1
           : weight > SP_SAMPLE_WEIGHT_MAX ? SP_SAMPLE_WEIGHT_MAX : weight;
}

size_t
sp_sample_size(uint16_t frame_count)
{
    return SP_SAMPLE_HEAD + 8 * (size_t)sp_frames_kept(frame_count);
}

size_t
sp_sample_encode(void *dst, const sp_sample *s)
{
    unsigned char *p = dst;
    uint16_t       n = sp_frames_kept(s->frame_count);
    uint8_t        flags = 0;
    size_t         i;

    sp_put64(p, 0, s->time_ns);
    sp_put64(p, 8, s->period_ns);
    sp_put32(p, 16, s->pid);
    sp_put32(p, 20, s->tid);
    /* up to the NUL, zero after it, the last byte always NUL */
    for (i = 0; i < SP_THREAD_NAME_SIZE - 1 && s->thread_name[i] != '\0';
         i++)
    {
        p[24 + i] = (unsigned char)s->thread_name[i];
    }
    for (; i < SP_THREAD_NAME_SIZE; i++) {
        p[24 + i] = 0;
    }
    if (s->truncated || n < s->frame_count) {
        flags |= SP_SAMPLE_TRUNCATED;
    }
    if (s->has_span) {
        flags |= SP_SAMPLE_HAS_SPAN;
    }
    sp_put8(p, 40, s->state);
    sp_put8(p, 41, s->source);
    sp_put8(p, 42, flags);
    sp_put8(p, 43, 0);
    sp_put16(p, 44, n);
    sp_put16(p, 46, sp_weight_kept(s->weight) - 1);
    if (s->has_span) {
        memcpy(p + 48, s->trace_id, 16);
        memcpy(p + 64, s->span_id, 8);
    } else {
        memset(p + 48, 0, 24);
    }
    sp_put_bytes(p, SP_SAMPLE_HEAD, s->frames, 8 * (size_t)n);
    return SP_SAMPLE_HEAD + 8 * (size_t)n;
}

sp_status
sp_sample_decode(const void *body, size_t len, sp_sample *out)
{
    const unsigned char *p = body;
    uint8_t              flags;
    uint16_t             n;

    if (body == NULL || len < SP_SAMPLE_HEAD
        || ((uintptr_t)body & 7) != 0)
    {
        return SP_ERR_INVALID;
    }
    n = sp_get16(p, 44);
    flags = p[42];
    if (n > SP_RECORD_MAX_FRAMES || len != sp_sample_size(n)
        || (flags & ~(SP_SAMPLE_TRUNCATED | SP_SAMPLE_HAS_SPAN)) != 0
        || p[43] != 0 || sp_get16(p, 46) >= SP_SAMPLE_WEIGHT_MAX
        || p[40] < SP_THREAD_RUNNING || p[40] > SP_THREAD_UNKNOWN
        || p[41] < SP_SOURCE_SNAPSHOT || p[41] > SP_SOURCE_CONTINUOUS
        || memchr(p + 24, '\0', SP_THREAD_NAME_SIZE) == NULL)
    {
        return SP_ERR_INVALID;
    }
    if ((flags & SP_SAMPLE_HAS_SPAN)
        ? sp_all_zero(p + 48, 16) || sp_all_zero(p + 64, 8)
        : !sp_all_zero(p + 48, 24))
    {
        return SP_ERR_INVALID;
    }

    memset(out, 0, sizeof(*out));
    out->time_ns = sp_get64(p, 0);
    out->period_ns = sp_get64(p, 8);
    out->pid = sp_get32(p, 16);
    out->tid = sp_get32(p, 20);
    memcpy(out->thread_name, p + 24, SP_THREAD_NAME_SIZE);
    out->state = p[40];
    out->source = p[41];
    out->truncated = (flags & SP_SAMPLE_TRUNCATED) != 0;
    out->has_span = (flags & SP_SAMPLE_HAS_SPAN) != 0;
    memcpy(out->trace_id, p + 48, 16);
    memcpy(out->span_id, p + 64, 8);
    out->frame_count = n;
    out->weight = (uint16_t)(sp_get16(p, 46) + 1);
    /* aligned: the body is, and SP_SAMPLE_HEAD is a multiple of 8 */
    out->frames = (const uint64_t *)(const void *)(p + SP_SAMPLE_HEAD);
    return SP_OK;
}

/* ---- spans: an OTLP Span message, written where the worker records it */

/* A string field whose repaired length n is known; len is already cut. */
static unsigned char *
sp_put_repaired(unsigned char *p, uint8_t tag, const char *s, size_t len,
    size_t n)
{
    *p++ = tag;
    p = sp_put_varint(p, n);
    sp_utf8_repair(p, s, len);
    return p + n;
}

unsigned char *
sp_put_text_repaired(unsigned char *p, uint8_t tag, const char *s,
    size_t len)
{
    return sp_put_repaired(p, tag, s, len, sp_utf8_repaired_len(s, len));
}

/* One attribute as sp_put_attr_repaired writes it: its strings cut, then
 * their lengths once repaired, and its AnyValue and KeyValue bodies. */
typedef struct sp_attr_sizes {
    size_t key_cut, key, str_cut, str, any, kv;
} sp_attr_sizes;

static void
sp_attr_measure(const sp_span_attr *a, sp_attr_sizes *z)
{
    z->key_cut = sp_cut(a->key, a->key_len, SP_SPAN_STRING_MAX);
    z->key = sp_utf8_repaired_len(a->key, z->key_cut);
    z->str_cut = 0;
    z->str = 0;
    switch (a->type) {
    case SP_VALUE_STRING:
        z->str_cut = sp_cut(a->str, a->str_len, SP_SPAN_STRING_MAX);
        z->str = sp_utf8_repaired_len(a->str, z->str_cut);
        z->any = sp_field_size(z->str);
        break;
    case SP_VALUE_BOOL:
        z->any = 2;
        break;
    default:
        z->any = 1 + sp_varint_size((uint64_t)a->integer);
        break;
    }
    z->kv = sp_field_size(z->key) + sp_field_size(z->any);
}

unsigned char *
sp_put_attr_repaired(unsigned char *p, const sp_span_attr *a)
{
    sp_attr_sizes z;

    sp_attr_measure(a, &z);
    *p++ = SP_TAG_SPAN_ATTR;
    p = sp_put_varint(p, z.kv);
    p = sp_put_repaired(p, SP_TAG_KV_KEY, a->key, z.key_cut, z.key);
    *p++ = SP_TAG_KV_VALUE;
    p = sp_put_varint(p, z.any);
    switch (a->type) {
    case SP_VALUE_STRING:
        return sp_put_repaired(p, SP_TAG_ANY_STRING, a->str, z.str_cut,
                               z.str);
    case SP_VALUE_BOOL:
        *p++ = SP_TAG_ANY_BOOL;
        *p++ = a->integer != 0 ? 1 : 0;
        return p;
    default:
        *p++ = SP_TAG_ANY_INT;
        return sp_put_varint(p, (uint64_t)a->integer);
    }
}

size_t
sp_span_size(const sp_span_record *s, const sp_span_attr *attrs,
    uint16_t attr_count)
{
    sp_attr_sizes z;
    size_t        size, ts_len = sp_tracestate_len(s);
    uint16_t      i;

    size = SP_SPAN_HEAD + 2 + 16 + 2 + 8 + 9 + 9 + 6
           + sp_field_size(sp_utf8_repaired_len(s->name,
                                                sp_cut(s->name, s->name_len,
                                                       SP_SPAN_STRING_MAX)));
    for (i = 0; i < attr_count; i++) {
        sp_attr_measure(&attrs[i], &z);
        size += sp_field_size(z.kv);
    }
    if (ts_len > 0) {
        size += sp_field_size(sp_utf8_repaired_len(s->tracestate, ts_len));
    }
    if (sp_span_has_parent(s)) {
        size += 2 + 8;
    }
    if (s->kind != 0) {
        size += 1 + sp_varint_size(s->kind);
    }
    if (s->status_code != SP_STATUS_UNSET) {
        size += 2 + 1 + sp_varint_size(s->status_code);
    }
    return size;
}

size_t
sp_span_encode(void *dst, const sp_span_record *s,
    const sp_span_attr *attrs, uint16_t attr_count)
{
    const sp_span_attr *a;
    unsigned char      *p;
    uint16_t            i;

    p = sp_put_span_head(dst, s);
    for (i = 0; i < attr_count; i++) {
        a = &attrs[i];
        if (a->type == SP_VALUE_STRING) {
            p = sp_put_attr_string(p, a->key,
                                   sp_cut(a->key, a->key_len,
                                          SP_SPAN_STRING_MAX),
                                   a->str,
                                   sp_cut(a->str, a->str_len,
                                          SP_SPAN_STRING_MAX));
        } else {
            p = sp_put_attr_number(p, a->key,
                                   sp_cut(a->key, a->key_len,
                                          SP_SPAN_STRING_MAX),
                                   a->type, a->integer);
        }
    }
    p = sp_put_span_tail(p, s);
    return (size_t)(p - (unsigned char *)dst);
}

/* A varint of at most 5 bytes (lengths here are far below 2^32) at
 * p[*i..n), or false when it runs past n or is longer. */
static bool
sp_get_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
    uint64_t x = 0;
    size_t   k = *i;
    int      shift;

    for (shift = 0; shift < 35 && k < n; shift += 7) {
        uint8_t b = p[k++];

        x |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *i = k;
            *v = x;
            return true;
        }
    }
    return false;
}

/* A length-delimited field at p[*i..n) whose tag is `tag`: its body's
 * offset and length, *i moved past it. */
static inline bool
sp_get_field(const unsigned char *p, size_t n, size_t *i, uint8_t tag,
    size_t *off, size_t *len)
{
    size_t   k = *i;
    uint64_t v;

    if (k >= n || p[k] != tag) {
        return false;
    }
    k++;
    if (k < n && p[k] < 0x80) {
        v = p[k++];         /* most lengths: one byte */
    } else if (!sp_get_varint(p, n, &k, &v)) {
        return false;
    }
    if (v > n - k) {
        return false;
    }
    *off = k;
    *len = (size_t)v;
    *i = k + (size_t)v;
    return true;
}

/* Past the attribute at p[i] whose length takes more than one byte, or 0
 * when it runs past n. Out of line: inlined, its registers cost the
 * one-byte loop an instruction per attribute. */
static __attribute__((noinline)) size_t
sp_skip_attr(const unsigned char *p, size_t n, size_t i)
{
    size_t off, len;

    return sp_get_field(p, n, &i, SP_TAG_SPAN_ATTR, &off, &len) ? i : 0;
}

/* sp_span_end_ok, then the view of the record b. */
static inline __attribute__((always_inline)) sp_status
sp_span_end(const unsigned char *b, size_t n, size_t i, uint32_t w,
    size_t trace, size_t span, sp_span_view *out)
{
    const unsigned char *p = b + SP_SPAN_HEAD;

    if (!sp_span_end_ok(p, n, i, w)) {
        return SP_ERR_INVALID;
    }
    out->pid = sp_get32(b, 0);
    out->otlp = p;
    out->otlp_len = n;
    out->trace_id = p + trace;
    out->span_id = p + span;
    return SP_OK;
}

/*
 * The attributes from p[i], i <= n - 6, walked against a limit 6 bytes
 * before the end, the flags' room, which leaves their tag and length
 * always readable; then the end. The tag and the length byte are taken
 * as one number, tag + 256 * length: less the attribute's tag, it has no
 * bit of 0x80ff set exactly when the tag is the attribute's and the
 * length fits its byte, and then it is 256 * length (8 instructions an
 * attribute instead of 9). An attribute that passes the limit fails the
 * record a little sooner than it would fail at the flags.
 */
static __attribute__((noinline)) sp_status
sp_span_attrs(const unsigned char *b, size_t n, size_t i, size_t trace,
    size_t span, sp_span_view *out)
{
    const unsigned char *p = b + SP_SPAN_HEAD;
    size_t               m = n - 6;
    uint32_t             w;

    for (;;) {
        w = sp_get16le(p, i);
        if (((w - SP_TAG_SPAN_ATTR) & 0x80ff) == 0) {
            i += (size_t)(w >> 8) + 2;
            if (i > m) {
                return SP_ERR_INVALID;
            }
        } else if ((w & 0xff) != SP_TAG_SPAN_ATTR) {
            break;
        } else if ((i = sp_skip_attr(p, m, i)) == 0) {
            return SP_ERR_INVALID;
        }
    }
    return sp_span_end(b, n, i, w, trace, span, out);
}

/*
 * sp_span_decode, every form: a field's length of more than one byte, a
 * tracestate, no kind. Its result is the same on every input as the
 * usual case's in sp_span_decode.
 */
static __attribute__((noinline)) sp_status
sp_span_decode_any(const unsigned char *b, size_t len, sp_span_view *out)
{
    const unsigned char *p;
    size_t               n, i = 0, trace, span, off, flen;
    uint64_t             v;

    if (b == NULL || len < SP_SPAN_HEAD || sp_get32(b, 4) != 0) {
        return SP_ERR_INVALID;
    }
    p = b + SP_SPAN_HEAD;
    n = len - SP_SPAN_HEAD;
    if (!sp_get_field(p, n, &i, SP_TAG_SPAN_TRACE_ID, &trace, &flen)
        || flen != 16
        || !sp_get_field(p, n, &i, SP_TAG_SPAN_SPAN_ID, &span, &flen)
        || flen != 8)
    {
        return SP_ERR_INVALID;
    }
    if (sp_all_zero(p + trace, 16) || sp_all_zero(p + span, 8)) {
        return SP_ERR_INVALID;
    }
    if (i < n && p[i] == SP_TAG_SPAN_TRACE_STATE
        && (!sp_get_field(p, n, &i, SP_TAG_SPAN_TRACE_STATE, &off, &flen)
            || flen == 0 || flen > SP_TRACESTATE_MAX_LEN))
    {
        return SP_ERR_INVALID;
    }
    if (i < n && p[i] == SP_TAG_SPAN_PARENT
        && (!sp_get_field(p, n, &i, SP_TAG_SPAN_PARENT, &off, &flen)
            || flen != 8))
    {
        return SP_ERR_INVALID;
    }
    if (!sp_get_field(p, n, &i, SP_TAG_SPAN_NAME, &off, &flen)) {
        return SP_ERR_INVALID;
    }
    if (i < n && p[i] == SP_TAG_SPAN_KIND) {
        i++;
        if (i < n && p[i] <= SP_SPAN_KIND_MAX) {
            i++;
        } else if (!sp_get_varint(p, n, &i, &v) || v > SP_SPAN_KIND_MAX) {
            return SP_ERR_INVALID;
        }
    }
    /* the two times, and the flags' 6 bytes somewhere after them */
    if (n - i < 18 + 6 || p[i] != SP_TAG_SPAN_START
        || p[i + 9] != SP_TAG_SPAN_END)
    {
        return SP_ERR_INVALID;
    }
    return sp_span_attrs(b, n, i + 18, trace, span, out);
}

/*
 * The framing of the Span message in the order sp_span_write gives it:
 * each field where it must be, each length inside the message, the ids
 * present and not zero. The attributes' insides are the encoder's and are
 * covered by the ring's checksum; the framing is what keeps one bad
 * record from taking its neighbours in the request with it.
 *
 * The form an entry span has is taken first (sp_span_entry), with no call
 * but where it leaves (no register to save); the exporter checks most
 * spans that way on the copy it sends (sp_span_check_copy), and the rest
 * here. Every other form starts over in sp_span_decode_any, and a long
 * attribute sends the attributes to sp_span_attrs: either gives the same
 * result.
 */
sp_status
sp_span_decode(const void *body, size_t len, sp_span_view *out)
{
    const unsigned char *b = body, *p;
    size_t               n, at;

    if (body == NULL || len < SP_SPAN_HEAD || sp_get32(b, 4) != 0) {
        return sp_span_decode_any(body, len, out);
    }
    p = b + SP_SPAN_HEAD;
    n = len - SP_SPAN_HEAD;
    switch (sp_span_entry(p, n, &at)) {
    case SP_FORM_ENTRY:
        return sp_span_end(b, n, at, sp_get16le(p, at), 2, 20, out);
    case SP_FORM_LONG:
        return sp_span_attrs(b, n, at, 2, 20, out);
    case SP_FORM_BAD:
        return SP_ERR_INVALID;
    default:
        return sp_span_decode_any(body, len, out);
    }
}

sp_status
sp_span_check_copy(const void *otlp, size_t otlp_len)
{
    return sp_span_check_padded(otlp, otlp_len) ? SP_OK : SP_ERR_NOT_FOUND;
}

/* ---- objects */

/* [off, off + len) lies inside [lo, size) */
static bool
sp_in_range(uint64_t off, uint64_t len, size_t lo, size_t size)
{
    return off >= lo && off <= size && len <= size - off;
}

size_t
sp_objects_size(const sp_object *objects, uint16_t count)
{
    size_t   size = SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)count;
    uint16_t i;

    for (i = 0; i < count; i++) {
        size += sp_cut(objects[i].path, objects[i].path_len,
                       SP_OBJECT_PATH_MAX);
    }
    return size;
}

size_t
sp_objects_encode(void *dst, uint32_t pid, uint32_t generation,
    const sp_object *objects, uint16_t count)
{
    unsigned char *p = dst, *e;
    size_t         off, path_len;
    uint8_t        id_len;
    uint16_t       i;

    sp_put32(p, 0, pid);
    sp_put32(p, 4, generation);
    sp_put16(p, 8, count);
    sp_put16(p, 10, 0);
    sp_put32(p, 12, 0);
    off = SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)count;
    for (i = 0; i < count; i++) {
        e = p + SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)i;
        path_len = sp_cut(objects[i].path, objects[i].path_len,
                          SP_OBJECT_PATH_MAX);
        id_len = objects[i].build_id_len > SP_BUILD_ID_MAX
                 ? SP_BUILD_ID_MAX : objects[i].build_id_len;
        sp_put64(e, 0, objects[i].start);
        sp_put64(e, 8, objects[i].end);
        sp_put64(e, 16, objects[i].load_bias);
        sp_put64(e, 24, objects[i].file_offset);
        memset(e + 32, 0, SP_BUILD_ID_MAX);
        memcpy(e + 32, objects[i].build_id, id_len);
        sp_put8(e, 52, id_len);
        sp_put8(e, 53, 0);
        sp_put16(e, 54, (uint16_t)path_len);
        sp_put32(e, 56, (uint32_t)off);
        sp_put32(e, 60, 0);
        sp_put_bytes(p, off, objects[i].path, path_len);
        off += path_len;
    }
    return off;
}

static sp_status
sp_object_parse(const unsigned char *body, size_t size, size_t strings,
    uint16_t i, sp_object *out)
{
    const unsigned char *e =
        body + SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)i;
    uint8_t              id_len = e[52];
    uint16_t             path_len = sp_get16(e, 54);
    uint32_t             path_off = sp_get32(e, 56);

    if (id_len > SP_BUILD_ID_MAX || e[53] != 0 || sp_get32(e, 60) != 0
        || !sp_all_zero(e + 32 + id_len, SP_BUILD_ID_MAX - id_len)
        || sp_get64(e, 0) > sp_get64(e, 8)
        || path_len > SP_OBJECT_PATH_MAX
        || !sp_in_range(path_off, path_len, strings, size))
    {
        return SP_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    out->start = sp_get64(e, 0);
    out->end = sp_get64(e, 8);
    out->load_bias = sp_get64(e, 16);
    out->file_offset = sp_get64(e, 24);
    memcpy(out->build_id, e + 32, SP_BUILD_ID_MAX);
    out->build_id_len = id_len;
    out->path = (const char *)body + path_off;
    out->path_len = path_len;
    return SP_OK;
}

sp_status
sp_objects_decode(const void *body, size_t len, sp_objects_record *out)
{
    const unsigned char *p = body;
    size_t               strings, total;
    uint16_t             count, i;
    sp_object            o;

    if (body == NULL || len < SP_OBJECTS_HEAD) {
        return SP_ERR_INVALID;
    }
    count = sp_get16(p, 8);
    strings = SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)count;
    if (sp_get16(p, 10) != 0 || sp_get32(p, 12) != 0 || strings > len) {
        return SP_ERR_INVALID;
    }
    total = strings;
    for (i = 0; i < count; i++) {
        if (sp_object_parse(p, len, strings, i, &o) != SP_OK) {
            return SP_ERR_INVALID;
        }
        total += o.path_len;
    }
    if (total != len) {
        return SP_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    out->pid = sp_get32(p, 0);
    out->generation = sp_get32(p, 4);
    out->count = count;
    out->objects = p;
    out->objects_len = len;
    return SP_OK;
}

/* objects points at the whole body, as attrs does for spans. */
sp_status
sp_object_at(const sp_objects_record *r, uint16_t i, sp_object *out)
{
    size_t strings;

    if (i >= r->count) {
        return SP_ERR_NOT_FOUND;
    }
    strings = SP_OBJECTS_HEAD + SP_OBJECT_SIZE * (size_t)r->count;
    if (r->objects == NULL || r->objects_len < strings) {
        return SP_ERR_INVALID;
    }
    return sp_object_parse(r->objects, r->objects_len, strings, i, out);
}
