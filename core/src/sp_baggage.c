/*
 * W3C Baggage; the grammar and the limits followed are quoted in
 * sp_baggage.h.
 *
 * Each kept member is stored as its serialized text "key=value[;props]",
 * the members one after the other in order. Serializing is then a join with
 * ",", the byte budget of a member is its text plus one comma, and a member
 * that fits the 8192-byte limit always fits the buffer.
 */
#include <string.h>

#include "sp_baggage.h"
#include "sp_percent.h"
#include "sp_text.h"

/* The 3 bytes of U+FFFD REPLACEMENT CHARACTER in UTF-8. */
static const char sp_replacement[3] = { '\xEF', '\xBF', '\xBD' };

/* Builds one member's text where it will live, counting what did not fit. */
typedef struct sp_member_writer {
    char *out;
    size_t cap;
    size_t n;           /* bytes the text needs; > cap means it did not fit */
} sp_member_writer;

/* Controls, whitespace, DQUOTE, ",", ";" and "\" are not baggage-octets. */
static bool
sp_is_baggage_octet(unsigned char c)
{
    return c == 0x21 || (c >= 0x23 && c <= 0x2B) || (c >= 0x2D && c <= 0x3A)
           || (c >= 0x3C && c <= 0x5B) || (c >= 0x5D && c <= 0x7E);
}

static size_t
sp_span_token(const char *s, size_t len)
{
    size_t i = 0;

    while (i < len && sp_is_tchar((unsigned char)s[i])) {
        i++;
    }
    return i;
}

static size_t
sp_span_value(const char *s, size_t len)
{
    size_t i = 0;

    while (i < len && sp_is_baggage_octet((unsigned char)s[i])) {
        i++;
    }
    return i;
}

/*
 * Values are percent-encoded: a '%' that does not start an escape makes
 * the member malformed, which also lets sp_baggage_get decode any stored
 * value without failing.
 */
static bool
sp_escapes_valid(const char *s, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (s[i] != '%') {
            continue;
        }
        if (len - i < 3 || sp_hex_value(s[i + 1]) < 0
            || sp_hex_value(s[i + 2]) < 0)
        {
            return false;
        }
        i += 2;
    }
    return true;
}

static void
sp_put(sp_member_writer *w, const char *s, size_t len)
{
    if (w->n <= w->cap && w->cap - w->n >= len) {
        memcpy(w->out + w->n, s, len);
    }
    w->n += len;
}

/*
 * One list-member, s[0..len) between two commas with leading OWS already
 * skipped. Writes its text without OWS through w; false when malformed.
 */
static bool
sp_parse_member(const char *s, size_t len, sp_member_writer *w,
    size_t *key_len, size_t *value_len)
{
    size_t i, k, v;

    k = sp_span_token(s, len);
    if (k == 0) {
        return false;
    }
    sp_put(w, s, k);
    i = k + sp_skip_ows(s + k, len - k);
    if (i == len || s[i] != '=') {
        return false;
    }
    i++;
    i += sp_skip_ows(s + i, len - i);
    v = sp_span_value(s + i, len - i);
    if (!sp_escapes_valid(s + i, v)) {
        return false;
    }
    sp_put(w, "=", 1);
    sp_put(w, s + i, v);
    i += v;
    *key_len = k;
    *value_len = v;

    for ( ;; ) {
        i += sp_skip_ows(s + i, len - i);
        if (i == len) {
            return true;
        }
        if (s[i] != ';') {
            return false;
        }
        i++;
        i += sp_skip_ows(s + i, len - i);
        k = sp_span_token(s + i, len - i);
        if (k == 0) {
            return false;
        }
        sp_put(w, ";", 1);
        sp_put(w, s + i, k);
        i += k;
        v = sp_skip_ows(s + i, len - i);
        if (i + v < len && s[i + v] == '=') {
            i += v + 1;
            i += sp_skip_ows(s + i, len - i);
            v = sp_span_value(s + i, len - i);
            if (!sp_escapes_valid(s + i, v)) {
                return false;
            }
            sp_put(w, "=", 1);
            sp_put(w, s + i, v);
            i += v;
        }
    }
}

static void
sp_parse_one(sp_baggage *b, const char *s, size_t len, sp_baggage_counts *c)
{
    sp_member_writer w;
    sp_baggage_slot *slot;
    size_t i, key_len, value_len, need;

    i = sp_skip_ows(s, len);
    if (i == len) {
        return;
    }

    /* Room for the text and, after the first member, its comma. */
    need = sp_baggage_serialized_len(b) + (b->count > 0 ? 1 : 0);
    w.out = b->text + b->used;
    w.cap = 0;
    w.n = 0;
    if (!b->truncated && b->count < SP_BAGGAGE_MAX_MEMBERS
        && need < SP_BAGGAGE_MAX_BYTES)
    {
        w.cap = SP_BAGGAGE_MAX_BYTES - need;
    }

    if (!sp_parse_member(s + i, len - i, &w, &key_len, &value_len)) {
        c->dropped_malformed++;
        return;
    }
    if (w.n > w.cap || b->truncated || b->count == SP_BAGGAGE_MAX_MEMBERS) {
        /* Whole members only, and a prefix: nothing after a gap. */
        b->truncated = true;
        c->dropped_limit++;
        return;
    }

    slot = &b->slots[b->count++];
    slot->off = (uint16_t)b->used;
    slot->len = (uint16_t)w.n;
    slot->key_len = (uint16_t)key_len;
    slot->value_len = (uint16_t)value_len;
    b->used += w.n;
    c->kept++;
}

void
sp_baggage_init(sp_baggage *b)
{
    b->count = 0;
    b->used = 0;
    b->truncated = false;
}

void
sp_baggage_parse(sp_baggage *b, const char *header, size_t len,
    sp_baggage_counts *counts)
{
    sp_baggage_counts c = { 0, 0, 0 };
    size_t start = 0, end;

    /* ',' is in no key, value or property, so it always ends a member. */
    while (start < len) {
        end = start;
        while (end < len && header[end] != ',') {
            end++;
        }
        sp_parse_one(b, header + start, end - start, &c);
        start = end + 1;
    }
    if (counts != NULL) {
        *counts = c;
    }
}

size_t
sp_baggage_count(const sp_baggage *b)
{
    return b->count;
}

sp_status
sp_baggage_entry_at(const sp_baggage *b, size_t i, sp_baggage_entry *e)
{
    const sp_baggage_slot *s;
    size_t props;

    if (i >= b->count) {
        return SP_ERR_NOT_FOUND;
    }
    s = &b->slots[i];
    e->key = b->text + s->off;
    e->key_len = s->key_len;
    e->value = e->key + s->key_len + 1;
    e->value_len = s->value_len;
    props = (size_t)s->key_len + 1 + s->value_len;
    if (s->len > props) {
        /* Skip the ';' that joins the value and the first property. */
        e->properties = e->key + props + 1;
        e->properties_len = s->len - props - 1;
    } else {
        e->properties = e->key + props;
        e->properties_len = 0;
    }
    return SP_OK;
}

static bool
sp_key_is(const sp_baggage *b, size_t i, const char *key, size_t key_len)
{
    const sp_baggage_slot *s = &b->slots[i];

    return s->key_len == key_len
           && memcmp(b->text + s->off, key, key_len) == 0;
}

static size_t
sp_find(const sp_baggage *b, const char *key, size_t key_len)
{
    size_t i;

    for (i = 0; i < b->count; i++) {
        if (sp_key_is(b, i, key, key_len)) {
            break;
        }
    }
    return i;
}

/* The last member with that key, plus one; 0 when none has it. */
static size_t
sp_find_last(const sp_baggage *b, const char *key, size_t key_len)
{
    size_t i;

    for (i = b->count; i > 0; i--) {
        if (sp_key_is(b, i - 1, key, key_len)) {
            break;
        }
    }
    return i;
}

/* The next octet of a value whose escapes were checked when it was stored. */
static unsigned char
sp_next_octet(const char *v, size_t len, size_t *pos)
{
    size_t step, n;
    char c = '\0';

    step = v[*pos] == '%' && len - *pos >= 3 ? 3 : 1;
    (void)sp_percent_decode(v + *pos, step, &c, 1, &n);
    *pos += step;
    return (unsigned char)c;
}

/*
 * How many bytes the UTF-8 sequence that lead starts has (0: lead cannot
 * start one), and the range of its second byte (Unicode table 3-7, which
 * excludes overlongs, surrogates and code points above U+10FFFF).
 */
static size_t
sp_utf8_lead(unsigned char lead, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead < 0x80) {
        return 1;
    }
    if (lead >= 0xC2 && lead <= 0xDF) {
        return 2;
    }
    if (lead >= 0xE0 && lead <= 0xEF) {
        if (lead == 0xE0) {
            *lo = 0xA0;
        } else if (lead == 0xED) {
            *hi = 0x9F;
        }
        return 3;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
        if (lead == 0xF0) {
            *lo = 0x90;
        } else if (lead == 0xF4) {
            *hi = 0x8F;
        }
        return 4;
    }
    return 0;
}

static bool
sp_emit(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    if (cap - *n < len) {
        return false;
    }
    memcpy(out + *n, s, len);
    *n += len;
    return true;
}

/*
 * Percent-decodes v and replaces each maximal ill-formed subsequence with
 * U+FFFD (the WHATWG Encoding standard's UTF-8 decoder), as the Baggage
 * spec asks: "percent-encoded octet sequences that do not match the UTF-8
 * encoding scheme MUST be replaced with the replacement code point".
 */
static sp_status
sp_decode_value(const char *v, size_t len, char *out, size_t cap,
    size_t *out_len)
{
    unsigned char seq[4], lo, hi;
    size_t pos = 0, n = 0, need, got, save;
    bool ok;

    while (pos < len) {
        seq[0] = sp_next_octet(v, len, &pos);
        need = sp_utf8_lead(seq[0], &lo, &hi);
        got = 1;
        while (got < need && pos < len) {
            save = pos;
            seq[got] = sp_next_octet(v, len, &pos);
            if (seq[got] < lo || seq[got] > hi) {
                /* Not part of this sequence: it may start the next one. */
                pos = save;
                break;
            }
            got++;
            lo = 0x80;
            hi = 0xBF;
        }
        if (need != 0 && got == need) {
            ok = sp_emit(out, cap, &n, (const char *)seq, got);
        } else {
            ok = sp_emit(out, cap, &n, sp_replacement, sizeof(sp_replacement));
        }
        if (!ok) {
            return SP_ERR_TOO_LONG;
        }
    }
    *out_len = n;
    return SP_OK;
}

sp_status
sp_baggage_get(const sp_baggage *b, const char *key, char *out, size_t cap,
    size_t *out_len)
{
    sp_baggage_entry e;
    size_t i;

    /*
     * The last of several: what OpenTelemetry's propagators make of a
     * repeated key (each member put into a map in turn), so that a trace
     * this server selects is one the services behind it select too.
     */
    i = sp_find_last(b, key, strlen(key));
    if (i == 0 || sp_baggage_entry_at(b, i - 1, &e) != SP_OK) {
        return SP_ERR_NOT_FOUND;
    }
    return sp_decode_value(e.value, e.value_len, out, cap, out_len);
}

static void
sp_remove_at(sp_baggage *b, size_t j)
{
    sp_baggage_slot gone = b->slots[j];
    size_t k, end = (size_t)gone.off + gone.len;

    memmove(b->text + gone.off, b->text + end, b->used - end);
    for (k = j + 1; k < b->count; k++) {
        b->slots[k - 1] = b->slots[k];
        b->slots[k - 1].off = (uint16_t)(b->slots[k - 1].off - gone.len);
    }
    b->count--;
    b->used -= gone.len;
}

/* Member i becomes key=value; the caller made sure the text fits. */
static void
sp_replace_at(sp_baggage *b, size_t i, const char *key, size_t key_len,
    const char *value, size_t value_len)
{
    sp_baggage_slot *s = &b->slots[i];
    size_t k, len = key_len + 1 + value_len, end = (size_t)s->off + s->len;
    char *p = b->text + s->off;

    memmove(p + len, b->text + end, b->used - end);
    memcpy(p, key, key_len);
    p[key_len] = '=';
    memcpy(p + key_len + 1, value, value_len);
    for (k = i + 1; k < b->count; k++) {
        b->slots[k].off = (uint16_t)(b->slots[k].off - s->len + len);
    }
    b->used = b->used - s->len + len;
    s->len = (uint16_t)len;
    s->key_len = (uint16_t)key_len;
    s->value_len = (uint16_t)value_len;
}

sp_status
sp_baggage_set(sp_baggage *b, const char *key, const char *value,
    size_t *evicted)
{
    size_t key_len, value_len, len, total, i, j, dropped = 0;

    key_len = strlen(key);
    value_len = strlen(value);
    if (key_len == 0 || sp_span_token(key, key_len) != key_len
        || sp_span_value(value, value_len) != value_len
        || !sp_escapes_valid(value, value_len))
    {
        return SP_ERR_INVALID;
    }
    len = key_len + 1 + value_len;
    if (len > SP_BAGGAGE_MAX_BYTES) {
        return SP_ERR_TOO_LONG;
    }

    i = sp_find(b, key, key_len);
    if (i < b->count) {
        /* From the end, so the members still to look at do not move. */
        for (j = b->count - 1; j > i; j--) {
            if (sp_key_is(b, j, key, key_len)) {
                sp_remove_at(b, j);
            }
        }
        total = sp_baggage_serialized_len(b) - b->slots[i].len + len;
        while (total > SP_BAGGAGE_MAX_BYTES) {
            /* i alone fits (len <= 8192), so another member is left. */
            j = b->count - 1 == i ? i - 1 : b->count - 1;
            total -= (size_t)b->slots[j].len + 1;
            sp_remove_at(b, j);
            dropped++;
            if (j < i) {
                i--;
            }
        }
        sp_replace_at(b, i, key, key_len, value, value_len);

    } else {
        total = sp_baggage_serialized_len(b) + (b->count > 0 ? 1 : 0) + len;
        while (b->count == SP_BAGGAGE_MAX_MEMBERS
               || total > SP_BAGGAGE_MAX_BYTES)
        {
            j = b->count - 1;
            total -= (size_t)b->slots[j].len + 1;
            sp_remove_at(b, j);
            dropped++;
        }
        b->slots[b->count].off = (uint16_t)b->used;
        b->slots[b->count].len = 0;
        b->count++;
        sp_replace_at(b, b->count - 1, key, key_len, value, value_len);
    }

    if (evicted != NULL) {
        *evicted = dropped;
    }
    return SP_OK;
}

size_t
sp_baggage_serialized_len(const sp_baggage *b)
{
    return b->count == 0 ? 0 : b->used + b->count - 1;
}

sp_status
sp_baggage_serialize(const sp_baggage *b, char *out, size_t cap,
    size_t *out_len)
{
    size_t i, n = sp_baggage_serialized_len(b);
    char *p = out;

    if (cap <= n) {
        return SP_ERR_TOO_LONG;
    }
    for (i = 0; i < b->count; i++) {
        if (i > 0) {
            *p++ = ',';
        }
        memcpy(p, b->text + b->slots[i].off, b->slots[i].len);
        p += b->slots[i].len;
    }
    *p = '\0';
    *out_len = n;
    return SP_OK;
}
