#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_baggage.h"

/* Too big for a test's stack frame to be comfortable; one per test. */
static sp_baggage bag, bag2;
static char ser[SP_BAGGAGE_SERIALIZE_CAP];
static char big[4 * SP_BAGGAGE_MAX_BYTES];

static int
reset(void **state)
{
    (void)state;
    sp_baggage_init(&bag);
    sp_baggage_init(&bag2);
    return 0;
}

static sp_baggage_counts
parse(sp_baggage *b, const char *header)
{
    sp_baggage_counts c;

    sp_baggage_parse(b, header, strlen(header), &c);
    return c;
}

/* The serialization of b, NUL-terminated, in ser. */
static const char *
serialized(const sp_baggage *b)
{
    size_t n;

    assert_int_equal(sp_baggage_serialize(b, ser, sizeof(ser), &n), SP_OK);
    assert_int_equal(n, strlen(ser));
    assert_int_equal(n, sp_baggage_serialized_len(b));
    assert_true(n <= SP_BAGGAGE_MAX_BYTES);
    return ser;
}

static void
assert_entry(const sp_baggage *b, size_t i, const char *key,
    const char *value, const char *props)
{
    sp_baggage_entry e;

    assert_int_equal(sp_baggage_entry_at(b, i, &e), SP_OK);
    assert_int_equal(e.key_len, strlen(key));
    assert_memory_equal(e.key, key, e.key_len);
    assert_int_equal(e.value_len, strlen(value));
    assert_memory_equal(e.value, value, e.value_len);
    assert_int_equal(e.properties_len, strlen(props));
    assert_memory_equal(e.properties, props, e.properties_len);
}

/* "kNNN=" followed by value_len 'v's, for building large baggage. */
static size_t
member(char *out, size_t i, size_t value_len)
{
    int n = sprintf(out, "k%03zu=", i);

    memset(out + n, 'v', value_len);
    out[n + value_len] = '\0';
    return (size_t)n + value_len;
}

/* count members joined with ",", each value_len long; returns the length. */
static size_t
members(char *out, size_t count, size_t value_len)
{
    size_t i, n = 0;

    for (i = 0; i < count; i++) {
        if (i > 0) {
            out[n++] = ',';
        }
        n += member(out + n, i, value_len);
    }
    out[n] = '\0';
    return n;
}

static void
parses_the_w3c_example_in_order(void **state)
{
    sp_baggage_counts c;

    (void)state;
    c = parse(&bag, "key1=value1;property1;property2, key2 = value2, "
                    "key3=value3; propertyKey=propertyValue");
    assert_int_equal(c.kept, 3);
    assert_int_equal(c.dropped_malformed, 0);
    assert_int_equal(c.dropped_limit, 0);
    assert_int_equal(sp_baggage_count(&bag), 3);
    assert_entry(&bag, 0, "key1", "value1", "property1;property2");
    assert_entry(&bag, 1, "key2", "value2", "");
    assert_entry(&bag, 2, "key3", "value3", "propertyKey=propertyValue");
    assert_string_equal(serialized(&bag),
                        "key1=value1;property1;property2,key2=value2,"
                        "key3=value3;propertyKey=propertyValue");
}

static void
accepts_ows_wherever_the_grammar_allows_it(void **state)
{
    sp_baggage_counts c;

    (void)state;
    c = parse(&bag, " \t a \t=\t 1 \t;\t p \t=\t x \t;\tq\t , b=2 ,\tc=3\t");
    assert_int_equal(c.kept, 3);
    assert_int_equal(c.dropped_malformed, 0);
    assert_entry(&bag, 0, "a", "1", "p=x;q");
    assert_string_equal(serialized(&bag), "a=1;p=x;q,b=2,c=3");
}

static void
accepts_every_token_character_in_keys(void **state)
{
    const char *in = "!#$%&'*+-.^_`|~09azAZ=1;!#$%&'*+-.^_`|~09azAZ=2";
    char out[4];
    size_t n;

    (void)state;
    assert_int_equal(parse(&bag, in).kept, 1);
    assert_string_equal(serialized(&bag), in);
    assert_int_equal(sp_baggage_get(&bag, "!#$%&'*+-.^_`|~09azAZ", out,
                                    sizeof(out), &n), SP_OK);
    assert_memory_equal(out, "1", 1);
    assert_int_equal(sp_baggage_set(&bag, "~", "2", NULL), SP_OK);
}

static void
keeps_values_and_properties_byte_for_byte(void **state)
{
    const char *in = "k=a%2Cb%20c==%e2%82%ac;p=%41%zz1;flag,"
                     "t=!#$&'*+-./:<>?@[]^_`{|}~;X-Y=Z";

    (void)state;
    /* %zz in a property is malformed; see the malformed table. */
    assert_int_equal(parse(&bag, in).dropped_malformed, 1);
    sp_baggage_init(&bag);
    in = "k=a%2Cb%20c==%e2%82%ac;p=%41;flag,"
         "t=!#$&'*+-./:<>?@[]^_`{|}~;X-Y=Z";
    assert_int_equal(parse(&bag, in).kept, 2);
    assert_string_equal(serialized(&bag), in);
    assert_entry(&bag, 0, "k", "a%2Cb%20c==%e2%82%ac", "p=%41;flag");
}

static void
properties_with_and_without_values_stay_distinct(void **state)
{
    (void)state;
    assert_int_equal(parse(&bag, "k=v;a=;b;c=1;d = ;e").kept, 1);
    assert_entry(&bag, 0, "k", "v", "a=;b;c=1;d=;e");
    assert_string_equal(serialized(&bag), "k=v;a=;b;c=1;d=;e");
}

static void
accepts_an_empty_value(void **state)
{
    char out[8];
    size_t n = 99;

    (void)state;
    assert_int_equal(parse(&bag, "e=,f = ;p").kept, 2);
    assert_int_equal(sp_baggage_get(&bag, "e", out, sizeof(out), &n), SP_OK);
    assert_int_equal(n, 0);
    assert_entry(&bag, 1, "f", "", "p");
    assert_string_equal(serialized(&bag), "e=,f=;p");
}

static void
drops_each_malformed_member_alone(void **state)
{
    static const char *const bad[] = {
        "bad key=1",        /* a space inside the key */
        "k\"=1",            /* DQUOTE is no tchar */
        "k(x)=1",
        "=v",               /* empty key */
        "noequals",
        "k",
        "k=a b",            /* whitespace inside the value */
        "k=a\"b",           /* DQUOTE */
        "k=a\\b",           /* backslash */
        "k=a\x7f",          /* DEL */
        "k=a\x01",
        "k=\xc3\xa9",       /* raw UTF-8 must be percent-encoded */
        "k=a\rb",
        "k=%zz",            /* bad escapes */
        "k=%4",
        "k=%",
        "k=a%g1",
        "k=v;;p",           /* empty property */
        "k=v;",
        "k=v; ;p",
        "k=v;=x",           /* property without key */
        "k=v;p=%2",         /* bad escape in a property value */
        "k=v;p q",
        "k=v;p=a b",
        "k=v x=y",
        "k\t=1 2",
    };
    char header[128];
    sp_baggage_counts c;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sp_baggage_init(&bag);
        snprintf(header, sizeof(header), "a=1, %s ,z=2", bad[i]);
        c = parse(&bag, header);
        if (c.kept != 2 || c.dropped_malformed != 1 || c.dropped_limit != 0) {
            fail_msg("\"%s\": kept %zu, malformed %zu, limit %zu", bad[i],
                     c.kept, c.dropped_malformed, c.dropped_limit);
        }
        assert_string_equal(serialized(&bag), "a=1,z=2");
    }
}

static void
skips_empty_list_members_without_counting_them(void **state)
{
    sp_baggage_counts c;

    (void)state;
    c = parse(&bag, ",a=1,, ,\t,b=2,");
    assert_int_equal(c.kept, 2);
    assert_int_equal(c.dropped_malformed, 0);
    assert_int_equal(c.dropped_limit, 0);
    assert_string_equal(serialized(&bag), "a=1,b=2");
    c = parse(&bag2, "");
    assert_int_equal(c.kept + c.dropped_malformed + c.dropped_limit, 0);
    assert_string_equal(serialized(&bag2), "");
}

static void
get_percent_decodes_the_last_member_with_the_key(void **state)
{
    char out[64];
    size_t n;

    (void)state;
    parse(&bag, "x=1,k=first,k=a%20b%2cc%2C%41,K=upper");
    assert_int_equal(sp_baggage_get(&bag, "k", out, sizeof(out), &n), SP_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(out, "a b,c,A", 7);
    assert_int_equal(sp_baggage_get(&bag, "x", out, sizeof(out), &n), SP_OK);
    assert_memory_equal(out, "1", 1);
    /* Keys are case-sensitive. */
    assert_int_equal(sp_baggage_get(&bag, "K", out, sizeof(out), &n), SP_OK);
    assert_memory_equal(out, "upper", 5);
    assert_int_equal(sp_baggage_get(&bag, "missing", out, sizeof(out), &n),
                     SP_ERR_NOT_FOUND);
    assert_int_equal(sp_baggage_get(&bag, "", out, sizeof(out), &n),
                     SP_ERR_NOT_FOUND);
}

static void
get_reports_a_too_small_output(void **state)
{
    char out[16];
    size_t n;

    (void)state;
    parse(&bag, "k=abc,e=%E2%82%AC,x=%FF");
    assert_int_equal(sp_baggage_get(&bag, "k", out, 2, &n), SP_ERR_TOO_LONG);
    assert_int_equal(sp_baggage_get(&bag, "k", out, 3, &n), SP_OK);
    assert_int_equal(sp_baggage_get(&bag, "e", out, 2, &n), SP_ERR_TOO_LONG);
    assert_int_equal(sp_baggage_get(&bag, "e", out, 3, &n), SP_OK);
    assert_memory_equal(out, "\xE2\x82\xAC", 3);
    /* U+FFFD for one escape: the encoded length still suffices. */
    assert_int_equal(sp_baggage_get(&bag, "x", out, 2, &n), SP_ERR_TOO_LONG);
    assert_int_equal(sp_baggage_get(&bag, "x", out, 3, &n), SP_OK);
}

static void
get_replaces_what_is_not_utf8_with_u_fffd(void **state)
{
    static const struct {
        const char *value;
        const char *decoded;
    } cases[] = {
        { "%C3%A9", "\xC3\xA9" },
        { "%F0%9F%98%80", "\xF0\x9F\x98\x80" },
        { "%ff", "\xEF\xBF\xBD" },
        { "a%80b", "a\xEF\xBF\xBD" "b" },
        { "%C0%80", "\xEF\xBF\xBD\xEF\xBF\xBD" },              /* overlong */
        { "%E2%82", "\xEF\xBF\xBD" },                   /* cut short */
        { "%E2%82A", "\xEF\xBF\xBD" "A" },
        { "%ED%A0%80",                                  /* a surrogate */
          "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
        { "%F4%90%80%80",                               /* above U+10FFFF */
          "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
        { "%E2%C3%A9", "\xEF\xBF\xBD\xC3\xA9" },
        { "%F0%8F%BF%BF",                               /* overlong */
          "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
        { "%F4%8F%BF%BF", "\xF4\x8F\xBF\xBF" },           /* U+10FFFF */
        { "%ED%9F%BF", "\xED\x9F\xBF" },                   /* U+D7FF */
    };
    char header[64], out[64];
    size_t i, n;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sp_baggage_init(&bag);
        snprintf(header, sizeof(header), "k=%s", cases[i].value);
        assert_int_equal(parse(&bag, header).kept, 1);
        assert_int_equal(sp_baggage_get(&bag, "k", out, sizeof(out), &n),
                         SP_OK);
        if (n != strlen(cases[i].decoded)
            || memcmp(out, cases[i].decoded, n) != 0)
        {
            fail_msg("%s decoded wrongly", cases[i].value);
        }
        /* Still propagated as received. */
        assert_string_equal(serialized(&bag), header);
    }
}

static void
keeps_180_members_and_drops_the_181st(void **state)
{
    sp_baggage_counts c;
    size_t n;

    (void)state;
    n = members(big, SP_BAGGAGE_MAX_MEMBERS, 1);
    c = parse(&bag, big);
    assert_int_equal(c.kept, 180);
    assert_int_equal(c.dropped_limit, 0);
    assert_string_equal(serialized(&bag), big);

    sp_baggage_init(&bag);
    strcpy(big + n, ",k180=v,k181=v, bad ,k182=v");
    c = parse(&bag, big);
    assert_int_equal(c.kept, 180);
    assert_int_equal(c.dropped_limit, 3);
    assert_int_equal(c.dropped_malformed, 1);
    assert_int_equal(sp_baggage_count(&bag), 180);
    big[n] = '\0';
    assert_string_equal(serialized(&bag), big);
}

static void
keeps_a_serialized_size_of_exactly_8192(void **state)
{
    sp_baggage_counts c;
    size_t n;

    (void)state;
    /* Three members "kNNN=" + 2725 bytes: 3 * 2730 + 2 commas = 8192. */
    n = members(big, 3, 2725);
    assert_int_equal(n, SP_BAGGAGE_MAX_BYTES);
    c = parse(&bag, big);
    assert_int_equal(c.kept, 3);
    assert_int_equal(c.dropped_limit, 0);
    assert_string_equal(serialized(&bag), big);

    /* One byte more in the last member: that member goes, whole. */
    sp_baggage_init(&bag);
    strcpy(big + n, "v");
    c = parse(&bag, big);
    assert_int_equal(c.kept, 2);
    assert_int_equal(c.dropped_limit, 1);
    assert_int_equal(sp_baggage_serialized_len(&bag), 2 * 2730 + 1);
    big[2 * 2730 + 1] = '\0';
    assert_string_equal(serialized(&bag), big);
}

static void
keeps_the_longest_prefix_of_whole_members_that_fits(void **state)
{
    sp_baggage_counts c;
    size_t n;

    (void)state;
    /* 40 members of 205 bytes: 40 * 206 - 1 = 8239 bytes. */
    n = members(big, 40, 200);
    assert_int_equal(n, 8239);
    /* A small member after the overflow would fit, but is not kept. */
    strcpy(big + n, ",s=1");
    c = parse(&bag, big);
    assert_int_equal(c.kept, 39);
    assert_int_equal(c.dropped_limit, 2);
    assert_int_equal(sp_baggage_serialized_len(&bag), 39 * 206 - 1);
    assert_int_equal(sp_baggage_get(&bag, "s", ser, sizeof(ser), &n),
                     SP_ERR_NOT_FOUND);
    big[39 * 206 - 1] = '\0';
    assert_string_equal(serialized(&bag), big);

    /* One member alone: 8192 bytes fit, 8193 or more are dropped whole. */
    sp_baggage_init(&bag);
    member(big, 0, SP_BAGGAGE_MAX_BYTES - 5);
    assert_int_equal(parse(&bag, big).kept, 1);
    assert_string_equal(serialized(&bag), big);
    sp_baggage_init(&bag);
    member(big, 0, SP_BAGGAGE_MAX_BYTES - 4);
    c = parse(&bag, big);
    assert_int_equal(c.kept, 0);
    assert_int_equal(c.dropped_limit, 1);
    assert_string_equal(serialized(&bag), "");
    sp_baggage_init(&bag);
    member(big, 0, 2 * SP_BAGGAGE_MAX_BYTES);
    assert_int_equal(parse(&bag, big).dropped_limit, 1);
}

static void
parsing_lines_one_by_one_equals_parsing_them_joined(void **state)
{
    static const char *const lines[] = {
        "a=1, b = 2", "", " c=%20;p", "bad", "d=4,", ",e=5",
    };
    sp_baggage_counts c;
    char joined[256] = "";
    size_t i, kept = 0, malformed = 0;

    (void)state;
    for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        c = parse(&bag, lines[i]);
        kept += c.kept;
        malformed += c.dropped_malformed;
        strcat(joined, i > 0 ? "," : "");
        strcat(joined, lines[i]);
    }
    c = parse(&bag2, joined);
    assert_int_equal(kept, c.kept);
    assert_int_equal(malformed, c.dropped_malformed);
    assert_string_equal(serialized(&bag), "a=1,b=2,c=%20;p,d=4,e=5");
    assert_string_equal(serialized(&bag2), "a=1,b=2,c=%20;p,d=4,e=5");

    /* The prefix rule holds across lines: after an overflow, nothing. */
    sp_baggage_init(&bag);
    member(big, 0, SP_BAGGAGE_MAX_BYTES);
    parse(&bag, "a=1");
    parse(&bag, big);
    c = parse(&bag, "b=2");
    assert_int_equal(c.kept, 0);
    assert_int_equal(c.dropped_limit, 1);
    assert_string_equal(serialized(&bag), "a=1");

    /* init starts afresh. */
    sp_baggage_init(&bag);
    assert_int_equal(parse(&bag, "b=2").kept, 1);
    assert_string_equal(serialized(&bag), "b=2");
}

static void
serialize_needs_room_for_the_nul(void **state)
{
    char out[8];
    size_t n = 0;

    (void)state;
    parse(&bag, "ab=cd");
    assert_int_equal(sp_baggage_serialize(&bag, out, 5, &n),
                     SP_ERR_TOO_LONG);
    assert_int_equal(sp_baggage_serialize(&bag, out, 6, &n), SP_OK);
    assert_int_equal(n, 5);
    assert_string_equal(out, "ab=cd");
    assert_int_equal(sp_baggage_serialize(&bag2, out, 0, &n),
                     SP_ERR_TOO_LONG);
    assert_int_equal(sp_baggage_serialize(&bag2, out, 1, &n), SP_OK);
    assert_int_equal(n, 0);
}

static void
set_appends_a_new_key(void **state)
{
    size_t evicted = 9;
    char out[16];
    size_t n;

    (void)state;
    assert_int_equal(sp_baggage_set(&bag, "a", "1", &evicted), SP_OK);
    assert_int_equal(evicted, 0);
    assert_string_equal(serialized(&bag), "a=1");
    parse(&bag, "b=2;p");
    assert_int_equal(sp_baggage_set(&bag, "c", "%203", NULL), SP_OK);
    assert_string_equal(serialized(&bag), "a=1,b=2;p,c=%203");
    assert_int_equal(sp_baggage_get(&bag, "c", out, sizeof(out), &n), SP_OK);
    assert_memory_equal(out, " 3", 2);
}

static void
set_replaces_the_first_member_in_place(void **state)
{
    (void)state;
    parse(&bag, "a=1,k=old;p=1,b=2,k=dup,c=3,k=dup2;x");
    assert_int_equal(sp_baggage_set(&bag, "k", "a-much-longer-value", NULL),
                     SP_OK);
    assert_string_equal(serialized(&bag),
                        "a=1,k=a-much-longer-value,b=2,c=3");
    assert_int_equal(sp_baggage_set(&bag, "k", "", NULL), SP_OK);
    assert_string_equal(serialized(&bag), "a=1,k=,b=2,c=3");
    assert_entry(&bag, 3, "c", "3", "");
    assert_int_equal(sp_baggage_set(&bag, "c", "4", NULL), SP_OK);
    assert_string_equal(serialized(&bag), "a=1,k=,b=2,c=4");
}

static void
set_rejects_what_is_not_valid_and_changes_nothing(void **state)
{
    static const char *const keys[] = { "", "a b", "k=", "k,", "\xc3\xa9" };
    static const char *const values[] = {
        "a b", "a,b", "a;b", "a\"b", "a\\b", "%zz", "%4", "\xc3\xa9", "\t",
    };
    size_t i;

    (void)state;
    parse(&bag, "a=1;p");
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        assert_int_equal(sp_baggage_set(&bag, keys[i], "v", NULL),
                         SP_ERR_INVALID);
    }
    for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        assert_int_equal(sp_baggage_set(&bag, "a", values[i], NULL),
                         SP_ERR_INVALID);
    }
    /* "k=" plus 8190 bytes is one byte too many. */
    memset(big, 'v', SP_BAGGAGE_MAX_BYTES - 1);
    big[SP_BAGGAGE_MAX_BYTES - 1] = '\0';
    assert_int_equal(sp_baggage_set(&bag, "k", big, NULL), SP_ERR_TOO_LONG);
    assert_string_equal(serialized(&bag), "a=1;p");
    big[SP_BAGGAGE_MAX_BYTES - 2] = '\0';
    assert_int_equal(sp_baggage_set(&bag, "k", big, NULL), SP_OK);
    assert_int_equal(sp_baggage_count(&bag), 1);
    assert_int_equal(sp_baggage_serialized_len(&bag), SP_BAGGAGE_MAX_BYTES);
}

static void
set_on_180_members_evicts_the_last(void **state)
{
    size_t evicted = 0, n;

    (void)state;
    n = members(big, SP_BAGGAGE_MAX_MEMBERS, 1);
    parse(&bag, big);
    assert_int_equal(sp_baggage_set(&bag, "ours", "x", &evicted), SP_OK);
    assert_int_equal(evicted, 1);
    assert_int_equal(sp_baggage_count(&bag), 180);
    /* k179=v (7 bytes with its comma) went, ours=x came. */
    strcpy(big + n - 7, ",ours=x");
    assert_string_equal(serialized(&bag), big);

    /* Replacing needs no eviction. */
    assert_int_equal(sp_baggage_set(&bag, "k000", "y", &evicted), SP_OK);
    assert_int_equal(evicted, 0);
    assert_int_equal(sp_baggage_count(&bag), 180);
}

static void
set_on_a_full_baggage_evicts_from_the_end_what_it_must(void **state)
{
    size_t evicted = 0, n = 0;
    char out[8];

    (void)state;
    /* 39 members, 8033 bytes: "ours=" + 200 needs 206 more, 47 too many. */
    members(big, 39, 200);
    parse(&bag, big);
    assert_int_equal(sp_baggage_serialized_len(&bag), 8033);
    memset(ser, 'x', 200);
    ser[200] = '\0';
    strcpy(big, ser);
    assert_int_equal(sp_baggage_set(&bag, "ours", big, &evicted), SP_OK);
    assert_int_equal(evicted, 1);
    assert_int_equal(sp_baggage_count(&bag), 39);
    assert_true(sp_baggage_serialized_len(&bag) <= SP_BAGGAGE_MAX_BYTES);
    assert_int_equal(sp_baggage_get(&bag, "k038", out, sizeof(out), &n),
                     SP_ERR_NOT_FOUND);
    assert_int_equal(sp_baggage_get(&bag, "k037", ser, sizeof(ser), &n),
                     SP_OK);
    assert_int_equal(n, 200);
    assert_int_equal(sp_baggage_get(&bag, "ours", ser, sizeof(ser), &n),
                     SP_OK);
    assert_int_equal(n, 200);
    serialized(&bag);
}

static void
set_growing_the_last_member_evicts_the_ones_before_it(void **state)
{
    size_t evicted = 0, n;
    sp_baggage_entry e;

    (void)state;
    /* 39 members of 206 bytes each with its comma, then ours=x. */
    n = members(big, 39, 200);
    strcpy(big + n, ",ours=x");
    parse(&bag, big);
    assert_int_equal(sp_baggage_count(&bag), 40);
    /* Grow ours to 5 + 1000 bytes: 8040 - 6 + 1005 = 9039: 847 too many. */
    memset(ser, 'y', 1000);
    ser[1000] = '\0';
    strcpy(big, ser);
    assert_int_equal(sp_baggage_set(&bag, "ours", big, &evicted), SP_OK);
    assert_int_equal(evicted, 5);
    assert_int_equal(sp_baggage_count(&bag), 35);
    assert_int_equal(sp_baggage_entry_at(&bag, 34, &e), SP_OK);
    assert_int_equal(e.key_len, 4);
    assert_memory_equal(e.key, "ours", 4);
    assert_int_equal(e.value_len, 1000);
    assert_int_equal(sp_baggage_entry_at(&bag, 33, &e), SP_OK);
    assert_memory_equal(e.key, "k033", 4);
    assert_int_equal(sp_baggage_serialized_len(&bag), 34 * 206 + 1005);
    serialized(&bag);
}

static void
entry_at_past_the_end_is_not_found(void **state)
{
    sp_baggage_entry e;

    (void)state;
    assert_int_equal(sp_baggage_entry_at(&bag, 0, &e), SP_ERR_NOT_FOUND);
    parse(&bag, "a=1");
    assert_int_equal(sp_baggage_entry_at(&bag, 0, &e), SP_OK);
    assert_int_equal(sp_baggage_entry_at(&bag, 1, &e), SP_ERR_NOT_FOUND);
}

static void
the_struct_stays_within_its_documented_size(void **state)
{
    (void)state;
    assert_true(sizeof(sp_baggage) <= 10 * 1024);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup(name, reset)
        T(parses_the_w3c_example_in_order),
        T(accepts_ows_wherever_the_grammar_allows_it),
        T(accepts_every_token_character_in_keys),
        T(keeps_values_and_properties_byte_for_byte),
        T(properties_with_and_without_values_stay_distinct),
        T(accepts_an_empty_value),
        T(drops_each_malformed_member_alone),
        T(skips_empty_list_members_without_counting_them),
        T(get_percent_decodes_the_last_member_with_the_key),
        T(get_reports_a_too_small_output),
        T(get_replaces_what_is_not_utf8_with_u_fffd),
        T(keeps_180_members_and_drops_the_181st),
        T(keeps_a_serialized_size_of_exactly_8192),
        T(keeps_the_longest_prefix_of_whole_members_that_fits),
        T(parsing_lines_one_by_one_equals_parsing_them_joined),
        T(serialize_needs_room_for_the_nul),
        T(set_appends_a_new_key),
        T(set_replaces_the_first_member_in_place),
        T(set_rejects_what_is_not_valid_and_changes_nothing),
        T(set_on_180_members_evicts_the_last),
        T(set_on_a_full_baggage_evicts_from_the_end_what_it_must),
        T(set_growing_the_last_member_evicts_the_ones_before_it),
        T(entry_at_past_the_end_is_not_found),
        T(the_struct_stays_within_its_documented_size),
#undef T
    };

    return cmocka_run_group_tests_name("baggage", tests, NULL, NULL);
}
