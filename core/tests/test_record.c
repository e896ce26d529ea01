/*
 * The record codec: every kind round-trips field by field, limits cut as
 * documented, encoders write exactly their size, and decoders reject each
 * malformed form (the byte offsets used here are the layout documented in
 * sp_record.c). A span's body is an OTLP Span, read back with protobuf-c.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_record.h"
#include "sp_tracecontext.h"

#include "opentelemetry/proto/trace/v1/trace.pb-c.h"

/* 8-byte aligned, as ring records are; large enough for every test. */
static uint64_t buf_words[(1 << 20) / 8];
static unsigned char *const buf = (unsigned char *)buf_words;
static uint64_t frames[SP_RECORD_MAX_FRAMES + 8];

static void
put16(unsigned char *p, size_t off, uint16_t v)
{
    memcpy(p + off, &v, 2);
}

static void
put32(unsigned char *p, size_t off, uint32_t v)
{
    memcpy(p + off, &v, 4);
}

static void
put64(unsigned char *p, size_t off, uint64_t v)
{
    memcpy(p + off, &v, 8);
}

/* ---- samples */

static sp_sample
a_sample(uint16_t frame_count)
{
    sp_sample s;
    uint16_t  i;

    memset(&s, 0, sizeof(s));
    s.time_ns = 1700000000123456789ull;
    s.period_ns = 10000123;
    s.pid = 4242;
    s.tid = 4243;
    strcpy(s.thread_name, "nginx: worker");
    s.state = SP_THREAD_BLOCKED;
    s.source = SP_SOURCE_SNAPSHOT;
    s.truncated = true;
    s.has_span = true;
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(0xa0 + i);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(0x10 + i);
    }
    for (i = 0; i < frame_count && i < SP_RECORD_MAX_FRAMES + 8; i++) {
        frames[i] = 0x7f0000001000ull + 0x10 * i + (uint64_t)i * i;
    }
    s.frame_count = frame_count;
    s.frames = frames;
    return s;
}

static size_t
encode_sample(const sp_sample *s)
{
    size_t n = sp_sample_encode(buf, s);

    assert_int_equal(n, sp_sample_size(s->frame_count));
    return n;
}

static void
assert_same_sample(const sp_sample *want, const sp_sample *got,
    uint16_t frames_kept)
{
    uint16_t i;

    assert_int_equal(got->time_ns, want->time_ns);
    assert_int_equal(got->period_ns, want->period_ns);
    assert_int_equal(got->pid, want->pid);
    assert_int_equal(got->tid, want->tid);
    assert_string_equal(got->thread_name, want->thread_name);
    assert_int_equal(got->state, want->state);
    assert_int_equal(got->source, want->source);
    assert_int_equal(got->has_span, want->has_span);
    assert_memory_equal(got->trace_id, want->trace_id, 16);
    assert_memory_equal(got->span_id, want->span_id, 8);
    assert_int_equal(got->frame_count, frames_kept);
    assert_int_equal(got->weight, want->weight == 0 ? 1 : want->weight);
    for (i = 0; i < frames_kept; i++) {
        assert_int_equal(got->frames[i], want->frames[i]);
    }
}

static void
sample_round_trips_every_field(void **state)
{
    sp_sample s = a_sample(3), d;
    size_t    n;

    (void)state;
    n = encode_sample(&s);
    assert_int_equal(n, 72 + 3 * 8);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_same_sample(&s, &d, 3);
    assert_true(d.truncated);
    /* frames point into the body, not at the writer's array */
    assert_ptr_equal(d.frames, buf + 72);

    /* the other values of every enum and flag */
    s.state = SP_THREAD_RUNNING;
    s.source = SP_SOURCE_CONTINUOUS;
    s.truncated = false;
    n = encode_sample(&s);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_same_sample(&s, &d, 3);
    assert_false(d.truncated);
    s.state = SP_THREAD_UNKNOWN;
    n = encode_sample(&s);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_int_equal(d.state, SP_THREAD_UNKNOWN);
}

/* The timer's missed expirations travel with the sample: 0 (a struct
 * left zero) is one sample, the maximum is kept, more saturates. */
static void
sample_weight_round_trips_and_saturates(void **state)
{
    static const uint16_t in[] = { 0, 1, 4, SP_SAMPLE_WEIGHT_MAX,
                                   SP_SAMPLE_WEIGHT_MAX + 1, UINT16_MAX };
    static const uint16_t out[] = { 1, 1, 4, SP_SAMPLE_WEIGHT_MAX,
                                    SP_SAMPLE_WEIGHT_MAX,
                                    SP_SAMPLE_WEIGHT_MAX };
    sp_sample s = a_sample(2), d;
    uint16_t  stored;
    size_t    i, n;

    (void)state;
    for (i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        s.weight = in[i];
        n = encode_sample(&s);
        assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
        assert_int_equal(d.weight, out[i]);
        /* stored less one: a zero there is the old reserved field */
        memcpy(&stored, buf + 46, 2);
        assert_int_equal(stored, out[i] - 1);
    }
}

static void
sample_without_span_has_zero_ids(void **state)
{
    sp_sample s = a_sample(1), d;
    size_t    n;

    (void)state;
    s.has_span = false;     /* ids left set: the encoder must not copy them */
    n = encode_sample(&s);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_false(d.has_span);
    assert_true(d.trace_id[0] == 0 && d.trace_id[15] == 0);
    assert_true(d.span_id[0] == 0 && d.span_id[7] == 0);
}

static void
sample_keeps_max_frames_and_cuts_beyond(void **state)
{
    sp_sample s = a_sample(SP_RECORD_MAX_FRAMES), d;
    size_t    n;

    (void)state;
    s.truncated = false;
    n = encode_sample(&s);
    assert_int_equal(n, 72 + 8 * SP_RECORD_MAX_FRAMES);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_same_sample(&s, &d, SP_RECORD_MAX_FRAMES);
    assert_false(d.truncated);

    /* more than the maximum: the first ones kept, marked truncated */
    s = a_sample(SP_RECORD_MAX_FRAMES + 5);
    s.truncated = false;
    assert_int_equal(sp_sample_size(s.frame_count),
                     72 + 8 * SP_RECORD_MAX_FRAMES);
    n = sp_sample_encode(buf, &s);
    assert_int_equal(n, 72 + 8 * SP_RECORD_MAX_FRAMES);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_same_sample(&s, &d, SP_RECORD_MAX_FRAMES);
    assert_true(d.truncated);

    s = a_sample(0);
    n = encode_sample(&s);
    assert_int_equal(n, 72);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_int_equal(d.frame_count, 0);
}

static void
sample_thread_name_is_cut_and_terminated(void **state)
{
    sp_sample s = a_sample(0), d;
    size_t    n;

    (void)state;
    memcpy(s.thread_name, "0123456789abcdef", 16);   /* no NUL */
    n = encode_sample(&s);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_string_equal(d.thread_name, "0123456789abcde");
    s.thread_name[0] = '\0';
    n = encode_sample(&s);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    assert_string_equal(d.thread_name, "");
}

/* Encodes a good sample, lets mutate spoil it, expects SP_ERR_INVALID. */
static void
expect_bad_sample(void (*mutate)(unsigned char *p, size_t *len))
{
    sp_sample s = a_sample(2), d;
    size_t    n = encode_sample(&s);

    assert_int_equal(sp_sample_decode(buf, n, &d), SP_OK);
    mutate(buf, &n);
    assert_int_equal(sp_sample_decode(buf, n, &d), SP_ERR_INVALID);
}

static void bad_state_0(unsigned char *p, size_t *n) { (void)n; p[40] = 0; }
static void bad_state_4(unsigned char *p, size_t *n) { (void)n; p[40] = 4; }
static void bad_source_0(unsigned char *p, size_t *n) { (void)n; p[41] = 0; }
static void bad_source_3(unsigned char *p, size_t *n) { (void)n; p[41] = 3; }
static void bad_flags(unsigned char *p, size_t *n) { (void)n; p[42] |= 4; }
static void bad_reserved43(unsigned char *p, size_t *n) { (void)n; p[43] = 1; }
/* Stored as weight - 1: this is one over SP_SAMPLE_WEIGHT_MAX. */
static void
bad_weight_over_max(unsigned char *p, size_t *n)
{
    uint16_t extra = SP_SAMPLE_WEIGHT_MAX;

    (void)n;
    memcpy(p + 46, &extra, 2);
}
static void bad_weight_ff(unsigned char *p, size_t *n) { (void)n; p[47] = 0xff; }
static void
bad_name_no_nul(unsigned char *p, size_t *n)
{
    (void)n;
    memset(p + 24, 'x', 16);
}
static void
bad_count_over_len(unsigned char *p, size_t *n)
{
    (void)n;
    put16(p, 44, 3);
}
static void
bad_count_under_len(unsigned char *p, size_t *n)
{
    (void)n;
    put16(p, 44, 1);
}
static void
bad_count_over_max(unsigned char *p, size_t *n)
{
    put16(p, 44, SP_RECORD_MAX_FRAMES + 1);
    *n = 72 + 8 * (SP_RECORD_MAX_FRAMES + 1);
}
static void
bad_trailing(unsigned char *p, size_t *n)
{
    (void)p;
    *n += 8;
}
static void
bad_span_zero_trace(unsigned char *p, size_t *n)
{
    (void)n;
    memset(p + 48, 0, 16);
}
static void
bad_span_zero_span(unsigned char *p, size_t *n)
{
    (void)n;
    memset(p + 64, 0, 8);
}
static void
bad_ids_without_span(unsigned char *p, size_t *n)
{
    (void)n;
    p[42] &= (unsigned char)~2;     /* has_span off, ids still there */
}

static void
sample_decoder_rejects_each_malformed_form(void **state)
{
    sp_sample s = a_sample(2), d;
    size_t    n, len;

    (void)state;
    expect_bad_sample(bad_state_0);
    expect_bad_sample(bad_state_4);
    expect_bad_sample(bad_source_0);
    expect_bad_sample(bad_source_3);
    expect_bad_sample(bad_flags);
    expect_bad_sample(bad_reserved43);
    expect_bad_sample(bad_weight_over_max);
    expect_bad_sample(bad_weight_ff);
    expect_bad_sample(bad_name_no_nul);
    expect_bad_sample(bad_count_over_len);
    expect_bad_sample(bad_count_under_len);
    expect_bad_sample(bad_count_over_max);
    expect_bad_sample(bad_trailing);
    expect_bad_sample(bad_span_zero_trace);
    expect_bad_sample(bad_span_zero_span);
    expect_bad_sample(bad_ids_without_span);

    /* every truncation */
    n = encode_sample(&s);
    for (len = 0; len < n; len++) {
        assert_int_equal(sp_sample_decode(buf, len, &d), SP_ERR_INVALID);
    }
    /* NULL, and a body that is not 8-byte aligned (frames are pointed at) */
    assert_int_equal(sp_sample_decode(NULL, n, &d), SP_ERR_INVALID);
    memmove(buf + 4, buf, n);
    assert_int_equal(sp_sample_decode(buf + 4, n, &d), SP_ERR_INVALID);
}

/* ---- spans: the record is [pid][0] + the OTLP Span message, read back
 * here with protobuf-c, an implementation that is not ours */

static const sp_span_attr attrs3[] = {
    { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
    { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, -404 },
    { "splunk.snapshot.profiling", 25, SP_VALUE_BOOL, NULL, 0, 1 },
    { "", 0, SP_VALUE_STRING, "", 0, 0 },
    { "big", 3, SP_VALUE_INT, NULL, 0, INT64_MIN },
    { "no", 2, SP_VALUE_BOOL, NULL, 0, 0 },
};
#define ATTRS3_COUNT ((uint16_t)(sizeof(attrs3) / sizeof(attrs3[0])))

typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;

static sp_span_record
a_span(void)
{
    sp_span_record s;
    int            i;

    memset(&s, 0, sizeof(s));
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(0x40 + i);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(0x80 + i);
        s.parent_span_id[i] = (uint8_t)(0xc0 + i);
    }
    s.trace_flags = 1;
    s.kind = SP_SPAN_KIND_SERVER;
    s.status_code = SP_STATUS_ERROR;
    s.pid = 777;
    s.start_ns = 1700000000000000001ull;
    s.end_ns = 1700000000500000002ull;
    s.name = "GET /api";
    s.name_len = 8;
    s.tracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
    s.tracestate_len = strlen(s.tracestate);
    return s;
}

static size_t
encode_span(const sp_span_record *s, const sp_span_attr *attrs,
    uint16_t count)
{
    size_t n = sp_span_size(s, attrs, count);

    assert_int_equal(sp_span_encode(buf, s, attrs, count), n);
    return n;
}

/* The record decoded by sp_span_decode, then its Span by protobuf-c. */
static pb_span *
decode_span(size_t n, sp_span_view *v)
{
    pb_span *m;

    assert_int_equal(sp_span_decode(buf, n, v), SP_OK);
    assert_ptr_equal(v->otlp, buf + 8);
    assert_int_equal(v->otlp_len, n - 8);
    m = opentelemetry__proto__trace__v1__span__unpack(NULL, v->otlp_len,
                                                      v->otlp);
    assert_non_null(m);
    assert_memory_equal(v->trace_id, m->trace_id.data, 16);
    assert_memory_equal(v->span_id, m->span_id.data, 8);
    return m;
}

static void
assert_attr(const pb_kv *kv, const sp_span_attr *want, size_t key_len,
    size_t str_len)
{
    assert_int_equal(strlen(kv->key), key_len);
    assert_memory_equal(kv->key, want->key, key_len);
    assert_non_null(kv->value);
    switch (want->type) {
    case SP_VALUE_STRING:
        assert_int_equal(kv->value->value_case,
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
        assert_int_equal(strlen(kv->value->string_value), str_len);
        assert_memory_equal(kv->value->string_value, want->str, str_len);
        break;
    case SP_VALUE_BOOL:
        assert_int_equal(kv->value->value_case,
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE);
        assert_int_equal(kv->value->bool_value, want->integer != 0);
        break;
    default:
        assert_int_equal(kv->value->value_case,
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
        assert_int_equal(kv->value->int_value, want->integer);
    }
}

static void
span_round_trips_every_field(void **state)
{
    sp_span_record s = a_span();
    sp_span_view   v;
    pb_span       *m;
    size_t         n;
    uint16_t       i;

    (void)state;
    n = encode_span(&s, attrs3, ATTRS3_COUNT);
    m = decode_span(n, &v);
    assert_int_equal(v.pid, s.pid);
    assert_int_equal(m->trace_id.len, 16);
    assert_memory_equal(m->trace_id.data, s.trace_id, 16);
    assert_int_equal(m->span_id.len, 8);
    assert_memory_equal(m->span_id.data, s.span_id, 8);
    assert_int_equal(m->parent_span_id.len, 8);
    assert_memory_equal(m->parent_span_id.data, s.parent_span_id, 8);
    /* W3C flags, and "the parent is remote" known and true */
    assert_int_equal(m->flags, 0x301);
    assert_int_equal(m->kind, s.kind);
    assert_non_null(m->status);
    assert_int_equal(m->status->code, s.status_code);
    assert_int_equal(m->start_time_unix_nano, s.start_ns);
    assert_int_equal(m->end_time_unix_nano, s.end_ns);
    assert_string_equal(m->name, "GET /api");
    assert_string_equal(m->trace_state, s.tracestate);
    assert_int_equal(m->n_attributes, ATTRS3_COUNT);
    for (i = 0; i < ATTRS3_COUNT; i++) {
        assert_attr(m->attributes[i], &attrs3[i], attrs3[i].key_len,
                    attrs3[i].str_len);
    }
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);

    /* no attributes, no tracestate, a root span, every kind and status */
    memset(s.parent_span_id, 0, 8);
    s.tracestate = NULL;
    s.tracestate_len = 0;
    for (i = 0; i <= 5; i++) {
        s.kind = (uint8_t)i;
        s.status_code = (uint8_t)(i % 3);
        n = encode_span(&s, NULL, 0);
        m = decode_span(n, &v);
        assert_int_equal(m->kind, i);
        if (i % 3 == 0) {
            assert_null(m->status);
        } else {
            assert_int_equal(m->status->code, i % 3);
        }
        assert_int_equal(m->n_attributes, 0);
        assert_string_equal(m->trace_state, "");
        assert_int_equal(m->parent_span_id.len, 0);
        assert_int_equal(m->flags, 0x101);
        opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
    }
}

/*
 * The bytes are protobuf-c's own encoding of the same Span, field for
 * field: the exporter puts them in a request as they are.
 */
static void
span_bytes_are_the_canonical_encoding(void **state)
{
    sp_span_record s = a_span();
    sp_span_view   v;
    pb_span       *m;
    uint8_t       *again;
    size_t         n, len;

    (void)state;
    /* not attrs3[3]: proto3 leaves an empty key out, we write it */
    n = encode_span(&s, attrs3, 3);
    m = decode_span(n, &v);
    len = opentelemetry__proto__trace__v1__span__get_packed_size(m);
    assert_int_equal(len, v.otlp_len);
    again = malloc(len);
    assert_non_null(again);
    assert_int_equal(opentelemetry__proto__trace__v1__span__pack(m, again),
                     len);
    assert_memory_equal(again, v.otlp, len);
    free(again);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
}

/* Strings that are not UTF-8 are repaired (U+FFFD), so a receiver built
 * on golang/protobuf does not refuse the whole request. */
static void
span_strings_are_valid_utf8(void **state)
{
    sp_span_record s = a_span();
    sp_span_attr   at[2];
    sp_span_view   v;
    pb_span       *m;
    size_t         n;

    (void)state;
    s.name = "GET /caf\xc3\xa9\xff";
    s.name_len = strlen(s.name);
    at[0] = (sp_span_attr){ "user_agent.original", 19, SP_VALUE_STRING,
                            "a\xe2\x82z", 4, 0 };
    at[1] = (sp_span_attr){ "k\x80", 2, SP_VALUE_INT, NULL, 0, 7 };
    s.tracestate = "k=\xe9v";
    s.tracestate_len = 4;
    n = encode_span(&s, at, 2);
    m = decode_span(n, &v);
    assert_string_equal(m->name, "GET /caf\xc3\xa9\xef\xbf\xbd");
    assert_string_equal(m->trace_state, "k=\xef\xbf\xbdv");
    assert_string_equal(m->attributes[0]->value->string_value,
                        "a\xef\xbf\xbdz");
    assert_string_equal(m->attributes[1]->key, "k\xef\xbf\xbd");
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);

    /* one non-ASCII byte anywhere in any string takes the checked path */
    at[0].str = "plain";
    at[0].str_len = 5;
    at[1].key = "k";
    at[1].key_len = 1;
    s.name = "GET /\xc3\xa9";
    s.name_len = strlen(s.name);
    n = encode_span(&s, at, 2);
    m = decode_span(n, &v);
    assert_string_equal(m->name, "GET /\xc3\xa9");
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);

    /* A byte over 0x7F at any place of a string of any length, in a
     * name, a key or a value, is noticed by the copy that takes strings
     * for ASCII: each length goes through another branch of it. */
    for (size_t len = 1; len <= 40; len++) {
        for (size_t k = 0; k < len; k++) {
            char text[40], want[48];

            memset(text, 'a', len);
            text[k] = (char)0xe9;
            memcpy(want, text, k);
            memcpy(want + k, "\xef\xbf\xbd", 3);
            memcpy(want + k + 3, text + k + 1, len - k - 1);
            want[len + 2] = '\0';
            s.name = text;
            s.name_len = len;
            at[0] = (sp_span_attr){ text, len, SP_VALUE_STRING, text, len,
                                    0 };
            at[1] = (sp_span_attr){ text, len, SP_VALUE_BOOL, NULL, 0, 1 };
            n = encode_span(&s, at, 2);
            m = decode_span(n, &v);
            assert_string_equal(m->name, want);
            assert_string_equal(m->attributes[0]->key, want);
            assert_string_equal(m->attributes[0]->value->string_value, want);
            assert_string_equal(m->attributes[1]->key, want);
            opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
        }
    }
}

static char long_text[SP_TRACESTATE_MAX_LEN + 100];

static void
span_strings_are_cut_at_their_limits(void **state)
{
    sp_span_record s = a_span();
    sp_span_attr   at[3];
    sp_span_view   v;
    pb_span       *m;
    size_t         n;

    (void)state;
    memset(long_text, 'a', sizeof(long_text));
    /* a 2-byte character straddling the limit goes as a whole */
    long_text[SP_SPAN_STRING_MAX - 1] = (char)0xc3;
    long_text[SP_SPAN_STRING_MAX] = (char)0xa9;
    s.name = long_text;
    s.name_len = 2000;
    s.tracestate = long_text;
    s.tracestate_len = SP_TRACESTATE_MAX_LEN + 1;   /* too long: left out */
    at[0] = (sp_span_attr){ long_text, 1500, SP_VALUE_STRING, long_text,
                            5000, 0 };
    at[1] = (sp_span_attr){ "k", 1, SP_VALUE_STRING, long_text + 1,
                            SP_SPAN_STRING_MAX, 0 };
    at[2] = (sp_span_attr){ "b", 1, SP_VALUE_BOOL, NULL, 0, 5 };
    n = encode_span(&s, at, 3);
    m = decode_span(n, &v);
    assert_int_equal(strlen(m->name), SP_SPAN_STRING_MAX - 1);
    assert_memory_equal(m->name, long_text, SP_SPAN_STRING_MAX - 1);
    assert_string_equal(m->trace_state, "");
    assert_attr(m->attributes[0], &at[0], SP_SPAN_STRING_MAX - 1,
                SP_SPAN_STRING_MAX - 1);
    /* exactly at the limit: kept whole, even ending in a sequence */
    assert_attr(m->attributes[1], &at[1], 1, SP_SPAN_STRING_MAX);
    /* a bool is true or false */
    assert_int_equal(m->attributes[2]->value->bool_value, 1);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);

    /* the longest valid tracestate is kept whole */
    s.tracestate_len = SP_TRACESTATE_MAX_LEN;
    n = encode_span(&s, NULL, 0);
    m = decode_span(n, &v);
    assert_int_equal(strlen(m->trace_state), SP_TRACESTATE_MAX_LEN);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
}

static void
expect_bad_span(void (*mutate)(unsigned char *p, size_t *len))
{
    sp_span_record s = a_span();
    sp_span_view   v;
    size_t         n = encode_span(&s, attrs3, ATTRS3_COUNT);

    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
    mutate(buf, &n);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
}

/*
 * Offsets in a_span()'s record: 8-byte head; trace id tag at 8, its bytes
 * at 10; span id tag 26, bytes 28; tracestate tag 36, length 37, bytes
 * 38..77; parent tag 77; name tag 87; kind tag 97, value 98; start tag 99;
 * end tag 108; the first attribute's tag 117.
 */
static void sp_rsv4(unsigned char *p, size_t *n) { (void)n; p[4] = 1; }
static void sp_kind_6(unsigned char *p, size_t *n) { (void)n; p[98] = 6; }
static void
sp_zero_trace(unsigned char *p, size_t *n)
{
    (void)n;
    memset(p + 10, 0, 16);
}
static void
sp_zero_span(unsigned char *p, size_t *n)
{
    (void)n;
    memset(p + 28, 0, 8);
}
static void sp_trace_tag(unsigned char *p, size_t *n) { (void)n; p[8] = 0x0b; }
static void sp_trace_len(unsigned char *p, size_t *n) { (void)n; p[9] = 15; }
static void sp_span_len(unsigned char *p, size_t *n) { (void)n; p[27] = 9; }
static void
sp_tracestate_huge(unsigned char *p, size_t *n)
{
    (void)n;
    p[37] = 0xff;       /* a varint running into the tracestate's bytes */
}
static void sp_no_start(unsigned char *p, size_t *n) { (void)n; p[99] = 0x38; }
static void sp_no_end(unsigned char *p, size_t *n) { (void)n; p[108] = 0; }
static void
sp_attr_past_end(unsigned char *p, size_t *n)
{
    (void)n;
    p[118] = 0x7f;
}
static void
sp_status_3(unsigned char *p, size_t *n)
{
    p[*n - 7] = 3;      /* status code, before the 6 bytes of flags */
}
static void
sp_no_flags(unsigned char *p, size_t *n)
{
    p[*n - 6] = 0x7a;
}
static void
sp_trailing(unsigned char *p, size_t *n)
{
    p[*n] = 0;
    *n += 1;
}
static void
sp_short(unsigned char *p, size_t *n)
{
    (void)p;
    *n -= 1;
}

static void
span_decoder_rejects_each_malformed_form(void **state)
{
    sp_span_record s = a_span();
    sp_span_view   v;
    size_t         n, len;

    (void)state;
    n = encode_span(&s, attrs3, ATTRS3_COUNT);
    /* the offsets the mutations use */
    assert_int_equal(buf[8], 0x0a);
    assert_int_equal(buf[26], 0x12);
    assert_int_equal(buf[36], 0x1a);
    assert_int_equal(buf[77], 0x22);
    assert_int_equal(buf[87], 0x2a);
    assert_int_equal(buf[97], 0x30);
    assert_int_equal(buf[99], 0x39);
    assert_int_equal(buf[108], 0x41);
    assert_int_equal(buf[117], 0x4a);
    assert_int_equal(buf[n - 10], 0x7a);

    expect_bad_span(sp_rsv4);
    expect_bad_span(sp_kind_6);
    expect_bad_span(sp_zero_trace);
    expect_bad_span(sp_zero_span);
    expect_bad_span(sp_trace_tag);
    expect_bad_span(sp_trace_len);
    expect_bad_span(sp_span_len);
    expect_bad_span(sp_tracestate_huge);
    expect_bad_span(sp_no_start);
    expect_bad_span(sp_no_end);
    expect_bad_span(sp_attr_past_end);
    expect_bad_span(sp_status_3);
    expect_bad_span(sp_no_flags);
    expect_bad_span(sp_trailing);
    expect_bad_span(sp_short);

    n = encode_span(&s, attrs3, ATTRS3_COUNT);
    for (len = 0; len < n; len++) {
        assert_int_equal(sp_span_decode(buf, len, &v), SP_ERR_INVALID);
    }
    assert_int_equal(sp_span_decode(NULL, n, &v), SP_ERR_INVALID);
}

/*
 * An entry span's form, which sp_span_decode takes without its general
 * path: no tracestate, a parent, a kind of one byte, lengths of one byte
 * but for one attribute of 200 bytes among short ones, which the walk
 * hands on. Offsets: parent tag 36, length 37; name tag 46, length 47;
 * kind tag 56, value 57; start tag 58; end tag 67; the first attribute's
 * tag 76, length 77.
 */
static const sp_span_attr entry_attrs[] = {
    { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
    { "user_agent.original", 19, SP_VALUE_STRING,
      "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like "
      "Gecko) Chrome/120.0.0.0 Safari/537.36 Mozilla/5.0 (X11; Linux "
      "x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
      "Safari/537", 200, 0 },
    { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, 200 },
};

static size_t
encode_entry_span(uint8_t status)
{
    sp_span_record s = a_span();

    s.tracestate = NULL;
    s.tracestate_len = 0;
    s.status_code = status;
    return encode_span(&s, entry_attrs, 3);
}

static void
span_decoder_takes_and_rejects_an_entry_span(void **state)
{
    /* offset (from the end when negative) and the byte written there */
    static const struct { int off; uint8_t byte; } bad[] = {
        { 4, 1 }, { 9, 15 }, { 27, 9 }, { 37, 9 }, { 37, 0x80 },
        { 47, 0x7f }, { 47, 0x80 }, { 56, 0x31 }, { 57, 6 }, { 58, 0x38 },
        { 67, 0 }, { 77, 0x7f }, { -7, 3 }, { -6, 0x7a }, { -5, 0 },
    };
    sp_span_view   v;
    pb_span       *m;
    size_t         n, len, i;
    uint8_t        status;

    (void)state;
    for (status = SP_STATUS_UNSET; status <= SP_STATUS_ERROR; status++) {
        n = encode_entry_span(status);
        assert_int_equal(buf[36], 0x22);
        assert_int_equal(buf[46], 0x2a);
        assert_int_equal(buf[56], 0x30);
        assert_int_equal(buf[58], 0x39);
        assert_int_equal(buf[67], 0x41);
        assert_int_equal(buf[76], 0x4a);
        m = decode_span(n, &v);
        assert_int_equal(v.pid, 777);
        assert_int_equal(m->n_attributes, 3);
        assert_int_equal(strlen(m->attributes[1]->value->string_value),
                         200);
        assert_string_equal(m->name, "GET /api");
        opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
        for (len = 0; len < n; len++) {
            assert_int_equal(sp_span_decode(buf, len, &v), SP_ERR_INVALID);
        }
        buf[n] = 0;
        assert_int_equal(sp_span_decode(buf, n + 1, &v), SP_ERR_INVALID);
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            n = encode_entry_span(status);
            buf[bad[i].off < 0 ? (int)n + bad[i].off : bad[i].off] =
                bad[i].byte;
            if (bad[i].off == -7 && status == SP_STATUS_UNSET) {
                continue;   /* a flags byte there, whatever its value */
            }
            assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
        }
        n = encode_entry_span(status);
        memset(buf + 10, 0, 16);
        assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
        n = encode_entry_span(status);
        memset(buf + 28, 0, 8);
        assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
    }
}

/*
 * sp_span_decode walks an entry span's attributes taking each length as
 * one byte and checks afterwards that none was longer. A longer one is
 * misread: the walk lands inside its value and goes on from there. Here
 * it lands on the value's last byte, a 'J' (an attribute's tag), reads
 * the status's tag after it as a length and passes the end of the
 * message: the span is still taken, as the attribute really ends where
 * the status begins. Offsets: the second attribute's tag at 106, its
 * length (159: 0x9f 0x01) at 107, the misread landing at 106 + 161.
 */
static void
span_decoder_takes_a_long_attribute_its_walk_misread(void **state)
{
    static char          value[150];
    static sp_span_attr  at[2] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "k", 1, SP_VALUE_STRING, value, sizeof(value), 0 },
    };
    sp_span_record s = a_span();
    sp_span_view   v;
    pb_span       *m;
    size_t         n;

    (void)state;
    memset(value, 'a', sizeof(value));
    value[sizeof(value) - 1] = 'J';
    s.tracestate = NULL;
    s.tracestate_len = 0;
    s.status_code = SP_STATUS_ERROR;
    n = encode_span(&s, at, 2);
    assert_int_equal(buf[106], 0x4a);
    assert_int_equal(buf[107], 0x9f);
    assert_int_equal(buf[108], 0x01);
    assert_int_equal(buf[106 + 161], 'J');
    assert_int_equal(buf[106 + 162], 0x7a);
    m = decode_span(n, &v);
    assert_int_equal(m->n_attributes, 2);
    assert_int_equal(strlen(m->attributes[1]->value->string_value),
                     sizeof(value));
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
}

/*
 * sp_span_check_copy on the Span message of the record in buf (n bytes of
 * record), copied into a buffer of exactly its length and the padding,
 * so that ASan sees any read past them.
 */
static sp_status
check_copy(size_t n)
{
    unsigned char *c;
    sp_status      st;

    assert_true(n >= SP_SPAN_RECORD_HEAD);
    c = malloc(n - SP_SPAN_RECORD_HEAD + SP_SPAN_COPY_PAD);
    assert_non_null(c);
    memcpy(c, buf + SP_SPAN_RECORD_HEAD, n - SP_SPAN_RECORD_HEAD);
    memset(c + n - SP_SPAN_RECORD_HEAD, 0, SP_SPAN_COPY_PAD);
    st = sp_span_check_copy(c, n - SP_SPAN_RECORD_HEAD);
    free(c);
    return st;
}

/*
 * The check on a copy takes an entry span and says nothing of any other
 * form; and it takes nothing sp_span_decode refuses: every byte of an
 * entry span changed to values that matter to the framing (tags, lengths
 * of one byte and of more, zero), the record checked both ways.
 */
static void
span_check_on_a_copy_takes_only_what_decode_takes(void **state)
{
    static const uint8_t values[] = {
        0x00, 0x01, 0x06, 0x08, 0x0a, 0x10, 0x12, 0x22, 0x2a, 0x30, 0x39,
        0x41, 0x4a, 0x7a, 0x7f, 0x80, 0x85, 0xff };
    static const sp_span_attr short_attrs[] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "url.path", 8, SP_VALUE_STRING, "/a", 2, 0 },
        { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, 200 },
    };
    sp_span_record s = a_span();
    sp_span_view   v;
    size_t         n, i, k, taken = 0;
    uint8_t        status, keep;

    (void)state;
    s.tracestate = NULL;
    s.tracestate_len = 0;
    for (status = SP_STATUS_UNSET; status <= SP_STATUS_ERROR; status++) {
        s.status_code = status;
        n = encode_span(&s, short_attrs, 3);
        assert_int_equal(check_copy(n), SP_OK);
        assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
        for (i = SP_SPAN_RECORD_HEAD; i < n; i++) {
            keep = buf[i];
            for (k = 0; k < sizeof(values); k++) {
                buf[i] = values[k];
                if (check_copy(n) == SP_OK) {
                    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
                    taken++;
                }
            }
            buf[i] = keep;
        }
        /* shorter or longer by a byte: the flags no longer end it */
        for (i = n - 3; i <= n + 1; i++) {
            buf[n] = 0;
            if (i != n) {
                assert_int_not_equal(check_copy(i), SP_OK);
            }
        }
    }
    /* changing bytes inside strings keeps the framing */
    assert_true(taken > 0);

    /* another form (a tracestate), another kind than an entry span's,
     * or an attribute longer than 127 bytes: not told */
    s = a_span();
    s.tracestate = NULL;
    s.tracestate_len = 0;
    s.kind = 3;     /* CLIENT */
    n = encode_span(&s, short_attrs, 3);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
    s = a_span();
    n = encode_span(&s, attrs3, ATTRS3_COUNT);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
    n = encode_entry_span(SP_STATUS_OK);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
}

/*
 * A length of two bytes whose low byte, read as a length, leads the walk
 * to a made-up attribute inside the value that ends just where the real
 * one does: the check on a copy must not take it, even once the real
 * length is made too long for the record (then sp_span_decode refuses
 * it). Offsets: the second attribute's tag at 106, its length (259: 0x83
 * 0x02) at 107, its value's bytes from 118; the misread lands at
 * 106 + 0x83 + 2 = 239, the value's byte 121, and 239 + 2 + 0x7f = 368,
 * the flags.
 */
static void
span_check_on_a_copy_refuses_a_long_length_it_misread(void **state)
{
    static char          value[250];
    static sp_span_attr  at[2] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "k", 1, SP_VALUE_STRING, value, sizeof(value), 0 },
    };
    sp_span_record s = a_span();
    sp_span_view   v;
    size_t         n;

    (void)state;
    memset(value, 'a', sizeof(value));
    value[121] = 'J';
    value[122] = 0x7f;
    s.tracestate = NULL;
    s.tracestate_len = 0;
    s.status_code = SP_STATUS_UNSET;
    n = encode_span(&s, at, 2);
    assert_int_equal(buf[106], 0x4a);
    assert_int_equal(buf[107], 0x83);
    assert_int_equal(buf[108], 0x02);
    assert_int_equal(buf[239], 'J');
    assert_int_equal(n - 6, 368);
    assert_int_equal(buf[368], 0x85);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_OK);
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
    buf[108] = 0x03;
    assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
}

/*
 * The walk's farthest step: a made-up attribute at n - 2 whose length
 * byte, n - 1, is 255 lands at n + 255, the padding's last byte (ASan,
 * make unit-asan, sees a read past a shorter padding). The flags' tag and
 * length at n - 6 are made an attribute of length 2 to lead there.
 */
static void
span_check_on_a_copy_stays_in_its_padding(void **state)
{
    static const sp_span_attr at[1] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
    };
    sp_span_record s = a_span();
    sp_span_view   v;
    size_t         n;

    (void)state;
    s.tracestate = NULL;
    s.tracestate_len = 0;
    s.status_code = SP_STATUS_UNSET;
    n = encode_span(&s, at, 1);
    assert_int_equal(check_copy(n), SP_OK);
    assert_int_equal(buf[n - 6], 0x85);
    buf[n - 6] = 0x4a;
    buf[n - 5] = 0x02;
    buf[n - 2] = 0x4a;
    buf[n - 1] = 0xff;
    assert_int_equal(check_copy(n), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_span_decode(buf, n, &v), SP_ERR_INVALID);
}

/* ---- objects */

static sp_object objs[3];

static void
make_objects(void)
{
    static const char *paths[3] = {
        "/usr/sbin/nginx", "/lib/x86_64-linux-gnu/libc.so.6", ""
    };
    int i, j;

    memset(objs, 0, sizeof(objs));
    for (i = 0; i < 3; i++) {
        objs[i].start = 0x555500000000ull + 0x100000ull * (uint64_t)i;
        objs[i].end = objs[i].start + 0x8000 + (uint64_t)i;
        objs[i].load_bias = objs[i].start - 0x1000;
        objs[i].file_offset = 0x1000 * (uint64_t)(i + 1);
        objs[i].path = paths[i];
        objs[i].path_len = strlen(paths[i]);
    }
    for (j = 0; j < SP_BUILD_ID_MAX; j++) {
        objs[0].build_id[j] = (uint8_t)(0xb0 + j);
    }
    objs[0].build_id_len = SP_BUILD_ID_MAX;
    objs[1].build_id_len = 0;
    for (j = 0; j < 8; j++) {
        objs[2].build_id[j] = (uint8_t)(1 + j);
    }
    objs[2].build_id_len = 8;
}

static size_t
encode_objects(const sp_object *o, uint16_t count)
{
    size_t n = sp_objects_size(o, count);

    assert_int_equal(sp_objects_encode(buf, 99, 7, o, count), n);
    return n;
}

static void
objects_round_trip_every_field(void **state)
{
    sp_objects_record r;
    sp_object         o;
    size_t            n;
    uint16_t          i;

    (void)state;
    make_objects();
    n = encode_objects(objs, 3);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_OK);
    assert_int_equal(r.pid, 99);
    assert_int_equal(r.generation, 7);
    assert_int_equal(r.count, 3);
    for (i = 0; i < 3; i++) {
        assert_int_equal(sp_object_at(&r, i, &o), SP_OK);
        assert_int_equal(o.start, objs[i].start);
        assert_int_equal(o.end, objs[i].end);
        assert_int_equal(o.load_bias, objs[i].load_bias);
        assert_int_equal(o.file_offset, objs[i].file_offset);
        assert_int_equal(o.build_id_len, objs[i].build_id_len);
        assert_memory_equal(o.build_id, objs[i].build_id, SP_BUILD_ID_MAX);
        assert_int_equal(o.path_len, objs[i].path_len);
        assert_memory_equal(o.path, objs[i].path, o.path_len);
    }
    assert_int_equal(sp_object_at(&r, 3, &o), SP_ERR_NOT_FOUND);

    n = encode_objects(objs, 0);
    assert_int_equal(n, 16);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_OK);
    assert_int_equal(r.count, 0);
}

static char long_path[SP_OBJECT_PATH_MAX + 1000];

static void
objects_cut_long_paths_and_build_ids(void **state)
{
    sp_objects_record r;
    sp_object         o;
    size_t            n;

    (void)state;
    make_objects();
    memset(long_path, '/', sizeof(long_path));
    objs[1].path = long_path;
    objs[1].path_len = sizeof(long_path);
    objs[2].build_id_len = SP_BUILD_ID_MAX + 5;
    n = encode_objects(objs, 3);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_OK);
    assert_int_equal(sp_object_at(&r, 1, &o), SP_OK);
    assert_int_equal(o.path_len, SP_OBJECT_PATH_MAX);
    assert_int_equal(sp_object_at(&r, 2, &o), SP_OK);
    assert_int_equal(o.build_id_len, SP_BUILD_ID_MAX);
}

static void
expect_bad_objects(void (*mutate)(unsigned char *p, size_t *len))
{
    sp_objects_record r;
    size_t            n;

    make_objects();
    n = encode_objects(objs, 3);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_OK);
    mutate(buf, &n);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_ERR_INVALID);
}

#define OBJ(p, i) ((p) + 16 + 64 * (i))

static void ob_rsv10(unsigned char *p, size_t *n) { (void)n; p[10] = 1; }
static void ob_rsv12(unsigned char *p, size_t *n) { (void)n; p[15] = 1; }
static void
ob_count_over(unsigned char *p, size_t *n)
{
    (void)n;
    put16(p, 8, 4);
}
static void
ob_count_huge(unsigned char *p, size_t *n)
{
    (void)n;
    put16(p, 8, 0xffff);
}
static void
ob_id_len(unsigned char *p, size_t *n)
{
    (void)n;
    OBJ(p, 0)[52] = SP_BUILD_ID_MAX + 1;
}
static void
ob_id_tail(unsigned char *p, size_t *n)
{
    (void)n;
    OBJ(p, 2)[32 + 10] = 1;     /* past its 8 bytes */
}
static void
ob_rsv53(unsigned char *p, size_t *n)
{
    (void)n;
    OBJ(p, 1)[53] = 1;
}
static void
ob_rsv60(unsigned char *p, size_t *n)
{
    (void)n;
    OBJ(p, 1)[63] = 1;
}
static void
ob_start_after_end(unsigned char *p, size_t *n)
{
    (void)n;
    put64(OBJ(p, 1), 0, 0xffffffffffffull);
}
static void
ob_path_past_end(unsigned char *p, size_t *n)
{
    put32(OBJ(p, 0), 56, (uint32_t)*n - 3);
}
static void
ob_path_in_table(unsigned char *p, size_t *n)
{
    (void)n;
    put32(OBJ(p, 0), 56, 16);
}
static void
ob_path_len_long(unsigned char *p, size_t *n)
{
    (void)n;
    put16(OBJ(p, 0), 54, SP_OBJECT_PATH_MAX + 1);
}
static void
ob_trailing(unsigned char *p, size_t *n)
{
    (void)p;
    *n += 3;
}

static void
objects_decoder_rejects_each_malformed_form(void **state)
{
    sp_objects_record r;
    sp_object         o;
    size_t            n, len;

    (void)state;
    expect_bad_objects(ob_rsv10);
    expect_bad_objects(ob_rsv12);
    expect_bad_objects(ob_count_over);
    expect_bad_objects(ob_count_huge);
    expect_bad_objects(ob_id_len);
    expect_bad_objects(ob_id_tail);
    expect_bad_objects(ob_rsv53);
    expect_bad_objects(ob_rsv60);
    expect_bad_objects(ob_start_after_end);
    expect_bad_objects(ob_path_past_end);
    expect_bad_objects(ob_path_in_table);
    expect_bad_objects(ob_path_len_long);
    expect_bad_objects(ob_trailing);

    make_objects();
    n = encode_objects(objs, 3);
    for (len = 0; len < n; len++) {
        assert_int_equal(sp_objects_decode(buf, len, &r), SP_ERR_INVALID);
    }
    assert_int_equal(sp_objects_decode(NULL, n, &r), SP_ERR_INVALID);
    assert_int_equal(sp_objects_decode(buf, n, &r), SP_OK);
    r.objects_len = 16 + 64;    /* the table cut off */
    assert_int_equal(sp_object_at(&r, 0, &o), SP_ERR_INVALID);
}

/* ---- encoders write exactly *_size bytes */

static void
encoders_never_write_past_their_size(void **state)
{
    sp_sample      s = a_sample(17);
    sp_span_record sp = a_span();
    size_t         n, i;

    (void)state;
    make_objects();
    memset(buf, 0xee, 65536);
    n = sp_sample_encode(buf, &s);
    for (i = n; i < n + 256; i++) {
        assert_int_equal(buf[i], 0xee);
    }
    memset(buf, 0xee, 65536);
    n = sp_span_encode(buf, &sp, attrs3, ATTRS3_COUNT);
    assert_int_equal(n, sp_span_size(&sp, attrs3, ATTRS3_COUNT));
    for (i = n; i < n + 256; i++) {
        assert_int_equal(buf[i], 0xee);
    }
    memset(buf, 0xee, 65536);
    n = sp_objects_encode(buf, 1, 2, objs, 3);
    assert_int_equal(n, sp_objects_size(objs, 3));
    for (i = n; i < n + 256; i++) {
        assert_int_equal(buf[i], 0xee);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sample_round_trips_every_field),
        cmocka_unit_test(sample_weight_round_trips_and_saturates),
        cmocka_unit_test(sample_without_span_has_zero_ids),
        cmocka_unit_test(sample_keeps_max_frames_and_cuts_beyond),
        cmocka_unit_test(sample_thread_name_is_cut_and_terminated),
        cmocka_unit_test(sample_decoder_rejects_each_malformed_form),
        cmocka_unit_test(span_round_trips_every_field),
        cmocka_unit_test(span_bytes_are_the_canonical_encoding),
        cmocka_unit_test(span_strings_are_valid_utf8),
        cmocka_unit_test(span_strings_are_cut_at_their_limits),
        cmocka_unit_test(span_decoder_rejects_each_malformed_form),
        cmocka_unit_test(span_decoder_takes_and_rejects_an_entry_span),
        cmocka_unit_test(span_decoder_takes_a_long_attribute_its_walk_misread),
        cmocka_unit_test(span_check_on_a_copy_takes_only_what_decode_takes),
        cmocka_unit_test(span_check_on_a_copy_refuses_a_long_length_it_misread),
        cmocka_unit_test(span_check_on_a_copy_stays_in_its_padding),
        cmocka_unit_test(objects_round_trip_every_field),
        cmocka_unit_test(objects_cut_long_paths_and_build_ids),
        cmocka_unit_test(objects_decoder_rejects_each_malformed_form),
        cmocka_unit_test(encoders_never_write_past_their_size),
    };

    return cmocka_run_group_tests_name("record", tests, NULL, NULL);
}
