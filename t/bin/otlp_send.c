/*
 * otlp_send: sends one OTLP request with spanprof's gRPC client, with
 * retries, and prints what happened. A test driver for t/otlp_client.t.
 *
 * The endpoint, headers, timeout and certificate come from the
 * environment through the configuration model (OTEL_EXPORTER_OTLP_*), as
 * in the exporter; the options below override them. The request bytes are
 * written here by hand in protobuf's wire format, with upstream's field
 * numbers, so the test does not depend on our own encoders: what arrives
 * is read back by an independent decoder.
 *
 *   otlp_send [--endpoint URL] [--headers LIST] [--certificate FILE]
 *             [--timeout MS] [--signals logs,traces,...|/method/path]
 *             [--payload empty|log|pprof|span|garbage|FILE]
 *             [--body TEXT] [--service NAME]
 *             [--attempts N] [--max-elapsed MS] [--base MS] [--max MS]
 *             [--random N] [--pause MS]
 *
 * --signals sends one request per item, all through one client (shared
 * with sp_otlp_client_share after the first). logs and traces name the
 * OTLP methods; anything starting with '/' is sent as it is. The payload
 * follows the signal unless --payload says otherwise: "log" for logs,
 * "span" for traces. --random N makes every jitter draw return N.
 * --pause MS waits between two items (a test stops or starts the
 * receiver meanwhile; the client and its channel stay).
 *
 * Output, one line each: "attempt N: LINE; retry in D ms" or "...; no
 * retry" for every call, then "result signal=... code=... name=...
 * retryable=... attempts=... elapsed_ms=... response_len=...
 * rejected=...". Exit status 0 when every export succeeded, 1 when one
 * failed, 2 on bad usage or configuration.
 */
#include "sp_common.h"
#include "sp_config.h"
#include "sp_otlp_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

typedef struct {
    uint8_t *p;
    size_t   len;
    size_t   cap;
} buf;

static void
die(const char *what)
{
    fprintf(stderr, "otlp_send: %s\n", what);
    exit(2);
}

static void
put(buf *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL) {
            die("out of memory");
        }
    }
    if (len > 0) {
        memcpy(b->p + b->len, data, len);
    }
    b->len += len;
}

static void
put_varint(buf *b, uint64_t v)
{
    uint8_t byte;

    do {
        byte = v & 0x7f;
        v >>= 7;
        if (v != 0) {
            byte |= 0x80;
        }
        put(b, &byte, 1);
    } while (v != 0);
}

static void
put_tag(buf *b, unsigned field, unsigned wire_type)
{
    put_varint(b, (uint64_t)field << 3 | wire_type);
}

static void
put_uint(buf *b, unsigned field, uint64_t v)
{
    put_tag(b, field, 0);
    put_varint(b, v);
}

static void
put_fixed64(buf *b, unsigned field, uint64_t v)
{
    uint8_t le[8];
    int     i;

    for (i = 0; i < 8; i++) {
        le[i] = (uint8_t)(v >> (8 * i));
    }
    put_tag(b, field, 1);
    put(b, le, 8);
}

static void
put_bytes(buf *b, unsigned field, const void *data, size_t len)
{
    put_tag(b, field, 2);
    put_varint(b, len);
    put(b, data, len);
}

static void
put_string(buf *b, unsigned field, const char *s)
{
    put_bytes(b, field, s, strlen(s));
}

/* Appends sub as an embedded message and empties it. */
static void
put_message(buf *b, unsigned field, buf *sub)
{
    put_bytes(b, field, sub->p, sub->len);
    free(sub->p);
    memset(sub, 0, sizeof(*sub));
}

/* KeyValue { key = 1; value = 2: AnyValue { string_value = 1 } } */
static void
put_attribute(buf *b, unsigned field, const char *key, const char *value)
{
    buf kv = { 0 }, any = { 0 };

    put_string(&kv, 1, key);
    put_string(&any, 1, value);
    put_message(&kv, 2, &any);
    put_message(b, field, &kv);
}

/* Resource { attributes = 1 } */
static void
put_resource(buf *b, unsigned field, const char *service)
{
    buf res = { 0 };

    put_attribute(&res, 1, "service.name", service);
    put_attribute(&res, 1, "otlp_send.pid", "1234");
    put_message(b, field, &res);
}

/* InstrumentationScope { name = 1; version = 2 } */
static void
put_scope(buf *b, unsigned field)
{
    buf scope = { 0 };

    put_string(&scope, 1, "otel.profiling");
    put_string(&scope, 2, "0.1.0");
    put_message(b, field, &scope);
}

static void
put_packed(buf *b, unsigned field, const uint64_t *v, size_t n)
{
    buf    packed = { 0 };
    size_t i;

    for (i = 0; i < n; i++) {
        put_varint(&packed, v[i]);
    }
    put_message(b, field, &packed);
}

/* ValueType { type = 1; unit = 2 } */
static void
put_value_type(buf *b, unsigned field, uint64_t type, uint64_t unit)
{
    buf vt = { 0 };

    put_uint(&vt, 1, type);
    put_uint(&vt, 2, unit);
    put_message(b, field, &vt);
}

/*
 * A pprof Profile with one sample of one frame: main at line 42 of
 * otlp_send.c in /usr/bin/otlp_send (build id abc123), labelled with a
 * trace id, a numeric event time and period.
 */
static void
pprof_profile(buf *b)
{
    static const char *const strings[] = {
        "", "samples", "count", "cpu", "nanoseconds", "main",
        "otlp_send.c", "/usr/bin/otlp_send", "abc123", "trace_id",
        "4bf92f3577b34da6a3ce929d0e0e4736", "source.event.time"
    };
    uint64_t loc[1] = { 1 }, val[2] = { 1, 10000000 };
    buf      sample = { 0 }, label = { 0 }, m = { 0 }, l = { 0 }, line = { 0 };
    buf      f = { 0 };
    size_t   i;

    put_value_type(b, 1, 1, 2);
    put_value_type(b, 1, 3, 4);
    put_packed(&sample, 1, loc, 1);
    put_packed(&sample, 2, val, 2);
    put_uint(&label, 1, 9);                 /* Label.key */
    put_uint(&label, 2, 10);                /* Label.str */
    put_message(&sample, 3, &label);
    put_uint(&label, 1, 11);
    put_uint(&label, 3, 1700000000123ull);  /* Label.num */
    put_message(&sample, 3, &label);
    put_message(b, 2, &sample);
    put_uint(&m, 1, 1);                     /* Mapping.id */
    put_uint(&m, 2, 0x400000);              /* memory_start */
    put_uint(&m, 3, 0x500000);              /* memory_limit */
    put_uint(&m, 5, 7);                     /* filename */
    put_uint(&m, 6, 8);                     /* build_id */
    put_message(b, 3, &m);
    put_uint(&l, 1, 1);                     /* Location.id */
    put_uint(&l, 2, 1);                     /* mapping_id */
    put_uint(&l, 3, 0x401234);              /* address */
    put_uint(&line, 1, 1);                  /* Line.function_id */
    put_uint(&line, 2, 42);                 /* Line.line */
    put_message(&l, 4, &line);
    put_message(b, 4, &l);
    put_uint(&f, 1, 1);                     /* Function.id */
    put_uint(&f, 2, 5);                     /* name */
    put_uint(&f, 3, 5);                     /* system_name */
    put_uint(&f, 4, 6);                     /* filename */
    put_message(b, 5, &f);
    for (i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        put_string(b, 6, strings[i]);
    }
    put_value_type(b, 11, 3, 4);            /* period_type */
    put_uint(b, 12, 10000000);              /* period */
}

static char *
gzip_base64(const buf *in)
{
    static const char digits[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    z_stream z;
    uint8_t  gz[65536];
    size_t   n, i, o = 0;
    char    *out;
    uint32_t v;

    memset(&z, 0, sizeof(z));
    /* 15 + 16: a gzip header and trailer, not zlib's. */
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
    {
        die("deflateInit2");
    }
    z.next_in = in->p;
    z.avail_in = (uInt)in->len;
    z.next_out = gz;
    z.avail_out = sizeof(gz);
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
        die("deflate");
    }
    n = sizeof(gz) - z.avail_out;
    deflateEnd(&z);

    out = malloc((n + 2) / 3 * 4 + 1);
    if (out == NULL) {
        die("out of memory");
    }
    for (i = 0; i < n; i += 3) {
        v = (uint32_t)gz[i] << 16;
        v |= i + 1 < n ? (uint32_t)gz[i + 1] << 8 : 0;
        v |= i + 2 < n ? gz[i + 2] : 0;
        out[o++] = digits[v >> 18 & 63];
        out[o++] = digits[v >> 12 & 63];
        out[o++] = i + 1 < n ? digits[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? digits[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/*
 * ExportLogsServiceRequest { resource_logs = 1: ResourceLogs {
 *   resource = 1; scope_logs = 2: ScopeLogs { scope = 1;
 *   log_records = 2: LogRecord { time_unix_nano = 1 (fixed64);
 *   body = 5 (AnyValue); attributes = 6 } } } }
 */
static void
logs_request(buf *b, const char *service, const char *body, bool pprof)
{
    buf   rl = { 0 }, sl = { 0 }, lr = { 0 }, any = { 0 }, prof = { 0 };
    char *encoded = NULL;

    put_resource(&rl, 1, service);
    put_scope(&sl, 1);
    put_fixed64(&lr, 1, 1700000000123456789ull);
    if (pprof) {
        pprof_profile(&prof);
        encoded = gzip_base64(&prof);
        free(prof.p);
        body = encoded;
    }
    put_string(&any, 1, body);
    put_message(&lr, 5, &any);
    put_attribute(&lr, 6, "com.splunk.sourcetype", "otel.profiling");
    if (pprof) {
        put_attribute(&lr, 6, "profiling.data.format", "pprof-gzip-base64");
    }
    put_message(&sl, 2, &lr);
    put_message(&rl, 2, &sl);
    put_message(b, 1, &rl);
    free(encoded);
}

/*
 * ExportTraceServiceRequest { resource_spans = 1: ResourceSpans {
 *   resource = 1; scope_spans = 2: ScopeSpans { scope = 1; spans = 2:
 *   Span { trace_id = 1; span_id = 2; name = 5; kind = 6;
 *   start_time_unix_nano = 7; end_time_unix_nano = 8 } } } }
 */
static void
traces_request(buf *b, const char *service)
{
    static const uint8_t trace_id[16] = {
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
        0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36
    };
    static const uint8_t span_id[8] = {
        0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7
    };
    buf rs = { 0 }, ss = { 0 }, span = { 0 };

    put_resource(&rs, 1, service);
    put_scope(&ss, 1);
    put_bytes(&span, 1, trace_id, sizeof(trace_id));
    put_bytes(&span, 2, span_id, sizeof(span_id));
    put_string(&span, 5, "GET /otlp_send");
    put_uint(&span, 6, 2);                  /* SPAN_KIND_SERVER */
    put_fixed64(&span, 7, 1700000000000000000ull);
    put_fixed64(&span, 8, 1700000000250000000ull);
    put_message(&ss, 2, &span);
    put_message(&rs, 2, &ss);
    put_message(b, 1, &rs);
}

static void
file_request(buf *b, const char *path)
{
    FILE   *f = fopen(path, "rb");
    uint8_t chunk[4096];
    size_t  n;

    if (f == NULL) {
        fprintf(stderr, "otlp_send: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        put(b, chunk, n);
    }
    fclose(f);
}

static const char *
env_lookup(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

static void
env_warn(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "otlp_send: warning: %s\n", message);
}

/* gRPC's own lines, on stderr with a prefix the test can recognise. */
static void
grpc_log(void *ctx, const char *severity, const char *message)
{
    (void)ctx;
    fprintf(stderr, "grpc %s: %s\n", severity, message);
}

typedef struct {
    const sp_otlp_client *client;
} attempt_ctx;

static void
on_attempt(void *ctx, const sp_otlp_result *r, bool retry, uint64_t delay)
{
    attempt_ctx *a = ctx;
    char         line[1024];

    sp_otlp_result_format(a->client, r, line, sizeof(line));
    if (retry) {
        printf("attempt %u: %s; retry in %llu ms\n", (unsigned)r->attempts,
               line, (unsigned long long)delay);
    } else {
        printf("attempt %u: %s; no retry\n", (unsigned)r->attempts, line);
    }
    fflush(stdout);
}

static uint64_t
fixed_random(void *ctx)
{
    return *(uint64_t *)ctx;
}

static uint64_t
number(const char *opt, const char *s)
{
    char              *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(stderr, "otlp_send: %s wants a number, not %s\n", opt, s);
        exit(2);
    }
    return v;
}

int
main(int argc, char **argv)
{
    sp_config            *config;
    sp_otlp_client_config cc;
    sp_otlp_client       *first = NULL, *client;
    bool                  shared;
    sp_otlp_retry_policy  policy;
    sp_otlp_result        r;
    attempt_ctx           actx;
    const char           *payload = NULL, *body = "hello from otlp_send";
    const char           *service = "otlp_send";
    char                 *signals = NULL, *item, *save = NULL;
    const char           *method;
    char                  err[512], line[1024];
    uint64_t              fixed = 0, pause_ms = 0;
    struct timespec       ts;
    buf                   req;
    int                   i, failed = 0;

    config = sp_config_create(SP_SERVER_NGINX);
    if (config == NULL) {
        die("out of memory");
    }
    sp_config_complete(config, env_lookup, NULL, env_warn, NULL);
    memset(&cc, 0, sizeof(cc));
    cc.endpoint = sp_config_text(config, SP_SETTING_PROFILER_LOGS_ENDPOINT);
    cc.headers = sp_config_text(config, SP_SETTING_OTLP_HEADERS);
    cc.certificate = sp_config_text(config, SP_SETTING_OTLP_CERTIFICATE);
    cc.timeout_ms = sp_config_integer(config, SP_SETTING_OTLP_TIMEOUT);

    memset(&policy, 0, sizeof(policy));
    policy.max_attempts = 1;
    for (i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (val == NULL) {
            fprintf(stderr, "otlp_send: %s needs a value\n", opt);
            return 2;
        }
        i++;
        if (strcmp(opt, "--endpoint") == 0) {
            cc.endpoint = val;
        } else if (strcmp(opt, "--headers") == 0) {
            cc.headers = val;
        } else if (strcmp(opt, "--certificate") == 0) {
            cc.certificate = val;
        } else if (strcmp(opt, "--timeout") == 0) {
            cc.timeout_ms = number(opt, val);
        } else if (strcmp(opt, "--signals") == 0) {
            signals = strdup(val);
        } else if (strcmp(opt, "--payload") == 0) {
            payload = val;
        } else if (strcmp(opt, "--body") == 0) {
            body = val;
        } else if (strcmp(opt, "--service") == 0) {
            service = val;
        } else if (strcmp(opt, "--attempts") == 0) {
            policy.max_attempts = (uint32_t)number(opt, val);
        } else if (strcmp(opt, "--max-elapsed") == 0) {
            policy.max_elapsed_ms = number(opt, val);
        } else if (strcmp(opt, "--base") == 0) {
            policy.base_ms = number(opt, val);
        } else if (strcmp(opt, "--max") == 0) {
            policy.max_ms = number(opt, val);
        } else if (strcmp(opt, "--pause") == 0) {
            pause_ms = number(opt, val);
        } else if (strcmp(opt, "--random") == 0) {
            fixed = number(opt, val);
            policy.random = fixed_random;
            policy.random_ctx = &fixed;
        } else {
            fprintf(stderr, "otlp_send: unknown option %s\n", opt);
            return 2;
        }
    }
    if (signals == NULL) {
        signals = strdup("logs");
    }

    sp_otlp_init(grpc_log, NULL);
    if (sp_otlp_client_create(&cc, &first, err, sizeof(err)) != SP_OK) {
        fprintf(stderr, "otlp_send: %s\n", err);
        sp_otlp_shutdown();
        sp_config_destroy(config);
        free(signals);
        return 2;
    }
    policy.on_attempt = on_attempt;
    policy.on_attempt_ctx = &actx;
    client = first;
    for (item = strtok_r(signals, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save))
    {
        const char *kind = payload;

        shared = client == NULL;
        if (shared) {
            client = sp_otlp_client_share(first);
            if (pause_ms > 0) {
                printf("pause %llu ms\n", (unsigned long long)pause_ms);
                fflush(stdout);
                ts.tv_sec = (time_t)(pause_ms / 1000);
                ts.tv_nsec = (long)(pause_ms % 1000) * 1000000;
                nanosleep(&ts, NULL);
            }
        }
        actx.client = client;
        if (strcmp(item, "logs") == 0) {
            method = SP_OTLP_LOGS_METHOD;
            kind = kind != NULL ? kind : "log";
        } else if (strcmp(item, "traces") == 0) {
            method = SP_OTLP_TRACES_METHOD;
            kind = kind != NULL ? kind : "span";
        } else {
            method = item;
            kind = kind != NULL ? kind : "empty";
        }
        memset(&req, 0, sizeof(req));
        if (strcmp(kind, "empty") == 0) {
            /* zero bytes: a valid request with nothing in it */
        } else if (strcmp(kind, "log") == 0) {
            logs_request(&req, service, body, false);
        } else if (strcmp(kind, "pprof") == 0) {
            logs_request(&req, service, body, true);
        } else if (strcmp(kind, "span") == 0) {
            traces_request(&req, service);
        } else if (strcmp(kind, "garbage") == 0) {
            /* field 1, length-delimited, claiming more bytes than follow */
            put(&req, "\x0a\xff\x01\x01", 4);
        } else {
            file_request(&req, kind);
        }

        sp_otlp_export_retry(client, method, req.p, req.len, &policy, &r);
        sp_otlp_result_format(client, &r, line, sizeof(line));
        printf("result signal=%s code=%d name=%s retryable=%d attempts=%u "
               "elapsed_ms=%llu response_len=%zu rejected=%lld\n", item,
               r.code, sp_otlp_status_name(r.code), r.retryable ? 1 : 0,
               (unsigned)r.attempts, (unsigned long long)r.elapsed_ms,
               r.response_len, (long long)r.rejected);
        printf("message %s\n", line);
        fflush(stdout);
        failed |= r.code != SP_GRPC_OK;
        free(req.p);
        if (shared) {
            sp_otlp_client_destroy(client);
        }
        client = NULL;
    }
    sp_otlp_client_destroy(first);
    sp_otlp_shutdown();
    sp_config_destroy(config);
    free(signals);
    return failed ? 1 : 0;
}
