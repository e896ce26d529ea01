/*
 * traceparent: a parse must agree with an independent statement of the
 * grammar, and whatever parses must format to a version 00 value that
 * parses back to the same context.
 */
#include <stdlib.h>
#include <string.h>

#include "sp_tracecontext.h"

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* x: lowercase hex digit, '-': itself. */
static const char layout[] =
    "xx-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-xxxxxxxxxxxxxxxx-xx";

static bool
lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static bool
all_zero_chars(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (s[i] != '0') {
            return false;
        }
    }
    return true;
}

/* Is s[0..n), already trimmed, a value we must accept? */
static bool
oracle(const char *s, size_t n)
{
    size_t i;

    if (n < 55) {
        return false;
    }
    for (i = 0; i < 55; i++) {
        if (layout[i] == 'x' ? !lower_hex(s[i]) : s[i] != '-') {
            return false;
        }
    }
    if (s[0] == 'f' && s[1] == 'f') {
        return false;
    }
    if (s[0] == '0' && s[1] == '0' ? n != 55 : n > 55 && s[55] != '-') {
        return false;
    }
    return !all_zero_chars(s + 3, 32) && !all_zero_chars(s + 36, 16);
}

static int
hexval(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *t = s;
    size_t n = size;
    sp_span_context ctx, sentinel, again;
    sp_traceparent_result r;
    char out[SP_TRACEPARENT_SIZE];

    while (n > 0 && (t[0] == ' ' || t[0] == '\t')) {
        t++;
        n--;
    }
    while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\t')) {
        n--;
    }

    memset(&ctx, 0x5a, sizeof(ctx));
    sentinel = ctx;
    r = sp_traceparent_parse(s, size, &ctx);
    CHECK(sp_traceparent_result_text(r) != NULL);
    CHECK((r == SP_TRACEPARENT_OK) == oracle(t, n));

    if (r != SP_TRACEPARENT_OK) {
        CHECK(r <= SP_TRACEPARENT_EXTRA_DATA);
        CHECK(memcmp(&ctx, &sentinel, sizeof(ctx)) == 0);
        return 0;
    }

    CHECK(sp_span_context_is_valid(&ctx));
    CHECK(ctx.trace_flags == (hexval(t[54]) & SP_TRACE_FLAG_SAMPLED));

    CHECK(sp_traceparent_format(&ctx, out) == SP_TRACEPARENT_LEN);
    CHECK(strlen(out) == SP_TRACEPARENT_LEN);
    CHECK(out[0] == '0' && out[1] == '0');
    /* The ids are copied verbatim: only lowercase hex was accepted. */
    CHECK(memcmp(out + 2, t + 2, 51) == 0);
    CHECK(out[53] == '0' && out[54] == '0' + ctx.trace_flags);

    CHECK(sp_traceparent_parse(out, SP_TRACEPARENT_LEN, &again)
          == SP_TRACEPARENT_OK);
    CHECK(memcmp(&again, &ctx, sizeof(ctx)) == 0);
    return 0;
}
