#include "sp_test.h"
#include "sp_config.h"
#include "sp_endpoint.h"
#include "sp_otlp_client.h"

static sp_endpoint
parsed(const char *s)
{
    sp_endpoint e;

    memset(&e, 0, sizeof(e));
    assert_int_equal(sp_endpoint_parse(s, strlen(s), &e), SP_OK);
    return e;
}

static void
scheme_selects_tls(void **state)
{
    sp_endpoint e;

    (void)state;
    e = parsed("http://collector:4318");
    assert_false(e.tls);
    assert_true(e.scheme);
    assert_string_equal(e.host, "collector");
    assert_int_equal(e.port, 4318);

    e = parsed("https://ingest.example.com:443");
    assert_true(e.tls);
    assert_string_equal(e.host, "ingest.example.com");
    assert_int_equal(e.port, 443);

    e = parsed("HTTPS://Collector:1");
    assert_true(e.tls);
    assert_string_equal(e.host, "Collector");
    assert_int_equal(e.port, 1);

    e = parsed("HtTp://10.0.0.7:65535/");
    assert_false(e.tls);
    assert_string_equal(e.host, "10.0.0.7");
    assert_int_equal(e.port, 65535);

    e = parsed("collector:4317");
    assert_true(e.tls);
    assert_false(e.scheme);
    assert_string_equal(e.host, "collector");
    assert_int_equal(e.port, 4317);
}

static void
port_defaults_to_4317(void **state)
{
    sp_endpoint e;

    (void)state;
    e = parsed("http://localhost");
    assert_int_equal(e.port, SP_ENDPOINT_DEFAULT_PORT);
    assert_false(e.tls);
    e = parsed("https://collector/");
    assert_int_equal(e.port, 4317);
    assert_true(e.tls);
    assert_string_equal(e.host, "collector");
}

static void
ipv6_keeps_brackets(void **state)
{
    sp_endpoint e;

    (void)state;
    e = parsed("http://[::1]:4318");
    assert_string_equal(e.host, "[::1]");
    assert_int_equal(e.port, 4318);
    e = parsed("https://[fe80::1%252]:4317/");
    assert_true(e.tls);
    assert_string_equal(e.host, "[fe80::1%252]");
    e = parsed("https://[fe80::1]");
    assert_string_equal(e.host, "[fe80::1]");
    assert_int_equal(e.port, 4317);
    e = parsed("[::ffff:10.1.2.3]:1");
    assert_false(e.scheme);
    assert_string_equal(e.host, "[::ffff:10.1.2.3]");
}

static void
rejects_what_is_not_one(void **state)
{
    static const char *const bad[] = {
        "", "collector", ":4317", "grpc://collector:4317", "http://",
        "https://", "http:/collector", "http://:4317", "http://x:",
        "http://x:0", "http://x:65536", "http://x:99999999999999999999",
        "http://x:12a", "http://x:-1", "http://x/v1/logs", "http://us er",
        "http://user@x:1", "http://[]:1", "http://[::1", "http://[::1]x",
        "http://[::g]:1", "http://x:1//", " http://x:1", "http://x:1 ",
        "http://[1::2::3]:1", "http://[:[:]:1", "http://[::1%]:1",
        "http://[%25lo]:1", "http://[12345::1]:1", "http://[1.2.3.4]:1",
        "x:1:2", "ftp://x:1"
    };
    sp_endpoint e;
    size_t      i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (sp_endpoint_parse(bad[i], strlen(bad[i]), &e) != SP_ERR_INVALID) {
            fail_msg("accepted \"%s\"", bad[i]);
        }
    }
    assert_int_equal(sp_endpoint_parse(NULL, 0, &e), SP_ERR_INVALID);
}

/* Only the len bytes count: a directive's value is not NUL-terminated. */
static void
reads_only_its_length(void **state)
{
    sp_endpoint e;

    (void)state;
    assert_int_equal(sp_endpoint_parse("http://x:12345", 11, &e), SP_OK);
    assert_string_equal(e.host, "x");
    assert_int_equal(e.port, 12);
    assert_int_equal(sp_endpoint_parse("http://x:1", 9, &e),
                     SP_ERR_INVALID);
    assert_int_equal(sp_endpoint_parse("http://x:1", 10, NULL), SP_OK);
}

static void
host_length_is_bounded(void **state)
{
    char        s[16 + SP_ENDPOINT_HOST_MAX + 2];
    sp_endpoint e;

    (void)state;
    strcpy(s, "http://");
    memset(s + 7, 'a', SP_ENDPOINT_HOST_MAX);
    s[7 + SP_ENDPOINT_HOST_MAX] = '\0';
    assert_int_equal(sp_endpoint_parse(s, strlen(s), &e), SP_OK);
    assert_int_equal(strlen(e.host), SP_ENDPOINT_HOST_MAX);
    strcat(s, "a");
    assert_int_equal(sp_endpoint_parse(s, strlen(s), &e), SP_ERR_TOO_LONG);
}

/*
 * The configuration test refuses what the exporter could not connect to:
 * a host past the bound passed `nginx -t` while the exporter refused it
 * at every start.
 */
static void
configuration_refuses_what_the_exporter_would(void **state)
{
    char        long_host[16 + SP_ENDPOINT_HOST_MAX + 2];
    const char *samples[] = {
        "http://localhost:4317", "https://x", "collector:4317", "collector",
        "http://x:0", "http://[::1]", "http://[1.2.3.4]:1", long_host
    };
    sp_config  *c = sp_config_create(SP_SERVER_NGINX);
    char        msg[SP_CONFIG_MESSAGE_SIZE];
    size_t      i;
    bool        config_ok, parse_ok;

    (void)state;
    assert_non_null(c);
    strcpy(long_host, "http://");
    memset(long_host + 7, 'a', SP_ENDPOINT_HOST_MAX + 1);
    long_host[8 + SP_ENDPOINT_HOST_MAX] = '\0';
    for (i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        config_ok = sp_config_set_directive(c, SP_SETTING_OTLP_ENDPOINT,
                                            "test", samples[i],
                                            strlen(samples[i]), msg,
                                            sizeof(msg)) == SP_OK;
        parse_ok = sp_endpoint_parse(samples[i], strlen(samples[i]), NULL)
                   == SP_OK;
        if (config_ok != parse_ok) {
            fail_msg("\"%.40s\": configuration %s, exporter %s", samples[i],
                     config_ok ? "accepts" : "refuses",
                     parse_ok ? "accepts" : "refuses");
        }
    }
    assert_int_equal(sp_config_set_directive(c, SP_SETTING_OTLP_ENDPOINT,
                                             "test", long_host,
                                             strlen(long_host), msg,
                                             sizeof(msg)), SP_ERR_INVALID);
    assert_non_null(strstr(msg, "at most 255"));
    sp_config_destroy(c);
}

/* ---- what the OTLP client makes of one */

/* Without a scheme: TLS, unless OTEL_EXPORTER_OTLP_INSECURE; a scheme
 * wins over that setting. */
static void
endpoint_insecure_applies_without_a_scheme(void **state)
{
    sp_endpoint e;

    (void)state;
    e = parsed("collector:4317");
    sp_otlp_endpoint_insecure(&e, true);
    assert_false(e.tls);
    e = parsed("https://collector:4317");
    sp_otlp_endpoint_insecure(&e, true);
    assert_true(e.tls);
    e = parsed("http://collector:4317");
    sp_otlp_endpoint_insecure(&e, false);
    assert_false(e.tls);
}

static void
endpoint_target_is_host_and_port(void **state)
{
    sp_endpoint e;
    char        target[300];

    (void)state;
    e = parsed("http://[::1]:4318");
    assert_int_equal(sp_otlp_endpoint_target(&e, target, sizeof(target)),
                     strlen("[::1]:4318"));
    assert_string_equal(target, "[::1]:4318");
    e = parsed("http://collector");
    sp_otlp_endpoint_target(&e, target, sizeof(target));
    assert_string_equal(target, "collector:4317");
    e = parsed(SP_OTLP_DEFAULT_ENDPOINT);
    sp_otlp_endpoint_target(&e, target, sizeof(target));
    assert_string_equal(target, "localhost:4317");
}

static void
endpoints_compare_after_normalising(void **state)
{
    sp_endpoint a, b;

    (void)state;
    a = parsed("http://Collector:4317/");
    b = parsed("http://collector");
    assert_true(sp_otlp_endpoint_equal(&a, &b));
    b = parsed("HTTP://COLLECTOR:4317");
    assert_true(sp_otlp_endpoint_equal(&a, &b));
    b = parsed("https://collector:4317");
    assert_false(sp_otlp_endpoint_equal(&a, &b));
    b = parsed("http://collector:4318");
    assert_false(sp_otlp_endpoint_equal(&a, &b));
    b = parsed("http://collector2:4317");
    assert_false(sp_otlp_endpoint_equal(&a, &b));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scheme_selects_tls),
        cmocka_unit_test(port_defaults_to_4317),
        cmocka_unit_test(ipv6_keeps_brackets),
        cmocka_unit_test(rejects_what_is_not_one),
        cmocka_unit_test(reads_only_its_length),
        cmocka_unit_test(host_length_is_bounded),
        cmocka_unit_test(configuration_refuses_what_the_exporter_would),
        cmocka_unit_test(endpoint_insecure_applies_without_a_scheme),
        cmocka_unit_test(endpoint_target_is_host_and_port),
        cmocka_unit_test(endpoints_compare_after_normalising),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
