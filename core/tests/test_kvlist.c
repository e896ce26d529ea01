#include <stdlib.h>

#include "sp_test.h"
#include "sp_kvlist.h"

static sp_kvlist *
parse_ok(const char *s)
{
    sp_kvlist *list = NULL;

    assert_int_equal(sp_kvlist_validate(s, strlen(s)), SP_OK);
    assert_int_equal(sp_kvlist_parse(s, strlen(s), &list), SP_OK);
    assert_non_null(list);
    return list;
}

/* Both entry points reject s[0..len), and parse leaves *out alone. */
static void
assert_invalid_len(const char *s, size_t len)
{
    sp_kvlist *list = (sp_kvlist *)&list;

    assert_int_equal(sp_kvlist_validate(s, len), SP_ERR_INVALID);
    assert_int_equal(sp_kvlist_parse(s, len, &list), SP_ERR_INVALID);
    assert_ptr_equal(list, (sp_kvlist *)&list);
}

static void
assert_invalid(const char *s)
{
    assert_invalid_len(s, strlen(s));
}

static void
parses_members_in_order(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok("service.name=shop,deployment.environment=prod");
    assert_int_equal(sp_kvlist_count(list), 2);
    assert_string_equal(sp_kvlist_key(list, 0), "service.name");
    assert_string_equal(sp_kvlist_value(list, 0), "shop");
    assert_string_equal(sp_kvlist_key(list, 1), "deployment.environment");
    assert_string_equal(sp_kvlist_value(list, 1), "prod");
    sp_kvlist_destroy(list);
}

static void
trims_blanks_around_keys_and_values_only(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok(" \ta \t= \t1 \t,b=x  y\t, c =\t%20 ");
    assert_int_equal(sp_kvlist_count(list), 3);
    assert_string_equal(sp_kvlist_key(list, 0), "a");
    assert_string_equal(sp_kvlist_value(list, 0), "1");
    assert_string_equal(sp_kvlist_key(list, 1), "b");
    assert_string_equal(sp_kvlist_value(list, 1), "x  y");
    /* An encoded blank is data, not trimmable whitespace. */
    assert_string_equal(sp_kvlist_key(list, 2), "c");
    assert_string_equal(sp_kvlist_value(list, 2), " ");
    sp_kvlist_destroy(list);
}

static void
decodes_values_but_not_keys(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok("k%41=v%2C%20x%3D,Authorization=Basic%20dXNlcjpw");
    assert_string_equal(sp_kvlist_key(list, 0), "k%41");
    assert_string_equal(sp_kvlist_value(list, 0), "v, x=");
    assert_string_equal(sp_kvlist_value(list, 1), "Basic dXNlcjpw");
    sp_kvlist_destroy(list);
}

static void
empty_or_blank_input_is_an_empty_list(void **state)
{
    static const char *const inputs[] = { "", " ", " \t \t", ",", " , ,\t," };
    sp_kvlist *list;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        list = parse_ok(inputs[i]);
        assert_int_equal(sp_kvlist_count(list), 0);
        assert_null(sp_kvlist_key(list, 0));
        sp_kvlist_destroy(list);
    }
    assert_int_equal(sp_kvlist_validate(NULL, 0), SP_OK);
    assert_int_equal(sp_kvlist_parse(NULL, 0, &list), SP_OK);
    assert_int_equal(sp_kvlist_count(list), 0);
    sp_kvlist_destroy(list);
    assert_int_equal(sp_kvlist_validate(NULL, 1), SP_ERR_INVALID);
    assert_int_equal(sp_kvlist_parse(NULL, 1, &list), SP_ERR_INVALID);
}

static void
skips_empty_members(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok(",a=1,, ,b=2,\t,");
    assert_int_equal(sp_kvlist_count(list), 2);
    assert_string_equal(sp_kvlist_key(list, 0), "a");
    assert_string_equal(sp_kvlist_key(list, 1), "b");
    assert_string_equal(sp_kvlist_value(list, 1), "2");
    sp_kvlist_destroy(list);
}

static void
values_may_be_empty_or_hold_equals_and_semicolons(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok("a=,b= \t,tok=YWJj==,c=x;p=1");
    assert_int_equal(sp_kvlist_count(list), 4);
    assert_string_equal(sp_kvlist_value(list, 0), "");
    assert_string_equal(sp_kvlist_value(list, 1), "");
    assert_string_equal(sp_kvlist_key(list, 2), "tok");
    assert_string_equal(sp_kvlist_value(list, 2), "YWJj==");
    assert_string_equal(sp_kvlist_key(list, 3), "c");
    assert_string_equal(sp_kvlist_value(list, 3), "x;p=1");
    sp_kvlist_destroy(list);
}

static void
keeps_raw_utf8_in_values(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok("city=Z\xc3\xbcrich,e=%C3%A9");
    assert_string_equal(sp_kvlist_value(list, 0), "Z\xc3\xbcrich");
    assert_string_equal(sp_kvlist_value(list, 1), "\xc3\xa9");
    sp_kvlist_destroy(list);
}

static void
one_bad_member_rejects_the_whole_list(void **state)
{
    (void)state;
    assert_invalid("a=1,b,c=3");            /* no '=' */
    assert_invalid("a=1,=3");               /* empty key */
    assert_invalid("a=1, \t=3");            /* blank key */
    assert_invalid("a=%zz,b=2");            /* bad escape */
    assert_invalid("a=1,b=%4");             /* cut escape */
    assert_invalid("a=1,b=%");
    assert_invalid("a b=1");                /* blank inside a key */
    assert_invalid("\xc3\xa9=1");           /* non-ASCII key */
    assert_invalid("a\x7f=1");              /* DEL in a key */
    assert_invalid("a=x\ny");               /* control character */
    assert_invalid("a=x\x7f");
    assert_invalid("a=%00");                /* decodes to NUL */
    assert_invalid("a=1,b=x%00y");
    assert_invalid_len("a=1\0,b=2", 8);     /* NUL inside len */
    assert_invalid_len("a\0=1", 4);
}

static void
keeps_duplicates_and_finds_the_last(void **state)
{
    sp_kvlist *list;

    (void)state;
    list = parse_ok("a=1,b=2,a=3");
    assert_int_equal(sp_kvlist_count(list), 3);
    assert_string_equal(sp_kvlist_value(list, 0), "1");
    assert_string_equal(sp_kvlist_find(list, "a"), "3");
    assert_string_equal(sp_kvlist_find(list, "b"), "2");
    assert_null(sp_kvlist_find(list, "c"));
    assert_null(sp_kvlist_find(list, "A"));
    assert_null(sp_kvlist_value(list, 3));
    assert_null(sp_kvlist_key(list, 3));
    sp_kvlist_destroy(list);
    sp_kvlist_destroy(NULL);
}

static void
uses_only_len_bytes(void **state)
{
    sp_kvlist *list = NULL;

    (void)state;
    /* The bytes after len would be an invalid member. */
    assert_int_equal(sp_kvlist_validate("a=1,b", 3), SP_OK);
    assert_int_equal(sp_kvlist_parse("a=1,b", 3, &list), SP_OK);
    assert_int_equal(sp_kvlist_count(list), 1);
    assert_string_equal(sp_kvlist_value(list, 0), "1");
    sp_kvlist_destroy(list);
}

/*
 * Validation decodes long values in 256-byte pieces: escapes that straddle
 * a piece's end must be judged exactly as parse judges them.
 */
static void
long_values_validate_like_they_parse(void **state)
{
    static const char *const tails[] = { "%41", "%%41", "%4", "%00", "%4x" };
    static const sp_status want[] = {
        SP_OK, SP_ERR_INVALID, SP_ERR_INVALID, SP_ERR_INVALID, SP_ERR_INVALID
    };
    char s[1200];
    size_t lead, t, len;
    sp_kvlist *list;
    sp_status rc;

    (void)state;
    for (lead = 240; lead < 530; lead++) {
        for (t = 0; t < sizeof(tails) / sizeof(tails[0]); t++) {
            memcpy(s, "k=", 2);
            memset(s + 2, 'x', lead);
            len = 2 + lead;
            memcpy(s + len, tails[t], strlen(tails[t]));
            len += strlen(tails[t]);
            memcpy(s + len, "yz%42", 5);
            len += 5;

            rc = sp_kvlist_validate(s, len);
            assert_int_equal(rc, want[t]);
            list = NULL;
            assert_int_equal(sp_kvlist_parse(s, len, &list), rc);
            if (rc == SP_OK) {
                assert_int_equal(strlen(sp_kvlist_value(list, 0)), lead + 4);
                assert_memory_equal(sp_kvlist_value(list, 0) + lead,
                                    "AyzB", 5);
                sp_kvlist_destroy(list);
            }
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_members_in_order),
        cmocka_unit_test(trims_blanks_around_keys_and_values_only),
        cmocka_unit_test(decodes_values_but_not_keys),
        cmocka_unit_test(empty_or_blank_input_is_an_empty_list),
        cmocka_unit_test(skips_empty_members),
        cmocka_unit_test(values_may_be_empty_or_hold_equals_and_semicolons),
        cmocka_unit_test(keeps_raw_utf8_in_values),
        cmocka_unit_test(one_bad_member_rejects_the_whole_list),
        cmocka_unit_test(keeps_duplicates_and_finds_the_last),
        cmocka_unit_test(uses_only_len_bytes),
        cmocka_unit_test(long_values_validate_like_they_parse),
    };

    return cmocka_run_group_tests_name("kvlist", tests, NULL, NULL);
}
