#include <math.h>
#include <stdio.h>

#include "sp_test.h"
#include "sp_selection.h"

#define THRESHOLD_1_PERCENT  2684354u  /* floor(0.01 * 0x0FFFFFFF) */
#define THRESHOLD_10_PERCENT 26843545u /* floor(0.10 * 0x0FFFFFFF) */

static sp_baggage bag;
static char before[SP_BAGGAGE_SERIALIZE_CAP], after[SP_BAGGAGE_SERIALIZE_CAP];

static int
reset(void **state)
{
    (void)state;
    sp_baggage_init(&bag);
    return 0;
}

/* A trace id whose last 4 bytes are last and whose others are all fill. */
static void
trace_id(uint8_t id[16], uint8_t fill, uint32_t last)
{
    memset(id, fill, 16);
    id[12] = (uint8_t)(last >> 24);
    id[13] = (uint8_t)(last >> 16);
    id[14] = (uint8_t)(last >> 8);
    id[15] = (uint8_t)last;
}

static void
serialize(char *out)
{
    size_t n;

    assert_int_equal(sp_baggage_serialize(&bag, out,
                                          SP_BAGGAGE_SERIALIZE_CAP, &n),
                     SP_OK);
}

/* Parses header, decides, and checks the baggage is exactly as received. */
static sp_selection
decide_received(const char *header, uint32_t r, bool recorded)
{
    sp_selection s;
    uint8_t id[16];

    sp_baggage_init(&bag);
    sp_baggage_parse(&bag, header, strlen(header), NULL);
    serialize(before);
    trace_id(id, 0xab, r);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, recorded, &s);
    serialize(after);
    assert_string_equal(before, after);
    assert_true(s.received);
    assert_int_equal(s.selected, s.volume == SP_SNAPSHOT_HIGHEST);
    assert_int_equal(s.profiled, s.selected && recorded);
    return s;
}

static void
threshold_for_the_default_and_the_maximum(void **state)
{
    (void)state;
    assert_true(SP_SELECTION_PROBABILITY_DEFAULT == 0.01);
    assert_true(SP_SELECTION_PROBABILITY_MAX == 0.10);
    assert_int_equal(sp_selection_threshold(0.01), THRESHOLD_1_PERCENT);
    assert_int_equal(sp_selection_threshold(0.10), THRESHOLD_10_PERCENT);
    assert_int_equal(sp_selection_threshold(0.05), 13421772u);
    /* Tiny but positive: only r == 0. */
    assert_int_equal(sp_selection_threshold(1e-12), 0);
}

static void
threshold_above_the_maximum_is_clamped(void **state)
{
    (void)state;
    assert_int_equal(sp_selection_threshold(0.1000001), THRESHOLD_10_PERCENT);
    assert_int_equal(sp_selection_threshold(0.5), THRESHOLD_10_PERCENT);
    assert_int_equal(sp_selection_threshold(1.0), THRESHOLD_10_PERCENT);
    assert_int_equal(sp_selection_threshold(INFINITY), THRESHOLD_10_PERCENT);
}

static void
threshold_at_or_below_zero_selects_nothing(void **state)
{
    static const double p[] = { 0.0, -0.0, -0.01, -INFINITY };
    uint8_t id[16];
    size_t i;

    (void)state;
    trace_id(id, 0, 0);
    for (i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        assert_int_equal(sp_selection_threshold(p[i]),
                         SP_SELECTION_THRESHOLD_NONE);
    }
    assert_int_equal(sp_selection_threshold(NAN), SP_SELECTION_THRESHOLD_NONE);
    /* Not even the trace id that ends in 0000000, nor one all ones. */
    assert_false(sp_selection_by_trace_id(id, sp_selection_threshold(0.0)));
    trace_id(id, 0xff, 0xffffffff);
    assert_false(sp_selection_by_trace_id(id, sp_selection_threshold(0.0)));
}

static void
r_equal_to_the_threshold_is_selected_one_more_is_not(void **state)
{
    static const uint32_t thresholds[] = {
        0, THRESHOLD_1_PERCENT, THRESHOLD_10_PERCENT, SP_SELECTION_R_MAX - 1,
    };
    uint8_t id[16];
    uint32_t t;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(thresholds) / sizeof(thresholds[0]); i++) {
        t = thresholds[i];
        trace_id(id, 0x5a, t);
        assert_true(sp_selection_by_trace_id(id, t));
        trace_id(id, 0x5a, t + 1);
        assert_false(sp_selection_by_trace_id(id, t));
        if (t > 0) {
            trace_id(id, 0x5a, t - 1);
            assert_true(sp_selection_by_trace_id(id, t));
        }
    }
    trace_id(id, 0, 0);
    assert_true(sp_selection_by_trace_id(id, 0));
    trace_id(id, 0, SP_SELECTION_R_MAX);
    assert_true(sp_selection_by_trace_id(id, SP_SELECTION_R_MAX));
}

static void
only_the_last_7_hex_digits_count(void **state)
{
    uint8_t id[16];
    size_t i;

    (void)state;
    /* The 8th digit from the end is the high nibble of byte 12. */
    trace_id(id, 0x00, 0xF0000000u | THRESHOLD_1_PERCENT);
    assert_true(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
    trace_id(id, 0xff, 0x70000000u | THRESHOLD_1_PERCENT);
    assert_true(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
    for (i = 0; i < 12; i++) {
        trace_id(id, 0x00, THRESHOLD_1_PERCENT + 1);
        id[i] = 0xff;
        assert_false(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
        trace_id(id, 0xff, THRESHOLD_1_PERCENT);
        id[i] = 0x00;
        assert_true(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
    }
    /* Each of the last 7 digits does count. */
    for (i = 0; i < 7; i++) {
        trace_id(id, 0x00, (uint32_t)1 << (4 * i));
        assert_false(sp_selection_by_trace_id(id, 0));
        trace_id(id, 0x00, 0);
        assert_true(sp_selection_by_trace_id(id, 0));
    }
    /* 32-digit trace id ...0028f5c2 (r = 0x028f5c2 = 2684354). */
    trace_id(id, 0x12, 0x0028f5c2);
    assert_true(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
    trace_id(id, 0x12, 0x0028f5c3);
    assert_false(sp_selection_by_trace_id(id, THRESHOLD_1_PERCENT));
}

static void
received_highest_selects_and_is_kept(void **state)
{
    sp_selection s;

    (void)state;
    /* The trace id would say no: the received value wins. */
    s = decide_received("splunk.trace.snapshot.volume=highest",
                        SP_SELECTION_R_MAX, true);
    assert_int_equal(s.volume, SP_SNAPSHOT_HIGHEST);
    assert_true(s.selected);
    assert_true(s.profiled);
    s = decide_received("a=1, splunk.trace.snapshot.volume = highest ;p;q=1,"
                        "b=%20", SP_SELECTION_R_MAX, true);
    assert_true(s.selected);
    assert_string_equal(after,
                        "a=1,splunk.trace.snapshot.volume=highest;p;q=1,b=%20");
}

static void
received_highest_is_compared_percent_decoded(void **state)
{
    sp_selection s;

    (void)state;
    s = decide_received("splunk.trace.snapshot.volume=%68ighes%74",
                        SP_SELECTION_R_MAX, true);
    assert_true(s.selected);
    /* Propagated encoded as it came. */
    assert_string_equal(after, "splunk.trace.snapshot.volume=%68ighes%74");
}

static void
received_off_or_anything_else_does_not_select(void **state)
{
    static const char *const values[] = {
        "HIGHEST", "high", "Highest", "highest2", "highestt", "%20highest",
        "highest%00", "highest-and-a-lot-more", "unspecified", "on", "true",
        "1", "%FF",
    };
    char header[128];
    sp_selection s;
    size_t i;

    (void)state;
    /* The trace id would say yes (r == 0). */
    s = decide_received("splunk.trace.snapshot.volume=off", 0, true);
    assert_int_equal(s.volume, SP_SNAPSHOT_OFF);
    assert_false(s.selected);
    assert_false(s.profiled);
    assert_string_equal(after, "splunk.trace.snapshot.volume=off");

    s = decide_received("splunk.trace.snapshot.volume=", 0, true);
    assert_int_equal(s.volume, SP_SNAPSHOT_OTHER);
    assert_false(s.selected);
    assert_string_equal(after, "splunk.trace.snapshot.volume=");

    for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        snprintf(header, sizeof(header), "splunk.trace.snapshot.volume=%s",
                 values[i]);
        s = decide_received(header, 0, true);
        if (s.volume != SP_SNAPSHOT_OTHER || s.selected || s.profiled) {
            fail_msg("value \"%s\" selected or not OTHER", values[i]);
        }
        assert_string_equal(after, header);
    }
}

/* As OpenTelemetry's propagators read a repeated key: the services
 * behind this one decide as it does. */
static void
the_last_of_duplicate_entries_counts(void **state)
{
    sp_selection s;

    (void)state;
    s = decide_received("splunk.trace.snapshot.volume=off,"
                        "splunk.trace.snapshot.volume=highest", 0, true);
    assert_int_equal(s.volume, SP_SNAPSHOT_HIGHEST);
    s = decide_received("splunk.trace.snapshot.volume=highest,"
                        "splunk.trace.snapshot.volume=off", 0, true);
    assert_int_equal(s.volume, SP_SNAPSHOT_OFF);
}

static void
the_key_is_case_sensitive(void **state)
{
    const char *h = "Splunk.Trace.Snapshot.Volume=highest";
    sp_selection s;
    uint8_t id[16];

    (void)state;
    sp_baggage_parse(&bag, h, strlen(h), NULL);
    trace_id(id, 0x01, SP_SELECTION_R_MAX);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.received);
    assert_false(s.selected);
    serialize(after);
    assert_string_equal(after, "Splunk.Trace.Snapshot.Volume=highest,"
                               "splunk.trace.snapshot.volume=off");
}

static void
received_entry_with_a_recorded_flag_off_is_not_profiled(void **state)
{
    sp_selection s;

    (void)state;
    s = decide_received("splunk.trace.snapshot.volume=highest", 0, false);
    assert_true(s.selected);
    assert_false(s.profiled);
}

static void
missing_entry_is_decided_by_trace_id_and_set(void **state)
{
    char out[16];
    size_t n;
    sp_selection s;
    uint8_t id[16];

    (void)state;
    sp_baggage_parse(&bag, "a=1;p, b=2", strlen("a=1;p, b=2"), NULL);
    trace_id(id, 0xcd, THRESHOLD_1_PERCENT);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.received);
    assert_int_equal(s.volume, SP_SNAPSHOT_HIGHEST);
    assert_true(s.selected);
    assert_true(s.profiled);
    serialize(after);
    assert_string_equal(after,
                        "a=1;p,b=2,splunk.trace.snapshot.volume=highest");
    assert_int_equal(sp_baggage_get(&bag, SP_SNAPSHOT_VOLUME_KEY, out,
                                    sizeof(out), &n), SP_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(out, "highest", 7);

    sp_baggage_init(&bag);
    trace_id(id, 0xcd, THRESHOLD_1_PERCENT + 1);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.received);
    assert_int_equal(s.volume, SP_SNAPSHOT_OFF);
    assert_false(s.selected);
    assert_false(s.profiled);
    serialize(after);
    assert_string_equal(after, "splunk.trace.snapshot.volume=off");

    /* A second decision downstream now sees the entry and keeps it. */
    sp_selection_decide(&bag, id, SP_SELECTION_R_MAX, true, &s);
    assert_true(s.received);
    assert_false(s.selected);
    serialize(after);
    assert_string_equal(after, "splunk.trace.snapshot.volume=off");
}

static void
not_recorded_is_not_profiled_but_the_entry_is_still_set(void **state)
{
    sp_selection s;
    uint8_t id[16];

    (void)state;
    trace_id(id, 0x01, 0);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, false, &s);
    assert_true(s.selected);
    assert_int_equal(s.volume, SP_SNAPSHOT_HIGHEST);
    assert_false(s.profiled);
    serialize(after);
    assert_string_equal(after, "splunk.trace.snapshot.volume=highest");
}

static void
a_malformed_entry_counts_as_missing(void **state)
{
    const char *h = "splunk.trace.snapshot.volume=%zz,a=1";
    sp_selection s;
    uint8_t id[16];

    (void)state;
    sp_baggage_parse(&bag, h, strlen(h), NULL);
    trace_id(id, 0x01, 0);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.received);
    assert_true(s.selected);
    serialize(after);
    assert_string_equal(after, "a=1,splunk.trace.snapshot.volume=highest");
}

static void
a_full_baggage_makes_room_for_the_entry(void **state)
{
    char header[SP_BAGGAGE_MAX_MEMBERS * 8];
    size_t i, n = 0;
    sp_selection s;
    uint8_t id[16];

    (void)state;
    for (i = 0; i < SP_BAGGAGE_MAX_MEMBERS; i++) {
        n += (size_t)sprintf(header + n, "%sk%03zu=v", i > 0 ? "," : "", i);
    }
    sp_baggage_parse(&bag, header, n, NULL);
    assert_int_equal(sp_baggage_count(&bag), SP_BAGGAGE_MAX_MEMBERS);
    trace_id(id, 0x01, SP_SELECTION_R_MAX);
    sp_selection_decide(&bag, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.selected);
    assert_int_equal(sp_baggage_count(&bag), SP_BAGGAGE_MAX_MEMBERS);
    serialize(after);
    /* k179=v (7 bytes with its comma) made room. */
    memcpy(header + n - 7, ",splunk.trace.snapshot.volume=off", 34);
    assert_string_equal(after, header);
}

static void
without_baggage_the_trace_id_decides(void **state)
{
    sp_selection s;
    uint8_t id[16];

    (void)state;
    trace_id(id, 0x01, 0);
    sp_selection_decide(NULL, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.received);
    assert_true(s.selected);
    assert_true(s.profiled);
    trace_id(id, 0x01, THRESHOLD_1_PERCENT + 1);
    sp_selection_decide(NULL, id, THRESHOLD_1_PERCENT, true, &s);
    assert_false(s.selected);
    assert_int_equal(s.volume, SP_SNAPSHOT_OFF);
}

static void
a_zero_probability_sets_off(void **state)
{
    sp_selection s;
    uint8_t id[16];

    (void)state;
    trace_id(id, 0x00, 0);
    sp_selection_decide(&bag, id, sp_selection_threshold(0.0), true, &s);
    assert_false(s.selected);
    serialize(after);
    assert_string_equal(after, "splunk.trace.snapshot.volume=off");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup(name, reset)
        T(threshold_for_the_default_and_the_maximum),
        T(threshold_above_the_maximum_is_clamped),
        T(threshold_at_or_below_zero_selects_nothing),
        T(r_equal_to_the_threshold_is_selected_one_more_is_not),
        T(only_the_last_7_hex_digits_count),
        T(received_highest_selects_and_is_kept),
        T(received_highest_is_compared_percent_decoded),
        T(received_off_or_anything_else_does_not_select),
        T(the_last_of_duplicate_entries_counts),
        T(the_key_is_case_sensitive),
        T(received_entry_with_a_recorded_flag_off_is_not_profiled),
        T(missing_entry_is_decided_by_trace_id_and_set),
        T(not_recorded_is_not_profiled_but_the_entry_is_still_set),
        T(a_malformed_entry_counts_as_missing),
        T(a_full_baggage_makes_room_for_the_entry),
        T(without_baggage_the_trace_id_decides),
        T(a_zero_probability_sets_off),
#undef T
    };

    return cmocka_run_group_tests_name("selection", tests, NULL, NULL);
}
