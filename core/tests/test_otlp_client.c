#include "sp_test.h"
#include "sp_otlp_client.h"
#include "sp_test_grpc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- metadata */

static void
metadata_keys_lowercased_values_decoded(void **state)
{
    sp_otlp_metadata *md = NULL;

    (void)state;
    assert_int_equal(sp_otlp_metadata_parse(
        "X-SF-Token=a%20b%2Cc, Api-Key = k=v ,x-trace.ID_2=%41", &md, NULL,
        0), SP_OK);
    assert_int_equal(sp_otlp_metadata_count(md), 3);
    assert_string_equal(sp_otlp_metadata_key(md, 0), "x-sf-token");
    assert_string_equal(sp_otlp_metadata_value(md, 0), "a b,c");
    assert_string_equal(sp_otlp_metadata_key(md, 1), "api-key");
    assert_string_equal(sp_otlp_metadata_value(md, 1), "k=v");
    assert_string_equal(sp_otlp_metadata_key(md, 2), "x-trace.id_2");
    assert_string_equal(sp_otlp_metadata_value(md, 2), "A");
    assert_null(sp_otlp_metadata_key(md, 3));
    assert_null(sp_otlp_metadata_value(md, 3));
    sp_otlp_metadata_destroy(md);
}

static void
metadata_empty_lists(void **state)
{
    static const char *const empty[] = { NULL, "", "  ", ",", " , ,, " };
    sp_otlp_metadata *md;
    size_t            i;

    (void)state;
    for (i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        md = NULL;
        assert_int_equal(sp_otlp_metadata_parse(empty[i], &md, NULL, 0),
                         SP_OK);
        assert_int_equal(sp_otlp_metadata_count(md), 0);
        sp_otlp_metadata_destroy(md);
    }
}

static void
metadata_refuses_without_showing_values(void **state)
{
    static const char *const bad[][2] = {
        /* headers, what the message must name */
        { "Bad/Key=hunter2", "\"Bad/Key\"" },
        { "ok=1,Ke:y=hunter2", "\"Ke:y\"" },
        { "grpc-timeout=hunter2", "reserved" },
        { "Grpc-Status=hunter2", "reserved" },
        { "k=hunter2%0A", "\"k\"" },
        { "k=hunter2%7F", "\"k\"" },
        { "k=hunter2%C3%A9", "\"k\"" },
        { "k=hunter2\tx", "\"k\"" },
        { "novalue,k=hunter2", "key=value" },
        { "k=hunter2%zz", "key=value" }
    };
    sp_otlp_metadata *md;
    char              err[256];
    size_t            i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        md = NULL;
        strcpy(err, "unset");
        if (sp_otlp_metadata_parse(bad[i][0], &md, err, sizeof(err))
            != SP_ERR_INVALID)
        {
            fail_msg("accepted %s", bad[i][0]);
        }
        assert_null(md);
        if (strstr(err, bad[i][1]) == NULL) {
            fail_msg("%s: \"%s\" does not say %s", bad[i][0], err,
                     bad[i][1]);
        }
        if (strstr(err, "hunter2") != NULL) {
            fail_msg("%s: the message shows the value: %s", bad[i][0], err);
        }
    }
}

static void
metadata_binary_keys_carry_any_byte(void **state)
{
    sp_otlp_metadata *md = NULL;

    (void)state;
    assert_int_equal(sp_otlp_metadata_parse("Trace-BIN=%0A%FF", &md, NULL, 0),
                     SP_OK);
    assert_string_equal(sp_otlp_metadata_key(md, 0), "trace-bin");
    assert_string_equal(sp_otlp_metadata_value(md, 0), "\n\xff");
    sp_otlp_metadata_destroy(md);
}

/* ---- statuses */

static void
only_three_codes_are_retryable(void **state)
{
    int code;

    (void)state;
    for (code = -1; code <= 20; code++) {
        bool want = code == 4 || code == 8 || code == 14;

        if (sp_otlp_status_retryable(code) != want) {
            fail_msg("code %d: retryable should be %d", code, want);
        }
    }
    assert_true(sp_otlp_status_retryable(SP_GRPC_UNAVAILABLE));
    assert_true(sp_otlp_status_retryable(SP_GRPC_RESOURCE_EXHAUSTED));
    assert_true(sp_otlp_status_retryable(SP_GRPC_DEADLINE_EXCEEDED));
}

static void
status_names(void **state)
{
    (void)state;
    assert_string_equal(sp_otlp_status_name(0), "OK");
    assert_string_equal(sp_otlp_status_name(4), "DEADLINE_EXCEEDED");
    assert_string_equal(sp_otlp_status_name(8), "RESOURCE_EXHAUSTED");
    assert_string_equal(sp_otlp_status_name(12), "UNIMPLEMENTED");
    assert_string_equal(sp_otlp_status_name(14), "UNAVAILABLE");
    assert_string_equal(sp_otlp_status_name(16), "UNAUTHENTICATED");
    assert_string_equal(sp_otlp_status_name(17), "UNKNOWN_STATUS");
    assert_string_equal(sp_otlp_status_name(-1), "UNKNOWN_STATUS");
}

/* ---- backoff */

static void
backoff_ceilings_double_up_to_the_max(void **state)
{
    static const uint64_t want[] = {
        1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000
    };
    sp_otlp_retry_policy p;
    uint32_t             i;

    (void)state;
    memset(&p, 0, sizeof(p));
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(sp_otlp_backoff_ceiling(&p, i), want[i]);
    }
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 1000000), 30000);
    assert_int_equal(sp_otlp_backoff_ceiling(&p, UINT32_MAX), 30000);

    p.base_ms = 100;
    p.max_ms = 250;
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 0), 100);
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 1), 200);
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 2), 250);
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 63), 250);
    assert_int_equal(sp_otlp_backoff_ceiling(&p, 64), 250);

    /* a huge base and max: no overflow */
    p.base_ms = UINT64_MAX / 2 + 1;
    p.max_ms = UINT64_MAX;
    assert_true(sp_otlp_backoff_ceiling(&p, 5) == UINT64_MAX);
}

/* Full jitter: every wait from 0 to the ceiling, never above. */
static void
backoff_jitter_is_full(void **state)
{
    sp_otlp_retry_policy p;
    bool                 seen[101];
    uint64_t             r, d;

    (void)state;
    memset(&p, 0, sizeof(p));
    p.base_ms = 100;
    p.max_ms = 1000;
    memset(seen, 0, sizeof(seen));
    for (r = 0; r < 10000; r++) {
        d = sp_otlp_backoff_delay(&p, 0, r * 7919);
        assert_true(d <= 100);
        seen[d] = true;
    }
    for (d = 0; d <= 100; d++) {
        if (!seen[d]) {
            fail_msg("a wait of %d ms never comes", (int)d);
        }
    }
    assert_int_equal(sp_otlp_backoff_delay(&p, 0, 0), 0);
    assert_int_equal(sp_otlp_backoff_delay(&p, 0, 100), 100);
    assert_int_equal(sp_otlp_backoff_delay(&p, 0, 101), 0);
    assert_int_equal(sp_otlp_backoff_delay(&p, 3, 999), 999 % 801);
    assert_int_equal(sp_otlp_backoff_delay(&p, 9, UINT64_MAX),
                     UINT64_MAX % 1001);
}

/* ---- the retry loop, against a closed port on loopback */

typedef struct {
    uint64_t draws[8];
    size_t   next;
    uint64_t slept[8];
    size_t   naps;
    bool     stop_after_first;
    int      calls;
    bool     retry[8];
    int      codes[8];
} retry_log;

static uint64_t
scripted_random(void *ctx)
{
    retry_log *l = ctx;

    return l->draws[l->next++ % 8];
}

static bool
recorded_sleep(void *ctx, uint64_t ms)
{
    retry_log *l = ctx;

    if (l->naps == 8) {
        fail_msg("more retries than the policy allows");
    }
    l->slept[l->naps++] = ms;
    return !l->stop_after_first;
}

static void
recorded_attempt(void *ctx, const sp_otlp_result *r, bool retry,
                 uint64_t delay)
{
    retry_log *l = ctx;

    (void)delay;
    if (l->calls == 8) {
        fail_msg("more calls than the policy allows");
    }
    l->retry[l->calls] = retry;
    l->codes[l->calls] = r->code;
    l->calls++;
}

/* A loopback port that was free a moment ago: connecting is refused. */
static uint16_t
closed_port(void)
{
    struct sockaddr_in a;
    socklen_t          len = sizeof(a);
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static sp_otlp_client *
client_to_closed_port(void)
{
    sp_otlp_client_config cfg;
    sp_otlp_client       *c = NULL;
    char                  url[64], err[256];

    snprintf(url, sizeof(url), "http://127.0.0.1:%u",
             (unsigned)closed_port());
    memset(&cfg, 0, sizeof(cfg));
    cfg.endpoint = url;
    cfg.timeout_ms = 2000;
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_OK);
    return c;
}

static sp_otlp_retry_policy
scripted_policy(retry_log *l)
{
    sp_otlp_retry_policy p;

    memset(&p, 0, sizeof(p));
    p.random = scripted_random;
    p.random_ctx = l;
    p.sleep = recorded_sleep;
    p.sleep_ctx = l;
    p.on_attempt = recorded_attempt;
    p.on_attempt_ctx = l;
    return p;
}

static void
retry_follows_the_schedule(void **state)
{
    sp_otlp_client      *c = client_to_closed_port();
    retry_log            l = { .draws = { 700, 5000, 1234567 } };
    sp_otlp_retry_policy p = scripted_policy(&l);
    sp_otlp_result       r;

    (void)state;
    p.max_attempts = 4;
    assert_int_equal(sp_otlp_export_retry(c, SP_OTLP_LOGS_METHOD, "", 0, &p,
                                          &r), SP_ERR_IO);
    assert_int_equal(r.code, SP_GRPC_UNAVAILABLE);
    assert_true(r.retryable);
    assert_int_equal(r.attempts, 4);
    /* ceilings 1000, 2000, 4000 with the default base and max */
    assert_int_equal(l.naps, 3);
    assert_int_equal(l.slept[0], 700);
    assert_int_equal(l.slept[1], 5000 % 2001);
    assert_int_equal(l.slept[2], 1234567 % 4001);
    assert_int_equal(l.calls, 4);
    assert_true(l.retry[0] && l.retry[1] && l.retry[2]);
    assert_false(l.retry[3]);
    assert_int_equal(l.codes[3], SP_GRPC_UNAVAILABLE);
    sp_otlp_client_destroy(c);
}

static void
retry_stops_when_the_sleep_says_so(void **state)
{
    sp_otlp_client      *c = client_to_closed_port();
    retry_log            l = { .draws = { 1 }, .stop_after_first = true };
    sp_otlp_retry_policy p = scripted_policy(&l);
    sp_otlp_result       r;

    (void)state;
    p.max_attempts = 10;
    sp_otlp_export_retry(c, SP_OTLP_TRACES_METHOD, "", 0, &p, &r);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(l.naps, 1);
    assert_int_equal(r.code, SP_GRPC_UNAVAILABLE);
    sp_otlp_client_destroy(c);
}

static void
retry_keeps_within_the_time_bound(void **state)
{
    sp_otlp_client      *c = client_to_closed_port();
    retry_log            l = { .draws = { 300, 1500 } };
    sp_otlp_retry_policy p = scripted_policy(&l);
    sp_otlp_result       r;

    (void)state;
    /* 300 ms fits in 1000 ms; the next wait, 1500 ms, would not. */
    p.max_elapsed_ms = 1000;
    sp_otlp_export_retry(c, SP_OTLP_LOGS_METHOD, "", 0, &p, &r);
    assert_int_equal(l.naps, 1);
    assert_int_equal(l.slept[0], 300);
    assert_int_equal(r.attempts, 2);
    assert_false(l.retry[1]);
    sp_otlp_client_destroy(c);
}

static void
retry_never_repeats_a_final_code(void **state)
{
    sp_otlp_client      *c = client_to_closed_port();
    retry_log            l = { .draws = { 0 } };
    sp_otlp_retry_policy p = scripted_policy(&l);
    sp_otlp_result       r;

    (void)state;
    p.max_attempts = 5;
    /* refused before any network: INVALID_ARGUMENT is final */
    sp_otlp_export_retry(c, "no-slash", "", 0, &p, &r);
    assert_int_equal(r.code, SP_GRPC_INVALID_ARGUMENT);
    assert_false(r.retryable);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(l.naps, 0);

    memset(&p, 0, sizeof(p));
    assert_int_equal(sp_otlp_export_retry(c, SP_OTLP_LOGS_METHOD, "", 0, &p,
                                          &r), SP_ERR_INVALID);
    assert_int_equal(r.code, SP_GRPC_INVALID_ARGUMENT);
    sp_otlp_client_destroy(c);
}

/* ---- clients */

static void
client_refuses_bad_settings_with_reasons(void **state)
{
    sp_otlp_client_config cfg;
    sp_otlp_client       *c = NULL;
    char                  err[512], path[] = "/tmp/sp_otlp_certXXXXXX";
    int                   fd;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.endpoint = "tcp://x:1";
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_ERR_INVALID);
    assert_non_null(strstr(err, "\"tcp://x:1\""));

    cfg.endpoint = "https://x:1";
    cfg.headers = "a b=hunter2";
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_ERR_INVALID);
    assert_null(strstr(err, "hunter2"));

    cfg.headers = NULL;
    cfg.certificate = "/nonexistent/ca.pem";
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/ca.pem"));

    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a certificate\n", 18), 18);
    close(fd);
    cfg.certificate = path;
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_ERR_INVALID);
    assert_non_null(strstr(err, "holds no PEM certificate"));
    unlink(path);
    assert_null(c);

    /* plaintext does not read the certificate at all */
    cfg.endpoint = "http://x:1";
    cfg.certificate = "/nonexistent/ca.pem";
    assert_int_equal(sp_otlp_client_create(&cfg, &c, err, sizeof(err)),
                     SP_OK);
    sp_otlp_client_destroy(c);
}

static void
client_defaults_and_sharing(void **state)
{
    sp_otlp_client_config cfg;
    sp_otlp_client       *c = NULL, *shared;
    const sp_endpoint    *e;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(sp_otlp_client_create(&cfg, &c, NULL, 0), SP_OK);
    e = sp_otlp_client_endpoint(c);
    assert_string_equal(e->host, "localhost");
    assert_int_equal(e->port, 4317);
    assert_false(e->tls);
    shared = sp_otlp_client_share(c);
    assert_ptr_equal(shared, c);
    sp_otlp_client_destroy(c);
    /* still usable through the second reference */
    assert_string_equal(sp_otlp_client_endpoint(shared)->host, "localhost");
    sp_otlp_client_destroy(shared);
    sp_otlp_client_destroy(NULL);
}

/* ---- responses and messages */

static void
partial_success_is_read(void **state)
{
    /* ExportLogsServiceResponse { partial_success { 3, "x" } } */
    static const uint8_t ok[] = { 0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, 'x' };
    /* an unknown varint field 5 first, and a field 9 inside */
    static const uint8_t extra[] = {
        0x28, 0x96, 0x01, 0x0a, 0x09, 0x48, 0x01, 0x08, 0xe8, 0x07,
        0x12, 0x02, 'o', 'k'
    };
    static const uint8_t truncated[] = { 0x0a, 0x05, 0x08, 0x03, 0x12 };
    static const uint8_t bad_length[] = { 0x0a, 0x7f, 0x08, 0x03 };
    int64_t rejected;
    char    msg[16];

    (void)state;
    assert_int_equal(sp_otlp_parse_partial_success(ok, sizeof(ok),
                                                   &rejected, msg,
                                                   sizeof(msg)), SP_OK);
    assert_int_equal(rejected, 3);
    assert_string_equal(msg, "x");
    assert_int_equal(sp_otlp_parse_partial_success(extra, sizeof(extra),
                                                   &rejected, msg,
                                                   sizeof(msg)), SP_OK);
    assert_int_equal(rejected, 1000);
    assert_string_equal(msg, "ok");
    assert_int_equal(sp_otlp_parse_partial_success("", 0, &rejected, msg,
                                                   sizeof(msg)), SP_OK);
    assert_int_equal(rejected, 0);
    assert_string_equal(msg, "");
    assert_int_equal(sp_otlp_parse_partial_success(truncated,
                     sizeof(truncated), &rejected, msg, sizeof(msg)),
                     SP_ERR_INVALID);
    assert_int_equal(rejected, 0);
    assert_int_equal(sp_otlp_parse_partial_success(bad_length,
                     sizeof(bad_length), &rejected, msg, sizeof(msg)),
                     SP_ERR_INVALID);
}

static void
result_line_for_operators(void **state)
{
    sp_otlp_client       *c = NULL;
    sp_otlp_client_config cfg;
    sp_otlp_result        r;
    char                  line[512], small[20];
    size_t                n;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.endpoint = "https://Collector:4317/";
    cfg.headers = "X-SF-Token=hunter2";
    assert_int_equal(sp_otlp_client_create(&cfg, &c, NULL, 0), SP_OK);

    memset(&r, 0, sizeof(r));
    strcpy(r.method, SP_OTLP_LOGS_METHOD);
    r.code = SP_GRPC_UNAVAILABLE;
    r.retryable = true;
    strcpy(r.message, "no \"route\"\nto host");
    r.attempts = 3;
    r.elapsed_ms = 4200;
    n = sp_otlp_result_format(c, &r, line, sizeof(line));
    assert_int_equal(n, strlen(line));
    assert_string_equal(line, "OTLP export of logs to "
                        "https://Collector:4317 failed: UNAVAILABLE (14) "
                        "\"no \\\"route\\\"\\x0ato host\" after 3 attempts "
                        "in 4200 ms, retryable");

    memset(&r, 0, sizeof(r));
    strcpy(r.method, SP_OTLP_TRACES_METHOD);
    r.attempts = 1;
    r.rejected = 2;
    strcpy(r.partial_message, "two spans too old");
    sp_otlp_result_format(c, &r, line, sizeof(line));
    assert_string_equal(line, "OTLP export of traces to "
                        "https://Collector:4317 succeeded after 1 attempt "
                        "in 0 ms, partial success: 2 rejected "
                        "\"two spans too old\"");

    r.code = SP_GRPC_INVALID_ARGUMENT;
    sp_otlp_result_format(c, &r, line, sizeof(line));
    assert_non_null(strstr(line, "INVALID_ARGUMENT (3) \"\""));
    assert_non_null(strstr(line, "not retryable"));
    assert_null(strstr(line, "hunter2"));

    /* truncated, always terminated, and the full length is returned */
    n = sp_otlp_result_format(c, &r, small, sizeof(small));
    assert_true(n > sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    sp_otlp_client_destroy(c);
}

/* ---- requests as pieces, to a receiver of the test's own */

/*
 * n bytes, (i * 7 + seed) & 0xff at i, in five pieces or so: copies and
 * moved buffers in turn.
 */
static sp_otlp_request *
pieces_request(size_t n, uint8_t seed)
{
    sp_otlp_request *r = NULL;
    sp_buf           b;
    size_t           off = 0, k, i, piece = n / 5 + 1;
    uint8_t         *tmp = malloc(piece);
    bool             copy = true;

    assert_non_null(tmp);
    assert_int_equal(sp_otlp_request_create(&r), SP_OK);
    for (off = 0; off < n; off += k, copy = !copy) {
        k = n - off < piece ? n - off : piece;
        for (i = 0; i < k; i++) {
            tmp[i] = (uint8_t)((off + i) * 7 + seed);
        }
        if (copy) {
            assert_int_equal(sp_otlp_request_copy(r, tmp, k), SP_OK);
        } else {
            sp_buf_init(&b, 0);
            assert_int_equal(sp_buf_append(&b, tmp, k), SP_OK);
            assert_int_equal(sp_otlp_request_take(r, &b), SP_OK);
        }
    }
    free(tmp);
    assert_int_equal(sp_otlp_request_len(r), n);
    return r;
}

static sp_otlp_client *
client_to(const test_grpc *s)
{
    sp_otlp_client_config cfg;
    sp_otlp_client       *c = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.endpoint = s->endpoint;
    assert_int_equal(sp_otlp_client_create(&cfg, &c, NULL, 0), SP_OK);
    return c;
}

static void
assert_got(const test_grpc *s, size_t call, const sp_otlp_request *r)
{
    sp_buf flat = SP_BUF_INIT(0);

    assert_int_equal(sp_otlp_request_flatten(r, &flat), SP_OK);
    assert_int_equal(s->got_len[call], flat.len);
    assert_memory_equal(s->got[call], flat.data, flat.len);
    sp_buf_free(&flat);
}

/*
 * The pieces arrive as one message, in order; the same request sent again
 * (the exporter's retry: it keeps its reference, nothing is copied)
 * arrives the same; sp_otlp_export_timeout still sends its bytes.
 */
static void
pieces_arrive_whole_and_a_retry_sends_them_again(void **state)
{
    static const int script[] = { GRPC_STATUS_UNAVAILABLE, GRPC_STATUS_OK,
                                  GRPC_STATUS_OK };
    test_grpc        s;
    sp_otlp_client  *c;
    sp_otlp_request *r = pieces_request(300000, 1);
    sp_otlp_result   res;

    (void)state;
    assert_true(sp_otlp_request_count(r) >= 5);
    test_grpc_start(&s, script, 3);
    c = client_to(&s);
    assert_int_equal(sp_otlp_export_request(c, SP_OTLP_TRACES_METHOD, r, 0,
                                            &res), SP_ERR_IO);
    assert_int_equal(res.code, SP_GRPC_UNAVAILABLE);
    assert_true(res.retryable);
    assert_int_equal(sp_otlp_export_request(c, SP_OTLP_TRACES_METHOD, r, 0,
                                            &res), SP_OK);
    assert_int_equal(sp_otlp_export_timeout(c, SP_OTLP_LOGS_METHOD,
                                            "abc", 3, 0, &res), SP_OK);
    test_grpc_stop(&s);
    assert_int_equal(s.answered, 3);
    assert_got(&s, 0, r);
    assert_got(&s, 1, r);
    assert_int_equal(s.got_len[2], 3);
    assert_memory_equal(s.got[2], "abc", 3);
    test_grpc_free(&s);
    sp_otlp_request_unref(r);
    sp_otlp_client_destroy(c);
}

/*
 * A call given up on (the receiver holds it, its 2 MB unread, so gRPC's
 * transport waits on flow control with the pieces in hand) whose caller
 * drops its reference as soon as it returns. Whether gRPC still holds
 * slices then is its transport's timing (here it mostly has let go
 * already); either way the memory must stay until the last reference and
 * go with it: under ASan a read of freed pieces, a double free or a
 * reference never dropped (a leak at exit) fails the test. The channel
 * then carries the next request intact.
 */
static void
a_request_outlives_a_call_given_up_on(void **state)
{
    static const int script[] = { TEST_GRPC_HOLD, GRPC_STATUS_OK };
    test_grpc        s;
    sp_otlp_client  *c;
    sp_otlp_request *big = pieces_request(2u << 20, 2);
    sp_otlp_request *next = pieces_request(100000, 3);
    sp_otlp_result   res;

    (void)state;
    test_grpc_start(&s, script, 2);
    c = client_to(&s);
    assert_int_equal(sp_otlp_export_request(c, SP_OTLP_LOGS_METHOD, big,
                                            500, &res), SP_ERR_IO);
    assert_int_equal(res.code, SP_GRPC_DEADLINE_EXCEEDED);
    sp_otlp_request_unref(big);
    assert_int_equal(sp_otlp_export_request(c, SP_OTLP_LOGS_METHOD, next,
                                            0, &res), SP_OK);
    test_grpc_stop(&s);
    assert_int_equal(s.answered, 2);
    assert_true(s.cancelled[0]);
    assert_got(&s, 1, next);
    test_grpc_free(&s);
    sp_otlp_request_unref(next);
    sp_otlp_client_destroy(c);
}

static int
setup(void **state)
{
    (void)state;
    sp_otlp_init(NULL, NULL);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    sp_otlp_shutdown();
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(metadata_keys_lowercased_values_decoded),
        cmocka_unit_test(metadata_empty_lists),
        cmocka_unit_test(metadata_refuses_without_showing_values),
        cmocka_unit_test(metadata_binary_keys_carry_any_byte),
        cmocka_unit_test(only_three_codes_are_retryable),
        cmocka_unit_test(status_names),
        cmocka_unit_test(backoff_ceilings_double_up_to_the_max),
        cmocka_unit_test(backoff_jitter_is_full),
        cmocka_unit_test(retry_follows_the_schedule),
        cmocka_unit_test(retry_stops_when_the_sleep_says_so),
        cmocka_unit_test(retry_keeps_within_the_time_bound),
        cmocka_unit_test(retry_never_repeats_a_final_code),
        cmocka_unit_test(client_refuses_bad_settings_with_reasons),
        cmocka_unit_test(client_defaults_and_sharing),
        cmocka_unit_test(partial_success_is_read),
        cmocka_unit_test(result_line_for_operators),
        cmocka_unit_test(pieces_arrive_whole_and_a_retry_sends_them_again),
        cmocka_unit_test(a_request_outlives_a_call_given_up_on),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
