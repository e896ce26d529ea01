/*
 * The differential checks of a connection's sp_entry_cache, for
 * test_entry_cache and fuzz_entry: a span finished with the cache must be
 * the bytes of the same span finished without it; and of the standard
 * methods' constants (test_entry, fuzz_entry).
 */
#ifndef SP_ENTRY_TWICE_H
#define SP_ENTRY_TWICE_H

#include <string.h>

#include "sp_entry.h"

/* The largest record the checks keep: a span's strings are cut at
 * SP_SPAN_STRING_MAX, fifteen attributes and a name far below this. */
#define SP_ENTRY_TWICE_MAX 65536

/* The ring's next record into out; its length, 0 when there is none. */
static inline size_t
sp_entry_take(sp_ring *ring, unsigned char *out)
{
    sp_record_view v;
    size_t         len;

    if (sp_ring_read(ring, &v) != SP_OK) {
        return 0;
    }
    len = v.len <= SP_ENTRY_TWICE_MAX ? v.len : 0;
    memcpy(out, v.body, len);
    (void)sp_ring_consume(ring, &v);
    return len;
}

/*
 * The record of e and h finished without a cache into plain, then with
 * cache (used, and refreshed, as a connection's would be) into cached;
 * h's end time fixed when it has none, so that both are one span. 1 when
 * both were written and are the same bytes, else 0.
 */
static inline int
sp_entry_same_with_cache(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_entry_cache *cache, sp_ring *ring,
    unsigned char *plain, unsigned char *cached)
{
    sp_entry_http with = *h;
    size_t        a, b;

    if (with.end_ns == 0) {
        with.end_ns = e->start_ns + 1;
    }
    with.cache = NULL;
    if (sp_entry_finish(p, e, &with, ring) != SP_OK) {
        return 0;
    }
    a = sp_entry_take(ring, plain);
    with.cache = cache;
    if (sp_entry_finish(p, e, &with, ring) != SP_OK) {
        return 0;
    }
    b = sp_entry_take(ring, cached);
    return a > 0 && a == b && memcmp(plain, cached, a) == 0;
}

/*
 * The record of e and h under p, whose methods are the standard list,
 * into plain, and under the same methods as a list in another order
 * (asked method by method, where p's copies constants) into listed; h's
 * end time fixed as above. 1 when both were written and are the same
 * bytes, else 0.
 */
static inline int
sp_entry_same_listed(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_ring *ring, unsigned char *plain,
    unsigned char *listed)
{
    static const char reordered[] =
        "TRACE,PUT,POST,PATCH,OPTIONS,HEAD,GET,DELETE,CONNECT";
    sp_entry_policy   q = *p;
    sp_entry_http     with = *h;
    size_t            a, b;

    if (!p->known_methods.standard
        || sp_http_methods_parse(reordered, sizeof(reordered) - 1,
                                 &q.known_methods) != SP_OK
        || q.known_methods.standard)
    {
        return 0;
    }
    if (with.end_ns == 0) {
        with.end_ns = e->start_ns + 1;
    }
    if (sp_entry_finish(p, e, &with, ring) != SP_OK) {
        return 0;
    }
    a = sp_entry_take(ring, plain);
    if (sp_entry_finish(&q, e, &with, ring) != SP_OK) {
        return 0;
    }
    b = sp_entry_take(ring, listed);
    return a > 0 && a == b && memcmp(plain, listed, a) == 0;
}

#endif
