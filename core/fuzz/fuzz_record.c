/*
 * Fuzzes the record decoders (sp_record.h) with arbitrary bodies. Every
 * decoder runs on every input. Invariants checked beyond "no crash, no
 * read past the body" (the body is copied into a buffer of exactly its
 * size, so ASan sees any overread):
 * - what a decoder returns points inside the body and keeps the limits
 *   (frame count, string lengths, enum ranges, a NUL in the thread name);
 * - sp_span_attr_at / sp_object_at succeed for every index below the count
 *   once the record decoded, and give SP_ERR_NOT_FOUND past it;
 * - encoding the decoded values gives *_size bytes, which decode again to
 *   the same values, field by field.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_record.h"
#include "sp_tracecontext.h"

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
        || a->frame_count != b->frame_count
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

static void
same_attr(const sp_span_attr *a, const sp_span_attr *b)
{
    if (a->type != b->type || a->key_len != b->key_len
        || (a->key_len > 0 && memcmp(a->key, b->key, a->key_len) != 0))
    {
        abort();
    }
    if (a->type == SP_VALUE_STRING
        ? a->str_len != b->str_len
          || (a->str_len > 0 && memcmp(a->str, b->str, a->str_len) != 0)
        : a->integer != b->integer)
    {
        abort();
    }
}

static void
fuzz_span(const unsigned char *body, size_t len)
{
    sp_span_record s, again;
    sp_span_attr  *attrs, a;
    void          *enc;
    size_t         n;
    uint16_t       i;

    if (sp_span_decode(body, len, &s) != SP_OK) {
        return;
    }
    if (s.kind > 5 || s.status_code > SP_STATUS_ERROR
        || s.name_len > SP_SPAN_STRING_MAX
        || s.tracestate_len > SP_TRACESTATE_MAX_LEN)
    {
        abort();
    }
    check_inside(s.name, s.name_len);
    check_inside(s.tracestate, s.tracestate_len);
    attrs = calloc(s.attr_count + 1u, sizeof(*attrs));
    if (attrs == NULL) {
        return;
    }
    for (i = 0; i < s.attr_count; i++) {
        if (sp_span_attr_at(&s, i, &attrs[i]) != SP_OK
            || attrs[i].key_len > SP_SPAN_STRING_MAX
            || attrs[i].str_len > SP_SPAN_STRING_MAX
            || (attrs[i].type == SP_VALUE_BOOL
                && attrs[i].integer != 0 && attrs[i].integer != 1))
        {
            abort();
        }
        check_inside(attrs[i].key, attrs[i].key_len);
        check_inside(attrs[i].str, attrs[i].str_len);
    }
    if (sp_span_attr_at(&s, s.attr_count, &a) != SP_ERR_NOT_FOUND) {
        abort();
    }

    n = sp_span_size(&s, attrs, s.attr_count);
    enc = malloc(n);
    if (enc != NULL) {
        if (sp_span_encode(enc, &s, attrs, s.attr_count) != n
            || sp_span_decode(enc, n, &again) != SP_OK
            || memcmp(again.trace_id, s.trace_id, 16) != 0
            || memcmp(again.span_id, s.span_id, 8) != 0
            || memcmp(again.parent_span_id, s.parent_span_id, 8) != 0
            || again.trace_flags != s.trace_flags || again.kind != s.kind
            || again.status_code != s.status_code || again.pid != s.pid
            || again.start_ns != s.start_ns || again.end_ns != s.end_ns
            || again.name_len != s.name_len
            || (s.name_len > 0
                && memcmp(again.name, s.name, s.name_len) != 0)
            || again.tracestate_len != s.tracestate_len
            || (s.tracestate_len > 0
                && memcmp(again.tracestate, s.tracestate,
                          s.tracestate_len) != 0)
            || again.attr_count != s.attr_count)
        {
            abort();
        }
        for (i = 0; i < s.attr_count; i++) {
            if (sp_span_attr_at(&again, i, &a) != SP_OK) {
                abort();
            }
            same_attr(&attrs[i], &a);
        }
        free(enc);
    }
    free(attrs);
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
