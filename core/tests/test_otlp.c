#include "sp_test.h"
#include "sp_otlp.h"

#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "perftools/profiles/profile.pb-c.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

typedef Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest
    LogsRequest;
typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest
    TraceRequest;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Logs__V1__LogRecord  LogRecord;
typedef Opentelemetry__Proto__Trace__V1__Span      Span;

/* The generated names are longer than a line. */
#define PASTE_(a, b, c) a##b##c
#define LOGS_REQUEST(fn) PASTE_(opentelemetry__proto__collector__logs__v1__, \
                                export_logs_service_request__, fn)
#define TRACE_REQUEST(fn) \
    PASTE_(opentelemetry__proto__collector__trace__v1__, \
           export_trace_service_request__, fn)
#define STATUS_ERROR \
    OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR

#define STRING_VALUE \
    OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE
#define INT_VALUE OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE
#define BOOL_VALUE \
    OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE

/* ---- reading requests back */

static LogsRequest *
unpack_logs(const sp_otlp_logs *l)
{
    sp_buf       out = SP_BUF_INIT(0);
    LogsRequest *r;

    assert_int_equal(sp_otlp_logs_serialize(l, &out), SP_OK);
    assert_int_equal(out.len, sp_otlp_logs_size(l));
    r = LOGS_REQUEST(unpack)(NULL, out.len, out.data);
    assert_non_null(r);
    sp_buf_free(&out);
    return r;
}

static void
free_logs(LogsRequest *r)
{
    LOGS_REQUEST(free_unpacked)(r, NULL);
}

static TraceRequest *
unpack_traces(const sp_otlp_traces *t)
{
    sp_buf        out = SP_BUF_INIT(0);
    TraceRequest *r;

    assert_int_equal(sp_otlp_traces_serialize(t, &out), SP_OK);
    assert_int_equal(out.len, sp_otlp_traces_size(t));
    r = TRACE_REQUEST(unpack)(NULL, out.len, out.data);
    assert_non_null(r);
    sp_buf_free(&out);
    return r;
}

static void
free_traces(TraceRequest *r)
{
    TRACE_REQUEST(free_unpacked)(r, NULL);
}

/*
 * Writes attributes as "key=s:value key=i:42 key=b:1" in their order, so
 * a test compares every key, type and value, and their order, at once.
 */
static void
attrs_text(KeyValue **kv, size_t n, char *out, size_t size)
{
    size_t i, used = 0;
    int    w = 0;

    out[0] = '\0';
    for (i = 0; i < n; i++) {
        assert_non_null(kv[i]->value);
        switch (kv[i]->value->value_case) {
        case STRING_VALUE:
            w = snprintf(out + used, size - used, "%s%s=s:%s", i ? " " : "",
                         kv[i]->key, kv[i]->value->string_value);
            break;
        case INT_VALUE:
            w = snprintf(out + used, size - used, "%s%s=i:%lld",
                         i ? " " : "", kv[i]->key,
                         (long long)kv[i]->value->int_value);
            break;
        case BOOL_VALUE:
            w = snprintf(out + used, size - used, "%s%s=b:%d", i ? " " : "",
                         kv[i]->key, (int)kv[i]->value->bool_value);
            break;
        default:
            fail_msg("attribute %s has no value", kv[i]->key);
        }
        assert_true(w > 0 && (size_t)w < size - used);
        used += (size_t)w;
    }
}

static const KeyValue *
attr(KeyValue **kv, size_t n, const char *key)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcmp(kv[i]->key, key) == 0) {
            return kv[i];
        }
    }
    return NULL;
}

/* The profile in a pprof-gzip-base64 body. */
static void
decode_body(const char *body, sp_buf *profile)
{
    sp_buf   gz = SP_BUF_INIT(0);
    z_stream z;
    int      rc;

    assert_int_equal(sp_base64_decode(&gz, body, strlen(body)), SP_OK);
    memset(&z, 0, sizeof(z));
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = gz.data;
    z.avail_in = (uInt)gz.len;
    do {
        assert_int_equal(sp_buf_reserve(profile, 4096), SP_OK);
        z.next_out = profile->data + profile->len;
        z.avail_out = 4096;
        rc = inflate(&z, Z_NO_FLUSH);
        profile->len = (size_t)(z.next_out - profile->data);
    } while (rc == Z_OK);
    assert_int_equal(rc, Z_STREAM_END);
    assert_int_equal(z.avail_in, 0);
    inflateEnd(&z);
    sp_buf_free(&gz);
}

/* ---- fixtures */

static sp_resource *
resource(const char *service, bool with_pid)
{
    sp_resource *r = NULL;

    assert_int_equal(sp_resource_create(&r), SP_OK);
    assert_int_equal(sp_resource_set_string(r, "service.name", service),
                     SP_OK);
    if (with_pid) {
        assert_int_equal(sp_resource_set_int(r, "process.pid", 1), SP_OK);
    }
    assert_int_equal(sp_resource_set_string(r, "host.name", "box"), SP_OK);
    assert_int_equal(sp_resource_set_int(r, "answer", -42), SP_OK);
    return r;
}

static sp_otlp_logs *
new_logs(size_t max_bytes)
{
    sp_otlp_builder_options o = { max_bytes, 0 };
    sp_otlp_logs           *l = NULL;

    assert_int_equal(sp_otlp_logs_create(&o, &l), SP_OK);
    return l;
}

static sp_otlp_traces *
new_traces(size_t max_bytes)
{
    sp_otlp_builder_options o = { max_bytes, 0 };
    sp_otlp_traces         *t = NULL;

    assert_int_equal(sp_otlp_traces_create(&o, &t), SP_OK);
    return t;
}

/* Both serialize to the same bytes, left in a and b (cleared first). */
static void
assert_same_traces(sp_otlp_traces *x, sp_otlp_traces *y, sp_buf *a,
    sp_buf *b)
{
    sp_buf_clear(a);
    sp_buf_clear(b);
    assert_int_equal(sp_otlp_traces_serialize(x, a), SP_OK);
    assert_int_equal(sp_otlp_traces_serialize(y, b), SP_OK);
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->data, b->data, a->len);
}

/* Both serialize to the same bytes; both are destroyed. */
static void
assert_same_traces_and_destroy(sp_otlp_traces *x, sp_otlp_traces *y)
{
    sp_buf a = SP_BUF_INIT(0), b = SP_BUF_INIT(0);

    assert_same_traces(x, y, &a, &b);
    sp_buf_free(&a);
    sp_buf_free(&b);
    sp_otlp_traces_destroy(x);
    sp_otlp_traces_destroy(y);
}

static const sp_pprof_mapping exe = {
    0x400000, 0x500000, 0, "/usr/sbin/nginx", (const uint8_t *)"\xab\xcd", 2
};
static const sp_pprof_line inner[1] = {
    { "ngx_inlined", "src/core/inl.h", 12 }
};

static void
fill_frames(sp_pprof_frame *f)
{
    memset(f, 0, 3 * sizeof(*f));
    f[0].address = 0x401000;
    f[0].mapping = &exe;
    f[0].frame.function = "ngx_http_handler";
    f[0].frame.file = "src/http/ngx_http_core_module.c";
    f[0].frame.line = 850;
    f[0].inlined = inner;
    f[0].inline_count = 1;
    f[1].address = 0x7f0000001000;
    f[1].frame.function = NULL;     /* not named */
    f[2].address = 0x402000;
    f[2].mapping = &exe;
    f[2].frame.function = "main";
    f[2].frame.file = NULL;
}

static sp_sample
sample(uint32_t pid, bool span)
{
    sp_sample s;
    int       i;

    memset(&s, 0, sizeof(s));
    s.time_ns = 1700000000000000000ULL + pid;
    s.period_ns = 20400000;
    s.pid = pid;
    s.tid = 0x2a;
    snprintf(s.thread_name, sizeof(s.thread_name), "nginx");
    s.state = SP_THREAD_RUNNING;
    s.source = SP_SOURCE_SNAPSHOT;
    s.has_span = span;
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(i + 1);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(0x80 + i);
    }
    return s;
}

/* A small serialized profile of n samples of the fixture's 3 frames. */
static void
make_profile(size_t n, sp_buf *out, uint64_t *frames)
{
    sp_pprof_options o = { 10000000, 0 };
    sp_pprof        *p = NULL;
    sp_pprof_frame   f[3];
    sp_sample        s = sample(1, true);
    size_t           i;

    fill_frames(f);
    assert_int_equal(sp_pprof_create(&o, &p), SP_OK);
    for (i = 0; i < n; i++) {
        s.time_ns += 1000000;
        assert_int_equal(sp_pprof_add(p, &s, f, 3 - i % 3), SP_OK);
    }
    *frames = sp_pprof_frame_count(p);
    assert_int_equal(sp_pprof_serialize(p, out), SP_OK);
    sp_pprof_destroy(p);
}

/* ---- logs */

static void
pprof_logs_round_trip(void **state)
{
    sp_resource  *res = resource("svc", true);
    sp_resource  *other = resource("other-svc", true);
    sp_otlp_logs *l = new_logs(0);
    sp_buf        prof = SP_BUF_INIT(0), prof2 = SP_BUF_INIT(0);
    sp_buf        back = SP_BUF_INIT(0);
    uint64_t      frames, frames2, sum;
    LogsRequest  *r;
    char          text[2048];
    size_t        i, j;
    Perftools__Profiles__Profile *pr;

    (void)state;
    make_profile(10, &prof, &frames);
    make_profile(4, &prof2, &frames2);
    assert_int_equal(frames, 21);
    assert_int_equal(frames2, 9);
    assert_int_equal(sp_otlp_logs_add_pprof(l, res, 101, SP_SOURCE_CONTINUOUS,
                         1000, 2000, prof.data, prof.len, frames), SP_OK);
    assert_int_equal(sp_otlp_logs_add_pprof(l, other, 202, SP_SOURCE_SNAPSHOT,
                         3000, 0, prof2.data, prof2.len, frames2), SP_OK);
    /* pid 101 again, with another resource: its first one stays. */
    assert_int_equal(sp_otlp_logs_add_pprof(l, other, 101, SP_SOURCE_SNAPSHOT,
                         5000, 6000, prof2.data, prof2.len, frames2), SP_OK);
    assert_int_equal(sp_otlp_logs_count(l), 3);

    r = unpack_logs(l);
    assert_int_equal(r->n_resource_logs, 2);

    /* One ResourceLogs per worker, its pid in place of the master's. */
    assert_non_null(r->resource_logs[0]->resource);
    attrs_text(r->resource_logs[0]->resource->attributes,
               r->resource_logs[0]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "service.name=s:svc process.pid=i:101 "
                              "host.name=s:box answer=i:-42");
    attrs_text(r->resource_logs[1]->resource->attributes,
               r->resource_logs[1]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "service.name=s:other-svc process.pid=i:202 "
                              "host.name=s:box answer=i:-42");

    for (i = 0; i < 2; i++) {
        assert_int_equal(r->resource_logs[i]->n_scope_logs, 1);
        assert_non_null(r->resource_logs[i]->scope_logs[0]->scope);
        assert_string_equal(r->resource_logs[i]->scope_logs[0]->scope->name,
                            "otel.profiling");
        assert_string_equal(
            r->resource_logs[i]->scope_logs[0]->scope->version, "0.1.0");
    }
    assert_int_equal(r->resource_logs[0]->scope_logs[0]->n_log_records, 2);
    assert_int_equal(r->resource_logs[1]->scope_logs[0]->n_log_records, 1);

    {
        LogRecord *a = r->resource_logs[0]->scope_logs[0]->log_records[0];
        LogRecord *b = r->resource_logs[0]->scope_logs[0]->log_records[1];
        LogRecord *c = r->resource_logs[1]->scope_logs[0]->log_records[0];
        LogRecord *all[3] = { a, b, c };
        const sp_buf *want[3] = { &prof, &prof2, &prof2 };

        assert_int_equal(a->time_unix_nano, 1000);
        assert_int_equal(a->observed_time_unix_nano, 2000);
        assert_int_equal(b->time_unix_nano, 5000);
        assert_int_equal(b->observed_time_unix_nano, 6000);
        assert_int_equal(c->time_unix_nano, 3000);
        assert_int_equal(c->observed_time_unix_nano, 3000);
        attrs_text(a->attributes, a->n_attributes, text, sizeof(text));
        assert_string_equal(text,
            "com.splunk.sourcetype=s:otel.profiling "
            "profiling.data.type=s:cpu "
            "profiling.data.format=s:pprof-gzip-base64 "
            "profiling.instrumentation.source=s:continuous "
            "profiling.data.total.frame.count=i:21");
        attrs_text(c->attributes, c->n_attributes, text, sizeof(text));
        assert_string_equal(text,
            "com.splunk.sourcetype=s:otel.profiling "
            "profiling.data.type=s:cpu "
            "profiling.data.format=s:pprof-gzip-base64 "
            "profiling.instrumentation.source=s:snapshot "
            "profiling.data.total.frame.count=i:9");
        for (i = 0; i < 3; i++) {
            assert_int_equal(all[i]->trace_id.len, 0);
            assert_int_equal(all[i]->span_id.len, 0);
            assert_non_null(all[i]->body);
            assert_int_equal(all[i]->body->value_case, STRING_VALUE);
            sp_buf_clear(&back);
            decode_body(all[i]->body->string_value, &back);
            assert_int_equal(back.len, want[i]->len);
            assert_memory_equal(back.data, want[i]->data, back.len);
            /* The frame count is that of the samples in the body. */
            pr = perftools__profiles__profile__unpack(NULL, back.len,
                                                      back.data);
            assert_non_null(pr);
            for (sum = 0, j = 0; j < pr->n_sample; j++) {
                sum += pr->sample[j]->n_location_id;
            }
            assert_int_equal(
                attr(all[i]->attributes, all[i]->n_attributes,
                     "profiling.data.total.frame.count")->value->int_value,
                sum);
            perftools__profiles__profile__free_unpacked(pr, NULL);
        }
    }
    free_logs(r);
    sp_buf_free(&prof);
    sp_buf_free(&prof2);
    sp_buf_free(&back);
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
    sp_resource_destroy(other);
}

static void
resource_gets_the_worker_pid_when_it_has_none(void **state)
{
    sp_resource  *res = resource("svc", false);
    sp_otlp_logs *l = new_logs(0);
    LogsRequest  *r;
    char          text[512];

    (void)state;
    assert_int_equal(sp_otlp_logs_add_pprof(l, res, 7, SP_SOURCE_SNAPSHOT, 1,
                                            1, "", 0, 0), SP_OK);
    assert_int_equal(sp_otlp_logs_add_pprof(l, NULL, 8, SP_SOURCE_SNAPSHOT,
                                            1, 1, "", 0, 0), SP_OK);
    r = unpack_logs(l);
    assert_int_equal(r->n_resource_logs, 2);
    attrs_text(r->resource_logs[0]->resource->attributes,
               r->resource_logs[0]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "service.name=s:svc host.name=s:box "
                              "answer=i:-42 process.pid=i:7");
    attrs_text(r->resource_logs[1]->resource->attributes,
               r->resource_logs[1]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "process.pid=i:8");
    free_logs(r);
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
}

static void
text_logs_follow_the_call_stack_format(void **state)
{
    sp_resource   *res = resource("svc", true);
    sp_otlp_logs  *l = new_logs(0);
    sp_pprof_frame f[3];
    sp_sample      s = sample(55, true), t = sample(55, false);
    LogsRequest   *r;
    LogRecord     *a, *b;
    char           text[2048];
    uint8_t        trace_id[16], span_id[8];
    int            i;

    (void)state;
    fill_frames(f);
    s.truncated = true;
    assert_int_equal(sp_otlp_logs_add_text(l, res, &s, f, 3, 10000000, 99),
                     SP_OK);
    t.period_ns = 0;
    t.state = SP_THREAD_UNKNOWN;
    t.source = SP_SOURCE_CONTINUOUS;
    snprintf(t.thread_name, sizeof(t.thread_name), "a\"b\nc");
    assert_int_equal(sp_otlp_logs_add_text(l, res, &t, f + 2, 1, 1000000000,
                                           0), SP_OK);
    assert_int_equal(sp_otlp_logs_count(l), 2);
    r = unpack_logs(l);
    assert_int_equal(r->n_resource_logs, 1);
    a = r->resource_logs[0]->scope_logs[0]->log_records[0];
    b = r->resource_logs[0]->scope_logs[0]->log_records[1];

    assert_int_equal(a->body->value_case, STRING_VALUE);
    assert_string_equal(a->body->string_value,
        "\"nginx\" #42 prio=0 os_prio=0 cpu=0 elapsed=0 tid=0x2a nid=0x2a "
        "running\n"
        "\n"
        "\tat ngx_inlined(src/core/inl.h:12)\n"
        "\tat ngx_http_handler(src/http/ngx_http_core_module.c:850)\n"
        "\tat unknown(unknown:0)\n"
        "\tat main(unknown:0)\n");
    assert_int_equal(a->time_unix_nano, s.time_ns);
    assert_int_equal(a->observed_time_unix_nano, 99);
    attrs_text(a->attributes, a->n_attributes, text, sizeof(text));
    assert_string_equal(text,
        "com.splunk.sourcetype=s:otel.profiling profiling.data.type=s:cpu "
        "profiling.data.format=s:text "
        "profiling.instrumentation.source=s:snapshot "
        "source.event.period=i:20 thread.stack.truncated=b:1");
    for (i = 0; i < 16; i++) {
        trace_id[i] = (uint8_t)(i + 1);
    }
    for (i = 0; i < 8; i++) {
        span_id[i] = (uint8_t)(0x80 + i);
    }
    assert_int_equal(a->trace_id.len, 16);
    assert_memory_equal(a->trace_id.data, trace_id, 16);
    assert_int_equal(a->span_id.len, 8);
    assert_memory_equal(a->span_id.data, span_id, 8);

    /* No span: no ids. No period: the interval. Quotes and breaks in the
     * name cannot break the line. */
    assert_string_equal(b->body->string_value,
        "\"a?b?c\" #42 prio=0 os_prio=0 cpu=0 elapsed=0 tid=0x2a nid=0x2a\n"
        "\n"
        "\tat main(unknown:0)\n");
    assert_int_equal(b->trace_id.len, 0);
    assert_int_equal(b->span_id.len, 0);
    assert_int_equal(b->observed_time_unix_nano, t.time_ns);
    attrs_text(b->attributes, b->n_attributes, text, sizeof(text));
    assert_string_equal(text,
        "com.splunk.sourcetype=s:otel.profiling profiling.data.type=s:cpu "
        "profiling.data.format=s:text "
        "profiling.instrumentation.source=s:continuous "
        "source.event.period=i:1000");
    free_logs(r);
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
}

static void
logs_refuse_bad_arguments(void **state)
{
    sp_otlp_logs           *l = new_logs(0);
    sp_otlp_builder_options o = { 100, 0 };
    sp_otlp_logs           *none = NULL;
    sp_sample               s = sample(1, false);
    sp_pprof_frame          f[3];

    (void)state;
    fill_frames(f);
    assert_int_equal(sp_otlp_logs_create(&o, &none), SP_ERR_INVALID);
    o.max_bytes = 0;
    o.gzip_level = 10;
    assert_int_equal(sp_otlp_logs_create(&o, &none), SP_ERR_INVALID);
    assert_null(none);
    assert_int_equal(sp_otlp_logs_add_pprof(l, NULL, 1, 0, 1, 1, "", 0, 0),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_logs_add_pprof(l, NULL, 1, 3, 1, 1, "", 0, 0),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_logs_add_pprof(l, NULL, 1, SP_SOURCE_SNAPSHOT,
                                            1, 1, NULL, 5, 0),
                     SP_ERR_INVALID);
    s.source = 9;
    assert_int_equal(sp_otlp_logs_add_text(l, NULL, &s, f, 3, 1, 1),
                     SP_ERR_INVALID);
    s.source = SP_SOURCE_SNAPSHOT;
    assert_int_equal(sp_otlp_logs_add_text(l, NULL, &s, NULL, 3, 1, 1),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_logs_add_text(l, NULL, &s, f,
                                           SP_PPROF_MAX_FRAMES + 1, 1, 1),
                     SP_ERR_INVALID);
    f[0].inlined = NULL;
    assert_int_equal(sp_otlp_logs_add_text(l, NULL, &s, f, 3, 1, 1),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_logs_count(l), 0);
    assert_int_equal(sp_otlp_logs_size(l), 0);
    assert_string_equal(sp_otlp_source_name(SP_SOURCE_SNAPSHOT), "snapshot");
    assert_string_equal(sp_otlp_source_name(SP_SOURCE_CONTINUOUS),
                        "continuous");
    assert_null(sp_otlp_source_name(0));
    sp_otlp_logs_destroy(l);
    sp_otlp_logs_destroy(NULL);
}

/* ---- the bound */

static void
requests_stay_within_max_bytes(void **state)
{
    sp_resource   *res = resource("svc", true);
    sp_otlp_logs  *l = new_logs(SP_OTLP_MIN_MAX_BYTES);
    sp_pprof_frame f[3];
    sp_sample      s;
    sp_buf         before = SP_BUF_INIT(0), after = SP_BUF_INIT(0);
    size_t         added = 0, size, i;
    sp_status      rc = SP_OK;
    LogsRequest   *r;
    char           big[6000];

    (void)state;
    fill_frames(f);
    for (i = 0; i < 1000 && rc == SP_OK; i++) {
        s = sample((uint32_t)(1 + i % 3), i % 2 == 0);
        rc = sp_otlp_logs_add_text(l, res, &s, f, 3, 1, 1);
        if (rc == SP_OK) {
            added++;
            assert_true(sp_otlp_logs_size(l) <= SP_OTLP_MIN_MAX_BYTES);
        }
    }
    assert_int_equal(rc, SP_ERR_TOO_LONG);
    assert_true(added >= 3);
    assert_int_equal(sp_otlp_logs_count(l), added);

    /* Failing adds change nothing: same record, a new worker, a big one. */
    size = sp_otlp_logs_size(l);
    assert_int_equal(sp_otlp_logs_serialize(l, &before), SP_OK);
    assert_int_equal(before.len, size);
    assert_true(size <= SP_OTLP_MIN_MAX_BYTES);
    s = sample(1, true);
    assert_int_equal(sp_otlp_logs_add_text(l, res, &s, f, 3, 1, 1),
                     SP_ERR_TOO_LONG);
    s = sample(999, true);
    assert_int_equal(sp_otlp_logs_add_text(l, res, &s, f, 3, 1, 1),
                     SP_ERR_TOO_LONG);
    assert_int_equal(sp_otlp_logs_count(l), added);
    assert_int_equal(sp_otlp_logs_size(l), size);
    assert_int_equal(sp_otlp_logs_serialize(l, &after), SP_OK);
    assert_int_equal(after.len, before.len);
    assert_memory_equal(after.data, before.data, before.len);
    r = unpack_logs(l);
    assert_int_equal(r->n_resource_logs, 3);
    free_logs(r);

    /* After a reset it takes records again; one that alone is too large
     * is refused by an empty builder, which stays empty. */
    sp_otlp_logs_reset(l);
    assert_int_equal(sp_otlp_logs_count(l), 0);
    assert_int_equal(sp_otlp_logs_size(l), 0);
    memset(big, 'x', sizeof(big));
    big[sizeof(big) - 1] = '\0';
    f[0].frame.function = big;
    assert_int_equal(sp_otlp_logs_add_text(l, res, &s, f, 3, 1, 1),
                     SP_ERR_TOO_LONG);
    assert_int_equal(sp_otlp_logs_count(l), 0);
    assert_int_equal(sp_otlp_logs_size(l), 0);
    sp_buf_clear(&after);
    assert_int_equal(sp_otlp_logs_serialize(l, &after), SP_OK);
    assert_int_equal(after.len, 0);
    assert_int_equal(sp_otlp_logs_add_pprof(l, res, 5, SP_SOURCE_SNAPSHOT, 1,
                                            1, big, sizeof(big), 0), SP_OK);
    assert_int_equal(sp_otlp_logs_count(l), 1);
    sp_buf_free(&before);
    sp_buf_free(&after);
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
}

/* ---- traces */

static sp_span_record
span(uint32_t pid, uint8_t first, bool child)
{
    sp_span_record s;
    int            i;

    memset(&s, 0, sizeof(s));
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(first + i);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(first + 0x40 + i);
        if (child) {
            s.parent_span_id[i] = (uint8_t)(0xf0 + i);
        }
    }
    s.trace_flags = 1;
    s.kind = SP_SPAN_KIND_SERVER;
    s.status_code = SP_STATUS_UNSET;
    s.pid = pid;
    s.start_ns = 1700000000000000000ULL + first;
    s.end_ns = s.start_ns + 1234567;
    s.name = "GET /index";
    s.name_len = strlen(s.name);
    return s;
}

static const sp_span_attr span_attrs[] = {
    { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
    { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, 503 },
    { "splunk.snapshot.profiling", 25, SP_VALUE_BOOL, NULL, 0, 1 },
    { "url.path", 8, SP_VALUE_STRING, "/index\xff", 7, 0 },
    { "empty", 5, SP_VALUE_STRING, NULL, 0, 0 },
    { "negative", 8, SP_VALUE_INT, NULL, 0, -3 },
    { "no", 2, SP_VALUE_BOOL, NULL, 0, 0 },
};

static void
traces_round_trip(void **state)
{
    sp_resource    *res = resource("svc", true);
    sp_otlp_traces *t = new_traces(0);
    sp_span_record  a = span(10, 0x10, true);
    sp_span_record  b = span(20, 0x20, false);
    sp_span_record  c = span(10, 0x30, false);
    TraceRequest   *r;
    Span           *x, *y, *z;
    char            text[2048];
    uint8_t         want[16];
    int             i;

    (void)state;
    a.tracestate = "vendor=value,other=1";
    a.tracestate_len = strlen(a.tracestate);
    a.status_code = SP_STATUS_ERROR;
    b.trace_flags = 0;
    c.kind = 0;
    c.name = "GET";
    c.name_len = 3;
    assert_int_equal(sp_otlp_traces_add(t, res, &a, span_attrs,
        sizeof(span_attrs) / sizeof(span_attrs[0])), SP_OK);
    assert_int_equal(sp_otlp_traces_add(t, res, &b, NULL, 0), SP_OK);
    assert_int_equal(sp_otlp_traces_add(t, res, &c, span_attrs, 1), SP_OK);
    assert_int_equal(sp_otlp_traces_count(t), 3);
    r = unpack_traces(t);
    assert_int_equal(r->n_resource_spans, 2);
    attrs_text(r->resource_spans[0]->resource->attributes,
               r->resource_spans[0]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "service.name=s:svc process.pid=i:10 "
                              "host.name=s:box answer=i:-42");
    attrs_text(r->resource_spans[1]->resource->attributes,
               r->resource_spans[1]->resource->n_attributes, text,
               sizeof(text));
    assert_string_equal(text, "service.name=s:svc process.pid=i:20 "
                              "host.name=s:box answer=i:-42");
    for (i = 0; i < 2; i++) {
        assert_int_equal(r->resource_spans[i]->n_scope_spans, 1);
        assert_string_equal(r->resource_spans[i]->scope_spans[0]->scope->name,
                            "spanprof");
        assert_string_equal(
            r->resource_spans[i]->scope_spans[0]->scope->version, SP_VERSION);
    }
    assert_int_equal(r->resource_spans[0]->scope_spans[0]->n_spans, 2);
    assert_int_equal(r->resource_spans[1]->scope_spans[0]->n_spans, 1);
    x = r->resource_spans[0]->scope_spans[0]->spans[0];
    y = r->resource_spans[1]->scope_spans[0]->spans[0];
    z = r->resource_spans[0]->scope_spans[0]->spans[1];

    assert_int_equal(x->trace_id.len, 16);
    assert_memory_equal(x->trace_id.data, a.trace_id, 16);
    assert_int_equal(x->span_id.len, 8);
    assert_memory_equal(x->span_id.data, a.span_id, 8);
    assert_int_equal(x->parent_span_id.len, 8);
    assert_memory_equal(x->parent_span_id.data, a.parent_span_id, 8);
    assert_string_equal(x->trace_state, "vendor=value,other=1");
    assert_string_equal(x->name, "GET /index");
    assert_int_equal(x->kind,
        OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER);
    assert_int_equal(x->start_time_unix_nano, a.start_ns);
    assert_int_equal(x->end_time_unix_nano, a.end_ns);
    assert_non_null(x->status);
    assert_int_equal(x->status->code, STATUS_ERROR);
    assert_string_equal(x->status->message, "");
    /* Sampled, parent known to be remote. */
    assert_int_equal(x->flags, 0x301);
    attrs_text(x->attributes, x->n_attributes, text, sizeof(text));
    assert_string_equal(text,
        "http.request.method=s:GET http.response.status_code=i:503 "
        "splunk.snapshot.profiling=b:1 url.path=s:/index\xef\xbf\xbd "
        "empty=s: negative=i:-3 no=b:0");

    /* A root span: no parent, the parent's remoteness known (none). */
    assert_int_equal(y->parent_span_id.len, 0);
    assert_string_equal(y->trace_state, "");
    assert_null(y->status);
    assert_int_equal(y->flags, 0x100);
    assert_int_equal(y->n_attributes, 0);
    for (i = 0; i < 16; i++) {
        want[i] = (uint8_t)(0x20 + i);
    }
    assert_memory_equal(y->trace_id.data, want, 16);

    assert_string_equal(z->name, "GET");
    assert_int_equal(z->kind, 0);
    assert_int_equal(z->flags, 0x101);
    assert_int_equal(z->n_attributes, 1);
    free_traces(r);
    sp_otlp_traces_destroy(t);
    sp_resource_destroy(res);
}

static void
traces_refuse_spans_receivers_would_reject(void **state)
{
    sp_otlp_traces *t = new_traces(0);
    sp_span_record  s;
    sp_span_attr    bad;

    (void)state;
    s = span(1, 1, false);
    memset(s.trace_id, 0, sizeof(s.trace_id));
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_INVALID);
    s = span(1, 1, false);
    memset(s.span_id, 0, sizeof(s.span_id));
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_INVALID);
    s = span(1, 1, false);
    s.kind = 6;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_INVALID);
    s = span(1, 1, false);
    s.status_code = 3;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_INVALID);
    s = span(1, 1, false);
    s.name = NULL;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_INVALID);
    s = span(1, 1, false);
    bad = span_attrs[0];
    bad.type = 9;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, &bad, 1),
                     SP_ERR_INVALID);
    bad = span_attrs[0];
    bad.key_len = 0;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, &bad, 1),
                     SP_ERR_INVALID);
    bad = span_attrs[0];
    bad.str = NULL;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, &bad, 1),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 1),
                     SP_ERR_INVALID);
    assert_int_equal(sp_otlp_traces_count(t), 0);
    assert_int_equal(sp_otlp_traces_size(t), 0);
    sp_otlp_traces_destroy(t);
}

/*
 * The size a traces builder keeps is the size it serializes after every
 * span, as the group's nested lengths grow past one, two and three bytes,
 * for two workers taking turns; at the bound a span is refused and
 * changes nothing, and a new worker's is refused too.
 */
#define SP_TEST_TRACES_MAX (32u << 10)

static void
traces_size_is_exact_up_to_max_bytes(void **state)
{
    sp_resource    *res = resource("svc", true);
    sp_otlp_traces *t = new_traces(SP_TEST_TRACES_MAX);
    sp_span_record  s = span(1, 1, false);
    sp_buf          out = SP_BUF_INIT(0), again = SP_BUF_INIT(0);
    size_t          added = 0, size, i;
    sp_status       rc = SP_OK;

    (void)state;
    for (i = 0; i < 100000 && rc == SP_OK; i++) {
        s.pid = 1 + (uint32_t)(i / 7 % 2);
        s.span_id[7] = (uint8_t)(i + 1);
        rc = sp_otlp_traces_add(t, res, &s, span_attrs,
            sizeof(span_attrs) / sizeof(span_attrs[0]));
        if (rc != SP_OK) {
            break;
        }
        added++;
        sp_buf_clear(&out);
        assert_int_equal(sp_otlp_traces_serialize(t, &out), SP_OK);
        assert_int_equal(out.len, sp_otlp_traces_size(t));
        assert_true(out.len <= SP_TEST_TRACES_MAX);
    }
    assert_int_equal(rc, SP_ERR_TOO_LONG);
    assert_true(sp_otlp_traces_size(t) > 16384);
    assert_int_equal(sp_otlp_traces_count(t), added);

    size = sp_otlp_traces_size(t);
    assert_int_equal(sp_otlp_traces_add(t, res, &s, span_attrs, 1),
                     SP_ERR_TOO_LONG);
    s.pid = 999;
    assert_int_equal(sp_otlp_traces_add(t, res, &s, NULL, 0),
                     SP_ERR_TOO_LONG);
    assert_int_equal(sp_otlp_traces_count(t), added);
    assert_int_equal(sp_otlp_traces_size(t), size);
    assert_int_equal(sp_otlp_traces_serialize(t, &again), SP_OK);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);
    sp_buf_free(&out);
    sp_buf_free(&again);
    sp_otlp_traces_destroy(t);
    sp_resource_destroy(res);
}

static void
one_request_holds_at_most_max_resources_workers(void **state)
{
    sp_otlp_traces *t = new_traces(0);
    sp_span_record  s = span(1, 1, false);
    TraceRequest   *r;
    uint32_t        pid;

    (void)state;
    for (pid = 1; pid <= SP_OTLP_MAX_RESOURCES; pid++) {
        s.pid = pid;
        assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0), SP_OK);
    }
    s.pid = pid;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0),
                     SP_ERR_TOO_LONG);
    /* A worker already in it still gets spans. */
    s.pid = 17;
    assert_int_equal(sp_otlp_traces_add(t, NULL, &s, NULL, 0), SP_OK);
    r = unpack_traces(t);
    assert_int_equal(r->n_resource_spans, SP_OTLP_MAX_RESOURCES);
    assert_int_equal(r->resource_spans[16]->scope_spans[0]->n_spans, 2);
    assert_int_equal(
        r->resource_spans[16]->resource->attributes[0]->value->int_value,
        17);
    free_traces(r);
    sp_otlp_traces_destroy(t);
}

static void
reset_gives_what_a_new_builder_gives(void **state)
{
    sp_resource    *res = resource("svc", true);
    sp_otlp_traces *used = new_traces(0), *fresh = new_traces(0);
    sp_span_record  s = span(3, 3, true);
    sp_buf          a = SP_BUF_INIT(0);

    (void)state;
    assert_int_equal(sp_otlp_traces_add(used, res, &s, span_attrs, 3),
                     SP_OK);
    s.pid = 4;
    assert_int_equal(sp_otlp_traces_add(used, res, &s, span_attrs, 3),
                     SP_OK);
    sp_otlp_traces_reset(used);
    assert_int_equal(sp_otlp_traces_count(used), 0);
    assert_int_equal(sp_otlp_traces_size(used), 0);
    assert_int_equal(sp_otlp_traces_serialize(used, &a), SP_OK);
    assert_int_equal(a.len, 0);
    sp_buf_free(&a);
    assert_int_equal(sp_otlp_traces_add(used, res, &s, span_attrs, 2),
                     SP_OK);
    assert_int_equal(sp_otlp_traces_add(fresh, res, &s, span_attrs, 2),
                     SP_OK);
    assert_same_traces_and_destroy(used, fresh);
    sp_resource_destroy(res);
}

/*
 * A request of spans as the workers write them is byte for byte what
 * protobuf-c writes for the same request: spans with and without each
 * optional field, every attribute type, negative and large integers,
 * strings whose lengths need one, two and three varint bytes (and nested
 * lengths that cross 127 and 16383), one string that is not valid UTF-8
 * (repaired), and more attributes than fit in one varint byte of count.
 */
static void
assert_canonical_and_destroy(sp_otlp_traces *t)
{
    sp_buf        out = SP_BUF_INIT(0);
    TraceRequest *r;
    uint8_t      *again;
    size_t        len;

    assert_int_equal(sp_otlp_traces_serialize(t, &out), SP_OK);
    r = TRACE_REQUEST(unpack)(NULL, out.len, out.data);
    assert_non_null(r);
    len = TRACE_REQUEST(get_packed_size)(r);
    assert_int_equal(len, out.len);
    again = malloc(len);
    assert_non_null(again);
    assert_int_equal(TRACE_REQUEST(pack)(r, again), len);
    assert_memory_equal(again, out.data, len);
    free(again);
    free_traces(r);
    sp_buf_free(&out);
    sp_otlp_traces_destroy(t);
}

static void
span_bytes_are_what_protobuf_c_writes(void **state)
{
    static char     big[20000];
    sp_resource    *res = resource("svc", true);
    sp_span_attr    attrs[6];
    sp_span_record  s;
    size_t          lens[] = { 0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33,
                               100, 127, 128, 200, 16383, 16384, 19990 };
    size_t          i, k, v;
    int             variant;

    (void)state;
    for (i = 0; i < sizeof(big); i++) {
        big[i] = (char)('a' + i % 26);
    }
    for (variant = 0; variant < 16; variant++) {
        for (k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
            sp_otlp_traces *d = new_traces(0);

            s = span(7, (uint8_t)variant, variant & 1);
            if (variant & 2) {
                s.tracestate = big;
                s.tracestate_len = lens[k] > 512 ? 512 : lens[k];
            }
            s.status_code = (uint8_t)(variant >> 2 & 3) % 3;
            s.kind = variant & 8 ? 0 : SP_SPAN_KIND_SERVER;
            /* proto3 leaves an empty name out; spans always have one */
            s.name = big;
            s.name_len = lens[k] > 1024 ? 1024 : lens[k] + 1;
            memset(attrs, 0, sizeof(attrs));
            attrs[0] = (sp_span_attr){ "k", 1, SP_VALUE_STRING, big,
                                       lens[k], 0 };
            attrs[1] = (sp_span_attr){ big, lens[k] > 0 ? lens[k] : 1,
                                       SP_VALUE_INT, NULL, 0,
                                       variant & 1 ? -1 : INT64_MAX };
            attrs[2] = (sp_span_attr){ "b", 1, SP_VALUE_BOOL, NULL, 0,
                                       variant & 1 };
            attrs[3] = (sp_span_attr){ "i", 1, SP_VALUE_INT, NULL, 0,
                                       (int64_t)lens[k] * 1000 };
            attrs[4] = (sp_span_attr){ "e", 1, SP_VALUE_STRING, NULL, 0,
                                       0 };
            attrs[5] = span_attrs[3];   /* "/index\xff" */
            for (v = 0; v <= 6; v++) {
                assert_int_equal(sp_otlp_traces_add(d, res, &s, attrs, v),
                                 SP_OK);
            }
            assert_canonical_and_destroy(d);
        }
    }
    {
        sp_otlp_traces *d = new_traces(0);
        sp_span_attr    many[200];

        s = span(8, 8, true);
        for (i = 0; i < 200; i++) {
            many[i] = span_attrs[i % 3];
            many[i].str_len = many[i].type == SP_VALUE_STRING ? 3 : 0;
            many[i].integer = (int64_t)i * 1000;
            if (many[i].type == SP_VALUE_BOOL) {
                many[i].integer = i & 1;
            }
        }
        assert_int_equal(sp_otlp_traces_add(d, res, &s, many, 200), SP_OK);
        assert_canonical_and_destroy(d);
    }
    sp_resource_destroy(res);
}

/* ---- requests taken as pieces */

/* Its bytes, contiguous, checked against the pieces one by one. */
static void
flatten(const sp_otlp_request *r, sp_buf *out)
{
    const uint8_t *p;
    size_t         i, n, total = 0;

    sp_buf_clear(out);
    assert_int_equal(sp_otlp_request_flatten(r, out), SP_OK);
    assert_int_equal(out->len, sp_otlp_request_len(r));
    for (i = 0; i < sp_otlp_request_count(r); i++) {
        p = sp_otlp_request_piece(r, i, &n);
        assert_non_null(p);
        assert_true(n > 0);
        assert_memory_equal(p, out->data + total, n);
        total += n;
    }
    assert_int_equal(total, out->len);
}

/*
 * The queue's bound (SPANPROF_EXPORTER_MAX_BYTES) counts requests' lengths:
 * a buffer taken must not keep the room it was given to grow into (the
 * soak, collector down: the queue's heap was 2.1 times its length).
 */
static void
request_takes_no_more_memory_than_its_bytes(void **state)
{
    sp_otlp_request *r = NULL;
    sp_buf           b = SP_BUF_INIT(0);
    uint8_t          text[5000];
    const uint8_t   *p;
    size_t           n, i;

    (void)state;
    for (i = 0; i < sizeof(text); i++) {
        text[i] = (uint8_t)(i * 7);
    }
    assert_int_equal(sp_otlp_request_create(&r), SP_OK);
    assert_int_equal(sp_buf_reserve(&b, 64 * 1024), SP_OK);
    sp_buf_append(&b, text, sizeof(text));
    assert_int_equal(sp_otlp_request_take(r, &b), SP_OK);
    assert_null(b.data);
    p = sp_otlp_request_piece(r, 0, &n);
    assert_int_equal(n, sizeof(text));
    assert_memory_equal(p, text, sizeof(text));
    assert_true(malloc_usable_size((void *)p) < sizeof(text) + 1024);
    assert_int_equal(sp_otlp_request_len(r), sizeof(text));
    sp_otlp_request_unref(r);
}

static void
request_copies_join_and_buffers_move(void **state)
{
    sp_otlp_request *r = NULL;
    sp_buf           b = SP_BUF_INIT(100), out = SP_BUF_INIT(0);
    const uint8_t   *p;
    size_t           n;

    (void)state;
    assert_int_equal(sp_otlp_request_create(&r), SP_OK);
    assert_int_equal(sp_otlp_request_len(r), 0);
    assert_int_equal(sp_otlp_request_count(r), 0);
    assert_int_equal(sp_otlp_request_copy(r, "ab", 2), SP_OK);
    assert_int_equal(sp_otlp_request_copy(r, "cd", 2), SP_OK);
    assert_int_equal(sp_otlp_request_copy(r, NULL, 0), SP_OK);
    assert_int_equal(sp_otlp_request_count(r), 1);

    /* an empty buffer adds nothing and keeps its memory */
    assert_int_equal(sp_buf_reserve(&b, 10), SP_OK);
    assert_int_equal(sp_otlp_request_take(r, &b), SP_OK);
    assert_non_null(b.data);
    assert_int_equal(sp_otlp_request_count(r), 1);
    sp_buf_append(&b, "efg", 3);
    p = b.data;
    assert_int_equal(sp_otlp_request_take(r, &b), SP_OK);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(b.limit, 100);
    assert_int_equal(sp_otlp_request_count(r), 2);
    assert_ptr_equal(sp_otlp_request_piece(r, 1, &n), p);    /* no copy */
    assert_int_equal(n, 3);
    /* a buffer in error gives its error and nothing */
    sp_buf_append(&b, "x", 1);
    b.err = SP_ERR_TOO_LONG;
    assert_int_equal(sp_otlp_request_take(r, &b), SP_ERR_TOO_LONG);
    assert_non_null(b.data);
    sp_buf_free(&b);
    assert_int_equal(sp_otlp_request_copy(r, "h", 1), SP_OK);
    assert_int_equal(sp_otlp_request_count(r), 3);
    assert_null(sp_otlp_request_piece(r, 3, &n));
    assert_int_equal(n, 0);

    sp_buf_append(&out, "X", 1);
    assert_int_equal(sp_otlp_request_flatten(r, &out), SP_OK);
    assert_int_equal(out.len, 9);
    assert_memory_equal(out.data, "Xabcdefgh", 9);
    sp_buf_free(&out);
    sp_buf_init(&out, 5);
    sp_buf_append(&out, "X", 1);
    assert_int_equal(sp_otlp_request_flatten(r, &out), SP_ERR_TOO_LONG);
    assert_int_equal(out.len, 1);
    sp_buf_free(&out);

    /* the last reference frees (ASan tells a leak or a double free) */
    assert_ptr_equal(sp_otlp_request_ref(r), r);
    sp_otlp_request_unref(r);
    assert_int_equal(sp_otlp_request_len(r), 8);
    sp_otlp_request_unref(r);
    sp_otlp_request_unref(NULL);
}

/*
 * A request taken as pieces is byte for byte what serialize writes, two
 * pieces a worker (its header, then its spans: the buffer the builder
 * wrote them in), and outlives the builder; the builder is empty after,
 * and what it builds next (its buffers given the last size) is what a new
 * builder builds.
 */
static void
taken_traces_are_what_serialize_writes(void **state)
{
    sp_resource     *res = resource("svc", true);
    sp_otlp_traces  *t = new_traces(0), *fresh;
    sp_otlp_request *r = NULL;
    sp_span_record   s;
    sp_buf           a = SP_BUF_INIT(0), b = SP_BUF_INIT(0);
    TraceRequest    *tr;
    const uint8_t   *p;
    size_t           i, n, round;

    (void)state;
    for (round = 0; round < 3; round++) {
        fresh = new_traces(0);
        for (i = 0; i < 40 + 20 * round; i++) {
            s = span((uint32_t)(1 + i % 3), (uint8_t)i, i & 1);
            assert_int_equal(sp_otlp_traces_add(t, res, &s, span_attrs,
                                                i % 7), SP_OK);
            assert_int_equal(sp_otlp_traces_add(fresh, res, &s, span_attrs,
                                                i % 7), SP_OK);
        }
        sp_buf_clear(&a);
        assert_int_equal(sp_otlp_traces_serialize(fresh, &a), SP_OK);
        sp_otlp_traces_destroy(fresh);
        assert_int_equal(sp_otlp_traces_take(t, &r), SP_OK);
        assert_int_equal(sp_otlp_traces_count(t), 0);
        assert_int_equal(sp_otlp_traces_size(t), 0);
        if (round == 2) {
            sp_otlp_traces_destroy(t);
            t = NULL;
        }
        flatten(r, &b);
        assert_int_equal(b.len, a.len);
        assert_memory_equal(b.data, a.data, a.len);
        assert_int_equal(sp_otlp_request_count(r), 6);
        for (i = 1; i < 6; i += 2) {
            p = sp_otlp_request_piece(r, i, &n);
            assert_int_equal(p[0], (2 << 3) | 2);  /* a Span's tag */
            assert_true(n > 10 * 40);
        }
        tr = TRACE_REQUEST(unpack)(NULL, b.len, b.data);
        assert_non_null(tr);
        assert_int_equal(tr->n_resource_spans, 3);
        assert_int_equal(tr->resource_spans[0]->scope_spans[0]->n_spans,
                         (40 + 20 * round + 2) / 3);
        free_traces(tr);
        sp_otlp_request_unref(r);
    }
    /* an empty builder gives an empty request */
    t = new_traces(0);
    assert_int_equal(sp_otlp_traces_take(t, &r), SP_OK);
    assert_int_equal(sp_otlp_request_len(r), 0);
    assert_int_equal(sp_otlp_request_count(r), 0);
    sp_otlp_request_unref(r);
    sp_otlp_traces_destroy(t);
    sp_buf_free(&a);
    sp_buf_free(&b);
    sp_resource_destroy(res);
}

/*
 * Spans of every length from the shortest to past what the AVX2 copy
 * takes, two of each one after the other, added with it and with memcpy:
 * the same request either way.
 */
static void
span_copies_give_the_same_bytes(void **state)
{
    static char     value[700];
    sp_resource    *res = resource("svc", true);
    sp_otlp_traces *with, *without;
    sp_span_record  s = span(7, 1, true);
    sp_span_attr    a = { "k", 1, SP_VALUE_STRING, value, 0, 0 };
    sp_buf          x = SP_BUF_INIT(0), y = SP_BUF_INIT(0);
    size_t          len, i;

    (void)state;
    for (i = 0; i < sizeof(value); i++) {
        value[i] = (char)('!' + i % 90);
    }
    for (len = 0; len < sizeof(value); len++) {
        with = new_traces(0);
        without = new_traces(0);
        /* the first span makes the group; the next ones take the
         * usual path, where the copy is */
        a.str_len = 0;
        assert_int_equal(sp_otlp_traces_add(with, res, &s, &a, 1), SP_OK);
        assert_int_equal(sp_otlp_traces_add(without, res, &s, &a, 1),
                         SP_OK);
        a.str_len = len;
        sp_otlp_use_avx2(true);
        assert_int_equal(sp_otlp_traces_add(with, res, &s, &a, 1), SP_OK);
        assert_int_equal(sp_otlp_traces_add(with, res, &s, &a, 1), SP_OK);
        sp_otlp_use_avx2(false);
        assert_int_equal(sp_otlp_traces_add(without, res, &s, &a, 1),
                         SP_OK);
        assert_int_equal(sp_otlp_traces_add(without, res, &s, &a, 1),
                         SP_OK);
        assert_same_traces(with, without, &x, &y);
        assert_non_null(memmem(x.data, x.len, value, len));
        sp_otlp_traces_destroy(with);
        sp_otlp_traces_destroy(without);
    }
    sp_otlp_use_avx2(true);
    sp_buf_free(&x);
    sp_buf_free(&y);
    sp_resource_destroy(res);
}

/*
 * Records added with sp_otlp_traces_add_record and with sp_span_decode
 * then sp_otlp_traces_add_span, with either copy: the same outcome for
 * each and the same request. The records: entry spans of many lengths
 * (the usual case), of two workers, a span of another form (a
 * tracestate), and spans with a byte changed (their reserved bytes, an
 * attribute's length, the flags' tag).
 */
static void
records_go_in_as_decoded_spans_do(void **state)
{
    static char     value[700];
    static uint64_t rec[128];
    uint8_t        *r = (uint8_t *)rec;
    sp_resource    *res = resource("svc", true);
    sp_otlp_traces *x, *y;
    sp_span_record  s;
    sp_span_attr    a[2] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "k", 1, SP_VALUE_STRING, value, 0, 0 },
    };
    sp_span_view    v;
    sp_status       want;
    sp_buf          bx = SP_BUF_INIT(0), by = SP_BUF_INIT(0);
    size_t          len, i, round, changed = 0;
    int             avx2;

    (void)state;
    memset(value, 'v', sizeof(value));
    for (avx2 = 0; avx2 < 2; avx2++) {
        sp_otlp_use_avx2(avx2 != 0);
        x = new_traces(0);
        y = new_traces(0);
        for (round = 0; round < 3 * 600; round++) {
            s = span(round % 7 == 6 ? 8 : 7, (uint8_t)round, true);
            s.kind = SP_SPAN_KIND_SERVER;
            if (round % 50 == 49) {
                s.tracestate = "k=v";
                s.tracestate_len = 3;
            }
            a[1].str_len = (round / 3) % 600;
            len = sp_span_size(&s, a, 2);
            assert_true(len <= sizeof(rec));
            sp_span_encode(rec, &s, a, 2);
            switch (round % 3 == 2 ? round / 3 % 4 : 0) {
            case 1:
                r[4] = 1;                   /* reserved */
                break;
            case 2:
                r[len - 6 - 2 - 1] += 5;    /* the last attribute's end */
                break;
            case 3:
                r[len - 6] = 0x7a;          /* no flags' tag */
                break;
            default:
                break;
            }
            want = sp_span_decode(rec, len, &v) == SP_OK ? SP_OK
                                                         : SP_ERR_INVALID;
            changed += want != SP_OK;
            assert_int_equal(sp_otlp_traces_add_record(x, res, rec, len),
                             want);
            if (want == SP_OK) {
                assert_int_equal(sp_otlp_traces_add_span(y, res, &v), SP_OK);
            }
            assert_int_equal(sp_otlp_traces_count(x),
                             sp_otlp_traces_count(y));
        }
        assert_true(changed > 100);
        assert_same_traces(x, y, &bx, &by);
        for (i = 0; i < 2; i++) {
            sp_otlp_traces_destroy(i == 0 ? x : y);
        }
    }
    sp_otlp_use_avx2(true);
    assert_int_equal(sp_otlp_traces_add_record(NULL, res, rec, len),
                     SP_ERR_INVALID);
    sp_buf_free(&bx);
    sp_buf_free(&by);
    sp_resource_destroy(res);
}

/*
 * Records of three workers in runs of different lengths, added with
 * sp_otlp_traces_add_record and with sp_span_decode then
 * sp_otlp_traces_add_span into requests of a bound, the smallest and one
 * where a group passes 16 KiB (its length takes a third byte): the same
 * outcome each time (SP_ERR_TOO_LONG at the same record, then both
 * serialized and emptied), the same requests, none past the bound. Every
 * other change of worker goes through sp_otlp_traces_add_span on the
 * same builder, as the exporter's general path does.
 */
static void
records_keep_the_request_bound(void **state)
{
    static const size_t bounds[] = { SP_OTLP_MIN_MAX_BYTES, 64 << 10 };
    static char         value[120];
    static uint64_t     rec[80];
    sp_resource        *res = resource("svc", true);
    sp_otlp_traces     *x, *y;
    sp_span_record      s;
    sp_span_attr        a[4] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "k", 1, SP_VALUE_STRING, value, 0, 0 },
        { "l", 1, SP_VALUE_STRING, value, 0, 0 },
        { "m", 1, SP_VALUE_STRING, value, 0, 0 },
    };
    sp_span_view        v;
    sp_status           got, want;
    sp_buf              bx = SP_BUF_INIT(0), by = SP_BUF_INIT(0);
    size_t              len, round, full, k, switches = 0, runs = 0;
    size_t              left = 0;
    uint32_t            pid = 10, last = 0;

    (void)state;
    memset(value, 'v', sizeof(value));
    for (k = 0; k < 2; k++) {
        x = new_traces(bounds[k]);
        y = new_traces(bounds[k]);
        full = 0;
        for (round = 0; round < 3000; round++) {
            /* runs of 1 to 5 records of a worker */
            if (left == 0) {
                pid = 10 + (pid + 1) % 3;
                left = 1 + runs++ % 5;
            }
            left--;
            s = span(pid, (uint8_t)round, true);
            s.kind = SP_SPAN_KIND_SERVER;
            /* attributes of one byte's length, the usual case */
            a[1].str_len = 20 + (round * 37) % 100;
            a[2].str_len = 20 + (round * 53) % 100;
            a[3].str_len = 20 + (round * 71) % 100;
            len = sp_span_size(&s, a, 4);
            assert_true(len <= sizeof(rec));
            sp_span_encode(rec, &s, a, 4);
            assert_int_equal(sp_span_decode(rec, len, &v), SP_OK);
            /* every other change of worker through the view */
            if (pid != last && switches++ % 2 == 0) {
                got = sp_otlp_traces_add_span(x, res, &v);
            } else {
                got = sp_otlp_traces_add_record(x, res, rec, len);
            }
            last = pid;
            want = sp_otlp_traces_add_span(y, res, &v);
            assert_int_equal(got, want);
            assert_true(sp_otlp_traces_size(x) <= bounds[k]);
            assert_int_equal(sp_otlp_traces_size(x), sp_otlp_traces_size(y));
            if (got == SP_ERR_TOO_LONG || round == 2999) {
                full++;
                assert_same_traces(x, y, &bx, &by);
                assert_true(bx.len <= bounds[k]);
                sp_otlp_traces_reset(x);
                sp_otlp_traces_reset(y);
            }
        }
        assert_true(full > (k == 0 ? 100 : 10));
        sp_otlp_traces_destroy(x);
        sp_otlp_traces_destroy(y);
    }
    sp_buf_free(&bx);
    sp_buf_free(&by);
    sp_resource_destroy(res);
}

/* The resource of each ResourceSpans of r, as attrs_text writes it, one
 * after another with "|" between. */
static void
resources_text(const TraceRequest *r, char *out, size_t size)
{
    char   one[512];
    size_t i, used = 0;

    out[0] = '\0';
    for (i = 0; i < r->n_resource_spans; i++) {
        attrs_text(r->resource_spans[i]->resource->attributes,
                   r->resource_spans[i]->resource->n_attributes, one,
                   sizeof(one));
        used += (size_t)snprintf(out + used, size - used, "%s%s",
                                 i ? "|" : "", one);
        assert_true(used < size);
    }
}

/* A request of one span of each pid given, in that order, with res. */
static void
one_request(sp_otlp_traces *t, const sp_resource *res, const uint32_t *pids,
            size_t n, char *text, size_t size)
{
    sp_otlp_request *q = NULL;
    sp_buf           b = SP_BUF_INIT(0);
    sp_span_record   s;
    TraceRequest    *tr;
    size_t           i;

    for (i = 0; i < n; i++) {
        s = span(pids[i], (uint8_t)(i + 1), false);
        assert_int_equal(sp_otlp_traces_add(t, res, &s, span_attrs, 2),
                         SP_OK);
    }
    assert_int_equal(sp_otlp_traces_take(t, &q), SP_OK);
    flatten(q, &b);
    tr = TRACE_REQUEST(unpack)(NULL, b.len, b.data);
    assert_non_null(tr);
    resources_text(tr, text, size);
    free_traces(tr);
    sp_otlp_request_unref(q);
    sp_buf_free(&b);
}

/*
 * A worker's resource is encoded once and kept from one request to the
 * next: each request still carries the resource of each of its workers,
 * whatever order they come in, and the resource as it is now.
 */
static void
resources_kept_between_requests_stay_right(void **state)
{
    static const uint32_t ab[] = { 10, 20 }, ba[] = { 20, 10 };
    static const uint32_t c[] = { 30 }, bca[] = { 20, 30, 10 };
    sp_resource    *res = resource("svc", true), *other;
    sp_otlp_traces *t = new_traces(0);
    char            text[2048];

    (void)state;
    one_request(t, res, ab, 2, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:svc process.pid=i:10 host.name=s:box answer=i:-42|"
        "service.name=s:svc process.pid=i:20 host.name=s:box answer=i:-42");
    one_request(t, res, ba, 2, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:svc process.pid=i:20 host.name=s:box answer=i:-42|"
        "service.name=s:svc process.pid=i:10 host.name=s:box answer=i:-42");
    one_request(t, res, c, 1, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:svc process.pid=i:30 host.name=s:box answer=i:-42");
    one_request(t, res, bca, 3, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:svc process.pid=i:20 host.name=s:box answer=i:-42|"
        "service.name=s:svc process.pid=i:30 host.name=s:box answer=i:-42|"
        "service.name=s:svc process.pid=i:10 host.name=s:box answer=i:-42");

    /* changed, the resource is encoded again */
    assert_int_equal(sp_resource_set_string(res, "host.name", "other"),
                     SP_OK);
    one_request(t, res, ba, 2, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:svc process.pid=i:20 host.name=s:other answer=i:-42|"
        "service.name=s:svc process.pid=i:10 host.name=s:other answer=i:-42");

    /* another resource, though it may be where an old one was */
    sp_resource_destroy(res);
    other = resource("else", true);
    one_request(t, other, ab, 2, text, sizeof(text));
    assert_string_equal(text,
        "service.name=s:else process.pid=i:10 host.name=s:box answer=i:-42|"
        "service.name=s:else process.pid=i:20 host.name=s:box answer=i:-42");
    sp_otlp_traces_destroy(t);
    sp_resource_destroy(other);
}

static void
taken_logs_are_what_serialize_writes(void **state)
{
    sp_resource     *res = resource("svc", true);
    sp_otlp_logs    *l = new_logs(0);
    sp_otlp_request *r = NULL;
    sp_pprof_frame   f[3];
    sp_sample        s;
    sp_buf           a = SP_BUF_INIT(0), b = SP_BUF_INIT(0);
    LogsRequest     *lr;
    size_t           i, round;

    (void)state;
    fill_frames(f);
    for (round = 0; round < 2; round++) {
        for (i = 0; i < 10; i++) {
            s = sample((uint32_t)(1 + i % 2), i % 3 == 0);
            assert_int_equal(sp_otlp_logs_add_text(l, res, &s, f, 3, 1, 1),
                             SP_OK);
        }
        assert_int_equal(sp_otlp_logs_add_pprof(l, res, 2,
                                                SP_SOURCE_SNAPSHOT, 1, 1,
                                                "pprof", 5, 1), SP_OK);
        sp_buf_clear(&a);
        assert_int_equal(sp_otlp_logs_serialize(l, &a), SP_OK);
        assert_int_equal(sp_otlp_logs_take(l, &r), SP_OK);
        assert_int_equal(sp_otlp_logs_count(l), 0);
        assert_int_equal(sp_otlp_logs_size(l), 0);
        assert_int_equal(sp_otlp_request_count(r), 4);
        flatten(r, &b);
        assert_int_equal(b.len, a.len);
        assert_memory_equal(b.data, a.data, a.len);
        lr = LOGS_REQUEST(unpack)(NULL, b.len, b.data);
        assert_non_null(lr);
        assert_int_equal(lr->n_resource_logs, 2);
        assert_int_equal(lr->resource_logs[1]->scope_logs[0]->n_log_records,
                         6);
        free_logs(lr);
        sp_otlp_request_unref(r);
    }
    sp_buf_free(&a);
    sp_buf_free(&b);
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pprof_logs_round_trip),
        cmocka_unit_test(resource_gets_the_worker_pid_when_it_has_none),
        cmocka_unit_test(text_logs_follow_the_call_stack_format),
        cmocka_unit_test(logs_refuse_bad_arguments),
        cmocka_unit_test(requests_stay_within_max_bytes),
        cmocka_unit_test(traces_round_trip),
        cmocka_unit_test(traces_refuse_spans_receivers_would_reject),
        cmocka_unit_test(traces_size_is_exact_up_to_max_bytes),
        cmocka_unit_test(one_request_holds_at_most_max_resources_workers),
        cmocka_unit_test(reset_gives_what_a_new_builder_gives),
        cmocka_unit_test(span_bytes_are_what_protobuf_c_writes),
        cmocka_unit_test(request_copies_join_and_buffers_move),
        cmocka_unit_test(request_takes_no_more_memory_than_its_bytes),
        cmocka_unit_test(taken_traces_are_what_serialize_writes),
        cmocka_unit_test(taken_logs_are_what_serialize_writes),
        cmocka_unit_test(resources_kept_between_requests_stay_right),
        cmocka_unit_test(span_copies_give_the_same_bytes),
        cmocka_unit_test(records_go_in_as_decoded_spans_do),
        cmocka_unit_test(records_keep_the_request_bound),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
