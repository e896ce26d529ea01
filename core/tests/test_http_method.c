#include <stdio.h>
#include <string.h>

#include "sp_test.h"
#include "sp_http_method.h"

static sp_status
parse(const char *s, sp_http_methods *m)
{
    return sp_http_methods_parse(s, strlen(s), m);
}

static bool
known(const sp_http_methods *m, const char *method)
{
    return sp_http_method_known(m, method, strlen(method));
}

static void
standard_list_is_rfc9110_and_patch(void **state)
{
    sp_http_methods m;

    (void)state;
    sp_http_methods_standard(&m);
    assert_true(m.standard);
    assert_int_equal(m.count, 9);
    assert_string_equal(m.text, SP_HTTP_METHODS_STANDARD);
    assert_true(known(&m, "GET"));
    assert_true(known(&m, "PATCH"));
    assert_true(known(&m, "CONNECT"));
    assert_false(known(&m, "get"));
    assert_false(known(&m, "GETS"));
    assert_false(known(&m, "GE"));
    assert_false(known(&m, "PROPFIND"));
    assert_false(known(&m, ""));
    assert_false(sp_http_method_known(&m, NULL, 3));
    /* the same list written out is the same list, in any spacing */
    assert_int_equal(parse("CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, "
                           "POST, PUT, TRACE", &m), SP_OK);
    assert_true(m.standard);
}

static void
replaced_list_knows_only_its_methods(void **state)
{
    sp_http_methods m;

    (void)state;
    assert_int_equal(parse(" GET ,\tPURGE,PROPFIND ", &m), SP_OK);
    assert_false(m.standard);
    assert_int_equal(m.count, 3);
    assert_string_equal(m.text, "GET,PURGE,PROPFIND");
    assert_true(known(&m, "GET"));
    assert_true(known(&m, "PURGE"));
    assert_true(known(&m, "PROPFIND"));
    assert_false(known(&m, "POST"));
    assert_false(known(&m, "PURG"));
    assert_false(known(&m, "GET,PURGE"));
}

static void
malformed_lists_are_refused_and_leave_the_old_one(void **state)
{
    static const char *const bad[] = { "", " ", ",", "GET,", ",GET",
        "GET,,POST", "GET POST", "GET;POST", "G\"T", "GET,P\x01ST",
        "M\xc3\xa9THODE" };
    sp_http_methods m;
    char            many[400];
    size_t          i, n = 0;

    (void)state;
    sp_http_methods_standard(&m);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i], &m), SP_ERR_INVALID);
        assert_true(m.standard);
    }
    assert_int_equal(sp_http_methods_parse(NULL, 0, &m), SP_ERR_INVALID);
    /* 33 methods: one too many */
    for (i = 0; i < 33; i++) {
        n += (size_t)snprintf(many + n, sizeof(many) - n, "%sM%zu",
                              i ? "," : "", i);
    }
    assert_int_equal(parse(many, &m), SP_ERR_TOO_LONG);
    many[strlen(many) - 4] = '\0';      /* 32 of them */
    assert_int_equal(parse(many, &m), SP_OK);
    assert_int_equal(m.count, 32);
    /* 256 characters in one method */
    memset(many, 'X', 256);
    many[256] = '\0';
    assert_int_equal(parse(many, &m), SP_ERR_TOO_LONG);
    many[255] = '\0';
    assert_int_equal(parse(many, &m), SP_OK);
    assert_true(known(&m, many));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(standard_list_is_rfc9110_and_patch),
        cmocka_unit_test(replaced_list_knows_only_its_methods),
        cmocka_unit_test(malformed_lists_are_refused_and_leave_the_old_one),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
