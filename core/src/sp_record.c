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
 *   46  u16  reserved
 *   48  u8   trace_id[16]       zero unless has_span, never zero with it
 *   64  u8   span_id[8]         likewise
 *   72  u64  frames[frame_count]
 * frames is 8-byte aligned in the body, so a decoded sample points at it.
 *
 * Span (SP_RECORD_SPAN), exactly 64 + 16 * attr_count + the strings:
 *    0  u8   trace_id[16]       never zero
 *   16  u8   span_id[8]         never zero
 *   24  u8   parent_span_id[8]
 *   32  u64  start_ns
 *   40  u64  end_ns
 *   48  u32  pid
 *   52  u8   trace_flags
 *   53  u8   kind               OTLP SpanKind, 0..5
 *   54  u8   status_code        0..2
 *   55  u8   reserved
 *   56  u16  name_len           <= SP_SPAN_STRING_MAX
 *   58  u16  tracestate_len     <= SP_TRACESTATE_MAX_LEN
 *   60  u16  attr_count
 *   62  u16  reserved
 *   64  attribute entries, 16 bytes each:
 *          0  u8   type         sp_value_type
 *          1  u8   reserved
 *          2  u16  key_len      <= SP_SPAN_STRING_MAX
 *          4  u32  key_off      from the start of the body
 *          8  i64  integer      SP_VALUE_INT; SP_VALUE_BOOL: 0 or 1
 *          8  u32  str_off      SP_VALUE_STRING, in place of integer
 *         12  u16  str_len      <= SP_SPAN_STRING_MAX
 *         14  u16  reserved
 *   then the name, the tracestate, and each attribute's key and string.
 * The offsets make sp_span_attr_at O(1); the decoder checks each one
 * against the string area and the total against the body's length.
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

#define SP_SAMPLE_HEAD          72
#define SP_SAMPLE_TRUNCATED     0x01
#define SP_SAMPLE_HAS_SPAN      0x02

#define SP_SPAN_HEAD            64
#define SP_ATTR_SIZE            16
#define SP_SPAN_KIND_MAX        5   /* CONSUMER */

#define SP_OBJECTS_HEAD         16
#define SP_OBJECT_SIZE          64

_Static_assert(SP_SAMPLE_HEAD % 8 == 0, "frames must stay aligned");
_Static_assert(SP_TRACESTATE_MAX_LEN <= UINT16_MAX, "u16 length");
_Static_assert(SP_SPAN_STRING_MAX <= UINT16_MAX, "u16 length");
_Static_assert(SP_OBJECT_PATH_MAX <= UINT16_MAX, "u16 length");

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

static uint16_t
sp_get16(const unsigned char *p, size_t off)
{
    uint16_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

static uint32_t
sp_get32(const unsigned char *p, size_t off)
{
    uint32_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

static uint64_t
sp_get64(const unsigned char *p, size_t off)
{
    uint64_t v;

    memcpy(&v, p + off, sizeof(v));
    return v;
}

static bool
sp_all_zero(const unsigned char *p, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (p[i] != 0) {
            return false;
        }
    }
    return true;
}

/*
 * The length s[0..len) keeps when cut to max bytes. The cut never splits a
 * UTF-8 sequence, so what reaches OTLP's string fields stays valid UTF-8 if
 * it was: it backs off over at most three continuation bytes.
 */
static size_t
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
static size_t
sp_tracestate_len(const sp_span_record *s)
{
    return s->tracestate_len <= SP_TRACESTATE_MAX_LEN ? s->tracestate_len
                                                      : 0;
}

/* ---- samples */

static uint16_t
sp_frames_kept(uint16_t frame_count)
{
    return frame_count > SP_RECORD_MAX_FRAMES ? SP_RECORD_MAX_FRAMES
                                              : frame_count;
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
    sp_put16(p, 46, 0);
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
        || p[43] != 0 || sp_get16(p, 46) != 0
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
    /* aligned: the body is, and SP_SAMPLE_HEAD is a multiple of 8 */
    out->frames = (const uint64_t *)(const void *)(p + SP_SAMPLE_HEAD);
    return SP_OK;
}

/* ---- spans */

static size_t
sp_attr_key_len(const sp_span_attr *a)
{
    return sp_cut(a->key, a->key_len, SP_SPAN_STRING_MAX);
}

static size_t
sp_attr_str_len(const sp_span_attr *a)
{
    return a->type == SP_VALUE_STRING
           ? sp_cut(a->str, a->str_len, SP_SPAN_STRING_MAX) : 0;
}

size_t
sp_span_size(const sp_span_record *s, const sp_span_attr *attrs,
    uint16_t attr_count)
{
    size_t   size;
    uint16_t i;

    size = SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)attr_count
           + sp_cut(s->name, s->name_len, SP_SPAN_STRING_MAX)
           + sp_tracestate_len(s);
    for (i = 0; i < attr_count; i++) {
        size += sp_attr_key_len(&attrs[i]) + sp_attr_str_len(&attrs[i]);
    }
    return size;
}

size_t
sp_span_encode(void *dst, const sp_span_record *s,
    const sp_span_attr *attrs, uint16_t attr_count)
{
    unsigned char *p = dst, *e;
    size_t         name_len, ts_len, key_len, str_len, off;
    uint16_t       i;

    name_len = sp_cut(s->name, s->name_len, SP_SPAN_STRING_MAX);
    ts_len = sp_tracestate_len(s);

    memcpy(p, s->trace_id, 16);
    memcpy(p + 16, s->span_id, 8);
    memcpy(p + 24, s->parent_span_id, 8);
    sp_put64(p, 32, s->start_ns);
    sp_put64(p, 40, s->end_ns);
    sp_put32(p, 48, s->pid);
    sp_put8(p, 52, s->trace_flags);
    sp_put8(p, 53, s->kind);
    sp_put8(p, 54, s->status_code);
    sp_put8(p, 55, 0);
    sp_put16(p, 56, (uint16_t)name_len);
    sp_put16(p, 58, (uint16_t)ts_len);
    sp_put16(p, 60, attr_count);
    sp_put16(p, 62, 0);

    off = SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)attr_count;
    sp_put_bytes(p, off, s->name, name_len);
    off += name_len;
    sp_put_bytes(p, off, s->tracestate, ts_len);
    off += ts_len;

    for (i = 0; i < attr_count; i++) {
        e = p + SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)i;
        key_len = sp_attr_key_len(&attrs[i]);
        str_len = sp_attr_str_len(&attrs[i]);
        sp_put8(e, 0, attrs[i].type);
        sp_put8(e, 1, 0);
        sp_put16(e, 2, (uint16_t)key_len);
        sp_put32(e, 4, (uint32_t)off);
        sp_put_bytes(p, off, attrs[i].key, key_len);
        off += key_len;
        if (attrs[i].type == SP_VALUE_STRING) {
            sp_put32(e, 8, (uint32_t)off);
            sp_put16(e, 12, (uint16_t)str_len);
            sp_put16(e, 14, 0);
            sp_put_bytes(p, off, attrs[i].str, str_len);
            off += str_len;
        } else if (attrs[i].type == SP_VALUE_BOOL) {
            sp_put64(e, 8, attrs[i].integer != 0);
        } else {
            sp_put64(e, 8, (uint64_t)attrs[i].integer);
        }
    }
    return off;
}

/* [off, off + len) lies inside [lo, size) */
static bool
sp_in_range(uint64_t off, uint64_t len, size_t lo, size_t size)
{
    return off >= lo && off <= size && len <= size - off;
}

/*
 * One attribute entry of a body of `size` bytes whose strings start at
 * `strings`: every offset checked before anything is pointed at.
 */
static sp_status
sp_attr_parse(const unsigned char *body, size_t size, size_t strings,
    uint16_t i, sp_span_attr *out)
{
    const unsigned char *e = body + SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)i;
    uint16_t             key_len = sp_get16(e, 2);
    uint32_t             key_off = sp_get32(e, 4);
    uint32_t             str_off;
    uint16_t             str_len;
    int64_t              integer;

    if (e[1] != 0 || key_len > SP_SPAN_STRING_MAX
        || !sp_in_range(key_off, key_len, strings, size))
    {
        return SP_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    out->type = e[0];
    out->key = (const char *)body + key_off;
    out->key_len = key_len;
    switch (e[0]) {
    case SP_VALUE_STRING:
        str_off = sp_get32(e, 8);
        str_len = sp_get16(e, 12);
        if (sp_get16(e, 14) != 0 || str_len > SP_SPAN_STRING_MAX
            || !sp_in_range(str_off, str_len, strings, size))
        {
            return SP_ERR_INVALID;
        }
        out->str = (const char *)body + str_off;
        out->str_len = str_len;
        return SP_OK;
    case SP_VALUE_BOOL:
    case SP_VALUE_INT:
        integer = (int64_t)sp_get64(e, 8);
        if (e[0] == SP_VALUE_BOOL && integer != 0 && integer != 1) {
            return SP_ERR_INVALID;
        }
        out->integer = integer;
        return SP_OK;
    default:
        return SP_ERR_INVALID;
    }
}

sp_status
sp_span_decode(const void *body, size_t len, sp_span_record *out)
{
    return sp_span_decode_attrs(body, len, out, NULL, 0);
}

sp_status
sp_span_decode_attrs(const void *body, size_t len, sp_span_record *out,
    sp_span_attr *attrs, size_t max)
{
    const unsigned char *p = body;
    size_t               strings, total;
    uint16_t             name_len, ts_len, count, i;
    sp_span_attr         a, *to;

    if (body == NULL || len < SP_SPAN_HEAD) {
        return SP_ERR_INVALID;
    }
    name_len = sp_get16(p, 56);
    ts_len = sp_get16(p, 58);
    count = sp_get16(p, 60);
    strings = SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)count;
    if (p[55] != 0 || sp_get16(p, 62) != 0
        || p[53] > SP_SPAN_KIND_MAX || p[54] > SP_STATUS_ERROR
        || name_len > SP_SPAN_STRING_MAX || ts_len > SP_TRACESTATE_MAX_LEN
        || sp_all_zero(p, 16) || sp_all_zero(p + 16, 8)
        || strings > len || (size_t)name_len + ts_len > len - strings)
    {
        return SP_ERR_INVALID;
    }

    memset(out, 0, sizeof(*out));
    out->attrs = p;
    out->attrs_len = len;
    out->attr_count = count;
    /* every entry checked now, so that sp_span_attr_at cannot fail later */
    total = strings + name_len + ts_len;
    for (i = 0; i < count; i++) {
        /* Parsed once: the caller's copy is the one checked. */
        to = i < max ? &attrs[i] : &a;
        if (sp_attr_parse(p, len, strings, i, to) != SP_OK) {
            return SP_ERR_INVALID;
        }
        total += to->key_len + to->str_len;
    }
    if (total != len) {
        return SP_ERR_INVALID;
    }

    memcpy(out->trace_id, p, 16);
    memcpy(out->span_id, p + 16, 8);
    memcpy(out->parent_span_id, p + 24, 8);
    out->start_ns = sp_get64(p, 32);
    out->end_ns = sp_get64(p, 40);
    out->pid = sp_get32(p, 48);
    out->trace_flags = p[52];
    out->kind = p[53];
    out->status_code = p[54];
    out->name = (const char *)p + strings;
    out->name_len = name_len;
    out->tracestate = (const char *)p + strings + name_len;
    out->tracestate_len = ts_len;
    return SP_OK;
}

/*
 * attrs points at the whole body (attrs_len bytes): the entries' offsets
 * count from its start. Checked again here, as the record is the caller's
 * and may not come from sp_span_decode.
 */
sp_status
sp_span_attr_at(const sp_span_record *s, uint16_t i, sp_span_attr *out)
{
    size_t strings;

    if (i >= s->attr_count) {
        return SP_ERR_NOT_FOUND;
    }
    strings = SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)s->attr_count;
    if (s->attrs == NULL || s->attrs_len < strings) {
        return SP_ERR_INVALID;
    }
    return sp_attr_parse(s->attrs, s->attrs_len, strings, i, out);
}

/*
 * Word at a time (32 bytes an iteration): callgrind counted ~70
 * instructions a string for checking a span's twenty-odd strings one by
 * one as UTF-8; one pass over the area is ~100 for all of them.
 */
bool
sp_span_strings_ascii(const sp_span_record *s)
{
    const unsigned char *p;
    size_t               strings, n, i;
    uint64_t             acc = 0;

    strings = SP_SPAN_HEAD + SP_ATTR_SIZE * (size_t)s->attr_count;
    if (s->attrs == NULL || s->attrs_len < strings) {
        return false;
    }
    p = (const unsigned char *)s->attrs + strings;
    n = s->attrs_len - strings;
    for (i = 0; i + 32 <= n; i += 32) {
        acc |= sp_get64(p, i) | sp_get64(p, i + 8) | sp_get64(p, i + 16)
               | sp_get64(p, i + 24);
    }
    for (; i + 8 <= n; i += 8) {
        acc |= sp_get64(p, i);
    }
    for (; i < n; i++) {
        acc |= p[i];
    }
    return (acc & 0x8080808080808080ull) == 0;
}

/* ---- objects */

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
