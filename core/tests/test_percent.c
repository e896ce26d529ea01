#include "sp_test.h"
#include "sp_percent.h"

static sp_status
decode(const char *in, char *out, size_t cap, size_t *n)
{
    return sp_percent_decode(in, strlen(in), out, cap, n);
}

static void
decodes_escapes_of_either_case(void **state)
{
    char out[32];
    size_t n;

    (void)state;
    assert_int_equal(decode("a%20b%2Cc%2cd", out, sizeof(out), &n), SP_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(out, "a b,c,d", 7);
}

static void
rejects_short_or_non_hex_escapes(void **state)
{
    char out[32];
    size_t n;

    (void)state;
    assert_int_equal(decode("%", out, sizeof(out), &n), SP_ERR_INVALID);
    assert_int_equal(decode("ab%4", out, sizeof(out), &n), SP_ERR_INVALID);
    assert_int_equal(decode("%zz", out, sizeof(out), &n), SP_ERR_INVALID);
    assert_int_equal(decode("%4g", out, sizeof(out), &n), SP_ERR_INVALID);
}

static void
reports_a_too_small_output(void **state)
{
    char out[2];
    size_t n;

    (void)state;
    assert_int_equal(decode("abc", out, sizeof(out), &n), SP_ERR_TOO_LONG);
    assert_int_equal(decode("%41%42", out, sizeof(out), &n), SP_OK);
    assert_memory_equal(out, "AB", 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decodes_escapes_of_either_case),
        cmocka_unit_test(rejects_short_or_non_hex_escapes),
        cmocka_unit_test(reports_a_too_small_output),
    };

    return cmocka_run_group_tests_name("percent", tests, NULL, NULL);
}
