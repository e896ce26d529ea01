/*
 * The cost of one gRPC export call, for callgrind: CALLS exports of one
 * fixed ExportTraceServiceRequest of SPANS spans (the batch processor's
 * default batch, 512) through spanprof's client, the way the exporter
 * sends them (sp_otlp_export_request, no copy), to a real receiver.
 *
 *   bench_export_call ENDPOINT [CALLS [SPANS]]
 *
 * The first two calls connect and warm gRPC up; under valgrind the
 * statistics are zeroed after them and dumped after the timed calls
 * (part "calls"), so that dump's total over every thread divided by
 * CALLS is the cost of one call. bench/exporter/export_call.sh runs it.
 */
#include "sp_otlp.h"
#include "sp_otlp_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

static const sp_span_attr attrs[] = {
    { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
    { "url.path", 8, SP_VALUE_STRING, "/index.html", 11, 0 },
    { "url.scheme", 10, SP_VALUE_STRING, "http", 4, 0 },
    { "server.address", 14, SP_VALUE_STRING, "localhost", 9, 0 },
    { "server.port", 11, SP_VALUE_INT, NULL, 0, 8080 },
    { "network.protocol.version", 24, SP_VALUE_STRING, "1.1", 3, 0 },
    { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, 200 },
};

/* gRPC's own messages (GRPC_VERBOSITY, GRPC_TRACE) on stderr. */
static void
log_grpc(void *ctx, const char *severity, const char *message)
{
    (void)ctx;
    fprintf(stderr, "grpc %s: %s\n", severity, message);
}

static int
export_once(sp_otlp_client *c, sp_otlp_request *req)
{
    sp_otlp_result r;

    if (sp_otlp_export_request(c, SP_OTLP_TRACES_METHOD, req, 0, &r)
        != SP_OK)
    {
        fprintf(stderr, "export: %d %s\n", r.code, r.message);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    sp_otlp_client_config cc;
    sp_otlp_client       *c;
    sp_otlp_traces       *t;
    sp_otlp_request      *req;
    sp_resource          *res;
    sp_span_record        s;
    char                  err[256];
    int                   calls, spans, i;

    if (argc < 2) {
        fprintf(stderr, "usage: bench_export_call ENDPOINT [CALLS [SPANS]]\n");
        return 2;
    }
    calls = argc > 2 ? atoi(argv[2]) : 20;
    spans = argc > 3 ? atoi(argv[3]) : 512;
    if (calls < 1 || spans < 1) {
        return 2;
    }

    if (sp_resource_create(&res) != SP_OK
        || sp_resource_set_string(res, "service.name", "nginx") != SP_OK
        || sp_otlp_traces_create(NULL, &t) != SP_OK)
    {
        return 1;
    }
    memset(&s, 0, sizeof(s));
    s.trace_flags = 1;
    s.kind = SP_SPAN_KIND_SERVER;
    s.pid = 4242;
    s.name = "GET /index.html";
    s.name_len = strlen(s.name);
    for (i = 0; i < spans; i++) {
        memset(s.trace_id, 0, sizeof(s.trace_id));
        memcpy(s.trace_id, &i, sizeof(i));
        s.trace_id[15] = 1;
        memcpy(s.span_id, &i, sizeof(i));
        s.span_id[7] = 1;
        s.start_ns = 1700000000000000000ULL + (uint64_t)i * 1000000;
        s.end_ns = s.start_ns + 250000;
        if (sp_otlp_traces_add(t, res, &s, attrs,
                               sizeof(attrs) / sizeof(attrs[0])) != SP_OK)
        {
            return 1;
        }
    }
    if (sp_otlp_traces_take(t, &req) != SP_OK) {
        return 1;
    }

    sp_otlp_init(log_grpc, NULL);
    memset(&cc, 0, sizeof(cc));
    cc.endpoint = argv[1];
    if (sp_otlp_client_create(&cc, &c, err, sizeof(err)) != SP_OK) {
        fprintf(stderr, "client: %s\n", err);
        return 1;
    }
    for (i = 0; i < 2; i++) {
        if (export_once(c, req) != 0) {
            return 1;
        }
    }
    CALLGRIND_ZERO_STATS;
    for (i = 0; i < calls; i++) {
        if (export_once(c, req) != 0) {
            return 1;
        }
    }
    CALLGRIND_DUMP_STATS_AT("calls");
    printf("%d calls of %zu bytes (%d spans)\n", calls,
           sp_otlp_request_len(req), spans);

    sp_otlp_request_unref(req);
    sp_otlp_client_destroy(c);
    sp_otlp_traces_destroy(t);
    sp_resource_destroy(res);
    sp_otlp_shutdown();
    return 0;
}
