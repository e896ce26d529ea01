#include "sp_test.h"
#include "sp_encode.h"

#include "opentelemetry/proto/common/v1/common.pb-c.h"
#include "opentelemetry/proto/logs/v1/logs.pb-c.h"
#include "opentelemetry/proto/trace/v1/trace.pb-c.h"

#include <stdlib.h>
#include <zlib.h>

/* ---- buffers */

static void
buffer_grows_until_its_limit_then_stays_failed(void **state)
{
    sp_buf  b = SP_BUF_INIT(1000);
    uint8_t chunk[300];

    (void)state;
    memset(chunk, 'x', sizeof(chunk));
    assert_int_equal(sp_buf_append(&b, chunk, 300), SP_OK);
    assert_int_equal(sp_buf_append(&b, chunk, 300), SP_OK);
    assert_int_equal(sp_buf_append(&b, chunk, 300), SP_OK);
    assert_int_equal(b.len, 900);
    assert_true(b.cap <= 1000);
    assert_int_equal(sp_buf_append(&b, chunk, 101), SP_ERR_TOO_LONG);
    assert_int_equal(b.len, 900);
    /* Sticky: even what would fit now fails, until cleared. */
    assert_int_equal(sp_buf_append(&b, chunk, 1), SP_ERR_TOO_LONG);
    assert_int_equal(sp_buf_status(&b), SP_ERR_TOO_LONG);
    assert_int_equal(b.len, 900);
    sp_buf_truncate(&b, 100);
    assert_int_equal(sp_buf_status(&b), SP_OK);
    assert_int_equal(b.len, 100);
    assert_int_equal(sp_buf_append(&b, chunk, 300), SP_OK);
    assert_int_equal(b.len, 400);
    sp_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    sp_buf_free(&b);
    assert_null(b.data);
    sp_buf_free(NULL);
}

static void
buffer_without_limit_grows_freely(void **state)
{
    sp_buf  b;
    size_t  i;
    uint8_t byte;

    (void)state;
    sp_buf_init(&b, 0);
    for (i = 0; i < 100000; i++) {
        byte = (uint8_t)i;
        assert_int_equal(sp_buf_append(&b, &byte, 1), SP_OK);
    }
    assert_int_equal(b.len, 100000);
    for (i = 0; i < 100000; i++) {
        assert_int_equal(b.data[i], (uint8_t)i);
    }
    sp_buf_free(&b);
}

/* ---- protobuf wire format */

static void
varints_are_canonical(void **state)
{
    static const struct {
        uint64_t v;
        size_t   n;
        uint8_t  bytes[10];
    } cases[] = {
        { 0, 1, { 0x00 } },
        { 1, 1, { 0x01 } },
        { 127, 1, { 0x7f } },
        { 128, 2, { 0x80, 0x01 } },
        { 300, 2, { 0xac, 0x02 } },
        { 16383, 2, { 0xff, 0x7f } },
        { 16384, 3, { 0x80, 0x80, 0x01 } },
        { UINT32_MAX, 5, { 0xff, 0xff, 0xff, 0xff, 0x0f } },
        { UINT64_MAX, 10, { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0x01 } },
    };
    size_t i;
    sp_buf b = SP_BUF_INIT(0);

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sp_buf_clear(&b);
        assert_int_equal(sp_pb_put_varint(&b, cases[i].v), SP_OK);
        assert_int_equal(b.len, cases[i].n);
        assert_int_equal(sp_pb_varint_size(cases[i].v), cases[i].n);
        assert_memory_equal(b.data, cases[i].bytes, cases[i].n);
    }
    /* Field 1 varint 150: the example of protobuf's encoding guide. */
    sp_buf_clear(&b);
    sp_pb_uint(&b, 1, 150);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "\x08\x96\x01", 3);
    /* Field 16 needs a two-byte tag. */
    sp_buf_clear(&b);
    sp_pb_fixed32(&b, 16, 0x01020304);
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.data, "\x85\x01\x04\x03\x02\x01", 6);
    sp_buf_free(&b);
}

/* A KeyValue {key, AnyValue} written with the wire writer. */
static void
write_kv(sp_buf *b, const char *key, int kind, const char *s, size_t len,
         int64_t i)
{
    size_t any;

    sp_pb_cstring(b, 1, key);
    any = sp_pb_begin(b, 2);
    if (kind == 1) {
        sp_pb_string(b, 1, s, len);
    } else if (kind == 2) {
        sp_pb_uint(b, 2, (uint64_t)i);
    } else {
        sp_pb_uint(b, 3, (uint64_t)i);
    }
    sp_pb_end(b, any);
}

static void
nested_messages_decode_with_protobuf_c(void **state)
{
    static const size_t lengths[] = { 0, 1, 125, 126, 127, 128, 200, 16383,
                                      16384, 70000 };
    Opentelemetry__Proto__Common__V1__KeyValue *kv;
    sp_buf  b = SP_BUF_INIT(0);
    char   *text;
    size_t  i;

    (void)state;
    text = malloc(70000);
    assert_non_null(text);
    for (i = 0; i < 70000; i++) {
        text[i] = (char)('a' + i % 26);
    }
    /* Around each length where the length prefix gets a byte longer. */
    for (i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        sp_buf_clear(&b);
        write_kv(&b, "k", 1, text, lengths[i], 0);
        assert_int_equal(sp_buf_status(&b), SP_OK);
        kv = opentelemetry__proto__common__v1__key_value__unpack(NULL, b.len,
                                                                 b.data);
        assert_non_null(kv);
        assert_string_equal(kv->key, "k");
        assert_non_null(kv->value);
        assert_int_equal(kv->value->value_case,
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
        assert_int_equal(strlen(kv->value->string_value), lengths[i]);
        assert_memory_equal(kv->value->string_value, text, lengths[i]);
        opentelemetry__proto__common__v1__key_value__free_unpacked(kv, NULL);
    }
    /* Negative int64 (ten bytes) and bool. */
    sp_buf_clear(&b);
    write_kv(&b, "neg", 3, NULL, 0, -5);
    kv = opentelemetry__proto__common__v1__key_value__unpack(NULL, b.len,
                                                             b.data);
    assert_non_null(kv);
    assert_int_equal(kv->value->value_case,
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
    assert_int_equal(kv->value->int_value, -5);
    opentelemetry__proto__common__v1__key_value__free_unpacked(kv, NULL);
    sp_buf_clear(&b);
    write_kv(&b, "yes", 2, NULL, 0, 1);
    kv = opentelemetry__proto__common__v1__key_value__unpack(NULL, b.len,
                                                             b.data);
    assert_non_null(kv);
    assert_int_equal(kv->value->value_case,
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE);
    assert_true(kv->value->bool_value);
    opentelemetry__proto__common__v1__key_value__free_unpacked(kv, NULL);
    free(text);
    sp_buf_free(&b);
}

static void
fixed_fields_decode_with_protobuf_c(void **state)
{
    Opentelemetry__Proto__Trace__V1__Span *span;
    sp_buf  b = SP_BUF_INIT(0);
    uint8_t id[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

    (void)state;
    sp_pb_bytes(&b, 2, id, sizeof(id));
    sp_pb_fixed64(&b, 7, 0x0123456789abcdefULL);
    sp_pb_fixed64(&b, 8, UINT64_MAX);
    sp_pb_fixed32(&b, 16, 0x301);
    span = opentelemetry__proto__trace__v1__span__unpack(NULL, b.len, b.data);
    assert_non_null(span);
    assert_int_equal(span->span_id.len, 8);
    assert_memory_equal(span->span_id.data, id, 8);
    assert_true(span->start_time_unix_nano == 0x0123456789abcdefULL);
    assert_true(span->end_time_unix_nano == UINT64_MAX);
    assert_int_equal(span->flags, 0x301);
    opentelemetry__proto__trace__v1__span__free_unpacked(span, NULL);
    sp_buf_free(&b);
}

static void
writer_errors_are_sticky_and_end_does_nothing(void **state)
{
    sp_buf b = SP_BUF_INIT(10);
    size_t mark;

    (void)state;
    mark = sp_pb_begin(&b, 1);
    sp_pb_string(&b, 1, "0123456789", 10);
    assert_int_equal(sp_pb_end(&b, mark), SP_ERR_TOO_LONG);
    assert_int_equal(sp_pb_uint(&b, 1, 1), SP_ERR_TOO_LONG);
    assert_true(b.len <= 10);
    sp_buf_free(&b);
}

/* ---- UTF-8 */

/* The eight-bytes-at-a-time ASCII path must see a bad byte anywhere. */
static void
utf8_checked_at_every_offset(void **state)
{
    char   s[24];
    size_t at;

    (void)state;
    for (at = 0; at < sizeof(s); at++) {
        memset(s, 'a', sizeof(s));
        s[at] = (char)0xff;
        assert_false(sp_utf8_valid(s, sizeof(s)));
        if (at + 1 < sizeof(s)) {
            s[at] = (char)0xc3;
            s[at + 1] = (char)0xa9;
            assert_true(sp_utf8_valid(s, sizeof(s)));
            /* A lead byte whose continuation is cut by the length. */
            assert_false(sp_utf8_valid(s, at + 1));
        }
    }
}

static void
strings_become_valid_utf8(void **state)
{
    static const struct {
        const char *in;
        size_t      in_len;
        const char *out;
    } cases[] = {
        { "plain", 5, "plain" },
        { "caf\xc3\xa9", 5, "caf\xc3\xa9" },
        { "\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80" },
        { "\xe2\x82\xac", 3, "\xe2\x82\xac" },
        { "a\xff" "b", 3, "a\xef\xbf\xbd" "b" },
        /* An overlong '/': two bytes that can start nothing. */
        { "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
        /* A surrogate: ED cannot be followed by A0, so three U+FFFD. */
        { "\xed\xa0\x80", 3,
          "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
        /* A sequence cut short is one U+FFFD. */
        { "x\xe2\x82", 3, "x\xef\xbf\xbd" },
        { "\xe2\x82x", 3, "\xef\xbf\xbdx" },
        /* Past U+10FFFF. */
        { "\xf4\x90\x80\x80", 4,
          "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
        { "nul\0in", 6, "nul\0in" },
    };
    sp_buf b = SP_BUF_INIT(0);
    size_t i, want;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sp_buf_clear(&b);
        assert_int_equal(sp_utf8_sanitize(&b, cases[i].in, cases[i].in_len),
                         SP_OK);
        want = i == sizeof(cases) / sizeof(cases[0]) - 1
               ? 6 : strlen(cases[i].out);
        assert_int_equal(b.len, want);
        assert_memory_equal(b.data, cases[i].out, want);
        assert_true(sp_utf8_valid((const char *)b.data, b.len));
        assert_int_equal(sp_utf8_valid(cases[i].in, cases[i].in_len),
                         strcmp(cases[i].in, cases[i].out) == 0);
    }
    /* sp_pb_string writes the sanitized form with its own length. */
    sp_buf_clear(&b);
    sp_pb_string(&b, 1, "a\xff", 2);
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.data, "\x0a\x04" "a\xef\xbf\xbd", 6);
    sp_buf_free(&b);
}

/* ---- gzip */

/* Inflates a gzip stream with zlib into out. */
static int
gunzip(const uint8_t *in, size_t len, sp_buf *out)
{
    z_stream z;
    int      rc;

    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 15 + 16) != Z_OK) {
        return -1;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    do {
        if (sp_buf_reserve(out, 65536) != SP_OK) {
            inflateEnd(&z);
            return -1;
        }
        z.next_out = out->data + out->len;
        z.avail_out = 65536;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len = (size_t)(z.next_out - out->data);
    } while (rc == Z_OK);
    inflateEnd(&z);
    /* The whole input, exactly one stream. */
    return rc == Z_STREAM_END && z.avail_in == 0 ? 0 : -1;
}

static void
gzip_inflates_back_to_its_input(void **state)
{
    static const size_t sizes[] = { 0, 1, 27, 4096, 1 << 20 };
    static const int    levels[] = { SP_GZIP_DEFAULT_LEVEL, 1, 9 };
    sp_buf    in = SP_BUF_INIT(0), gz = SP_BUF_INIT(0), back = SP_BUF_INIT(0);
    size_t    i, j, k;
    uint32_t  x = 12345;
    uint8_t   byte;

    (void)state;
    for (k = 0; k < (1 << 20); k++) {
        /* Half text-like, half noise. */
        x = x * 1103515245 + 12345;
        byte = k % 2 == 0 ? (uint8_t)('a' + (k / 7) % 26)
                          : (uint8_t)(x >> 24);
        sp_buf_append(&in, &byte, 1);
    }
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (j = 0; j < sizeof(levels) / sizeof(levels[0]); j++) {
            sp_buf_clear(&gz);
            sp_buf_clear(&back);
            sp_buf_append(&gz, "prefix", 6);
            assert_int_equal(sp_gzip(&gz, in.data, sizes[i], levels[j]),
                             SP_OK);
            /* Appended after what was there. */
            assert_memory_equal(gz.data, "prefix", 6);
            assert_int_equal(gz.data[6], 0x1f);
            assert_int_equal(gz.data[7], 0x8b);
            assert_int_equal(gunzip(gz.data + 6, gz.len - 6, &back), 0);
            assert_int_equal(back.len, sizes[i]);
            if (sizes[i] > 0) {
                assert_memory_equal(back.data, in.data, sizes[i]);
            }
        }
    }
    sp_buf_free(&in);
    sp_buf_free(&gz);
    sp_buf_free(&back);
}

static void
gzip_matches_a_known_vector(void **state)
{
    /* Python's zlib.compressobj(6, DEFLATED, 31) of this input. */
    static const char    input[] = "spanprof spanprof spanprof\n";
    static const uint8_t known[] = {
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x2b,
        0x2e, 0x48, 0xcc, 0x2b, 0x28, 0xca, 0x4f, 0x53, 0x28, 0x46, 0x67,
        0x70, 0x01, 0x00, 0x00, 0xa1, 0xd4, 0x4d, 0x1b, 0x00, 0x00, 0x00
    };
    sp_buf gz = SP_BUF_INIT(0), back = SP_BUF_INIT(0);

    (void)state;
    assert_int_equal(sp_gzip(&gz, input, sizeof(input) - 1,
                             SP_GZIP_DEFAULT_LEVEL), SP_OK);
    /* Header: magic, deflate, no flags (no name), mtime 0, Unix. */
    assert_true(gz.len >= 18);
    assert_memory_equal(gz.data, known, 10);
    /* Trailer: CRC-32 and length of the input, little-endian. */
    assert_memory_equal(gz.data + gz.len - 8, known + sizeof(known) - 8, 8);
    assert_int_equal(gz.len, sizeof(known));
    assert_memory_equal(gz.data, known, sizeof(known));
    /* And the vector itself is what zlib reads back as the input. */
    assert_int_equal(gunzip(known, sizeof(known), &back), 0);
    assert_int_equal(back.len, sizeof(input) - 1);
    assert_memory_equal(back.data, input, back.len);
    sp_buf_free(&gz);
    sp_buf_free(&back);
}

static void
gzip_refuses_bad_levels_and_respects_limits(void **state)
{
    sp_buf  gz = SP_BUF_INIT(100);
    uint8_t big[1000];

    (void)state;
    memset(big, 7, sizeof(big));
    assert_int_equal(sp_gzip(&gz, big, 10, 10), SP_ERR_INVALID);
    assert_int_equal(sp_gzip(&gz, big, 10, -2), SP_ERR_INVALID);
    assert_int_equal(gz.len, 0);
    assert_int_equal(sp_buf_status(&gz), SP_OK);
    assert_int_equal(sp_gzip(&gz, big, sizeof(big), 6), SP_ERR_TOO_LONG);
    assert_int_equal(gz.len, 0);
    sp_buf_free(&gz);
}

/* ---- base64 */

static void
base64_rfc4648_vectors(void **state)
{
    /* RFC 4648 section 10. */
    static const char *const vectors[][2] = {
        { "", "" },
        { "f", "Zg==" },
        { "fo", "Zm8=" },
        { "foo", "Zm9v" },
        { "foob", "Zm9vYg==" },
        { "fooba", "Zm9vYmE=" },
        { "foobar", "Zm9vYmFy" },
    };
    sp_buf b = SP_BUF_INIT(0);
    size_t i, n;

    (void)state;
    for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        n = strlen(vectors[i][0]);
        sp_buf_clear(&b);
        assert_int_equal(sp_base64_encode(&b, vectors[i][0], n), SP_OK);
        assert_int_equal(b.len, strlen(vectors[i][1]));
        assert_int_equal(sp_base64_size(n), b.len);
        assert_memory_equal(b.data, vectors[i][1], b.len);
        sp_buf_clear(&b);
        assert_int_equal(sp_base64_decode(&b, vectors[i][1],
                                          strlen(vectors[i][1])), SP_OK);
        assert_int_equal(b.len, n);
        assert_memory_equal(b.data, vectors[i][0], n);
    }
    /* The last two letters of the standard alphabet, not the URL one. */
    sp_buf_clear(&b);
    sp_base64_encode(&b, "\xfb\xff\xbf", 3);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "+/+/", 4);
    sp_buf_free(&b);
}

static void
base64_round_trips_every_byte(void **state)
{
    uint8_t all[256 * 3];
    sp_buf  enc = SP_BUF_INIT(0), dec = SP_BUF_INIT(0);
    size_t  i, n;

    (void)state;
    for (i = 0; i < sizeof(all); i++) {
        all[i] = (uint8_t)(i * 7 + i / 256);
    }
    for (n = 0; n <= sizeof(all); n += 1 + n / 3) {
        sp_buf_clear(&enc);
        sp_buf_clear(&dec);
        assert_int_equal(sp_base64_encode(&enc, all, n), SP_OK);
        assert_int_equal(enc.len, (n + 2) / 3 * 4);
        assert_int_equal(sp_base64_decode(&dec, (const char *)enc.data,
                                          enc.len), SP_OK);
        assert_int_equal(dec.len, n);
        if (n > 0) {
            assert_memory_equal(dec.data, all, n);
        }
    }
    sp_buf_free(&enc);
    sp_buf_free(&dec);
}

static void
base64_decode_refuses_what_is_not_standard(void **state)
{
    static const char *const bad[] = {
        "Zg=", "Zg", "Z===", "Zg=a", "=Zg=", "Zm9v\n", "Zm9v Zg==", "Zm-_",
        "Zh==", "Zm9=", "Zg==Zg==", "====", "Zm9v=",
    };
    sp_buf b = SP_BUF_INIT(0);
    size_t i;

    (void)state;
    sp_buf_append(&b, "keep", 4);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(sp_base64_decode(&b, bad[i], strlen(bad[i])),
                         SP_ERR_INVALID);
        assert_int_equal(b.len, 4);
    }
    assert_memory_equal(b.data, "keep", 4);
    sp_buf_free(&b);
}

static void
base64_encode_respects_the_limit(void **state)
{
    sp_buf b = SP_BUF_INIT(7);

    (void)state;
    assert_int_equal(sp_base64_encode(&b, "foob", 4), SP_ERR_TOO_LONG);
    assert_int_equal(b.len, 0);
    sp_buf_truncate(&b, 0);
    assert_int_equal(sp_base64_encode(&b, "foo", 3), SP_OK);
    assert_memory_equal(b.data, "Zm9v", 4);
    sp_buf_free(&b);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buffer_grows_until_its_limit_then_stays_failed),
        cmocka_unit_test(buffer_without_limit_grows_freely),
        cmocka_unit_test(varints_are_canonical),
        cmocka_unit_test(nested_messages_decode_with_protobuf_c),
        cmocka_unit_test(fixed_fields_decode_with_protobuf_c),
        cmocka_unit_test(writer_errors_are_sticky_and_end_does_nothing),
        cmocka_unit_test(strings_become_valid_utf8),
        cmocka_unit_test(utf8_checked_at_every_offset),
        cmocka_unit_test(gzip_inflates_back_to_its_input),
        cmocka_unit_test(gzip_matches_a_known_vector),
        cmocka_unit_test(gzip_refuses_bad_levels_and_respects_limits),
        cmocka_unit_test(base64_rfc4648_vectors),
        cmocka_unit_test(base64_round_trips_every_byte),
        cmocka_unit_test(base64_decode_refuses_what_is_not_standard),
        cmocka_unit_test(base64_encode_respects_the_limit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
