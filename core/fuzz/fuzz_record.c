/*
 * Fuzzes the record decoders (sp_record.h) with arbitrary bodies. Every
 * decoder runs on every input. Invariants checked beyond "no crash, no
 * read past the body" (the body is copied into a buffer of exactly its
 * size, so ASan sees any overread):
 * - what a decoder returns points inside the body and keeps the limits
 *   (frame count, string lengths, enum ranges, a NUL in the thread name,
 *   a weight of 1 to SP_SAMPLE_WEIGHT_MAX);
 * - sp_object_at succeeds for every index below the count once the
 *   record decoded, and gives SP_ERR_NOT_FOUND past it;
 * - sp_span_check_copy takes no span record sp_span_decode refuses;
 * - a span record written from the input's bytes as its fields decodes,
 *   and protobuf-c reads its Span with every string valid UTF-8;
 * - encoding the decoded values gives *_size bytes, which decode again to
 *   the same values, field by field.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_record.h"
#include "sp_tracecontext.h"
#include "sp_utf8.h"

#include "opentelemetry/proto/trace/v1/trace.pb-c.h"

static const unsigned char *body_lo, *body_hi;

static void
check_inside(const void *p, size_t len)
{
    const unsigned char *b = p;

    if (len == 0) {
        return;
    }
    if (b < body_lo || b > body_hi || len > (size_t)(body_hi - b)) {
        abort();
    }
}

/* An 8-byte aligned copy of exactly len bytes (plus the slack malloc's
 * alignment gives, which ASan still guards). */
static void *
aligned_copy(const void *src, size_t len)
{
    void *p = NULL;

    if (posix_memalign(&p, 8, len == 0 ? 1 : len) != 0) {
        return NULL;
    }
    if (len > 0) {
        memcpy(p, src, len);
    }
    return p;
}

static void
same_sample(const sp_sample *a, const sp_sample *b)
{
    if (a->time_ns != b->time_ns || a->period_ns != b->period_ns
        || a->pid != b->pid || a->tid != b->tid
        || strcmp(a->thread_name, b->thread_name) != 0
        || a->state != b->state || a->source != b->source
        || a->truncated != b->truncated || a->has_span != b->has_span
        || memcmp(a->trace_id, b->trace_id, 16) != 0
        || memcmp(a->span_id, b->span_id, 8) != 0
        || a->frame_count != b->frame_count || a->weight != b->weight
        || (a->frame_count > 0
            && memcmp(a->frames, b->frames, 8 * (size_t)a->frame_count)
               != 0))
    {
        abort();
    }
}

static void
fuzz_sample(const unsigned char *body, size_t len)
{
    sp_sample s, again;
    void     *enc;
    size_t    n;

    if (sp_sample_decode(body, len, &s) != SP_OK) {
        return;
    }
    if (s.frame_count > SP_RECORD_MAX_FRAMES
        || memchr(s.thread_name, '\0', SP_THREAD_NAME_SIZE) == NULL
        || s.state < SP_THREAD_RUNNING || s.state > SP_THREAD_UNKNOWN
        || s.source < SP_SOURCE_SNAPSHOT || s.source > SP_SOURCE_CONTINUOUS
        || s.weight < 1 || s.weight > SP_SAMPLE_WEIGHT_MAX
        || len != sp_sample_size(s.frame_count))
    {
        abort();
    }
    check_inside(s.frames, 8 * (size_t)s.frame_count);
    n = sp_sample_size(s.frame_count);
    enc = malloc(n);
    if (enc == NULL) {
        return;
    }
    if (sp_sample_encode(enc, &s) != n
        || sp_sample_decode(enc, n, &again) != SP_OK)
    {
        abort();
    }
    same_sample(&s, &again);
    free(enc);
}

/*
 * The check the exporter makes on its copy of a record's Span
 * (sp_span_check_copy, the copy followed by its padding and nothing else,
 * so that ASan sees a read past it) never takes what sp_span_decode
 * refuses.
 */
static void
check_copy_agrees(const unsigned char *body, size_t len)
{
    unsigned char *c;
    sp_span_view   v;
    uint32_t       reserved;

    if (len < SP_SPAN_RECORD_HEAD) {
        return;
    }
    c = malloc(len - SP_SPAN_RECORD_HEAD + SP_SPAN_COPY_PAD);
    if (c == NULL) {
        return;
    }
    memcpy(c, body + SP_SPAN_RECORD_HEAD, len - SP_SPAN_RECORD_HEAD);
    memset(c + len - SP_SPAN_RECORD_HEAD, 0, SP_SPAN_COPY_PAD);
    memcpy(&reserved, body + 4, 4);
    if (sp_span_check_copy(c, len - SP_SPAN_RECORD_HEAD) == SP_OK
        && reserved == 0 && sp_span_decode(body, len, &v) != SP_OK)
    {
        abort();
    }
    free(c);
}

/*
 * A span record decoded from anything: the Span it points at lies in the
 * body, its ids inside that, not zero. Then the same bytes taken as the
 * fields of a span (strings that need not be UTF-8, any kind and status
 * in range): the record written decodes, protobuf-c reads its Span back
 * with the ids and times given, and every string in it is valid UTF-8.
 */
static void
fuzz_span(const unsigned char *body, size_t len)
{
    sp_span_view   v;
    sp_span_record r;
    sp_span_attr   at[3];
    unsigned char *enc;
    size_t         n, i, cut;
    Opentelemetry__Proto__Trace__V1__Span *m;

    check_copy_agrees(body, len);
    if (sp_span_decode(body, len, &v) == SP_OK) {
        check_inside(v.otlp, v.otlp_len);
        check_inside(v.trace_id, 16);
        check_inside(v.span_id, 8);
        if (v.otlp_len != len - 8 || !sp_trace_id_is_valid(v.trace_id)
            || !sp_span_id_is_valid(v.span_id))
        {
            abort();
        }
    }

    if (len < 48) {
        return;
    }
    memset(&r, 0, sizeof(r));
    memcpy(r.trace_id, body, 16);
    memcpy(r.span_id, body + 16, 8);
    memcpy(r.parent_span_id, body + 24, 8);
    r.trace_flags = body[32];
    r.kind = body[33] % 6;
    r.status_code = body[34] % 3;
    memcpy(&r.start_ns, body + 36, 8);
    r.end_ns = r.start_ns + body[44];
    r.trace_id[0] |= 1;
    r.span_id[0] |= 1;
    /* the rest, in four strings: name, tracestate, a key and a value */
    n = len - 48;
    cut = n / 4;
    r.name = (const char *)body + 48;
    r.name_len = cut;
    r.tracestate = r.name + cut;
    r.tracestate_len = body[45] & 1 ? cut : 0;
    at[0] = (sp_span_attr){ r.name + 2 * cut, cut > 0 ? cut : 1,
                            SP_VALUE_STRING, r.name + 3 * cut, n - 3 * cut,
                            0 };
    if (cut == 0) {
        at[0].key = "k";
    }
    at[1] = (sp_span_attr){ "i", 1, SP_VALUE_INT, NULL, 0,
                            (int64_t)r.start_ns };
    at[2] = (sp_span_attr){ "b", 1, SP_VALUE_BOOL, NULL, 0, body[46] };
    n = sp_span_size(&r, at, 3);
    enc = malloc(n);
    if (enc == NULL) {
        return;
    }
    if (sp_span_encode(enc, &r, at, 3) != n
        || sp_span_decode(enc, n, &v) != SP_OK
        || memcmp(v.trace_id, r.trace_id, 16) != 0
        || memcmp(v.span_id, r.span_id, 8) != 0)
    {
        abort();
    }
    m = opentelemetry__proto__trace__v1__span__unpack(NULL, v.otlp_len,
                                                      v.otlp);
    if (m == NULL || m->start_time_unix_nano != r.start_ns
        || m->end_time_unix_nano != r.end_ns || m->n_attributes != 3
        || (uint8_t)m->flags != r.trace_flags
        || !sp_utf8_valid(m->name, strlen(m->name))
        || !sp_utf8_valid(m->trace_state, strlen(m->trace_state)))
    {
        abort();
    }
    for (i = 0; i < m->n_attributes; i++) {
        const char *str = m->attributes[i]->value->value_case
            == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE
            ? m->attributes[i]->value->string_value : "";

        if (!sp_utf8_valid(m->attributes[i]->key,
                           strlen(m->attributes[i]->key))
            || !sp_utf8_valid(str, strlen(str)))
        {
            abort();
        }
    }
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
    /* the record written, and it with one byte changed, as the input
     * says: the copy's check agrees on forms the encoder gives */
    check_copy_agrees(enc, n);
    enc[SP_SPAN_RECORD_HEAD + body[0] % (n - SP_SPAN_RECORD_HEAD)] = body[1];
    check_copy_agrees(enc, n);
    free(enc);
}

static void
fuzz_objects(const unsigned char *body, size_t len)
{
    sp_objects_record r, again;
    sp_object        *objs, o;
    void             *enc;
    size_t            n;
    uint16_t          i;

    if (sp_objects_decode(body, len, &r) != SP_OK) {
        return;
    }
    objs = calloc(r.count + 1u, sizeof(*objs));
    if (objs == NULL) {
        return;
    }
    for (i = 0; i < r.count; i++) {
        if (sp_object_at(&r, i, &objs[i]) != SP_OK
            || objs[i].build_id_len > SP_BUILD_ID_MAX
            || objs[i].path_len > SP_OBJECT_PATH_MAX
            || objs[i].start > objs[i].end)
        {
            abort();
        }
        check_inside(objs[i].path, objs[i].path_len);
    }
    if (sp_object_at(&r, r.count, &o) != SP_ERR_NOT_FOUND) {
        abort();
    }
    n = sp_objects_size(objs, r.count);
    enc = malloc(n);
    if (enc != NULL) {
        if (sp_objects_encode(enc, r.pid, r.generation, objs, r.count) != n
            || sp_objects_decode(enc, n, &again) != SP_OK
            || again.pid != r.pid || again.generation != r.generation
            || again.count != r.count)
        {
            abort();
        }
        for (i = 0; i < r.count; i++) {
            if (sp_object_at(&again, i, &o) != SP_OK
                || o.start != objs[i].start || o.end != objs[i].end
                || o.load_bias != objs[i].load_bias
                || o.file_offset != objs[i].file_offset
                || o.build_id_len != objs[i].build_id_len
                || memcmp(o.build_id, objs[i].build_id, SP_BUILD_ID_MAX)
                   != 0
                || o.path_len != objs[i].path_len
                || (o.path_len > 0
                    && memcmp(o.path, objs[i].path, o.path_len) != 0))
            {
                abort();
            }
        }
        free(enc);
    }
    free(objs);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *body = aligned_copy(data, size);
    sp_sample      s;

    if (body == NULL) {
        return 0;
    }
    body_lo = body;
    body_hi = body + size;
    fuzz_sample(body, size);
    fuzz_span(body, size);
    fuzz_objects(body, size);
    free(body);

    /* a sample body that is not 8-byte aligned is refused, never read */
    body = malloc(size + 1);
    if (body != NULL) {
        if (size > 0) {
            memcpy(body + 1, data, size);
        }
        if (sp_sample_decode(body + 1, size, &s) != SP_ERR_INVALID) {
            abort();
        }
        free(body);
    }
    return 0;
}
