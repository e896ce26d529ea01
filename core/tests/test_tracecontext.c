#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_tracecontext.h"
#include "sp_tracecontext_cpu.h"

#define TRACE_HEX "4bf92f3577b34da6a3ce929d0e0e4736"
#define PARENT_HEX "00f067aa0ba902b7"
#define VALID "00-" TRACE_HEX "-" PARENT_HEX "-01"
#define ZERO_TRACE "00000000000000000000000000000000"
#define ZERO_PARENT "0000000000000000"

/* Positions in VALID, as the W3C layout puts them. */
#define POS_TRACE 3
#define POS_PARENT 36
#define POS_FLAGS 53

static const uint8_t trace_bytes[16] = {
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
    0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36
};
static const uint8_t parent_bytes[8] = {
    0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7
};

static sp_traceparent_result
tp(const char *s)
{
    sp_span_context ctx;

    return sp_traceparent_parse(s, strlen(s), &ctx);
}

/* VALID with the char at pos replaced by c. */
static sp_traceparent_result
tp_with(size_t pos, char c)
{
    char buf[] = VALID;

    buf[pos] = c;
    return tp(buf);
}

static void
parses_a_valid_header(void **state)
{
    sp_span_context ctx;

    (void)state;
    assert_int_equal(sp_traceparent_parse(VALID, strlen(VALID), &ctx),
                     SP_TRACEPARENT_OK);
    assert_memory_equal(ctx.trace_id, trace_bytes, 16);
    assert_memory_equal(ctx.span_id, parent_bytes, 8);
    assert_int_equal(ctx.trace_flags, SP_TRACE_FLAG_SAMPLED);
}

static void
reads_only_len_chars(void **state)
{
    sp_span_context ctx;
    char *exact = malloc(SP_TRACEPARENT_LEN);
    char longer[] = VALID "-and more";

    (void)state;
    /* No NUL after the value: ASan reports any read past it. */
    assert_non_null(exact);
    memcpy(exact, VALID, SP_TRACEPARENT_LEN);
    assert_int_equal(sp_traceparent_parse(exact, SP_TRACEPARENT_LEN, &ctx),
                     SP_TRACEPARENT_OK);
    free(exact);
    assert_int_equal(sp_traceparent_parse(longer, SP_TRACEPARENT_LEN, &ctx),
                     SP_TRACEPARENT_OK);
    assert_int_equal(sp_traceparent_parse(NULL, 0, &ctx),
                     SP_TRACEPARENT_BAD_LENGTH);
}

static void
trims_optional_whitespace(void **state)
{
    sp_span_context ctx;
    const char *padded = " \t " VALID "\t  ";

    (void)state;
    memset(&ctx, 0, sizeof(ctx));
    assert_int_equal(sp_traceparent_parse(padded, strlen(padded), &ctx),
                     SP_TRACEPARENT_OK);
    assert_memory_equal(ctx.trace_id, trace_bytes, 16);
    assert_int_equal(tp(" " VALID), SP_TRACEPARENT_OK);
    assert_int_equal(tp(VALID "\t"), SP_TRACEPARENT_OK);
    /* Only space and tab are optional whitespace. */
    assert_int_equal(tp(VALID "\n"), SP_TRACEPARENT_EXTRA_DATA);
    assert_int_equal(tp("\n" VALID), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp("   \t "), SP_TRACEPARENT_BAD_LENGTH);
}

static void
version_00_is_exactly_55_chars(void **state)
{
    char buf[] = VALID;

    (void)state;
    assert_int_equal(strlen(VALID), 55);
    assert_int_equal(tp(VALID), SP_TRACEPARENT_OK);
    buf[54] = '\0';
    assert_int_equal(tp(buf), SP_TRACEPARENT_BAD_LENGTH);
    assert_int_equal(tp(VALID "-"), SP_TRACEPARENT_EXTRA_DATA);
    assert_int_equal(tp(VALID "0"), SP_TRACEPARENT_EXTRA_DATA);
    assert_int_equal(tp(VALID "-extra"), SP_TRACEPARENT_EXTRA_DATA);
    assert_int_equal(tp(""), SP_TRACEPARENT_BAD_LENGTH);
    assert_int_equal(tp("0"), SP_TRACEPARENT_BAD_LENGTH);
    assert_int_equal(tp("00"), SP_TRACEPARENT_BAD_LENGTH);
    assert_int_equal(tp("00-" TRACE_HEX), SP_TRACEPARENT_BAD_LENGTH);
}

static void
rejects_invalid_versions(void **state)
{
    (void)state;
    assert_int_equal(tp_with(0, 'g'), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp_with(1, 'z'), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp_with(1, 'A'), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp_with(0, 'B'), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp_with(0, '-'), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp("FF-" TRACE_HEX "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp("ff-" TRACE_HEX "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_VERSION_FF);
    /* Neighbours of ff are ordinary future versions. */
    assert_int_equal(tp("fe-" TRACE_HEX "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_OK);
    assert_int_equal(tp("ef-" TRACE_HEX "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_OK);
}

static void
reports_the_version_before_the_length(void **state)
{
    (void)state;
    assert_int_equal(tp("0G"), SP_TRACEPARENT_BAD_VERSION);
    assert_int_equal(tp("ff"), SP_TRACEPARENT_VERSION_FF);
    assert_int_equal(tp("ff-" TRACE_HEX), SP_TRACEPARENT_VERSION_FF);
    assert_int_equal(tp("01-" TRACE_HEX), SP_TRACEPARENT_BAD_LENGTH);
}

static void
accepts_future_versions(void **state)
{
    sp_span_context ctx;
    const char *exact = "01-" TRACE_HEX "-" PARENT_HEX "-01";
    const char *more = "cc-" TRACE_HEX "-" PARENT_HEX "-01-what-comes-next";
    const char *dash = "01-" TRACE_HEX "-" PARENT_HEX "-01-";

    (void)state;
    memset(&ctx, 0, sizeof(ctx));
    assert_int_equal(sp_traceparent_parse(exact, strlen(exact), &ctx),
                     SP_TRACEPARENT_OK);
    assert_memory_equal(ctx.trace_id, trace_bytes, 16);
    assert_memory_equal(ctx.span_id, parent_bytes, 8);
    assert_int_equal(ctx.trace_flags, SP_TRACE_FLAG_SAMPLED);

    memset(&ctx, 0, sizeof(ctx));
    assert_int_equal(sp_traceparent_parse(more, strlen(more), &ctx),
                     SP_TRACEPARENT_OK);
    assert_memory_equal(ctx.trace_id, trace_bytes, 16);
    assert_memory_equal(ctx.span_id, parent_bytes, 8);
    assert_int_equal(tp(dash), SP_TRACEPARENT_OK);
    assert_int_equal(tp(" 01-" TRACE_HEX "-" PARENT_HEX "-01-x\t"),
                     SP_TRACEPARENT_OK);
}

static void
rejects_future_versions_that_break_version_00_rules(void **state)
{
    (void)state;
    assert_int_equal(tp("01-" TRACE_HEX "-" PARENT_HEX "-0"),
                     SP_TRACEPARENT_BAD_LENGTH);
    /* The flags field must end where version 00's does. */
    assert_int_equal(tp("01-" TRACE_HEX "-" PARENT_HEX "-01xextra"),
                     SP_TRACEPARENT_BAD_SEPARATOR);
    assert_int_equal(tp("01-" TRACE_HEX "-" PARENT_HEX "-010"),
                     SP_TRACEPARENT_BAD_SEPARATOR);
    assert_int_equal(tp("01-" ZERO_TRACE "-" PARENT_HEX "-01-x"),
                     SP_TRACEPARENT_ZERO_TRACE_ID);
    assert_int_equal(tp("01-" TRACE_HEX "-" ZERO_PARENT "-01-x"),
                     SP_TRACEPARENT_ZERO_PARENT_ID);
    assert_int_equal(tp("01-" TRACE_HEX "-" PARENT_HEX "-0X-x"),
                     SP_TRACEPARENT_BAD_FLAGS);
    assert_int_equal(tp("01-4BF92F3577B34DA6A3CE929D0E0E4736-"
                        PARENT_HEX "-01"),
                     SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp("01_" TRACE_HEX "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_BAD_SEPARATOR);
}

static void
rejects_misplaced_separators(void **state)
{
    (void)state;
    assert_int_equal(tp_with(2, '_'), SP_TRACEPARENT_BAD_SEPARATOR);
    assert_int_equal(tp_with(35, '0'), SP_TRACEPARENT_BAD_SEPARATOR);
    assert_int_equal(tp_with(52, ' '), SP_TRACEPARENT_BAD_SEPARATOR);
    /* Right length, but the trace id is one digit short. */
    assert_int_equal(tp("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7"
                        "-01"),
                     SP_TRACEPARENT_BAD_SEPARATOR);
    /* A dash where a digit belongs is a field error, not a separator one. */
    assert_int_equal(tp_with(10, '-'), SP_TRACEPARENT_BAD_TRACE_ID);
}

static void
rejects_invalid_trace_ids(void **state)
{
    (void)state;
    assert_int_equal(tp_with(POS_TRACE, 'A'), SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp_with(POS_TRACE + 1, 'F'),
                     SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp_with(POS_TRACE + 31, 'g'),
                     SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp_with(POS_TRACE + 16, ' '),
                     SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp("00-4BF92F3577B34DA6A3CE929D0E0E4736-"
                        PARENT_HEX "-01"),
                     SP_TRACEPARENT_BAD_TRACE_ID);
    assert_int_equal(tp("00-" ZERO_TRACE "-" PARENT_HEX "-01"),
                     SP_TRACEPARENT_ZERO_TRACE_ID);
    assert_int_equal(tp("00-00000000000000000000000000000001-"
                        PARENT_HEX "-01"),
                     SP_TRACEPARENT_OK);
    assert_int_equal(tp("00-10000000000000000000000000000000-"
                        PARENT_HEX "-01"),
                     SP_TRACEPARENT_OK);
}

static void
rejects_invalid_parent_ids(void **state)
{
    (void)state;
    assert_int_equal(tp_with(POS_PARENT, 'A'), SP_TRACEPARENT_BAD_PARENT_ID);
    assert_int_equal(tp_with(POS_PARENT + 15, 'B'),
                     SP_TRACEPARENT_BAD_PARENT_ID);
    assert_int_equal(tp_with(POS_PARENT + 7, 'x'),
                     SP_TRACEPARENT_BAD_PARENT_ID);
    assert_int_equal(tp("00-" TRACE_HEX "-00F067AA0BA902B7-01"),
                     SP_TRACEPARENT_BAD_PARENT_ID);
    assert_int_equal(tp("00-" TRACE_HEX "-" ZERO_PARENT "-01"),
                     SP_TRACEPARENT_ZERO_PARENT_ID);
    assert_int_equal(tp("00-" TRACE_HEX "-0000000000000001-01"),
                     SP_TRACEPARENT_OK);
    assert_int_equal(tp("00-" TRACE_HEX "-8000000000000000-01"),
                     SP_TRACEPARENT_OK);
}

static void
rejects_invalid_flags(void **state)
{
    (void)state;
    assert_int_equal(tp_with(POS_FLAGS, 'A'), SP_TRACEPARENT_BAD_FLAGS);
    assert_int_equal(tp_with(POS_FLAGS + 1, 'F'), SP_TRACEPARENT_BAD_FLAGS);
    assert_int_equal(tp_with(POS_FLAGS + 1, 'g'), SP_TRACEPARENT_BAD_FLAGS);
    assert_int_equal(tp_with(POS_FLAGS, '-'), SP_TRACEPARENT_BAD_FLAGS);
    assert_int_equal(tp_with(POS_FLAGS, ' '), SP_TRACEPARENT_BAD_FLAGS);
}

static void
reports_the_first_broken_field(void **state)
{
    (void)state;
    assert_int_equal(tp("00-" ZERO_TRACE "-" ZERO_PARENT "-zz"),
                     SP_TRACEPARENT_ZERO_TRACE_ID);
    assert_int_equal(tp("00-" TRACE_HEX "-" ZERO_PARENT "-zz"),
                     SP_TRACEPARENT_ZERO_PARENT_ID);
    assert_int_equal(tp("00-" ZERO_TRACE "x" PARENT_HEX "-01"),
                     SP_TRACEPARENT_BAD_SEPARATOR);
    assert_int_equal(tp("00-" TRACE_HEX "-" PARENT_HEX "-zz" "x"),
                     SP_TRACEPARENT_EXTRA_DATA);
}

static uint8_t
flags_of(const char *flags)
{
    char buf[] = VALID;
    sp_span_context ctx;

    memcpy(buf + POS_FLAGS, flags, 2);
    ctx.trace_flags = 0xee;
    assert_int_equal(sp_traceparent_parse(buf, strlen(buf), &ctx),
                     SP_TRACEPARENT_OK);
    return ctx.trace_flags;
}

static void
keeps_only_the_sampled_flag(void **state)
{
    sp_span_context ctx;
    const char *future = "02-" TRACE_HEX "-" PARENT_HEX "-ff-x";

    (void)state;
    assert_int_equal(flags_of("00"), 0x00);
    assert_int_equal(flags_of("01"), 0x01);
    assert_int_equal(flags_of("ff"), 0x01);
    assert_int_equal(flags_of("fe"), 0x00);
    assert_int_equal(flags_of("02"), 0x00);
    assert_int_equal(flags_of("09"), 0x01);
    assert_int_equal(flags_of("80"), 0x00);
    assert_int_equal(sp_traceparent_parse(future, strlen(future), &ctx),
                     SP_TRACEPARENT_OK);
    assert_int_equal(ctx.trace_flags, 0x01);
}

static void
leaves_the_output_alone_on_failure(void **state)
{
    sp_span_context ctx, before;
    const char *bad[] = {
        "", "zz", "ff-" TRACE_HEX "-" PARENT_HEX "-01", VALID "x",
        "00-" ZERO_TRACE "-" PARENT_HEX "-01",
        "00-" TRACE_HEX "-" ZERO_PARENT "-01",
        "00-" TRACE_HEX "-" PARENT_HEX "-0z",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&ctx, 0xa5, sizeof(ctx));
        before = ctx;
        assert_int_not_equal(sp_traceparent_parse(bad[i], strlen(bad[i]),
                                                  &ctx),
                             SP_TRACEPARENT_OK);
        assert_memory_equal(&ctx, &before, sizeof(ctx));
    }
}

static void
formats_version_00(void **state)
{
    sp_span_context ctx;
    char out[SP_TRACEPARENT_SIZE];
    size_t i;

    (void)state;
    for (i = 0; i < 16; i++) {
        ctx.trace_id[i] = (uint8_t)(0xf0 + i);
    }
    for (i = 0; i < 8; i++) {
        ctx.span_id[i] = (uint8_t)(0x0a * i);
    }
    ctx.trace_flags = 0;
    memset(out, 'X', sizeof(out));
    assert_int_equal(sp_traceparent_format(&ctx, out), SP_TRACEPARENT_LEN);
    assert_string_equal(out, "00-f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff-"
                             "000a141e28323c46-00");
    ctx.trace_flags = SP_TRACE_FLAG_SAMPLED;
    sp_traceparent_format(&ctx, out);
    assert_string_equal(out + POS_FLAGS, "01");
    ctx.trace_flags = 0xab;
    sp_traceparent_format(&ctx, out);
    assert_string_equal(out + POS_FLAGS, "ab");
}

/* Every byte value at every place of the ids, as printf writes it: the
 * trace id's halves are written from one vector, each its own way; with
 * SSSE3's pshufb where the CPU has it, and with SSE2's arithmetic. */
static void
formats_every_byte_everywhere(void **state)
{
    sp_span_context ctx;
    char out[SP_TRACEPARENT_SIZE], want[SP_TRACEPARENT_SIZE + 8];
    size_t i, k, n;

    (void)state;
    for (k = 0; k < 512; k++) {
        sp_traceparent_use_ssse3(k < 256);
        for (i = 0; i < 16; i++) {
            ctx.trace_id[i] = (uint8_t)(k + 16 * i);
        }
        for (i = 0; i < 8; i++) {
            ctx.span_id[i] = (uint8_t)(k * 7 + 16 * i);
        }
        ctx.trace_flags = (uint8_t)k;
        n = (size_t)snprintf(want, sizeof(want), "00-");
        for (i = 0; i < 16; i++) {
            n += (size_t)snprintf(want + n, sizeof(want) - n, "%02x",
                                  ctx.trace_id[i]);
        }
        n += (size_t)snprintf(want + n, sizeof(want) - n, "-");
        for (i = 0; i < 8; i++) {
            n += (size_t)snprintf(want + n, sizeof(want) - n, "%02x",
                                  ctx.span_id[i]);
        }
        snprintf(want + n, sizeof(want) - n, "-%02x", (unsigned)(k & 0xff));
        sp_traceparent_format(&ctx, out);
        assert_string_equal(out, want);
    }
    sp_traceparent_use_ssse3(true);
}

static void
round_trips_through_format(void **state)
{
    sp_span_context ctx, again;
    char out[SP_TRACEPARENT_SIZE];
    const char *future = "7a-" TRACE_HEX "-" PARENT_HEX "-03-more";

    (void)state;
    assert_int_equal(tp(VALID), SP_TRACEPARENT_OK);
    sp_traceparent_parse(VALID, strlen(VALID), &ctx);
    sp_traceparent_format(&ctx, out);
    assert_string_equal(out, VALID);

    /* A future version comes back as version 00 with known flags only. */
    sp_traceparent_parse(future, strlen(future), &ctx);
    sp_traceparent_format(&ctx, out);
    assert_string_equal(out, VALID);
    assert_int_equal(sp_traceparent_parse(out, strlen(out), &again),
                     SP_TRACEPARENT_OK);
    assert_memory_equal(&again, &ctx, sizeof(ctx));
}

static void
names_every_traceparent_result(void **state)
{
    const char *texts[SP_TRACEPARENT_EXTRA_DATA + 1];
    int i, j;

    (void)state;
    for (i = 0; i <= SP_TRACEPARENT_EXTRA_DATA; i++) {
        texts[i] = sp_traceparent_result_text((sp_traceparent_result)i);
        assert_non_null(texts[i]);
        for (j = 0; j < i; j++) {
            assert_string_not_equal(texts[i], texts[j]);
        }
    }
    assert_string_equal(sp_traceparent_result_text(
                            SP_TRACEPARENT_ZERO_TRACE_ID),
                        "trace id is all zeros");
}

static void
checks_ids_and_formats_hex(void **state)
{
    uint8_t trace[16] = {0}, span[8] = {0};
    const uint8_t bytes[4] = {0x00, 0x0f, 0xa0, 0xff};
    char out[9];
    sp_span_context ctx;

    (void)state;
    assert_false(sp_trace_id_is_valid(trace));
    assert_false(sp_span_id_is_valid(span));
    trace[15] = 1;
    span[7] = 1;
    assert_true(sp_trace_id_is_valid(trace));
    assert_true(sp_span_id_is_valid(span));
    trace[15] = 0;
    trace[0] = 0x80;
    assert_true(sp_trace_id_is_valid(trace));

    memset(&ctx, 0, sizeof(ctx));
    assert_false(sp_span_context_is_valid(&ctx));
    ctx.trace_id[3] = 1;
    assert_false(sp_span_context_is_valid(&ctx));
    ctx.span_id[3] = 1;
    assert_true(sp_span_context_is_valid(&ctx));

    memset(out, 'X', sizeof(out));
    assert_int_equal(sp_hex_format(bytes, 4, out), 8);
    assert_string_equal(out, "000fa0ff");
    assert_int_equal(sp_hex_format(bytes, 0, out), 0);
    assert_string_equal(out, "");
}

/* Whole 8-byte chunks and the bytes after them, every byte value. */
static void
formats_every_byte_at_every_length(void **state)
{
    uint8_t bytes[256];
    char out[2 * 256 + 2], want[2 * 256 + 1];
    size_t i, n, start;

    (void)state;
    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)(255 - i);
    }
    for (start = 0; start < 256; start += 37) {
        for (n = 0; n <= 20 && start + n <= 256; n++) {
            for (i = 0; i < n; i++) {
                snprintf(want + 2 * i, 3, "%02x", bytes[start + i]);
            }
            want[2 * n] = '\0';
            memset(out, 'X', sizeof(out));
            assert_int_equal(sp_hex_format(bytes + start, n, out), 2 * n);
            assert_string_equal(out, want);
            assert_int_equal(out[2 * n + 1], 'X');
        }
    }
    memset(out, 'X', sizeof(out));
    sp_hex_format(bytes, 256, out);
    for (i = 0; i < 256; i++) {
        snprintf(want + 2 * i, 3, "%02x", bytes[i]);
    }
    assert_string_equal(out, want);
}

/* ---- tracestate */

/* Parses a NUL-terminated s; its members stay valid while s does. */
static sp_tracestate_result
ts_parse(const char *s, sp_tracestate *ts)
{
    return sp_tracestate_parse(s, strlen(s), ts);
}

static sp_tracestate_result
ts(const char *s)
{
    sp_tracestate t;

    return ts_parse(s, &t);
}

static void
assert_member(const sp_tracestate *t, const char *src, size_t i,
              const char *key, const char *value)
{
    const sp_tracestate_member *m = &t->members[i];

    assert_true(i < t->count);
    assert_int_equal(m->key_len, strlen(key));
    assert_memory_equal(src + m->key_off, key, m->key_len);
    assert_int_equal(m->value_len, strlen(value));
    assert_memory_equal(src + m->value_off, value, m->value_len);
}

/* The canonical form of s, into out; asserts that s is valid. */
static const char *
canonical(const char *s, char *out, size_t cap)
{
    sp_tracestate t;

    assert_int_equal(ts_parse(s, &t), SP_TRACESTATE_OK);
    sp_tracestate_format(&t, s, out, cap);
    return out;
}

/* Writes n copies of c and a NUL at p; returns the end. */
static char *
fill(char *p, char c, size_t n)
{
    memset(p, c, n);
    p[n] = '\0';
    return p + n;
}

static void
parses_members_in_order(void **state)
{
    sp_tracestate t;
    const char *s = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,a@b=x y";

    (void)state;
    assert_int_equal(ts_parse(s, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 3);
    assert_member(&t, s, 0, "rojo", "00f067aa0ba902b7");
    assert_member(&t, s, 1, "congo", "t61rcWkgMzE");
    assert_member(&t, s, 2, "a@b", "x y");
}

static void
accepts_empty_lists_and_members(void **state)
{
    sp_tracestate t;
    const char *s = " ,\t a=1 ,, \t b=2\t,";
    char out[64];

    (void)state;
    t.count = 99;
    assert_int_equal(ts_parse("", &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 0);
    t.count = 99;
    assert_int_equal(sp_tracestate_parse(NULL, 0, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 0);
    assert_int_equal(ts_parse(" , ,\t,,  ", &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 0);
    assert_int_equal(ts_parse(s, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 2);
    assert_member(&t, s, 0, "a", "1");
    assert_member(&t, s, 1, "b", "2");
    assert_string_equal(canonical(s, out, sizeof(out)), "a=1,b=2");
}

/* n members "k0=v,k1=v,...", each followed by extra, into buf. */
static void
members(char *buf, size_t n, const char *extra)
{
    size_t i;

    buf[0] = '\0';
    for (i = 0; i < n; i++) {
        sprintf(buf + strlen(buf), "%sk%zu=v%s", i > 0 ? "," : "", i, extra);
    }
}

static void
allows_at_most_32_members(void **state)
{
    char buf[1024];
    sp_tracestate t;

    (void)state;
    members(buf, 32, "");
    assert_int_equal(ts_parse(buf, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 32);
    assert_member(&t, buf, 31, "k31", "v");
    members(buf, 33, "");
    assert_int_equal(ts_parse(buf, &t), SP_TRACESTATE_TOO_MANY_MEMBERS);
    assert_int_equal(t.count, 0);
    /* Empty members do not count. */
    members(buf, 32, ",, ,");
    assert_int_equal(ts_parse(buf, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 32);
}

/* A key of n chars: 'k' then 'x's, followed by "=v". */
static sp_tracestate_result
simple_key_of(size_t n)
{
    char buf[600];
    char *p = buf;

    *p++ = 'k';
    p = fill(p, 'x', n - 1);
    strcpy(p, "=v");
    return ts(buf);
}

/* tenant of t chars '@' system of s chars, "=v" */
static sp_tracestate_result
tenant_key_of(size_t tn, size_t sn)
{
    char buf[600];
    char *p = buf;

    *p++ = '7';
    p = fill(p, 't', tn - 1);
    *p++ = '@';
    *p++ = 's';
    p = fill(p, '9', sn - 1);
    strcpy(p, "=v");
    return ts(buf);
}

static void
limits_key_lengths(void **state)
{
    (void)state;
    assert_int_equal(simple_key_of(1), SP_TRACESTATE_OK);
    assert_int_equal(simple_key_of(256), SP_TRACESTATE_OK);
    assert_int_equal(simple_key_of(257), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(tenant_key_of(1, 1), SP_TRACESTATE_OK);
    assert_int_equal(tenant_key_of(241, 14), SP_TRACESTATE_OK);
    assert_int_equal(tenant_key_of(242, 14), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(tenant_key_of(241, 15), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(tenant_key_of(1, 15), SP_TRACESTATE_BAD_KEY);
}

static void
checks_key_characters(void **state)
{
    (void)state;
    assert_int_equal(ts("a0_-*/z=1"), SP_TRACESTATE_OK);
    assert_int_equal(ts("A=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("aB=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("1a=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("_a=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a.b=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a b=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a =1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("=1"), SP_TRACESTATE_BAD_KEY);
    /* A tenant id may start with a digit, a system id may not. */
    assert_int_equal(ts("1a@b=1"), SP_TRACESTATE_OK);
    assert_int_equal(ts("a-_*/1@b2_-*/=1"), SP_TRACESTATE_OK);
    assert_int_equal(ts("a@1=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("_a@b=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a@B=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("@b=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a@=1"), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(ts("a@b@c=1"), SP_TRACESTATE_BAD_KEY);
}

static sp_tracestate_result
value_of(size_t n)
{
    char buf[600] = "k=";

    fill(buf + 2, 'v', n);
    return ts(buf);
}

static void
checks_values(void **state)
{
    sp_tracestate t;
    const char *lead = "a= b";
    char all[128];
    char *p = all;
    int c;

    (void)state;
    assert_int_equal(value_of(1), SP_TRACESTATE_OK);
    assert_int_equal(value_of(256), SP_TRACESTATE_OK);
    assert_int_equal(value_of(257), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a="), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a=b=c"), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a=b\tc"), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a=\x1f"), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a=\x7f"), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a=caf\xc3\xa9"), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(sp_tracestate_parse("a=b\0c", 5, &t),
                     SP_TRACESTATE_BAD_VALUE);
    /* Leading blanks belong to the value; inner blanks too. */
    assert_int_equal(ts_parse(lead, &t), SP_TRACESTATE_OK);
    assert_member(&t, lead, 0, "a", " b");
    assert_int_equal(ts("a=b c"), SP_TRACESTATE_OK);

    /* Every printable char but ',' and '='. */
    strcpy(p, "k=");
    p += 2;
    for (c = 0x20 + 1; c <= 0x7e; c++) {
        if (c != ',' && c != '=') {
            *p++ = (char)c;
        }
    }
    *p = '\0';
    assert_int_equal(ts(all), SP_TRACESTATE_OK);
}

static void
never_keeps_a_trailing_space_in_a_value(void **state)
{
    sp_tracestate t;
    const char *one = "a=b  ";
    const char *two = "a=b x \t,c=d";

    (void)state;
    /* Trailing blanks are whitespace around the list separator. */
    assert_int_equal(ts_parse(one, &t), SP_TRACESTATE_OK);
    assert_member(&t, one, 0, "a", "b");
    assert_int_equal(ts_parse(two, &t), SP_TRACESTATE_OK);
    assert_member(&t, two, 0, "a", "b x");
    assert_member(&t, two, 1, "c", "d");
    /* A value of blanks only is then empty, which is invalid. */
    assert_int_equal(ts("a=   "), SP_TRACESTATE_BAD_VALUE);
    assert_int_equal(ts("a= ,b=1"), SP_TRACESTATE_BAD_VALUE);
}

static void
rejects_members_without_equals(void **state)
{
    (void)state;
    assert_int_equal(ts("abc"), SP_TRACESTATE_MISSING_EQUALS);
    assert_int_equal(ts("a=1,b"), SP_TRACESTATE_MISSING_EQUALS);
    assert_int_equal(ts("a=1, b ,c=2"), SP_TRACESTATE_MISSING_EQUALS);
    assert_int_equal(ts("ABC"), SP_TRACESTATE_MISSING_EQUALS);
}

static void
rejects_duplicate_keys(void **state)
{
    (void)state;
    assert_int_equal(ts("a=1,b=2,a=3"), SP_TRACESTATE_DUPLICATE_KEY);
    assert_int_equal(ts("a=1,a=1"), SP_TRACESTATE_DUPLICATE_KEY);
    assert_int_equal(ts("t@s=1, t@s=2"), SP_TRACESTATE_DUPLICATE_KEY);
    assert_int_equal(ts("a=1,ab=2,b=3,a@b=4,b@a=5"), SP_TRACESTATE_OK);
}

static void
drops_everything_when_one_member_is_bad(void **state)
{
    sp_tracestate t;

    (void)state;
    assert_int_equal(ts_parse("a=1,b=2", &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 2);
    assert_int_equal(ts_parse("a=1,b=2,C=3", &t), SP_TRACESTATE_BAD_KEY);
    assert_int_equal(t.count, 0);
    assert_int_equal(ts_parse("a=1,b=2,b=3", &t),
                     SP_TRACESTATE_DUPLICATE_KEY);
    assert_int_equal(t.count, 0);
}

static void
reads_only_len_bytes_of_tracestate(void **state)
{
    const char *s = "a=1,b=2";
    char *exact = malloc(strlen(s));
    sp_tracestate t;
    char out[16];

    (void)state;
    assert_non_null(exact);
    memcpy(exact, s, strlen(s));
    assert_int_equal(sp_tracestate_parse(exact, strlen(s), &t),
                     SP_TRACESTATE_OK);
    assert_int_equal(sp_tracestate_format(&t, exact, out, sizeof(out)), 7);
    assert_string_equal(out, "a=1,b=2");
    free(exact);
    /* The bad member lies beyond len. */
    assert_int_equal(sp_tracestate_parse("a=1,B", 3, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 1);
}

static void
formats_with_truncation_like_snprintf(void **state)
{
    const char *s = "a=1, b=22";
    sp_tracestate t;
    char out[16];

    (void)state;
    assert_int_equal(ts_parse(s, &t), SP_TRACESTATE_OK);
    assert_int_equal(sp_tracestate_format(&t, s, NULL, 0), 8);
    memset(out, 'X', sizeof(out));
    assert_int_equal(sp_tracestate_format(&t, s, out, 1), 8);
    assert_string_equal(out, "");
    assert_int_equal(sp_tracestate_format(&t, s, out, 5), 8);
    assert_string_equal(out, "a=1,");
    assert_int_equal(out[5], 'X');
    assert_int_equal(sp_tracestate_format(&t, s, out, 8), 8);
    assert_string_equal(out, "a=1,b=2");
    assert_int_equal(sp_tracestate_format(&t, s, out, 9), 8);
    assert_string_equal(out, "a=1,b=22");
    t.count = 0;
    assert_int_equal(sp_tracestate_format(&t, s, out, sizeof(out)), 0);
    assert_string_equal(out, "");
}

static void
the_largest_tracestate_fits_the_max_size(void **state)
{
    static char in[SP_TRACESTATE_SIZE + 64], out[SP_TRACESTATE_SIZE];
    char *p = in;
    sp_tracestate t;
    size_t i, n;

    (void)state;
    for (i = 0; i < SP_TRACESTATE_MAX_MEMBERS; i++) {
        if (i > 0) {
            *p++ = ',';
        }
        /* Keys differ in their first two chars. */
        *p++ = (char)('a' + i / 26);
        *p++ = (char)('a' + i % 26);
        p = fill(p, 'k', SP_TRACESTATE_MAX_KEY_LEN - 2);
        *p++ = '=';
        p = fill(p, 'v', SP_TRACESTATE_MAX_VALUE_LEN);
    }
    assert_int_equal((size_t)(p - in), SP_TRACESTATE_MAX_LEN);
    assert_int_equal(ts_parse(in, &t), SP_TRACESTATE_OK);
    assert_int_equal(t.count, 32);
    n = sp_tracestate_format(&t, in, out, sizeof(out));
    assert_int_equal(n, SP_TRACESTATE_MAX_LEN);
    assert_string_equal(out, in);
}

static void
round_trips_through_canonical_form(void **state)
{
    const char *s = "\tz=1 ,,y@x= v w ,  a=!\"#$%&'()*+-./:;<>?@[\\]^_`{|}~";
    char once[256], twice[256];
    sp_tracestate t1, t2;
    size_t i;

    (void)state;
    canonical(s, once, sizeof(once));
    assert_string_equal(once, "z=1,y@x= v w,"
                              "a=!\"#$%&'()*+-./:;<>?@[\\]^_`{|}~");
    assert_int_equal(ts_parse(s, &t1), SP_TRACESTATE_OK);
    assert_int_equal(ts_parse(once, &t2), SP_TRACESTATE_OK);
    assert_int_equal(t1.count, t2.count);
    for (i = 0; i < t1.count; i++) {
        assert_int_equal(t1.members[i].key_len, t2.members[i].key_len);
        assert_memory_equal(s + t1.members[i].key_off,
                            once + t2.members[i].key_off,
                            t1.members[i].key_len);
        assert_int_equal(t1.members[i].value_len, t2.members[i].value_len);
        assert_memory_equal(s + t1.members[i].value_off,
                            once + t2.members[i].value_off,
                            t1.members[i].value_len);
    }
    canonical(once, twice, sizeof(twice));
    assert_string_equal(once, twice);
}

static void
names_every_tracestate_result(void **state)
{
    const char *texts[SP_TRACESTATE_DUPLICATE_KEY + 1];
    int i, j;

    (void)state;
    for (i = 0; i <= SP_TRACESTATE_DUPLICATE_KEY; i++) {
        texts[i] = sp_tracestate_result_text((sp_tracestate_result)i);
        assert_non_null(texts[i]);
        for (j = 0; j < i; j++) {
            assert_string_not_equal(texts[i], texts[j]);
        }
    }
    assert_string_equal(sp_tracestate_result_text(
                            SP_TRACESTATE_DUPLICATE_KEY),
                        "duplicate key");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_a_valid_header),
        cmocka_unit_test(reads_only_len_chars),
        cmocka_unit_test(trims_optional_whitespace),
        cmocka_unit_test(version_00_is_exactly_55_chars),
        cmocka_unit_test(rejects_invalid_versions),
        cmocka_unit_test(reports_the_version_before_the_length),
        cmocka_unit_test(accepts_future_versions),
        cmocka_unit_test(rejects_future_versions_that_break_version_00_rules),
        cmocka_unit_test(rejects_misplaced_separators),
        cmocka_unit_test(rejects_invalid_trace_ids),
        cmocka_unit_test(rejects_invalid_parent_ids),
        cmocka_unit_test(rejects_invalid_flags),
        cmocka_unit_test(reports_the_first_broken_field),
        cmocka_unit_test(keeps_only_the_sampled_flag),
        cmocka_unit_test(leaves_the_output_alone_on_failure),
        cmocka_unit_test(formats_version_00),
        cmocka_unit_test(formats_every_byte_everywhere),
        cmocka_unit_test(round_trips_through_format),
        cmocka_unit_test(names_every_traceparent_result),
        cmocka_unit_test(checks_ids_and_formats_hex),
        cmocka_unit_test(formats_every_byte_at_every_length),
        cmocka_unit_test(parses_members_in_order),
        cmocka_unit_test(accepts_empty_lists_and_members),
        cmocka_unit_test(allows_at_most_32_members),
        cmocka_unit_test(limits_key_lengths),
        cmocka_unit_test(checks_key_characters),
        cmocka_unit_test(checks_values),
        cmocka_unit_test(never_keeps_a_trailing_space_in_a_value),
        cmocka_unit_test(rejects_members_without_equals),
        cmocka_unit_test(rejects_duplicate_keys),
        cmocka_unit_test(drops_everything_when_one_member_is_bad),
        cmocka_unit_test(reads_only_len_bytes_of_tracestate),
        cmocka_unit_test(formats_with_truncation_like_snprintf),
        cmocka_unit_test(the_largest_tracestate_fits_the_max_size),
        cmocka_unit_test(round_trips_through_canonical_form),
        cmocka_unit_test(names_every_tracestate_result),
    };

    return cmocka_run_group_tests_name("tracecontext", tests, NULL, NULL);
}
