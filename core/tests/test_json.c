/* sp_json: the strict JSON reader behind spanprof-dump. */
#include "sp_test.h"

#include "sp_json.h"

#include <stdio.h>
#include <stdlib.h>

static sp_json *
parse_ok(const char *text)
{
    sp_json *doc = NULL;

    assert_int_equal(sp_json_parse(text, strlen(text), &doc), SP_OK);
    assert_non_null(doc);
    return doc;
}

static void
parse_bad(const char *text)
{
    sp_json *doc = (sp_json *)1;

    if (sp_json_parse(text, strlen(text), &doc) != SP_ERR_INVALID) {
        fail_msg("accepted: %s", text);
    }
    assert_null(doc);
}

static void
objects_arrays_and_lookups(void **state)
{
    sp_json             *doc;
    const sp_json_value *root, *arr, *e;
    int64_t              n;
    int                  i = 0;

    (void)state;
    doc = parse_ok(" {\"a\": [1, \"two\", true, false, null, {}, []],"
                   " \"b\": {\"c\": \"d\"}, \"a2\": -0.5e+3 }\n");
    root = sp_json_root(doc);
    assert_int_equal(sp_json_type_of(root), SP_JSON_OBJECT);
    assert_int_equal(sp_json_count(root), 3);
    arr = sp_json_get(root, "a");
    assert_int_equal(sp_json_count(arr), 7);
    static const sp_json_type types[] = {
        SP_JSON_NUMBER, SP_JSON_STRING, SP_JSON_TRUE, SP_JSON_FALSE,
        SP_JSON_NULL, SP_JSON_OBJECT, SP_JSON_ARRAY
    };
    for (e = sp_json_first(arr); e != NULL; e = sp_json_next(e)) {
        assert_int_equal(sp_json_type_of(e), types[i++]);
    }
    assert_int_equal(i, 7);
    assert_int_equal(sp_json_int64(sp_json_first(arr), &n), SP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(sp_json_string(sp_json_get(sp_json_get(root, "b"),
                                                   "c"), NULL), "d");
    /* Chained lookups through missing members stay NULL. */
    assert_null(sp_json_get(sp_json_get(root, "x"), "y"));
    assert_null(sp_json_get(arr, "a"));
    assert_int_equal(sp_json_type_of(NULL), SP_JSON_NULL);
    assert_string_equal(sp_json_key(sp_json_first(root)), "a");
    /* A fraction is not an integer. */
    assert_int_equal(sp_json_int64(sp_json_get(root, "a2"), &n),
                     SP_ERR_INVALID);
    sp_json_destroy(doc);
}

static void
repeated_key_gives_the_last(void **state)
{
    sp_json *doc;

    (void)state;
    doc = parse_ok("{\"k\":\"first\",\"k\":\"last\"}");
    assert_string_equal(sp_json_string(sp_json_get(sp_json_root(doc), "k"),
                                       NULL), "last");
    sp_json_destroy(doc);
}

static void
string_escapes_decode(void **state)
{
    sp_json    *doc;
    const char *s;
    size_t      len;

    (void)state;
    doc = parse_ok("\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac"
                   "\\ud83d\\ude00\\u0000z\"");
    s = sp_json_string(sp_json_root(doc), &len);
    assert_int_equal(len, 1 + 8 + 2 + 3 + 4 + 1 + 1);
    assert_memory_equal(s, "a\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac"
                        "\xf0\x9f\x98\x80\0z", len);
    assert_int_equal(s[len], '\0');
    sp_json_destroy(doc);

    doc = parse_ok("\"caf\xc3\xa9\"");
    assert_string_equal(sp_json_string(sp_json_root(doc), NULL),
                        "caf\xc3\xa9");
    sp_json_destroy(doc);
}

static void
int64_from_numbers_and_strings(void **state)
{
    sp_json *doc;
    int64_t  n = 7;

    (void)state;
    doc = parse_ok("[\"1795403764414026807\", -9223372036854775808,"
                   " \"9223372036854775808\", \"12a\", \"\", \"-\"]");
    const sp_json_value *e = sp_json_first(sp_json_root(doc));
    assert_int_equal(sp_json_int64(e, &n), SP_OK);
    assert_true(n == INT64_C(1795403764414026807));
    e = sp_json_next(e);
    assert_int_equal(sp_json_int64(e, &n), SP_OK);
    assert_true(n == INT64_MIN);
    n = 7;
    for (e = sp_json_next(e); e != NULL; e = sp_json_next(e)) {
        assert_int_equal(sp_json_int64(e, &n), SP_ERR_INVALID);
    }
    assert_int_equal(n, 7);
    sp_json_destroy(doc);
}

static void
grammar_is_strict(void **state)
{
    static const char *bad[] = {
        "", " ", "{", "[", "]", "{}}", "[1,]", "{\"a\":1,}", "{\"a\" 1}",
        "{a:1}", "{'a':1}", "01", "-", "1.", ".5", "1e", "+1", "0x10",
        "tru", "nul", "True", "\"unterminated", "\"bad \\x escape\"",
        "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"",
        "\"tab\there\"", "\"nl\nhere\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
        "\"\xc0\xaf\"", "1 2", "[1] x", "/* c */ 1", "[1,,2]", "{,}",
        "NaN", "Infinity", "\"\\",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        parse_bad(bad[i]);
    }
}

static void
input_need_not_be_terminated(void **state)
{
    sp_json *doc = NULL;

    (void)state;
    /* Only the first 3 bytes count: "[1]" then garbage never read. */
    assert_int_equal(sp_json_parse("[1]xyz", 3, &doc), SP_OK);
    sp_json_destroy(doc);
    assert_int_equal(sp_json_parse("[12", 2, &doc), SP_ERR_INVALID);
}

static void
depth_is_bounded(void **state)
{
    char     text[2 * (SP_JSON_MAX_DEPTH + 1) + 1];
    sp_json *doc = NULL;
    size_t   d;

    (void)state;
    for (d = SP_JSON_MAX_DEPTH; d <= SP_JSON_MAX_DEPTH + 1; d++) {
        memset(text, '[', d);
        memset(text + d, ']', d);
        text[2 * d] = '\0';
        assert_int_equal(sp_json_parse(text, 2 * d, &doc),
                         d <= SP_JSON_MAX_DEPTH ? SP_OK : SP_ERR_INVALID);
        sp_json_destroy(doc);
        doc = NULL;
    }
}

static void
large_arrays_keep_order(void **state)
{
    char                 *text = malloc(100000 * 8 + 16);
    size_t                len = 0;
    sp_json              *doc;
    const sp_json_value  *e;
    int64_t               n, want = 0;
    int                   i;

    (void)state;
    text[len++] = '[';
    for (i = 0; i < 100000; i++) {
        len += (size_t)sprintf(text + len, "%s%d", i ? "," : "", i);
    }
    text[len++] = ']';
    assert_int_equal(sp_json_parse(text, len, &doc), SP_OK);
    assert_int_equal(sp_json_count(sp_json_root(doc)), 100000);
    for (e = sp_json_first(sp_json_root(doc)); e; e = sp_json_next(e)) {
        assert_int_equal(sp_json_int64(e, &n), SP_OK);
        assert_true(n == want++);
    }
    sp_json_destroy(doc);
    free(text);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(objects_arrays_and_lookups),
        cmocka_unit_test(repeated_key_gives_the_last),
        cmocka_unit_test(string_escapes_decode),
        cmocka_unit_test(int64_from_numbers_and_strings),
        cmocka_unit_test(grammar_is_strict),
        cmocka_unit_test(input_need_not_be_terminated),
        cmocka_unit_test(depth_is_bounded),
        cmocka_unit_test(large_arrays_keep_order),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
