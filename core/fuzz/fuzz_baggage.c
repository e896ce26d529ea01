/*
 * The input is a baggage header value. Checks, aborting on a violation:
 * the limits always hold; serialize(parse(x)) re-parses to the same members
 * with nothing dropped and serializes to the same bytes; parsing x in two
 * pieces split at a comma equals parsing it whole; get decodes every kept
 * value into valid UTF-8 no longer than its encoded form; set keeps the
 * limits, reads back the value set, keeps the other members in order and
 * drops only from the end; an invalid set changes nothing; the selection
 * leaves a received entry alone and sets a missing one to its decision.
 */
#include <stdlib.h>
#include <string.h>

#include "sp_baggage.h"
#include "sp_selection.h"

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

static sp_baggage bag, copy, pieces;
static char out[SP_BAGGAGE_SERIALIZE_CAP], out2[SP_BAGGAGE_SERIALIZE_CAP];
static char val[SP_BAGGAGE_MAX_BYTES];
static char key_arg[64], value_arg[64], long_arg[SP_BAGGAGE_MAX_BYTES];

static size_t
serialize(const sp_baggage *b, char *o)
{
    size_t n;

    CHECK(sp_baggage_serialize(b, o, SP_BAGGAGE_SERIALIZE_CAP, &n) == SP_OK);
    CHECK(n == sp_baggage_serialized_len(b));
    CHECK(n <= SP_BAGGAGE_MAX_BYTES);
    CHECK(o[n] == '\0' && strlen(o) == n);
    CHECK(sp_baggage_count(b) <= SP_BAGGAGE_MAX_MEMBERS);
    CHECK(n > 0 || sp_baggage_count(b) == 0);
    return n;
}

static bool
entries_equal(const sp_baggage_entry *a, const sp_baggage_entry *b)
{
    return a->key_len == b->key_len && a->value_len == b->value_len
           && a->properties_len == b->properties_len
           && memcmp(a->key, b->key, a->key_len) == 0
           && memcmp(a->value, b->value, a->value_len) == 0
           && memcmp(a->properties, b->properties, a->properties_len) == 0;
}

static bool
has_key(const sp_baggage_entry *e, const char *key)
{
    return e->key_len == strlen(key) && memcmp(e->key, key, e->key_len) == 0;
}

static bool
utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0, len, k;
    unsigned char lo, hi;

    while (i < n) {
        lo = 0x80;
        hi = 0xBF;
        if (s[i] < 0x80) {
            len = 1;
        } else if (s[i] >= 0xC2 && s[i] <= 0xDF) {
            len = 2;
        } else if (s[i] >= 0xE0 && s[i] <= 0xEF) {
            len = 3;
            lo = s[i] == 0xE0 ? 0xA0 : 0x80;
            hi = s[i] == 0xED ? 0x9F : 0xBF;
        } else if (s[i] >= 0xF0 && s[i] <= 0xF4) {
            len = 4;
            lo = s[i] == 0xF0 ? 0x90 : 0x80;
            hi = s[i] == 0xF4 ? 0x8F : 0xBF;
        } else {
            return false;
        }
        if (n - i < len) {
            return false;
        }
        for (k = 1; k < len; k++) {
            if (s[i + k] < lo || s[i + k] > hi) {
                return false;
            }
            lo = 0x80;
            hi = 0xBF;
        }
        i += len;
    }
    return true;
}

/* The members of after that are not key are the same as before's, in
 * order, less some at the end; returns how many are missing. */
static size_t
others_are_a_prefix(const sp_baggage *before, const sp_baggage *after,
    const char *key)
{
    sp_baggage_entry a, b;
    size_t i = 0, j = 0, others = 0;

    for (;;) {
        while (sp_baggage_entry_at(after, j, &a) == SP_OK
               && has_key(&a, key))
        {
            j++;
        }
        while (sp_baggage_entry_at(before, i, &b) == SP_OK
               && has_key(&b, key))
        {
            i++;
        }
        if (sp_baggage_entry_at(after, j, &a) != SP_OK) {
            break;
        }
        CHECK(sp_baggage_entry_at(before, i, &b) == SP_OK);
        CHECK(entries_equal(&a, &b));
        i++;
        j++;
    }
    for (; sp_baggage_entry_at(before, i, &b) == SP_OK; i++) {
        others += !has_key(&b, key);
    }
    return others;
}

static void
check_set(const char *key, const char *value)
{
    sp_baggage_entry e;
    size_t i, n, evicted = 0, found = 0;
    sp_status rc;

    copy = bag;
    n = serialize(&bag, out);
    rc = sp_baggage_set(&bag, key, value, &evicted);
    if (rc != SP_OK) {
        CHECK(rc == SP_ERR_INVALID || rc == SP_ERR_TOO_LONG);
        CHECK(serialize(&bag, out2) == n && memcmp(out, out2, n) == 0);
        return;
    }
    serialize(&bag, out2);
    for (i = 0; sp_baggage_entry_at(&bag, i, &e) == SP_OK; i++) {
        if (has_key(&e, key)) {
            found++;
            CHECK(e.value_len == strlen(value));
            CHECK(memcmp(e.value, value, e.value_len) == 0);
            CHECK(e.properties_len == 0);
        }
    }
    CHECK(found == 1);
    CHECK(others_are_a_prefix(&copy, &bag, key) == evicted);
    CHECK(sp_baggage_get(&bag, key, val, strlen(value), &n) == SP_OK);
}

static void
check_selection(const uint8_t *data, size_t size)
{
    uint8_t id[16] = { 0 };
    sp_selection s;
    size_t n, m;

    memcpy(id, data, size < 16 ? size : 16);
    n = serialize(&copy, out);
    sp_selection_decide(&copy, id, sp_selection_threshold(0.10), size & 1,
                        &s);
    CHECK(s.selected == (s.volume == SP_SNAPSHOT_HIGHEST));
    CHECK(s.profiled == (s.selected && (size & 1)));
    if (s.received) {
        CHECK(serialize(&copy, out2) == n && memcmp(out, out2, n) == 0);
        return;
    }
    CHECK(s.selected == sp_selection_by_trace_id(id,
                            sp_selection_threshold(0.10)));
    serialize(&copy, out2);
    CHECK(sp_baggage_get(&copy, SP_SNAPSHOT_VOLUME_KEY, val, sizeof(val), &m)
          == SP_OK);
    if (s.selected) {
        CHECK(m == 7 && memcmp(val, "highest", 7) == 0);
    } else {
        CHECK(m == 3 && memcmp(val, "off", 3) == 0);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    const char *comma;
    sp_baggage_counts c, c2;
    sp_baggage_entry e, e2, last;
    size_t i, j, n, m, segments = 1;

    for (i = 0; i < size; i++) {
        segments += in[i] == ',';
    }

    sp_baggage_init(&bag);
    sp_baggage_parse(&bag, in, size, &c);
    CHECK(c.kept == sp_baggage_count(&bag));
    CHECK(c.kept + c.dropped_malformed + c.dropped_limit <= segments);
    n = serialize(&bag, out);
    CHECK(memchr(out, ' ', n) == NULL && memchr(out, '\t', n) == NULL);

    /* The serialization parses back to the same members, dropping none. */
    sp_baggage_init(&copy);
    sp_baggage_parse(&copy, out, n, &c2);
    CHECK(c2.kept == c.kept);
    CHECK(c2.dropped_malformed == 0 && c2.dropped_limit == 0);
    for (i = 0; i < c.kept; i++) {
        CHECK(sp_baggage_entry_at(&bag, i, &e) == SP_OK);
        CHECK(sp_baggage_entry_at(&copy, i, &e2) == SP_OK);
        CHECK(entries_equal(&e, &e2));
    }
    CHECK(serialize(&copy, out2) == n && memcmp(out, out2, n) == 0);

    /* Two header lines give what their join with "," gives. */
    comma = memchr(in, ',', size);
    if (comma != NULL) {
        sp_baggage_init(&pieces);
        sp_baggage_parse(&pieces, in, (size_t)(comma - in), &c2);
        m = c2.kept;
        sp_baggage_parse(&pieces, comma + 1, size - (size_t)(comma - in) - 1,
                         &c2);
        CHECK(m + c2.kept == c.kept);
        CHECK(serialize(&pieces, out2) == n && memcmp(out, out2, n) == 0);
    }

    /* get: the last member with a key, decoded, within its encoded size. */
    for (i = 0; sp_baggage_entry_at(&bag, i, &e) == SP_OK; i++) {
        size_t last_at = i;

        if (e.key_len >= sizeof(key_arg)) {
            continue;
        }
        memcpy(key_arg, e.key, e.key_len);
        key_arg[e.key_len] = '\0';
        for (j = 0; sp_baggage_entry_at(&bag, j, &last) == SP_OK; j++) {
            if (has_key(&last, key_arg)) {
                last_at = j;
            }
        }
        CHECK(last_at >= i);
        CHECK(sp_baggage_entry_at(&bag, last_at, &last) == SP_OK);
        CHECK(sp_baggage_get(&bag, key_arg, val, last.value_len, &m)
              == SP_OK);
        CHECK(m <= last.value_len);
        CHECK(utf8_valid((const unsigned char *)val, m));
    }

    check_selection(data, size);

    check_set(SP_SNAPSHOT_VOLUME_KEY, size & 2 ? "highest" : "off");

    /* Growing a member of a nearly full baggage makes set evict others. */
    n = sp_baggage_count(&bag);
    if (size > 0 && n > 0
        && sp_baggage_entry_at(&bag, data[size - 1] % n, &e) == SP_OK
        && e.key_len < sizeof(key_arg))
    {
        memcpy(key_arg, e.key, e.key_len);
        key_arg[e.key_len] = '\0';
        m = e.value_len + 1 + size % 300;
        if (m > sizeof(long_arg) - 1) {
            m = sizeof(long_arg) - 1;
        }
        memset(long_arg, 'x', m);
        long_arg[m] = '\0';
        check_set(key_arg, long_arg);
    }

    /* A key and value from the input: valid or not, the rules hold. */
    n = size < 2 ? 0 : data[0] % sizeof(key_arg);
    m = size < 2 ? 0 : data[1] % sizeof(value_arg);
    if (n + m + 2 <= size) {
        memcpy(key_arg, in + 2, n);
        key_arg[n] = '\0';
        memcpy(value_arg, in + 2 + n, m);
        value_arg[m] = '\0';
        check_set(key_arg, value_arg);
    }
    return 0;
}
