/*
 * The input is what a client sends: traceparent, tracestate and baggage
 * values separated by '\n' (a missing one is absent), then the request's
 * method, path, query, server name, user agent, known methods, and the
 * Forwarded, X-Forwarded-Host, authority and X-Forwarded-Proto the
 * request was sent with, the same way. Checks, aborting on a violation: the entry
 * span always has valid ids and a traceparent that parses back to them; a
 * valid incoming traceparent is continued (same trace, its span as
 * parent) and an invalid one starts a root span with no tracestate; the
 * tracestate sent on parses and stays within its limits; the baggage sent
 * on stays within 180 members and 8192 bytes and carries a snapshot
 * volume; only recorded spans are profiled; the span record of a
 * recorded span is written and decodes to the same ids.
 *
 * What follows is later requests on the same connection, each a change
 * of the one before: a byte naming a field (its low bits) and whether the
 * field is then absent (0x80), then the field's new value up to '\n'. Each
 * request's span is finished with the connection's sp_entry_cache and
 * without it, and must be the same bytes (sp_entry_twice.h); the first
 * one's also under the standard methods as a list, which must not change
 * its bytes either.
 */
#include <stdlib.h>
#include <string.h>

#include "sp_baggage.h"
#include "sp_entry.h"
#include "sp_record.h"
#include "../tests/sp_entry_twice.h"

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

static char scratch[SP_ENTRY_SCRATCH_SIZE];
static sp_baggage bag;
static sp_idgen *ids;
static sp_region *region;
static sp_ring *ring;
static void *mem;
static sp_entry_cache cache;
static unsigned char plain[SP_ENTRY_TWICE_MAX], cached[SP_ENTRY_TWICE_MAX];

static const char *
field(const char **p, const char *end, size_t *len)
{
    const char *start = *p, *nl;

    if (start >= end) {
        *len = 0;
        return NULL;
    }
    nl = memchr(start, '\n', (size_t)(end - start));
    *len = (size_t)((nl ? nl : end) - start);
    *p = nl ? nl + 1 : end;
    return start;
}

static void
setup(void)
{
    size_t size = sp_region_size(1, 1 << 16);

    ids = sp_idgen_create();
    mem = aligned_alloc(64, size);
    CHECK(ids != NULL && mem != NULL);
    CHECK(sp_region_init(mem, size, 1, 1 << 16) == SP_OK);
    CHECK(sp_region_attach(mem, size, &region) == SP_OK);
    ring = sp_region_claim(region, 1);
    CHECK(ring != NULL);
}

/* A later request on the connection: h changed as the input says, as
 * long as there is input. */
static void
connection(const sp_entry_policy *pol, sp_entry *e, sp_entry_http *h,
           const char *p, const char *end)
{
    const char *v;
    size_t      len;
    unsigned    op;

    sp_entry_cache_init(&cache);
    e->recorded = true;
    CHECK(sp_entry_same_with_cache(pol, e, h, &cache, ring, plain, cached));
    while (p < end) {
        op = (unsigned char)*p++;
        v = field(&p, end, &len);
        if (op & 0x80) {
            v = NULL;
            len = 0;
        }
        switch (op & 0x0f) {
        case 0: h->authority = v; h->authority_len = len; break;
        case 1: h->scheme = v; h->scheme_len = len; break;
        case 2: h->client_address = v; h->client_address_len = len; break;
        case 3: h->peer_address = v; h->peer_address_len = len; break;
        case 4: h->protocol_version = v; h->protocol_version_len = len;
                break;
        case 5: h->user_agent = v; h->user_agent_len = len; break;
        case 6: h->forwarded = v; h->forwarded_len = len; break;
        case 7: h->forwarded_host = v; h->forwarded_host_len = len; break;
        case 8: h->forwarded_proto = v; h->forwarded_proto_len = len; break;
        case 9: h->server_address = v; h->server_address_len = len; break;
        case 10: h->server_port = (int64_t)(len > 0 ? (unsigned char)v[0]
                                                    << 8 | len : 0);
                 break;
        case 11: h->status = len > 0 && v[0] == '5' ? 500 : 200; break;
        default: e->selection.profiled = !e->selection.profiled; break;
        }
        CHECK(sp_entry_same_with_cache(pol, e, h, &cache, ring, plain,
                                       cached));
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char      *p = (const char *)data, *end = p + size;
    sp_entry_policy  pol;
    sp_entry_headers in;
    sp_entry_http    h;
    sp_entry         e;
    sp_span_context  parsed, out;
    sp_tracestate    ts;
    sp_baggage_counts counts;
    sp_record_view   v;
    sp_span_view     rec;
    sp_status        st;
    bool             incoming_valid;
    size_t           i, volumes;
    sp_baggage_entry be;
    const char      *known;
    size_t           known_len;

    if (ids == NULL) {
        setup();
    }

    memset(&pol, 0, sizeof(pol));
    pol.sampler = SP_SAMPLER_PARENTBASED_ALWAYS_ON;
    pol.sampler_ratio = 1.0;
    pol.propagators = SP_PROPAGATOR_TRACECONTEXT | SP_PROPAGATOR_BAGGAGE;
    pol.snapshot_enabled = true;
    pol.selection_threshold = sp_selection_threshold(0.1);
    sp_http_methods_standard(&pol.known_methods);

    memset(&in, 0, sizeof(in));
    in.traceparent = field(&p, end, &in.traceparent_len);
    in.tracestate = field(&p, end, &in.tracestate_len);
    in.baggage = field(&p, end, &in.baggage_len);

    sp_entry_begin(&pol, ids, &in, scratch, sizeof(scratch), &e);

    CHECK(sp_trace_id_is_valid(e.ctx.trace_id));
    CHECK(sp_span_id_is_valid(e.ctx.span_id));
    CHECK(sp_traceparent_parse(e.traceparent, strlen(e.traceparent), &out)
          == SP_TRACEPARENT_OK);
    CHECK(memcmp(out.trace_id, e.ctx.trace_id, 16) == 0);
    CHECK(memcmp(out.span_id, e.ctx.span_id, 8) == 0);
    CHECK(!e.selection.profiled || e.recorded);

    incoming_valid = in.traceparent != NULL
        && sp_traceparent_parse(in.traceparent, in.traceparent_len, &parsed)
           == SP_TRACEPARENT_OK;
    CHECK(e.remote_parent == incoming_valid);
    if (incoming_valid) {
        CHECK(memcmp(parsed.trace_id, e.ctx.trace_id, 16) == 0);
        CHECK(memcmp(parsed.span_id, e.parent_span_id, 8) == 0);
    } else {
        CHECK(e.tracestate == NULL);
        for (i = 0; i < 8; i++) {
            CHECK(e.parent_span_id[i] == 0);
        }
    }

    if (e.tracestate != NULL) {
        CHECK(e.tracestate_len <= SP_TRACESTATE_MAX_LEN);
        CHECK(sp_tracestate_parse(e.tracestate, e.tracestate_len, &ts)
              == SP_TRACESTATE_OK);
    }

    /* Snapshot profiling is on: the volume always goes on. */
    CHECK(e.baggage != NULL && e.baggage_len <= SP_BAGGAGE_MAX_BYTES);
    sp_baggage_init(&bag);
    sp_baggage_parse(&bag, e.baggage, e.baggage_len, &counts);
    CHECK(counts.dropped_malformed == 0 && counts.dropped_limit == 0);
    CHECK(sp_baggage_count(&bag) <= SP_BAGGAGE_MAX_MEMBERS);
    volumes = 0;
    for (i = 0; i < sp_baggage_count(&bag); i++) {
        CHECK(sp_baggage_entry_at(&bag, i, &be) == SP_OK);
        volumes += be.key_len == strlen(SP_SNAPSHOT_VOLUME_KEY)
                   && memcmp(be.key, SP_SNAPSHOT_VOLUME_KEY, be.key_len) == 0;
    }
    CHECK(volumes >= 1);    /* a client may send it twice; kept as sent */

    memset(&h, 0, sizeof(h));
    h.method = field(&p, end, &h.method_len);
    h.path = field(&p, end, &h.path_len);
    h.route = h.path;
    h.route_len = h.path_len;
    h.query = field(&p, end, &h.query_len);
    h.server_address = field(&p, end, &h.server_address_len);
    h.user_agent = field(&p, end, &h.user_agent_len);
    known = field(&p, end, &known_len);
    h.forwarded = field(&p, end, &h.forwarded_len);
    h.forwarded_host = field(&p, end, &h.forwarded_host_len);
    h.authority = field(&p, end, &h.authority_len);
    h.forwarded_proto = field(&p, end, &h.forwarded_proto_len);
    if (known == NULL
        || sp_http_methods_parse(known, known_len, &pol.known_methods)
           != SP_OK)
    {
        sp_http_methods_standard(&pol.known_methods);
    }
    h.status = 200;
    h.pid = 1;

    st = sp_entry_finish(&pol, &e, &h, ring);
    CHECK(e.recorded ? st == SP_OK : st == SP_ERR_NOT_FOUND);
    if (st == SP_OK) {
        CHECK(sp_ring_read(ring, &v) == SP_OK);
        CHECK(v.type == SP_RECORD_SPAN);
        CHECK(sp_span_decode(v.body, v.len, &rec) == SP_OK);
        CHECK(memcmp(rec.span_id, e.ctx.span_id, 8) == 0);
        CHECK(memcmp(rec.trace_id, e.ctx.trace_id, 16) == 0);
        CHECK(sp_ring_consume(ring, &v) == SP_OK);
    }
    /* a standard method's constants are the general path's bytes */
    if (e.recorded && pol.known_methods.standard) {
        CHECK(sp_entry_same_listed(&pol, &e, &h, ring, plain, cached));
    }
    connection(&pol, &e, &h, p, end);
    return 0;
}
