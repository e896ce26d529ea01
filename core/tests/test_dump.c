/*
 * sp_dump, sp_gunzip and sp_flame: profiles made by spanprof's own
 * builders (sp_pprof, sp_otlp, sp_otlp_json) read back.
 */
#include "sp_test.h"

#include "sp_dump.h"
#include "sp_flame.h"
#include "sp_gunzip.h"
#include "sp_otlp.h"
#include "sp_otlp_json.h"
#include "sp_pprof.h"

#include <stdio.h>
#include <stdlib.h>

#define TRACE_A "0102030405060708090a0b0c0d0e0f10"
#define SPAN_A  "a1a2a3a4a5a6a7a8"
#define TRACE_B "ffeeddccbbaa99887766554433221100"
#define SPAN_B  "b1b2b3b4b5b6b7b8"

static const sp_pprof_mapping map = {
    0x1000, 0x100000, 0, "/opt/test/bin/server", NULL, 0
};

static sp_pprof_frame
frame(uint64_t address, const char *function)
{
    sp_pprof_frame f;

    memset(&f, 0, sizeof(f));
    f.address = address;
    f.mapping = &map;
    f.frame.function = function;
    return f;
}

static void
unhex(const char *s, uint8_t *out, size_t n)
{
    size_t       i;
    unsigned int b;

    for (i = 0; i < n; i++) {
        sscanf(s + 2 * i, "%2x", &b);
        out[i] = (uint8_t)b;
    }
}

static sp_sample
sample(const char *trace, const char *span)
{
    sp_sample s;

    memset(&s, 0, sizeof(s));
    s.time_ns = 1700000000000000000ULL;
    s.period_ns = 10000000;
    s.pid = 100;
    s.tid = 100;
    if (trace != NULL) {
        s.has_span = true;
        unhex(trace, s.trace_id, 16);
        unhex(span, s.span_id, 8);
    }
    return s;
}

/*
 * The profile: trace A: main>handle>work twice, main>handle once;
 * trace B: main>rec>rec>leaf (recursion) once; no span: main>idle once.
 */
static void
make_profile(sp_buf *out)
{
    sp_pprof_options o = { 10000000, 0 };
    sp_pprof        *p;
    sp_pprof_frame   w[3], h[2], r[4], i[2];
    sp_sample        s;

    w[0] = frame(0x1300, "work");
    w[1] = frame(0x1200, "handle");
    w[2] = frame(0x1100, "main");
    h[0] = w[1];
    h[1] = w[2];
    r[0] = frame(0x1500, "leaf");
    r[1] = frame(0x1400, "rec");
    r[2] = frame(0x1410, "rec");
    r[3] = w[2];
    i[0] = frame(0x1600, "idle;wait");   /* a ';' in a name */
    i[1] = w[2];
    assert_int_equal(sp_pprof_create(&o, &p), SP_OK);
    s = sample(TRACE_A, SPAN_A);
    assert_int_equal(sp_pprof_add(p, &s, w, 3), SP_OK);
    assert_int_equal(sp_pprof_add(p, &s, w, 3), SP_OK);
    assert_int_equal(sp_pprof_add(p, &s, h, 2), SP_OK);
    s = sample(TRACE_B, SPAN_B);
    assert_int_equal(sp_pprof_add(p, &s, r, 4), SP_OK);
    s = sample(NULL, NULL);
    assert_int_equal(sp_pprof_add(p, &s, i, 2), SP_OK);
    assert_int_equal(sp_pprof_serialize(p, out), SP_OK);
    sp_pprof_destroy(p);
}

/* The profile as one OTLP/JSON logs line, as the console exporter
   writes it, for service "svc" and source. */
static void
make_line(sp_buf *line, uint8_t source)
{
    sp_otlp_logs *l;
    sp_buf        prof = SP_BUF_INIT(0), req = SP_BUF_INIT(0);
    sp_resource  *res = NULL;

    make_profile(&prof);
    assert_int_equal(sp_otlp_logs_create(NULL, &l), SP_OK);
    (void)res;
    assert_int_equal(sp_otlp_logs_add_pprof(l, NULL, 100, source,
                                            1700000000000000000ULL, 0,
                                            prof.data, prof.len, 12), SP_OK);
    assert_int_equal(sp_otlp_logs_serialize(l, &req), SP_OK);
    assert_int_equal(sp_otlp_json_append(line, SP_OTLP_SIGNAL_LOGS, req.data,
                                         req.len), SP_OK);
    line->len--;    /* the newline */
    sp_otlp_logs_destroy(l);
    sp_buf_free(&prof);
    sp_buf_free(&req);
}

static sp_dump *
dump_with_line(uint8_t source)
{
    sp_dump *d;
    sp_buf   line = SP_BUF_INIT(0);

    assert_int_equal(sp_dump_create(NULL, &d), SP_OK);
    make_line(&line, source);
    assert_int_equal(sp_dump_add_line(d, (const char *)line.data, line.len),
                     SP_OK);
    sp_buf_free(&line);
    return d;
}

static char *
folded(const sp_dump *d, const sp_dump_filter *f)
{
    sp_buf out = SP_BUF_INIT(0);

    assert_int_equal(sp_dump_folded(d, f, &out), SP_OK);
    assert_int_equal(sp_buf_append(&out, "", 1), SP_OK);
    return (char *)out.data;
}

static void
folded_stacks_root_first(void **state)
{
    sp_dump        *d = dump_with_line(SP_SOURCE_SNAPSHOT);
    sp_dump_filter  f;
    sp_dump_stats   st;
    char           *text;

    (void)state;
    memset(&f, 0, sizeof(f));
    text = folded(d, &f);
    assert_string_equal(text, "main;handle 1\n"
                              "main;handle;work 2\n"
                              "main;idle_wait 1\n"
                              "main;rec;rec;leaf 1\n");
    free(text);

    f.trace_id = TRACE_A;
    text = folded(d, &f);
    assert_string_equal(text, "main;handle 1\nmain;handle;work 2\n");
    free(text);

    /* Upper-case ids mean the same. */
    f.trace_id = "FFEEDDCCBBAA99887766554433221100";
    f.span_id = SPAN_B;
    text = folded(d, &f);
    assert_string_equal(text, "main;rec;rec;leaf 1\n");
    free(text);

    f.trace_id = NULL;
    f.span_id = NULL;
    f.value = SP_DUMP_VALUE_CPU_NS;
    f.service_root = true;
    text = folded(d, &f);
    /* No service.name in the resource: the root frame is "". */
    assert_string_equal(text, ";main;handle 10000000\n"
                              ";main;handle;work 20000000\n"
                              ";main;idle_wait 10000000\n"
                              ";main;rec;rec;leaf 10000000\n");
    free(text);

    f.service_root = false;
    f.source = SP_DUMP_SOURCE_CONTINUOUS;
    text = folded(d, &f);
    assert_string_equal(text, "");
    free(text);

    f.source = SP_DUMP_SOURCE_ANY;
    f.service = "nobody";
    text = folded(d, &f);
    assert_string_equal(text, "");
    free(text);

    sp_dump_get_stats(d, &st);
    assert_int_equal(st.lines, 1);
    assert_int_equal(st.records, 1);
    assert_int_equal(st.profiles, 1);
    assert_int_equal(st.profiles_bad, 0);
    assert_int_equal(st.samples, 5);
    sp_dump_destroy(d);
}

static void
bad_filters_are_refused(void **state)
{
    sp_dump        *d = dump_with_line(SP_SOURCE_SNAPSHOT);
    sp_dump_filter  f;
    sp_buf          out = SP_BUF_INIT(0);

    (void)state;
    memset(&f, 0, sizeof(f));
    f.trace_id = "0102";
    assert_int_equal(sp_dump_folded(d, &f, &out), SP_ERR_INVALID);
    f.trace_id = NULL;
    f.span_id = "zzzzzzzzzzzzzzzz";
    assert_int_equal(sp_dump_folded(d, &f, &out), SP_ERR_INVALID);
    assert_int_equal(out.len, 0);
    sp_buf_free(&out);
    sp_dump_destroy(d);
}

static void
top_counts_self_and_total_once_per_sample(void **state)
{
    sp_dump        *d = dump_with_line(SP_SOURCE_CONTINUOUS);
    sp_dump_filter  f;
    sp_dump_row    *rows;
    size_t          n;
    int64_t         sum;

    (void)state;
    memset(&f, 0, sizeof(f));
    assert_int_equal(sp_dump_top(d, &f, &rows, &n, &sum), SP_OK);
    assert_int_equal(sum, 5);
    assert_int_equal(n, 6);
    /* By self, then total, then name. */
    assert_string_equal(rows[0].name, "work");
    assert_int_equal(rows[0].self, 2);
    assert_int_equal(rows[0].total, 2);
    assert_string_equal(rows[1].name, "handle");
    assert_int_equal(rows[1].self, 1);
    assert_int_equal(rows[1].total, 3);
    assert_string_equal(rows[2].name, "idle;wait");
    assert_string_equal(rows[3].name, "leaf");
    assert_string_equal(rows[4].name, "main");
    assert_int_equal(rows[4].self, 0);
    assert_int_equal(rows[4].total, 5);
    assert_string_equal(rows[5].name, "rec");
    assert_int_equal(rows[5].total, 1);     /* twice on one stack */
    free(rows);

    f.source = SP_DUMP_SOURCE_CONTINUOUS;
    f.trace_id = TRACE_B;
    f.value = SP_DUMP_VALUE_CPU_NS;
    assert_int_equal(sp_dump_top(d, &f, &rows, &n, &sum), SP_OK);
    assert_int_equal(sum, 10000000);
    assert_int_equal(n, 3);
    free(rows);
    sp_dump_destroy(d);
}

static const char spans_line[] =
    "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":"
    "\"service.name\",\"value\":{\"stringValue\":\"front\"}}]},"
    "\"scopeSpans\":[{\"spans\":["
    "{\"traceId\":\"" TRACE_A "\",\"spanId\":\"" SPAN_A "\","
    "\"name\":\"GET /\",\"kind\":2,\"startTimeUnixNano\":\"2000\","
    "\"endTimeUnixNano\":\"5000\"},"
    "{\"traceId\":\"" TRACE_A "\",\"spanId\":\"c1c2c3c4c5c6c7c8\","
    "\"parentSpanId\":\"" SPAN_A "\",\"name\":\"GET /inner\","
    "\"startTimeUnixNano\":3000,\"endTimeUnixNano\":\"4000\"},"
    "{\"traceId\":\"\",\"spanId\":\"" SPAN_A "\"}"
    "]}]}]}";

static void
traces_and_their_spans(void **state)
{
    sp_dump        *d = dump_with_line(SP_SOURCE_SNAPSHOT);
    sp_dump_filter  f;
    sp_dump_trace  *t;
    sp_dump_span   *s;
    sp_dump_stats   st;
    size_t          n;

    (void)state;
    assert_int_equal(sp_dump_add_line(d, spans_line, strlen(spans_line)),
                     SP_OK);
    sp_dump_get_stats(d, &st);
    assert_int_equal(st.spans, 2);      /* the one without a trace id: no */

    memset(&f, 0, sizeof(f));
    f.trace_id = TRACE_B;               /* ignored: every trace is listed */
    assert_int_equal(sp_dump_traces(d, &f, &t, &n), SP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].trace_id, TRACE_A);
    assert_int_equal(t[0].samples, 3);
    assert_int_equal(t[0].cpu_ns, 30000000);
    assert_int_equal(t[0].spans, 2);
    assert_string_equal(t[1].trace_id, TRACE_B);
    assert_int_equal(t[1].samples, 1);
    assert_int_equal(t[1].spans, 0);
    free(t);

    assert_int_equal(sp_dump_spans(d, TRACE_A, &s, &n), SP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].span_id, SPAN_A);
    assert_string_equal(s[0].parent_span_id, "");
    assert_string_equal(s[0].name, "GET /");
    assert_string_equal(s[0].service, "front");
    assert_int_equal(s[0].start_ns, 2000);
    assert_int_equal(s[0].end_ns, 5000);
    assert_int_equal(s[0].samples, 3);
    assert_string_equal(s[1].parent_span_id, SPAN_A);
    assert_int_equal(s[1].start_ns, 3000);
    assert_int_equal(s[1].samples, 0);
    free(s);
    assert_int_equal(sp_dump_spans(d, "x", &s, &n), SP_ERR_INVALID);
    sp_dump_destroy(d);
}

static void
lines_that_are_not_otlp(void **state)
{
    static const char *bad[] = {
        "not json", "[1,2]", "{}", "{\"resourceLogs\":{}}", "{\"x\":1} x",
    };
    sp_dump      *d;
    sp_dump_stats st;
    size_t        i;

    (void)state;
    assert_int_equal(sp_dump_create(NULL, &d), SP_OK);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(sp_dump_add_line(d, bad[i], strlen(bad[i])),
                         SP_ERR_INVALID);
    }
    assert_int_equal(sp_dump_add_line(d, " \r", 2), SP_OK);
    assert_int_equal(sp_dump_add_line(d, "{\"resourceLogs\":[]}", 19), SP_OK);
    sp_dump_get_stats(d, &st);
    assert_int_equal(st.lines, 1);
    sp_dump_destroy(d);
}

/* A logs line whose one record has this format and body. */
static void
record_line(sp_buf *out, const char *format, const char *body)
{
    const char *parts[] = {
        "{\"resourceLogs\":[{\"scopeLogs\":[{\"logRecords\":"
        "[{\"body\":{\"stringValue\":\"", body,
        "\"},\"attributes\":[{\"key\":\"profiling.data.format\","
        "\"value\":{\"stringValue\":\"", format, "\"}}]}]}]}]}"
    };
    size_t i;

    out->len = 0;
    for (i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        sp_buf_append(out, parts[i], strlen(parts[i]));
    }
}

static void
bad_profiles_are_counted_and_skipped(void **state)
{
    sp_dump        *d;
    sp_dump_stats   st;
    sp_buf          line = SP_BUF_INIT(0), gz = SP_BUF_INIT(0);
    sp_buf          b64 = SP_BUF_INIT(0);
    static const uint8_t junk[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f };
    /* A profile whose sample names location 9, which it lacks. */
    static const uint8_t dangling[] = { 0x12, 0x02, 0x08, 0x09 };
    const uint8_t  *bodies[] = { junk, dangling };
    size_t          sizes[] = { sizeof(junk), sizeof(dangling) };
    size_t          i;

    (void)state;
    assert_int_equal(sp_dump_create(NULL, &d), SP_OK);
    record_line(&line, "pprof-gzip-base64", "not base64!");
    assert_int_equal(sp_dump_add_line(d, (char *)line.data, line.len), SP_OK);
    record_line(&line, "pprof-gzip-base64", "aGVsbG8=");   /* not gzip */
    assert_int_equal(sp_dump_add_line(d, (char *)line.data, line.len), SP_OK);
    for (i = 0; i < 2; i++) {
        gz.len = 0;
        b64.len = 0;
        assert_int_equal(sp_gzip(&gz, bodies[i], sizes[i], 6), SP_OK);
        assert_int_equal(sp_base64_encode(&b64, gz.data, gz.len), SP_OK);
        sp_buf_append(&b64, "", 1);
        record_line(&line, "pprof-gzip-base64", (char *)b64.data);
        assert_int_equal(sp_dump_add_line(d, (char *)line.data, line.len),
                         SP_OK);
    }
    record_line(&line, "text", "\\\"main\\\" #1");
    assert_int_equal(sp_dump_add_line(d, (char *)line.data, line.len), SP_OK);
    sp_dump_get_stats(d, &st);
    assert_int_equal(st.records, 5);
    assert_int_equal(st.records_skipped, 1);
    assert_int_equal(st.profiles, 4);
    assert_int_equal(st.profiles_bad, 4);
    assert_int_equal(st.samples, 0);
    assert_int_equal(sp_dump_add_profile(d, dangling, sizeof(dangling), "s",
                                         SP_DUMP_SOURCE_ANY), SP_ERR_INVALID);
    sp_buf_free(&line);
    sp_buf_free(&gz);
    sp_buf_free(&b64);
    sp_dump_destroy(d);
}

static void
memory_is_bounded(void **state)
{
    sp_dump_options o = { 0, 4096 };
    sp_dump        *d;
    sp_buf          prof = SP_BUF_INIT(0);

    (void)state;
    make_profile(&prof);
    assert_int_equal(sp_dump_create(&o, &d), SP_OK);
    assert_int_equal(sp_dump_add_profile(d, prof.data, prof.len, "s",
                                         SP_DUMP_SOURCE_SNAPSHOT),
                     SP_ERR_TOO_LONG);
    sp_dump_destroy(d);
    sp_buf_free(&prof);
}

static void
gunzip_inverts_gzip_within_its_bounds(void **state)
{
    uint8_t  in[5000];
    sp_buf   gz = SP_BUF_INIT(0), out = SP_BUF_INIT(0);
    sp_buf   small = SP_BUF_INIT(4999);
    size_t   i;

    (void)state;
    for (i = 0; i < sizeof(in); i++) {
        in[i] = (uint8_t)(i * 7 % 13);
    }
    assert_int_equal(sp_gzip(&gz, in, sizeof(in), 6), SP_OK);
    sp_buf_append(&out, "x", 1);
    assert_int_equal(sp_gunzip(&out, gz.data, gz.len), SP_OK);
    assert_int_equal(out.len, 1 + sizeof(in));
    assert_memory_equal(out.data + 1, in, sizeof(in));

    /* One byte too many for the limit. */
    assert_int_equal(sp_gunzip(&small, gz.data, gz.len), SP_ERR_TOO_LONG);
    assert_int_equal(small.len, 0);
    /* Cut short, and with something after the member. */
    out.len = 0;
    assert_int_equal(sp_gunzip(&out, gz.data, gz.len - 1), SP_ERR_INVALID);
    assert_int_equal(out.len, 0);
    sp_buf_append(&gz, "z", 1);
    assert_int_equal(sp_gunzip(&out, gz.data, gz.len), SP_ERR_INVALID);
    /* A broken CRC. */
    gz.len--;
    gz.data[gz.len - 8] ^= 1;
    assert_int_equal(sp_gunzip(&out, gz.data, gz.len), SP_ERR_INVALID);
    assert_int_equal(sp_gunzip(&out, "plain", 5), SP_ERR_INVALID);
    assert_int_equal(sp_buf_status(&out), SP_OK);
    sp_buf_free(&gz);
    sp_buf_free(&out);
    sp_buf_free(&small);
}

static char *
svg(const char *folded_text, const sp_flame_options *o)
{
    sp_buf out = SP_BUF_INIT(0);

    assert_int_equal(sp_flame_svg(&out, folded_text, strlen(folded_text), o),
                     SP_OK);
    sp_buf_append(&out, "", 1);
    return (char *)out.data;
}

static void
flame_graph_boxes(void **state)
{
    sp_flame_options o = { "t <1>", "samples", 1020 };
    char            *s;

    (void)state;
    s = svg("main;handle;work 2\nmain;handle 1\nbad line\nmain;x&y 1\n"
            "main;neg -1\n\nmain;zero 0\r\n", &o);
    assert_non_null(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(s, ">t &lt;1&gt;</text>"));
    /* 1000 pixels for 4 samples: 250 each, children left to right. */
    assert_non_null(strstr(s, "<title>all (4 samples, 100.00%)</title><rect "
                              "x=\"10.0\" y=\"84.0\" width=\"1000.0\""));
    assert_non_null(strstr(s, "<title>main (4 samples, 100.00%)</title>"
                              "<rect x=\"10.0\" y=\"68.0\" width=\"1000.0\""));
    assert_non_null(strstr(s, "<title>handle (3 samples, 75.00%)</title>"
                              "<rect x=\"10.0\""));
    assert_non_null(strstr(s, "<title>work (2 samples, 50.00%)</title>"
                              "<rect x=\"10.0\""));
    assert_non_null(strstr(s, "<title>x&amp;y (1 samples, 25.00%)</title>"
                              "<rect x=\"760.0\""));
    assert_null(strstr(s, "neg"));
    assert_null(strstr(s, "zero"));
    assert_null(strstr(s, "bad"));
    assert_non_null(strstr(s, "</svg>\n"));
    free(s);

    s = svg("", NULL);
    assert_non_null(strstr(s, ">no samples</text>"));
    free(s);

    /* Control characters and broken UTF-8 never reach the XML. */
    s = svg("a\x01\xff;b 1\n", NULL);
    assert_non_null(strstr(s, "<title>a?\xef\xbf\xbd (1 samples"));
    free(s);
}

static void
flame_graph_names_are_cut_to_fit(void **state)
{
    sp_flame_options o = { NULL, NULL, 220 };
    char            *s;

    (void)state;
    /* 200 px for 100 samples: 2 px a sample. a_long_function_name gets
       40 px, room for (40 - 6) / 7 = 4 characters: "a_".."; tiny gets
       2 px: no text. */
    s = svg("root;a_long_function_name 20\nroot;tiny 1\nroot;rest 79\n", &o);
    assert_non_null(strstr(s, ">a_..</text>"));
    assert_null(strstr(s, ">tiny</text>"));
    assert_non_null(strstr(s, "<title>tiny (1 samples"));
    free(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(folded_stacks_root_first),
        cmocka_unit_test(bad_filters_are_refused),
        cmocka_unit_test(top_counts_self_and_total_once_per_sample),
        cmocka_unit_test(traces_and_their_spans),
        cmocka_unit_test(lines_that_are_not_otlp),
        cmocka_unit_test(bad_profiles_are_counted_and_skipped),
        cmocka_unit_test(memory_is_bounded),
        cmocka_unit_test(gunzip_inverts_gzip_within_its_bounds),
        cmocka_unit_test(flame_graph_boxes),
        cmocka_unit_test(flame_graph_names_are_cut_to_fit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
