/*
 * tracestate: the parser must give the result an independent reading of
 * the grammar gives, its members must point at valid keys and values in
 * the input, and the canonical form must parse back to the same members
 * and be a fixed point of parse + format.
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

static bool
in_set(char c, const char *set)
{
    return c != '\0' && strchr(set, c) != NULL;
}

#define LCALPHA "abcdefghijklmnopqrstuvwxyz"
#define DIGITS "0123456789"
#define KEYCHARS LCALPHA DIGITS "_-*/"

static bool
all_in(const char *s, size_t n, const char *set)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!in_set(s[i], set)) {
            return false;
        }
    }
    return true;
}

static bool
oracle_key(const char *k, size_t n)
{
    size_t at;

    for (at = 0; at < n && k[at] != '@'; at++) {
    }
    if (at == n) {
        return n >= 1 && n <= 256 && in_set(k[0], LCALPHA)
               && all_in(k, n, KEYCHARS);
    }
    return at >= 1 && at <= 241 && in_set(k[0], LCALPHA DIGITS)
           && all_in(k, at, KEYCHARS) && n - at - 1 >= 1
           && n - at - 1 <= 14 && in_set(k[at + 1], LCALPHA)
           && all_in(k + at + 1, n - at - 1, KEYCHARS);
}

static bool
oracle_value(const char *v, size_t n)
{
    size_t i;

    if (n < 1 || n > 256 || v[n - 1] == ' ') {
        return false;
    }
    for (i = 0; i < n; i++) {
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e
            || v[i] == ',' || v[i] == '=')
        {
            return false;
        }
    }
    return true;
}

typedef struct span {
    const char *p;
    size_t n;
} span;

static bool
span_eq(span a, span b)
{
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

/* The result the documented rules give for s[0..len), in their order. */
static sp_tracestate_result
oracle(const char *s, size_t len, span keys[32], span values[32],
       size_t *count)
{
    size_t i = 0, b, e, eq, j;

    *count = 0;
    while (i <= len) {
        for (e = i; e < len && s[e] != ','; e++) {
        }
        b = i;
        i = e + 1;
        while (b < e && (s[b] == ' ' || s[b] == '\t')) {
            b++;
        }
        while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) {
            e--;
        }
        if (b == e) {
            continue;
        }
        if (*count == 32) {
            return SP_TRACESTATE_TOO_MANY_MEMBERS;
        }
        for (eq = b; eq < e && s[eq] != '='; eq++) {
        }
        if (eq == e) {
            return SP_TRACESTATE_MISSING_EQUALS;
        }
        if (!oracle_key(s + b, eq - b)) {
            return SP_TRACESTATE_BAD_KEY;
        }
        if (!oracle_value(s + eq + 1, e - eq - 1)) {
            return SP_TRACESTATE_BAD_VALUE;
        }
        keys[*count] = (span){s + b, eq - b};
        values[*count] = (span){s + eq + 1, e - eq - 1};
        for (j = 0; j < *count; j++) {
            if (span_eq(keys[j], keys[*count])) {
                return SP_TRACESTATE_DUPLICATE_KEY;
            }
        }
        (*count)++;
    }
    return SP_TRACESTATE_OK;
}

static span
key_of(const sp_tracestate *ts, const char *src, size_t i)
{
    return (span){src + ts->members[i].key_off, ts->members[i].key_len};
}

static span
value_of(const sp_tracestate *ts, const char *src, size_t i)
{
    return (span){src + ts->members[i].value_off, ts->members[i].value_len};
}

static char out[SP_TRACESTATE_SIZE], out2[SP_TRACESTATE_SIZE];
static char part[SP_TRACESTATE_SIZE];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    sp_tracestate ts, again;
    sp_tracestate_result r;
    span keys[32], values[32];
    size_t count, i, n, cap;
    const sp_tracestate_member *m;

    ts.count = 7;
    r = sp_tracestate_parse(s, size, &ts);
    CHECK(sp_tracestate_result_text(r) != NULL);
    CHECK(r == oracle(s, size, keys, values, &count));
    if (r != SP_TRACESTATE_OK) {
        CHECK(ts.count == 0);
        return 0;
    }

    CHECK(ts.count == count && ts.count <= SP_TRACESTATE_MAX_MEMBERS);
    for (i = 0; i < ts.count; i++) {
        m = &ts.members[i];
        CHECK(m->key_off < size && m->key_len <= size - m->key_off);
        CHECK(m->value_off == m->key_off + m->key_len + 1);
        CHECK(m->value_len <= size - m->value_off);
        CHECK(span_eq(key_of(&ts, s, i), keys[i]));
        CHECK(span_eq(value_of(&ts, s, i), values[i]));
    }

    n = sp_tracestate_format(&ts, s, out, sizeof(out));
    CHECK(n <= SP_TRACESTATE_MAX_LEN && strlen(out) == n);

    /* The canonical form holds the same members, and is its own. */
    CHECK(sp_tracestate_parse(out, n, &again) == SP_TRACESTATE_OK);
    CHECK(again.count == ts.count);
    for (i = 0; i < ts.count; i++) {
        CHECK(span_eq(key_of(&again, out, i), key_of(&ts, s, i)));
        CHECK(span_eq(value_of(&again, out, i), value_of(&ts, s, i)));
    }
    CHECK(sp_tracestate_format(&again, out, out2, sizeof(out2)) == n);
    CHECK(memcmp(out, out2, n + 1) == 0);

    /* A short buffer gets a NUL-terminated prefix, never more. */
    cap = size % (n + 1) + 1;
    memset(part, 'X', cap + 1 < sizeof(part) ? cap + 1 : sizeof(part));
    CHECK(sp_tracestate_format(&ts, s, part, cap) == n);
    CHECK(strlen(part) == (cap - 1 < n ? cap - 1 : n));
    CHECK(memcmp(part, out, strlen(part)) == 0);
    if (cap < sizeof(part)) {
        CHECK(part[cap] == 'X');
    }
    return 0;
}
