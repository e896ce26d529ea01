/*
 * A connection's sp_entry_cache: over long random runs of requests on
 * one connection, each span finished with the cache is the same bytes as
 * without it, and the cache is used.
 */
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_entry.h"
#include "sp_entry_twice.h"
#include "sp_record.h"

static char scratch[SP_ENTRY_SCRATCH_SIZE];
static unsigned char plain[SP_ENTRY_TWICE_MAX], cached[SP_ENTRY_TWICE_MAX];

/* Long values: one whose attribute still takes one byte of length, ones
 * that take two, one over what a cache keeps of a value. */
static char long127[128], long128[129], long300[301], host300[301];

/* Each field's values: NULL (absent) first. Several values repeat, and a
 * request keeps the previous one's most of the time, so that the cache
 * is used as often as it is refreshed. */
static const char *const authorities[] = {
    NULL, "", "example.com", "example.com:8080", "h:0", "h:80",
    "h:65535", "h:81", "[::1]:443", "bad host", "EXAMPLE.com", host300
};
static const char *const schemes[] = { NULL, "", "http", "https", "HTTP" };
static const char *const forwarded[] = {
    NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    "for=192.0.2.1;host=fwd.example:444;proto=https", "for=x", ""
};
static const char *const forwarded_hosts[] = {
    NULL, NULL, NULL, NULL, "xfh.example"
};
static const char *const forwarded_protos[] = {
    NULL, NULL, NULL, NULL, "https"
};
static const char *const server_addresses[] = {
    NULL, "localhost", "[::1]"
};
static const int64_t ports[] = { 0, 80, 65535 };
static const char *const addresses[] = {
    NULL, "", "192.0.2.1", "192.0.2.10", "192.0.2.11", "2001:db8::1",
    "\xbd", long127, long128, long300, "::1", "::2", "1.2.3.4", "1.2.3.5"
};
static const char *const versions[] = {
    NULL, "1.1", "2", "1.0", "", "1_1", "20", "21", "3"
};
static const char *const agents[] = {
    NULL, "", "curl/8.0", "curl/8.1", "ApacheBench/2.3",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/1",
    "Mozilla/5.0 (X12; Linux x86_64) Firefox/1",
    "caf\xc3\xa9-agent/1.0", "ua\x80x", "\xbd", long127, long128, long300
};
static const int64_t statuses[] = { 200, 500, 0, 404 };

#define PICK(pool, r) pool[(r) % (sizeof(pool) / sizeof(pool[0]))]

static uint64_t
next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A field keeps its value but for one request in sixteen. */
#define CHANGE(s) (next(s) % 16 == 0)

static void
set(const char **v, size_t *len, const char *value)
{
    *v = value;
    *len = value != NULL ? strlen(value) : 0;
}

static void
setup_values(void)
{
    memset(long127, 'a', 127);
    memset(long128, 'b', 128);
    memset(long300, 'c', 300);
    memset(host300, 'h', 300);
}

/* One request's changes from the previous one's, drawn from the pools. */
static void
change(sp_entry_http *h, uint64_t *s)
{
    if (CHANGE(s)) {
        set(&h->authority, &h->authority_len, PICK(authorities, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->scheme, &h->scheme_len, PICK(schemes, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->forwarded, &h->forwarded_len, PICK(forwarded, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->forwarded_host, &h->forwarded_host_len,
            PICK(forwarded_hosts, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->forwarded_proto, &h->forwarded_proto_len,
            PICK(forwarded_protos, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->server_address, &h->server_address_len,
            PICK(server_addresses, next(s)));
        h->server_port = PICK(ports, next(s));
    }
    if (CHANGE(s)) {
        set(&h->client_address, &h->client_address_len,
            PICK(addresses, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->peer_address, &h->peer_address_len,
            PICK(addresses, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->protocol_version, &h->protocol_version_len,
            PICK(versions, next(s)));
    }
    if (CHANGE(s)) {
        set(&h->user_agent, &h->user_agent_len, PICK(agents, next(s)));
    }
    h->status = PICK(statuses, next(s));
}

/*
 * Whether finishing h with a copy of cache whose kept attributes were
 * spoiled shows it: then the span copied them, as it should for a request
 * that repeats the one before. The copy's run is found after the
 * authority and scheme it keeps.
 */
static bool
copied_from(const sp_entry_policy *p, const sp_entry *e,
            const sp_entry_http *h, const sp_entry_cache *cache,
            sp_ring *ring)
{
    sp_entry_cache spoiled = *cache;

    if (cache->run_len == 0 || cache->lens[0] == SIZE_MAX) {
        return false;
    }
    spoiled.data[cache->run_off + 2] ^= 0x20;
    return !sp_entry_same_with_cache(p, e, h, &spoiled, ring, plain,
                                     cached);
}

/*
 * One connection's buffers that an adapter hands the core request after
 * request at the same addresses, their bytes and lengths changed in
 * place between requests (a server's pool gives the same memory back).
 * On the heap, as a server's are; room for the lengths drawn below.
 */
typedef struct {
    char   authority[32];
    char   client[32];
    char   peer[32];
    char   agent[32];
    char   scheme[8];
    char   version[8];
    size_t authority_len;
    size_t client_len;
    size_t peer_len;
    size_t agent_len;
} reused_buffers;

static const char *const literal_schemes[] = { "http", "https" };
static const char *const literal_versions[] = { "1.1", "2", "1.0" };

static void
setup_reused(reused_buffers *b)
{
    memset(b, 0, sizeof(*b));
    memset(b->authority, 'a', sizeof(b->authority) - 1);
    memset(b->client, '1', sizeof(b->client) - 1);
    memset(b->peer, '1', sizeof(b->peer) - 1);
    memset(b->agent, 'u', sizeof(b->agent) - 1);
    memcpy(b->scheme, "http", 5);
    memcpy(b->version, "1.1", 4);
    b->authority_len = 12;
    b->client_len = 10;
    b->peer_len = 10;
    b->agent_len = 12;
}

/*
 * One request in eight a new length, 5 to 18 bytes, across the 8 to 16
 * the usual case keeps as words; one in four a byte changed in place to
 * one of bytes. Mostly the lengths stay, so that a kept run is compared
 * with bytes changed at the same address and length.
 */
static void
rewrite(char *buf, size_t *len, const char *bytes, uint64_t *s)
{
    if (next(s) % 8 == 0) {
        *len = 5 + next(s) % 14;
    }
    if (next(s) % 4 == 0) {
        buf[next(s) % *len] = bytes[next(s) % strlen(bytes)];
    }
}

/*
 * A scheme or a version: one request in eight (and the first) draws again
 * whether it is the literal (read-only, compared by address: seven times
 * in eight) or buf, on the heap, of a length that stays; while it is buf,
 * a byte of it is changed to one of bytes at each request.
 */
static void
literal_or_buffer(const char **v, size_t *len, const char *literal,
    char *buf, const char *bytes, uint64_t *s)
{
    if (*v == NULL || next(s) % 8 == 0) {
        if (next(s) % 8 != 0) {
            set(v, len, literal);
        } else {
            *v = buf;
            *len = strlen(buf);
        }
    }
    if (*v == buf) {
        buf[next(s) % *len] = bytes[next(s) % strlen(bytes)];
    }
}

/*
 * The next request on the reused buffers: each rewritten, the authority
 * with a host's bytes but one in sixteen times a colon or a colon and a
 * byte at its end (an empty or short port, or a colon inside once the
 * length grows). One request in eight draws again whether the peer is
 * the client's pointer (three times in four) or its own buffer, and
 * whether the scheme and the version are literals (read-only, compared
 * by address: seven times in eight) or buffers of the same lengths.
 */
static void
reuse_in_place(sp_entry_http *h, reused_buffers *b, uint64_t *s)
{
    static const char host[] = "ab9.-", address[] = "ab:1[]9.";

    rewrite(b->authority, &b->authority_len, host, s);
    rewrite(b->client, &b->client_len, address, s);
    rewrite(b->agent, &b->agent_len, address, s);
    rewrite(b->peer, &b->peer_len, address, s);
    if (next(s) % 16 == 0) {
        b->authority[b->authority_len - 1 - next(s) % 2] = ':';
    }
    h->authority = b->authority;
    h->authority_len = b->authority_len;
    h->client_address = b->client;
    h->client_address_len = b->client_len;
    if (h->peer_address == NULL || next(s) % 8 == 0) {
        h->peer_address = next(s) % 4 == 0 ? b->peer : b->client;
    }
    h->peer_address_len = h->peer_address == b->peer ? b->peer_len
                                                     : b->client_len;
    h->user_agent = b->agent;
    h->user_agent_len = b->agent_len;
    literal_or_buffer(&h->scheme, &h->scheme_len,
                      PICK(literal_schemes, next(s)), b->scheme, "hpst", s);
    literal_or_buffer(&h->protocol_version, &h->protocol_version_len,
                      PICK(literal_versions, next(s)), b->version, "12.",
                      s);
}

/* Whether c keeps a run whose six lengths are h's: then the cache
 * compares h's bytes (or addresses) with what it kept. */
static bool
lengths_kept(const sp_entry_cache *c, const sp_entry_http *h)
{
    return c->lens[0] != SIZE_MAX && c->lens[0] == h->authority_len
           && c->lens[1] == h->scheme_len
           && c->lens[2] == h->client_address_len
           && c->lens[3] == h->peer_address_len
           && c->lens[4] == h->protocol_version_len
           && c->lens[5] == h->user_agent_len;
}

/*
 * Whether sp_entry_cache_hit takes its usual case for h: the lengths
 * kept, the words kept (slow 0), the scheme and the version the kept
 * literals' addresses, the peer the client's pointer.
 */
static bool
takes_fast_path(const sp_entry_cache *c, const sp_entry_http *h)
{
    return lengths_kept(c, h) && c->slow == 0 && h->scheme == c->scheme_ro
           && h->protocol_version == c->version_ro
           && h->peer_address == h->client_address;
}

/* The policy the tests finish spans with, and a ring of 1 MiB in mem. */
static sp_ring *
setup_ring(sp_entry_policy *p, void **mem, sp_region **region)
{
    size_t   size = sp_region_size(1, 1 << 20);
    sp_ring *ring;

    memset(p, 0, sizeof(*p));
    p->sampler = SP_SAMPLER_ALWAYS_ON;
    sp_http_methods_standard(&p->known_methods);
    *mem = aligned_alloc(64, size);
    assert_non_null(*mem);
    assert_int_equal(sp_region_init(*mem, size, 1, 1 << 20), SP_OK);
    assert_int_equal(sp_region_attach(*mem, size, region), SP_OK);
    ring = sp_region_claim(*region, 1);
    assert_non_null(ring);
    return ring;
}

static void
spans_with_the_cache_are_the_bytes_without_it(void **state)
{
    sp_entry_policy p;
    sp_entry_headers in;
    sp_entry_http   h;
    sp_entry_cache  cache;
    sp_entry        e;
    sp_idgen       *ids = sp_idgen_create();
    sp_region      *region;
    sp_ring        *ring;
    void           *mem;
    uint64_t        s = 0x9e3779b97f4a7c15ull;
    int             conn, i, same = 0, reused = 0;
    bool            repeat;

    (void)state;
    setup_values();
    assert_non_null(ids);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));

    for (conn = 0; conn < 40; conn++) {
        memset(&h, 0, sizeof(h));
        h.method = "GET";
        h.method_len = 3;
        h.path = "/small.html";
        h.path_len = strlen(h.path);
        h.route = "/";
        h.route_len = 1;
        h.scheme = "http";
        h.scheme_len = 4;
        h.pid = 7;
        sp_entry_cache_init(&cache);
        for (i = 0; i < 500; i++) {
            sp_entry_http before = h;

            change(&h, &s);
            repeat = i > 0
                && memcmp(&before, &h, offsetof(sp_entry_http, status)) == 0;
            sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
            e.selection.profiled = next(&s) % 4 == 0;
            if (repeat && copied_from(&p, &e, &h, &cache, ring)) {
                reused++;
            }
            if (!sp_entry_same_with_cache(&p, &e, &h, &cache, ring, plain,
                                          cached))
            {
                print_message("connection %d, request %d: the cached span "
                              "differs (authority %.20s, UA %.20s)\n", conn,
                              i, h.authority ? h.authority : "(none)",
                              h.user_agent ? h.user_agent : "(none)");
                fail();
            }
            same++;
        }
    }
    print_message("%d spans the same with the cache, %d copied from it\n",
                  same, reused);
    /* Most repeats find their attributes kept: not a test of nothing. */
    assert_true(reused > 1000);

    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

/*
 * A request whose authority and scheme are each short enough to be kept
 * (at most 255 bytes) but together longer than the cache's data: the run
 * is not kept, and nothing past the cache is written.
 */
static void
a_long_authority_and_scheme_are_not_kept(void **state)
{
    static char     host[256], scheme[251];
    sp_entry_policy p;
    sp_entry_headers in;
    sp_entry_http   h;
    sp_entry        e;
    sp_idgen       *ids = sp_idgen_create();
    sp_region      *region;
    sp_ring        *ring;
    void           *mem;
    size_t          i;
    /* the cache and what an allocator might put after it */
    struct {
        sp_entry_cache cache;
        unsigned char  after[1024];
    } *kept = malloc(sizeof(*kept));

    (void)state;
    assert_non_null(kept);
    assert_non_null(ids);
    memset(host, 'h', 252);
    memcpy(host + 252, ":80", 3);
    memset(scheme, 's', 250);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET";
    h.method_len = 3;
    h.path = "/";
    h.path_len = 1;
    set(&h.authority, &h.authority_len, host);
    set(&h.scheme, &h.scheme_len, scheme);
    h.client_address = "192.0.2.1";
    h.client_address_len = 9;
    h.user_agent = "curl/8.0";
    h.user_agent_len = 8;
    h.status = 200;
    h.pid = 7;
    sp_entry_cache_init(&kept->cache);
    memset(kept->after, 0x5a, sizeof(kept->after));

    for (i = 0; i < 2; i++) {
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        assert_true(sp_entry_same_with_cache(&p, &e, &h, &kept->cache, ring,
                                             plain, cached));
    }
    for (i = 0; i < sizeof(kept->after); i++) {
        assert_int_equal(kept->after[i], 0x5a);
    }
    assert_true(kept->cache.lens[0] == SIZE_MAX);

    free(kept);
    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

/*
 * The peer compared as the client when it is the same string, but only
 * when the kept peer was the kept client's bytes: a connection whose
 * first spans had another peer of the same length must not copy it into
 * a span whose peer is now the client.
 */
static void
a_peer_that_becomes_the_client_is_compared(void **state)
{
    static const char client[] = "192.0.2.10", other[] = "192.0.2.11";
    sp_entry_policy   p;
    sp_entry_headers  in;
    sp_entry_http     h;
    sp_entry_cache    cache;
    sp_entry          e;
    sp_idgen         *ids = sp_idgen_create();
    sp_region        *region;
    sp_ring          *ring;
    void             *mem;
    int               i;

    (void)state;
    assert_non_null(ids);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET";
    h.method_len = 3;
    h.path = "/";
    h.path_len = 1;
    set(&h.authority, &h.authority_len, "example.com");
    set(&h.scheme, &h.scheme_len, "http");
    set(&h.client_address, &h.client_address_len, client);
    set(&h.peer_address, &h.peer_address_len, other);
    set(&h.protocol_version, &h.protocol_version_len, "1.1");
    h.status = 200;
    h.pid = 7;
    sp_entry_cache_init(&cache);

    for (i = 0; i < 4; i++) {
        if (i == 2) {
            h.peer_address = h.client_address;
        }
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                             plain, cached));
    }

    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

/*
 * The usual connection, which sp_entry_cache_hit compares in few
 * instructions: an authority, a client (the peer too) and a user agent
 * each of 8 to 16 bytes, the scheme and the version literals. A request
 * with one of the three values the kept bytes in another buffer copies
 * the kept run; one whose value differs from the kept one only in its
 * first or its last byte writes its own.
 */
static void
a_value_that_differs_at_either_end_is_found(void **state)
{
    static const char *const kept[3] = {
        "example.com:8080", "192.0.2.10", "ApacheBench/2.3"
    };
    char              buf[17];
    sp_entry_policy   p;
    sp_entry_headers  in;
    sp_entry_http     h;
    sp_entry_cache    cache;
    sp_entry          e;
    sp_idgen         *ids = sp_idgen_create();
    sp_region        *region;
    sp_ring          *ring;
    void             *mem;
    size_t            v, end, len;

    (void)state;
    assert_non_null(ids);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET";
    h.method_len = 3;
    h.path = "/";
    h.path_len = 1;
    set(&h.scheme, &h.scheme_len, "http");
    set(&h.protocol_version, &h.protocol_version_len, "1.1");
    h.status = 200;
    h.pid = 7;
    sp_entry_cache_init(&cache);

    for (v = 0; v < 3; v++) {
        for (end = 0; end < 3; end++) {
            set(&h.authority, &h.authority_len, kept[0]);
            set(&h.client_address, &h.client_address_len, kept[1]);
            set(&h.user_agent, &h.user_agent_len, kept[2]);
            h.peer_address = h.client_address;
            h.peer_address_len = h.client_address_len;
            /* the kept values, kept */
            sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
            assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                                 plain, cached));
            assert_int_equal(cache.slow, 0);

            /* end 0, 1: the first, the last byte changed; 2: none */
            len = strlen(kept[v]);
            memcpy(buf, kept[v], len + 1);
            if (end < 2) {
                buf[end == 0 ? 0 : len - 1] ^= 0x01;
            }
            if (v == 0) {
                h.authority = buf;
            } else if (v == 1) {
                h.client_address = h.peer_address = buf;
            } else {
                h.user_agent = buf;
            }
            sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
            assert_int_equal(copied_from(&p, &e, &h, &cache, ring),
                             end == 2);
            assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                                 plain, cached));
        }
    }

    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

/*
 * A scheme and a protocol version at the same address as the kept ones
 * are taken for the kept bytes only when that address is read-only, in
 * this program or the object the core is linked into (an adapter's or
 * the server's literal): in memory a later request may reuse, another
 * value of the same length at the same address is compared and found,
 * and so is one in a library that could be unloaded (libc's here).
 */
static void
a_reused_buffer_is_compared_and_a_literal_is_not(void **state)
{
    static const char *const reused[][2] = {
        { "http", "1.1" }, { "ftps", "1.0" }, { "http", "2.0" }
    };
    char              scheme[8], version[8];
    sp_entry_policy   p;
    sp_entry_headers  in;
    sp_entry_http     h;
    sp_entry_cache    cache, spoiled;
    sp_entry          e;
    sp_idgen         *ids = sp_idgen_create();
    sp_region        *region;
    sp_ring          *ring;
    void             *mem;
    size_t            i;

    (void)state;
    assert_non_null(ids);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET";
    h.method_len = 3;
    h.path = "/";
    h.path_len = 1;
    set(&h.authority, &h.authority_len, "example.com");
    set(&h.client_address, &h.client_address_len, "192.0.2.1");
    h.peer_address = h.client_address;
    h.peer_address_len = h.client_address_len;
    h.status = 200;
    h.pid = 7;
    sp_entry_cache_init(&cache);

    /* the same buffers, other bytes: each span is the one without cache */
    h.scheme = scheme;
    h.scheme_len = 4;
    h.protocol_version = version;
    h.protocol_version_len = 3;
    for (i = 0; i < 2 * sizeof(reused) / sizeof(reused[0]); i++) {
        memcpy(scheme, reused[i / 2][0], 5);
        memcpy(version, reused[i / 2][1], 4);
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                             plain, cached));
    }
    assert_null(cache.scheme_ro);
    assert_null(cache.version_ro);

    /* literals: kept by address, and a hit does not read the kept bytes
     * (a spoiled copy of them still hits, and stays spoiled) */
    h.scheme = "http";
    h.protocol_version = "1.1";
    for (i = 0; i < 2; i++) {
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                             plain, cached));
    }
    assert_ptr_equal(cache.scheme_ro, h.scheme);
    assert_ptr_equal(cache.version_ro, h.protocol_version);
    spoiled = cache;
    spoiled.data[cache.run_off - h.scheme_len] ^= 0x20;
    sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
    assert_true(sp_entry_same_with_cache(&p, &e, &h, &spoiled, ring, plain,
                                         cached));
    assert_int_equal(spoiled.data[cache.run_off - h.scheme_len], 'h' ^ 0x20);

    h.protocol_version = gnu_get_libc_version();
    h.protocol_version_len = strlen(h.protocol_version);
    for (i = 0; i < 2; i++) {
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        assert_true(sp_entry_same_with_cache(&p, &e, &h, &cache, ring,
                                             plain, cached));
    }
    assert_ptr_equal(cache.scheme_ro, h.scheme);
    assert_null(cache.version_ro);

    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

/*
 * The pools above give each value its own string, so a request that
 * differs from the kept one differs in its addresses too; an adapter's
 * buffers do not: the same memory, other bytes, maybe the same lengths.
 * Then only the cache's compare of bytes tells the requests apart: the
 * words kept at the start of data, the read-only scheme and version
 * taken by address (a buffer at another address, of the same length, is
 * not the kept literal), the peer taken as the client when it is the
 * same pointer. fuzz_entry's values are copied each run and cannot reach
 * that. Each span with the cache must still be the bytes without it; the
 * counts show the requests met a kept run and the usual case, so that a
 * change of the draws cannot leave those compares untested.
 */
static void
buffers_changed_in_place_are_compared(void **state)
{
    sp_entry_policy  p;
    sp_entry_headers in;
    sp_entry_http    h;
    sp_entry_cache   cache;
    sp_entry         e;
    sp_idgen        *ids = sp_idgen_create();
    sp_region       *region;
    sp_ring         *ring;
    reused_buffers  *bufs = malloc(sizeof(*bufs));
    void            *mem;
    uint64_t         s = 88172645463325252ull;
    int              i, kept = 0, compared = 0, fast = 0;

    (void)state;
    assert_non_null(ids);
    assert_non_null(bufs);
    ring = setup_ring(&p, &mem, &region);
    memset(&in, 0, sizeof(in));
    setup_reused(bufs);
    sp_entry_cache_init(&cache);

    memset(&h, 0, sizeof(h));
    h.method = "GET";
    h.method_len = 3;
    h.path = "/";
    h.path_len = 1;
    h.status = 200;
    h.pid = 7;
    for (i = 0; i < 500000; i++) {
        reuse_in_place(&h, bufs, &s);
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        kept += cache.lens[0] != SIZE_MAX;
        compared += lengths_kept(&cache, &h);
        fast += takes_fast_path(&cache, &h);
        if (!sp_entry_same_with_cache(&p, &e, &h, &cache, ring, plain,
                                      cached))
        {
            print_message("request %d: the cached span differs "
                          "(authority %.*s, client %.*s, peer %s, "
                          "scheme %.*s, version %.*s)\n", i,
                          (int)h.authority_len, h.authority,
                          (int)h.client_address_len, h.client_address,
                          h.peer_address == h.client_address ? "client"
                                                              : "own",
                          (int)h.scheme_len, h.scheme,
                          (int)h.protocol_version_len, h.protocol_version);
            fail();
        }
    }
    print_message("%d requests met a kept run, %d of its lengths, %d in "
                  "the usual case\n", kept, compared, fast);
    assert_true(kept > 0);
    assert_true(compared > 0);
    assert_true(fast > 0);

    free(bufs);
    sp_region_detach(region);
    free(mem);
    sp_idgen_destroy(ids);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spans_with_the_cache_are_the_bytes_without_it),
        cmocka_unit_test(a_long_authority_and_scheme_are_not_kept),
        cmocka_unit_test(a_peer_that_becomes_the_client_is_compared),
        cmocka_unit_test(a_value_that_differs_at_either_end_is_found),
        cmocka_unit_test(a_reused_buffer_is_compared_and_a_literal_is_not),
        cmocka_unit_test(buffers_changed_in_place_are_compared),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
