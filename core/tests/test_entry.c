/*
 * Entry spans from incoming headers, and their records.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_clock.h"
#include "sp_entry.h"
#include "sp_record.h"
#include "sp_entry_twice.h"

#include "opentelemetry/proto/trace/v1/trace.pb-c.h"

static char scratch[SP_ENTRY_SCRATCH_SIZE];

static sp_entry_policy
policy(uint32_t sampler, bool snapshot, double probability)
{
    sp_entry_policy p;

    memset(&p, 0, sizeof(p));
    p.sampler = sampler;
    p.sampler_ratio = 1.0;
    p.propagators = SP_PROPAGATOR_TRACECONTEXT | SP_PROPAGATOR_BAGGAGE;
    p.snapshot_enabled = snapshot;
    p.selection_threshold = sp_selection_threshold(probability);
    sp_http_methods_standard(&p.known_methods);
    return p;
}

static sp_entry
begin(const sp_entry_policy *p, const char *tp, const char *ts,
      const char *bg)
{
    sp_entry_headers h = {
        tp, tp ? strlen(tp) : 0, ts, ts ? strlen(ts) : 0,
        bg, bg ? strlen(bg) : 0 };
    sp_idgen *ids = sp_idgen_create();
    sp_entry  e;

    assert_non_null(ids);
    sp_entry_begin(p, ids, &h, scratch, sizeof(scratch), &e);
    sp_idgen_destroy(ids);
    return e;
}

static void
valid_parent_continues_the_trace(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_PARENTBASED_ALWAYS_ON, true, 0.01);
    sp_entry e;

    (void)state;
    e = begin(&p, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
              "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "a=1");
    assert_true(e.remote_parent);
    assert_true(e.recorded);
    assert_memory_equal(e.parent_span_id,
                        "\xb7\xad\x6b\x71\x69\x20\x33\x31", 8);
    assert_int_equal(strncmp(e.traceparent,
                     "00-0af7651916cd43dd8448eb211c80319c-", 36), 0);
    assert_int_equal(strcmp(e.traceparent + 52, "-01"), 0);
    assert_string_equal(e.tracestate, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
    /* No snapshot entry: decided here and added. */
    assert_non_null(e.baggage);
    assert_non_null(strstr(e.baggage, "a=1"));
    assert_non_null(strstr(e.baggage, "splunk.trace.snapshot.volume="));
}

static void
unsampled_parent_is_not_recorded_nor_profiled(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_PARENTBASED_ALWAYS_ON, true, 0.1);
    sp_entry e;

    (void)state;
    e = begin(&p, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
              NULL, "splunk.trace.snapshot.volume=highest");
    assert_false(e.recorded);
    assert_true(e.selection.selected);
    assert_false(e.selection.profiled);
    assert_string_equal(e.traceparent + 52, "-00");
}

static void
invalid_parent_starts_a_new_trace_and_drops_tracestate(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_PARENTBASED_ALWAYS_ON, true, 0.1);
    sp_entry e;

    (void)state;
    e = begin(&p, "00-00000000000000000000000000000000-b7ad6b7169203331-01",
              "rojo=1", NULL);
    assert_false(e.remote_parent);
    assert_true(e.recorded);
    assert_null(e.tracestate);
    assert_memory_equal(e.parent_span_id, "\0\0\0\0\0\0\0\0", 8);
    assert_true(sp_trace_id_is_valid(e.ctx.trace_id));
}

static void
received_volume_decides_and_is_kept(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, true, 0.01);
    sp_entry e;

    (void)state;
    e = begin(&p, NULL, NULL, "splunk.trace.snapshot.volume=highest,b=2");
    assert_true(e.selection.profiled);
    assert_string_equal(e.baggage, "splunk.trace.snapshot.volume=highest,b=2");
    e = begin(&p, NULL, NULL, "splunk.trace.snapshot.volume=loud");
    assert_false(e.selection.selected);
    assert_string_equal(e.baggage, "splunk.trace.snapshot.volume=loud");
    /* Snapshot profiling off: baggage passes through untouched. */
    p.snapshot_enabled = false;
    e = begin(&p, NULL, NULL, "b=2");
    assert_false(e.selection.profiled);
    assert_string_equal(e.baggage, "b=2");
}

static void
samplers_decide_recording(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_OFF, true, 0.1);
    sp_entry e;
    int      i, recorded = 0;

    (void)state;
    e = begin(&p, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
              NULL, NULL);
    assert_false(e.recorded);
    p = policy(SP_SAMPLER_TRACEIDRATIO, false, 0.1);
    p.sampler_ratio = 0.25;
    for (i = 0; i < 4000; i++) {
        recorded += begin(&p, NULL, NULL, NULL).recorded;
    }
    /* 1000 expected; 6 standard deviations (27) either way. */
    assert_true(recorded > 838 && recorded < 1162);
}

/* A new trace's traceparent: its ids, and whether it is recorded, for
 * each sampler's decision (the ratio's both ways). */
static void
new_trace_traceparent_says_its_ids_and_sampling(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_TRACEIDRATIO, false, 0.1);
    sp_span_context back;
    sp_entry        e;
    char            want[SP_TRACEPARENT_SIZE];
    int             i, seen[2] = {0, 0};

    (void)state;
    p.sampler_ratio = 0.5;
    for (i = 0; i < 200; i++) {
        p.sampler = i < 10 ? SP_SAMPLER_ALWAYS_ON
                    : i < 20 ? SP_SAMPLER_ALWAYS_OFF
                    : SP_SAMPLER_TRACEIDRATIO;
        e = begin(&p, NULL, NULL, NULL);
        assert_false(e.remote_parent);
        seen[e.recorded]++;
        assert_int_equal(e.ctx.trace_flags,
                         e.recorded ? SP_TRACE_FLAG_SAMPLED : 0);
        sp_traceparent_format(&e.ctx, want);
        assert_string_equal(e.traceparent, want);
        assert_int_equal(sp_traceparent_parse(e.traceparent,
                                              strlen(e.traceparent), &back),
                         SP_TRACEPARENT_OK);
        assert_memory_equal(&back, &e.ctx, sizeof(back));
    }
    assert_true(seen[0] > 20 && seen[1] > 20);
}

/* SPEC 3 with no volume received: over 20,000 new traces the selected
 * fraction is p, each decision is the trace id's last 7 hex digits against
 * floor(p * 0x0FFFFFFF), the same id decides the same way when it comes
 * back as a parent, and the baggage sent on says the decision. */
static void
selection_by_trace_id_over_20000_traces(void **state)
{
    enum { N = 20000 };
    sp_entry_policy  p = policy(SP_SAMPLER_PARENTBASED_ALWAYS_ON, true, 0.1);
    sp_idgen        *ids = sp_idgen_create();
    sp_entry_headers none, again;
    sp_entry         e, f;
    char             tp[SP_TRACEPARENT_SIZE];
    uint32_t         r, threshold = (uint32_t)(0.1 * 0x0FFFFFFF);
    int              i, selected = 0;
    bool             want;

    (void)state;
    assert_non_null(ids);
    memset(&none, 0, sizeof(none));
    for (i = 0; i < N; i++) {
        sp_entry_begin(&p, ids, &none, scratch, sizeof(scratch), &e);
        r = (uint32_t)strtoul(e.traceparent + 3 + 25, NULL, 16);
        want = r <= threshold;
        assert_int_equal(e.selection.selected, want);
        assert_int_equal(e.selection.profiled, want);
        assert_string_equal(e.baggage, want
                            ? "splunk.trace.snapshot.volume=highest"
                            : "splunk.trace.snapshot.volume=off");
        selected += want;

        if (i % 100 == 0) {
            memcpy(tp, e.traceparent, sizeof(tp));
            memset(&again, 0, sizeof(again));
            again.traceparent = tp;
            again.traceparent_len = strlen(tp);
            sp_entry_begin(&p, ids, &again, scratch, sizeof(scratch), &f);
            assert_memory_equal(f.ctx.trace_id, e.ctx.trace_id, 16);
            assert_int_equal(f.selection.selected, want);
        }
    }
    /* 2000 expected, standard deviation 42.4: 6 of them either way. */
    assert_true(selected > 2000 - 255 && selected < 2000 + 255);
    sp_idgen_destroy(ids);
}

/* A region of one ring of ring_bytes, claimed for pid 1234; free *mem
 * after sp_region_detach(*region). */
static sp_ring *
one_ring(size_t ring_bytes, void **mem, sp_region **region)
{
    size_t   size = sp_region_size(1, ring_bytes);
    sp_ring *ring;

    *mem = aligned_alloc(64, size);
    assert_non_null(*mem);
    assert_int_equal(sp_region_init(*mem, size, 1, ring_bytes), SP_OK);
    assert_int_equal(sp_region_attach(*mem, size, region), SP_OK);
    ring = sp_region_claim(*region, 1234);
    assert_non_null(ring);
    return ring;
}

static void
finished_span_record_carries_spec_attributes(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, true, 0.1);
    sp_entry        e;
    sp_entry_http   h;
    sp_record_view  v;
    sp_span_view    sv;
    Opentelemetry__Proto__Trace__V1__Span *m;
    Opentelemetry__Proto__Common__V1__KeyValue *kv;
    void           *mem;
    sp_region      *region;
    sp_ring        *ring;
    size_t          i;
    bool            seen_profiling = false, seen_status = false;
    bool            seen_address = false, seen_agent = false;

    (void)state;
    ring = one_ring(65536, &mem, &region);

    e = begin(&p, NULL, NULL, "splunk.trace.snapshot.volume=highest");
    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    h.route = "/api"; h.route_len = 4;
    h.path = "/api/x"; h.path_len = 6;
    h.scheme = "http"; h.scheme_len = 4;
    h.status = 503;
    h.server_port = 8080;
    h.server_address = "[::1]"; h.server_address_len = 5;
    /* not UTF-8: the one-pass ASCII write gives way to the checked one */
    h.user_agent = "caf\xc3\xa9\xff"; h.user_agent_len = 6;
    h.pid = 1234;
    assert_int_equal(sp_entry_finish(&p, &e, &h, ring), SP_OK);
    assert_int_equal(sp_ring_read(ring, &v), SP_OK);
    assert_int_equal(v.type, SP_RECORD_SPAN);
    assert_int_equal(sp_span_decode(v.body, v.len, &sv), SP_OK);
    assert_int_equal(sv.pid, 1234);
    m = opentelemetry__proto__trace__v1__span__unpack(NULL, sv.otlp_len,
                                                      sv.otlp);
    assert_non_null(m);
    assert_string_equal(m->name, "GET /api");
    assert_int_equal(m->kind, SP_SPAN_KIND_SERVER);
    assert_non_null(m->status);
    assert_int_equal(m->status->code, SP_STATUS_ERROR);
    assert_int_equal(m->span_id.len, 8);
    assert_memory_equal(m->span_id.data, e.ctx.span_id, 8);
    for (i = 0; i < m->n_attributes; i++) {
        kv = m->attributes[i];
        if (strcmp(kv->key, "splunk.snapshot.profiling") == 0) {
            seen_profiling = kv->value->value_case
                == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE
                && kv->value->bool_value;
        }
        if (strcmp(kv->key, "user_agent.original") == 0) {
            seen_agent = strcmp(kv->value->string_value,
                                "caf\xc3\xa9\xef\xbf\xbd") == 0;
        }
        if (strcmp(kv->key, "server.address") == 0) {
            /* an IPv6 Host's address without its brackets */
            seen_address = strcmp(kv->value->string_value, "::1") == 0;
        }
        if (strcmp(kv->key, "http.response.status_code") == 0) {
            seen_status = kv->value->value_case
                == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE
                && kv->value->int_value == 503;
        }
    }
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
    assert_true(seen_profiling);
    assert_true(seen_status);
    assert_true(seen_address);
    assert_true(seen_agent);
    /* Not recorded: nothing written. */
    e.recorded = false;
    assert_int_equal(sp_entry_finish(&p, &e, &h, ring), SP_ERR_NOT_FOUND);
    sp_region_detach(region);
    free(mem);
}

/* The value of the string attribute key in span m, or NULL. */
static const char *
string_attribute(const Opentelemetry__Proto__Trace__V1__Span *m,
    const char *key)
{
    size_t i;

    for (i = 0; i < m->n_attributes; i++) {
        if (strcmp(m->attributes[i]->key, key) == 0
            && m->attributes[i]->value->value_case
               == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
        {
            return m->attributes[i]->value->string_value;
        }
    }
    return NULL;
}

/*
 * HTTP server conventions: error.type is conditionally required when the
 * request ended in an error, and a status that makes the span's status
 * Error (5xx on a server) gives it as the code's decimal string; a 4xx,
 * which leaves a server span's status unset, gives none.
 */
static Opentelemetry__Proto__Trace__V1__Span *finished_span(
    const sp_entry_policy *p, const sp_entry_http *h);
static void attribute(const Opentelemetry__Proto__Trace__V1__Span *m,
                      const char *key, char *out, size_t size);

static void
error_type_is_the_status_code_of_a_5xx(void **state)
{
    static const struct { int64_t status; const char *want; } cases[] = {
        { 503, "503" }, { 500, "500" }, { 599, "599" }, { 404, NULL },
        { 200, NULL }, { 499, NULL }, { 0, NULL },
        { INT64_MAX, "9223372036854775807" },
    };
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.1);
    sp_entry_http   h;
    Opentelemetry__Proto__Trace__V1__Span *m;
    const char     *got;
    size_t          i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&h, 0, sizeof(h));
        h.method = "GET"; h.method_len = 3;
        h.path = "/"; h.path_len = 1;
        h.status = cases[i].status;
        m = finished_span(&p, &h);
        got = string_attribute(m, "error.type");
        if (cases[i].want == NULL) {
            assert_null(got);
        } else {
            assert_non_null(got);
            assert_string_equal(got, cases[i].want);
        }
        opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
    }
}

/*
 * http.response.status_code of codes of every varint size and none: the
 * code, and bytes that are what protobuf-c packs of the span they
 * unpack to (from 128 to 16383 a constant head and the code's two bytes,
 * else the general writer).
 */
static void
status_codes_are_the_bytes_protobuf_packs(void **state)
{
    static const int64_t statuses[] = {
        0, -1, 1, 100, 127, 128, 200, 204, 404, 499, 500, 503, 599, 999,
        16383, 16384, 2097151, 2097152, INT64_MAX
    };
    static uint8_t  packed[SP_ENTRY_TWICE_MAX];
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.1);
    sp_entry        e;
    sp_entry_http   h;
    sp_record_view  v;
    sp_span_view    sv;
    Opentelemetry__Proto__Trace__V1__Span *m;
    void           *mem;
    sp_region      *region;
    sp_ring        *ring;
    char            got[32], want[32];
    size_t          i;

    (void)state;
    ring = one_ring(65536, &mem, &region);
    e = begin(&p, NULL, NULL, NULL);
    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    h.path = "/"; h.path_len = 1;
    h.pid = 1234;
    for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        h.status = statuses[i];
        assert_int_equal(sp_entry_finish(&p, &e, &h, ring), SP_OK);
        assert_int_equal(sp_ring_read(ring, &v), SP_OK);
        assert_int_equal(sp_span_decode(v.body, v.len, &sv), SP_OK);
        m = opentelemetry__proto__trace__v1__span__unpack(NULL, sv.otlp_len,
                                                          sv.otlp);
        assert_non_null(m);
        attribute(m, "http.response.status_code", got, sizeof(got));
        snprintf(want, sizeof(want), "%lld", (long long)statuses[i]);
        assert_string_equal(got, statuses[i] > 0 ? want : "");
        assert_int_equal(opentelemetry__proto__trace__v1__span__get_packed_size(
                             m), sv.otlp_len);
        opentelemetry__proto__trace__v1__span__pack(m, packed);
        assert_memory_equal(packed, sv.otlp, sv.otlp_len);
        opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
        assert_int_equal(sp_ring_consume(ring, &v), SP_OK);
    }
    sp_region_detach(region);
    free(mem);
}

/*
 * Strings of every length up to past their limit, each byte one that
 * repair triples: the span is written in the room its worst case needs
 * (on the stack, or from the heap past it; ASan sees a byte too far) and
 * every value arrives whole, as U+FFFD for each byte.
 */
static void
span_of_strings_repaired_to_their_worst_fits(void **state)
{
    static char     bad[SP_SPAN_STRING_MAX + 10];
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, true, 0.1);
    sp_entry        e;
    sp_entry_http   h;
    sp_record_view  v;
    sp_span_view    sv;
    Opentelemetry__Proto__Trace__V1__Span *m;
    void           *mem;
    sp_region      *region;
    sp_ring        *ring;
    size_t          lens[] = { 1, 40, 200, 700, SP_SPAN_STRING_MAX,
                               SP_SPAN_STRING_MAX + 10 };
    size_t          i, j, want;

    (void)state;
    memset(bad, 0xff, sizeof(bad));
    ring = one_ring(1 << 20, &mem, &region);
    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        want = lens[i] < SP_SPAN_STRING_MAX ? lens[i] : SP_SPAN_STRING_MAX;
        e = begin(&p, NULL, NULL, "splunk.trace.snapshot.volume=highest");
        memset(&h, 0, sizeof(h));
        h.method = bad; h.method_len = lens[i];
        h.route = bad; h.route_len = lens[i];
        h.path = bad; h.path_len = lens[i];
        h.query = bad; h.query_len = lens[i];
        h.scheme = bad; h.scheme_len = lens[i];
        h.server_address = bad; h.server_address_len = lens[i];
        h.client_address = bad; h.client_address_len = lens[i];
        h.peer_address = bad; h.peer_address_len = lens[i];
        h.protocol_version = bad; h.protocol_version_len = lens[i];
        h.user_agent = bad; h.user_agent_len = lens[i];
        h.status = 200;
        h.server_port = 65535;
        h.pid = 1234;
        assert_int_equal(sp_entry_finish(&p, &e, &h, ring), SP_OK);
        assert_int_equal(sp_ring_read(ring, &v), SP_OK);
        assert_int_equal(sp_span_decode(v.body, v.len, &sv), SP_OK);
        m = opentelemetry__proto__trace__v1__span__unpack(NULL, sv.otlp_len,
                                                          sv.otlp);
        assert_non_null(m);
        /* the method is not a known one: "_OTHER", and the original */
        assert_int_equal(m->n_attributes, 14);
        for (j = 0; j < m->n_attributes; j++) {
            const char *str = m->attributes[j]->value->string_value;

            if (m->attributes[j]->value->value_case
                != OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
            {
                continue;
            }
            if (strcmp(m->attributes[j]->key, "http.request.method") == 0) {
                assert_string_equal(str, "_OTHER");
                continue;
            }
            assert_int_equal(strlen(str), 3 * want);
            assert_memory_equal(str, "\xef\xbf\xbd", 3);
            assert_memory_equal(str + 3 * want - 3, "\xef\xbf\xbd", 3);
        }
        opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
        sp_ring_consume(ring, &v);
    }
    sp_region_detach(region);
    free(mem);
}

/* The span of one request that ends as h says, under p: unpacked (free
 * it with opentelemetry__proto__trace__v1__span__free_unpacked). */
static Opentelemetry__Proto__Trace__V1__Span *
finished_span(const sp_entry_policy *p, const sp_entry_http *h)
{
    sp_entry        e;
    sp_record_view  v;
    sp_span_view    sv;
    Opentelemetry__Proto__Trace__V1__Span *m;
    void           *mem;
    sp_region      *region;
    sp_ring        *ring;

    ring = one_ring(65536, &mem, &region);
    e = begin(p, NULL, NULL, NULL);
    assert_int_equal(sp_entry_finish(p, &e, h, ring), SP_OK);
    assert_int_equal(sp_ring_read(ring, &v), SP_OK);
    assert_int_equal(sp_span_decode(v.body, v.len, &sv), SP_OK);
    m = opentelemetry__proto__trace__v1__span__unpack(NULL, sv.otlp_len,
                                                      sv.otlp);
    assert_non_null(m);
    sp_region_detach(region);
    free(mem);
    return m;
}

/*
 * A wall clock stepped back while the request ran: the span ends where it
 * began, never before. A clock that went on keeps the end it was given.
 */
static void
span_never_ends_before_it_began(void **state)
{
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.1);
    sp_entry_http   h;
    Opentelemetry__Proto__Trace__V1__Span *m;
    uint64_t        later;

    (void)state;
    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    h.status = 200;

    h.end_ns = 1;
    m = finished_span(&p, &h);
    assert_true(m->start_time_unix_nano > 1);
    assert_int_equal(m->end_time_unix_nano, m->start_time_unix_nano);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);

    later = sp_realtime_ns() + 3600ull * 1000000000ull;
    h.end_ns = later;
    m = finished_span(&p, &h);
    assert_int_equal(m->end_time_unix_nano, later);
    assert_true(m->start_time_unix_nano < later);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
}

/* A string attribute's value, an int one's in decimal; "" when absent. */
static void
attribute(const Opentelemetry__Proto__Trace__V1__Span *m, const char *key,
          char *out, size_t size)
{
    size_t i;

    out[0] = '\0';
    for (i = 0; i < m->n_attributes; i++) {
        if (strcmp(m->attributes[i]->key, key) != 0) {
            continue;
        }
        if (m->attributes[i]->value->value_case
            == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE)
        {
            snprintf(out, size, "%lld",
                     (long long)m->attributes[i]->value->int_value);
        } else {
            snprintf(out, size, "%s", m->attributes[i]->value->string_value);
        }
    }
}

/* The span of one request with method (and route "/r") under p: its
 * name, http.request.method and http.request.method_original ("" when
 * absent). */
static void
method_span(const sp_entry_policy *p, const char *method, char *name,
            char *value, char *original)
{
    sp_entry_http   h;
    Opentelemetry__Proto__Trace__V1__Span *m;

    memset(&h, 0, sizeof(h));
    h.method = method; h.method_len = strlen(method);
    h.route = "/r"; h.route_len = 2;
    h.status = 200;
    h.pid = 1234;
    m = finished_span(p, &h);
    strcpy(name, m->name);
    attribute(m, "http.request.method", value, 64);
    attribute(m, "http.request.method_original", original, 64);
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
}

/*
 * The conventions' methods go as sent; any other is "_OTHER", sent in
 * http.request.method_original, named "HTTP"; a list of known methods
 * replaces theirs (OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS).
 */
static void
unknown_methods_are_other_and_the_list_can_be_replaced(void **state)
{
    static const char *const standard[] = { "CONNECT", "DELETE", "GET",
        "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE" };
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.01);
    char            name[64], value[64], original[64];
    size_t          i;

    (void)state;
    for (i = 0; i < sizeof(standard) / sizeof(standard[0]); i++) {
        method_span(&p, standard[i], name, value, original);
        assert_string_equal(value, standard[i]);
        assert_string_equal(original, "");
        assert_memory_equal(name, standard[i], strlen(standard[i]));
    }
    /* none read (a request refused before it): "_OTHER", no original */
    method_span(&p, "", name, value, original);
    assert_string_equal(name, "HTTP /r");
    assert_string_equal(value, "_OTHER");
    assert_string_equal(original, "");
    method_span(&p, "PROPFIND", name, value, original);
    assert_string_equal(name, "HTTP /r");
    assert_string_equal(value, "_OTHER");
    assert_string_equal(original, "PROPFIND");
    /* case-sensitive: a method is the token as sent */
    method_span(&p, "get", name, value, original);
    assert_string_equal(value, "_OTHER");
    assert_string_equal(original, "get");

    assert_int_equal(sp_http_methods_parse(" GET , PURGE", 12,
                                           &p.known_methods), SP_OK);
    method_span(&p, "PURGE", name, value, original);
    assert_string_equal(name, "PURGE /r");
    assert_string_equal(value, "PURGE");
    assert_string_equal(original, "");
    method_span(&p, "POST", name, value, original);
    assert_string_equal(name, "HTTP /r");
    assert_string_equal(value, "_OTHER");
    assert_string_equal(original, "POST");
}

/* origin_of() gives the server's name with SP_ENTRY_TO_NUL. */
static bool server_to_nul;

/*
 * With the standard list, a standard method's attribute and the name's
 * method are copied from constants: each method, and ones like them (of
 * the same length, letters, first letter and length, a prefix or more),
 * with a route, none, or one that makes the name long or not ASCII, is
 * the bytes the general path writes.
 */
static void
standard_methods_are_the_bytes_of_the_general_path(void **state)
{
    static const char *const methods[] = {
        "CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST",
        "PUT", "TRACE", "GOT", "get", "GEt", "FET", "gET", "GE", "G",
        "GETS", "PUTT", "HEAX", "POS", "POSTS", "PATCHY", "TRACF",
        "DELETF", "OPTIONR", "CONNECTS", "CONNEC", "PROPFIND",
        "\xc7" "ET", "GE\xd4", "", NULL
    };
    static char     long_route[300];
    static unsigned char a[SP_ENTRY_TWICE_MAX], b[SP_ENTRY_TWICE_MAX];
    const char     *routes[] = { "/", NULL, "/api/x", long_route,
                                 "/caf\xc3\xa9" };
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.1);
    sp_entry        e;
    sp_entry_http   h;
    void           *mem;
    sp_region      *region;
    sp_ring        *ring;
    size_t          i, j;

    (void)state;
    memset(long_route, 'r', sizeof(long_route) - 1);
    ring = one_ring(1 << 20, &mem, &region);
    e = begin(&p, NULL, NULL, NULL);
    memset(&h, 0, sizeof(h));
    h.path = "/x"; h.path_len = 2;
    h.status = 200;
    h.end_ns = e.start_ns + 1;
    h.pid = 1234;
    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        for (j = 0; j < sizeof(routes) / sizeof(routes[0]); j++) {
            h.method = methods[i];
            h.method_len = methods[i] != NULL ? strlen(methods[i]) : 0;
            h.route = routes[j];
            h.route_len = routes[j] != NULL ? strlen(routes[j]) : 0;
            if (!sp_entry_same_listed(&p, &e, &h, ring, a, b)) {
                print_message("method \"%s\", route \"%.10s\": the span "
                              "differs\n", methods[i] ? methods[i] : "(none)",
                              routes[j] ? routes[j] : "(none)");
                fail();
            }
        }
    }
    sp_region_detach(region);
    free(mem);
}

/* "scheme|address|port" of the span of a request with these sources
 * (NULL: not received), over http. */
static const char *
origin_of(const char *forwarded, const char *forwarded_proto,
          const char *forwarded_host, const char *authority,
          const char *server_address, int64_t port)
{
    static char     out[700];
    char            scheme[64], address[256], number[32];
    sp_entry_policy p = policy(SP_SAMPLER_ALWAYS_ON, false, 0.01);
    sp_entry_http   h;
    Opentelemetry__Proto__Trace__V1__Span *m;

    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    h.scheme = "http"; h.scheme_len = 4;
#define SOURCE(f, v) h.f = (v); h.f##_len = (v) != NULL ? strlen(v) : 0
    SOURCE(forwarded, forwarded);
    SOURCE(forwarded_proto, forwarded_proto);
    SOURCE(forwarded_host, forwarded_host);
    SOURCE(authority, authority);
    SOURCE(server_address, server_address);
#undef SOURCE
    if (server_to_nul) {
        h.server_address_len = SP_ENTRY_TO_NUL;
    }
    h.server_port = port;
    h.status = 200;
    m = finished_span(&p, &h);
    attribute(m, "url.scheme", scheme, sizeof(scheme));
    attribute(m, "server.address", address, sizeof(address));
    attribute(m, "server.port", number, sizeof(number));
    opentelemetry__proto__trace__v1__span__free_unpacked(m, NULL);
    snprintf(out, sizeof(out), "%s|%s|%s", scheme, address, number);
    return out;
}

/* "address|port" over http, with no scheme from a proxy. */
static const char *
server_of(const char *forwarded, const char *forwarded_host,
          const char *authority, const char *server_address, int64_t port)
{
    const char *o = origin_of(forwarded, NULL, forwarded_host, authority,
                              server_address, port);

    return strchr(o, '|') + 1;
}

/*
 * server.address and server.port as the HTTP conventions say: the host a
 * proxy passed on, then the request's own authority, each with its port
 * (the scheme's for the request's own without one); a value that is no
 * authority is passed over; with none, the server's name and the port the
 * request came in on.
 */
static void
server_is_where_the_client_addressed_the_request(void **state)
{
    (void)state;
    assert_string_equal(server_of(NULL, NULL, "example.com:8080",
                                  "ignored", 9999), "example.com|8080");
    assert_string_equal(server_of(NULL, NULL, "example.com", "ignored",
                                  9999), "example.com|80");
    assert_string_equal(server_of(NULL, NULL, "[::1]:8443", NULL, 0),
                        "::1|8443");
    assert_string_equal(server_of(NULL, "public.example:8443, inner:80",
                                  "inner", NULL, 80),
                        "public.example|8443");
    /* a proxy's host without a port: which port the client used is not
     * known */
    assert_string_equal(server_of(NULL, "public.example", "inner:81", NULL,
                                  81), "public.example|");
    assert_string_equal(server_of("for=192.0.2.1;host=\"fwd.example:444\"",
                                  "xfh.example", "inner", NULL, 80),
                        "fwd.example|444");
    /* a later element of Forwarded is a hop's inside the chain */
    assert_string_equal(origin_of("for=a, for=b;host=lb.internal:8080;"
                                  "proto=http", "https", NULL,
                                  "shop.example", NULL, 80),
                        "https|shop.example|443");
    /* passed over: no host in Forwarded, not an authority */
    assert_string_equal(server_of("for=192.0.2.1", "xfh.example",
                                  "inner", NULL, 80), "xfh.example|");
    assert_string_equal(server_of("host=\"bad host\"", "<script>",
                                  "inner:82", NULL, 80), "inner|82");
    /* none: the server's own name (an IPv6 one without its brackets) */
    assert_string_equal(server_of(NULL, NULL, NULL, "localhost", 8080),
                        "localhost|8080");
    assert_string_equal(server_of(NULL, NULL, "", "[::1]", 8080),
                        "::1|8080");
    assert_string_equal(server_of(NULL, NULL, NULL, NULL, 0), "|");

    /* the client's scheme, from a proxy: url.scheme, and the port of a
     * host without one, the proxy's or the request's own */
    assert_string_equal(origin_of("for=x;proto=https", "http", NULL,
                                  "shop.example", NULL, 8080),
                        "https|shop.example|443");
    assert_string_equal(origin_of(NULL, "https, http", "public.example",
                                  "inner:81", NULL, 81),
                        "https|public.example|443");
    assert_string_equal(origin_of("proto=\"bad scheme\"", "1nvalid", NULL,
                                  "shop.example", NULL, 80),
                        "http|shop.example|80");
    assert_string_equal(origin_of(NULL, "https", "public.example:8443",
                                  NULL, NULL, 80),
                        "https|public.example|8443");
}

/* The server's name given up to its NUL: the same span as with its
 * length, the name read only when no authority names the server. */
static void
server_name_up_to_its_nul(void **state)
{
    (void)state;
    server_to_nul = true;
    assert_string_equal(server_of(NULL, NULL, NULL, "localhost", 8080),
                        "localhost|8080");
    assert_string_equal(server_of(NULL, NULL, "", "[::1]", 8080),
                        "::1|8080");
    assert_string_equal(server_of(NULL, NULL, "<script>", "localhost", 81),
                        "localhost|81");
    assert_string_equal(server_of(NULL, NULL, "example.com:8080",
                                  "ignored", 9999), "example.com|8080");
    assert_string_equal(server_of(NULL, NULL, NULL, NULL, 0), "|");
    server_to_nul = false;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_parent_continues_the_trace),
        cmocka_unit_test(unsampled_parent_is_not_recorded_nor_profiled),
        cmocka_unit_test(
            invalid_parent_starts_a_new_trace_and_drops_tracestate),
        cmocka_unit_test(received_volume_decides_and_is_kept),
        cmocka_unit_test(samplers_decide_recording),
        cmocka_unit_test(new_trace_traceparent_says_its_ids_and_sampling),
        cmocka_unit_test(selection_by_trace_id_over_20000_traces),
        cmocka_unit_test(finished_span_record_carries_spec_attributes),
        cmocka_unit_test(span_never_ends_before_it_began),
        cmocka_unit_test(error_type_is_the_status_code_of_a_5xx),
        cmocka_unit_test(status_codes_are_the_bytes_protobuf_packs),
        cmocka_unit_test(span_of_strings_repaired_to_their_worst_fits),
        cmocka_unit_test(server_is_where_the_client_addressed_the_request),
        cmocka_unit_test(server_name_up_to_its_nul),
        cmocka_unit_test(
            unknown_methods_are_other_and_the_list_can_be_replaced),
        cmocka_unit_test(standard_methods_are_the_bytes_of_the_general_path),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
