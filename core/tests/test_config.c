#include "sp_test.h"
#include "sp_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A fake environment: name/value pairs, NULL-terminated. */
typedef struct {
    const char *pairs[32][2];
} fake_env;

static const char *
fake_lookup(void *ctx, const char *name)
{
    fake_env *env = ctx;
    int       i;

    for (i = 0; env->pairs[i][0] != NULL; i++) {
        if (strcmp(env->pairs[i][0], name) == 0) {
            return env->pairs[i][1];
        }
    }
    return NULL;
}

typedef struct {
    int  count;
    char last[SP_CONFIG_MESSAGE_SIZE];
    char all[4096];
} warnings;

static void
collect_warning(void *ctx, const char *message)
{
    warnings *w = ctx;

    w->count++;
    snprintf(w->last, sizeof(w->last), "%s", message);
    strncat(w->all, message, sizeof(w->all) - strlen(w->all) - 2);
    strcat(w->all, "\n");
}

static sp_config *
complete_with(sp_config *c, fake_env *env, warnings *w)
{
    sp_config_complete(c, fake_lookup, env, collect_warning, w);
    return c;
}

static sp_status
directive(sp_config *c, sp_setting s, const char *value, char *msg)
{
    return sp_config_set_directive(c, s, "test_directive", value,
                                   strlen(value), msg,
                                   SP_CONFIG_MESSAGE_SIZE);
}

static void
defaults_follow_spec_section_1(void **state)
{
    fake_env   env = { { { NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 0);
    assert_true(sp_config_flag(c, SP_SETTING_ENABLED));
    assert_false(sp_config_flag(c, SP_SETTING_SNAPSHOT_PROFILER_ENABLED));
    assert_true(sp_config_number(c,
        SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY) == 0.01);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 10);
    assert_false(sp_config_flag(c, SP_SETTING_PROFILER_ENABLED));
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_PROFILER_CALL_STACK_INTERVAL), 1000);
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_ENDPOINT),
                        "http://localhost:4317");
    assert_string_equal(sp_config_text(c, SP_SETTING_PROFILER_LOGS_ENDPOINT),
                        "http://localhost:4317");
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_TRACES_ENDPOINT),
                        "http://localhost:4317");
    assert_null(sp_config_text(c, SP_SETTING_OTLP_HEADERS));
    assert_int_equal(sp_config_integer(c, SP_SETTING_OTLP_TIMEOUT), 10000);
    assert_null(sp_config_text(c, SP_SETTING_OTLP_CERTIFICATE));
    assert_null(sp_config_text(c, SP_SETTING_SERVICE_NAME));
    assert_null(sp_config_text(c, SP_SETTING_RESOURCE_ATTRIBUTES));
    assert_int_equal(sp_config_integer(c, SP_SETTING_TRACES_EXPORTER),
                     SP_EXPORTER_OTLP);
    assert_int_equal(sp_config_integer(c, SP_SETTING_LOGS_EXPORTER),
                     SP_EXPORTER_OTLP);
    assert_int_equal(sp_config_integer(c, SP_SETTING_TRACES_SAMPLER),
                     SP_SAMPLER_PARENTBASED_ALWAYS_ON);
    assert_int_equal(sp_config_integer(c, SP_SETTING_PROPAGATORS),
                     SP_PROPAGATOR_TRACECONTEXT | SP_PROPAGATOR_BAGGAGE);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_PROFILER_EXPORT_INTERVAL), 1000);
    assert_int_equal(sp_config_integer(c, SP_SETTING_BSP_SCHEDULE_DELAY),
                     5000);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE), 512);
    assert_int_equal(sp_config_integer(c, SP_SETTING_BSP_MAX_QUEUE_SIZE),
                     2048);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_PROFILER_MAX_STACK_DEPTH), 128);
    assert_int_equal(sp_config_origin(c, SP_SETTING_OTLP_ENDPOINT),
                     SP_ORIGIN_DEFAULT);
    sp_config_destroy(c);
}

static void
httpd_samples_continuously_every_10s(void **state)
{
    sp_config *c = sp_config_create(SP_SERVER_HTTPD);
    char       line[4096];

    (void)state;
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_PROFILER_CALL_STACK_INTERVAL), 10000);
    sp_config_describe(c, line, sizeof(line));
    assert_non_null(strstr(line, "OTEL_SERVICE_NAME=unknown_service:httpd"));
    sp_config_destroy(c);
}

static void
environment_applies_when_no_directive_is_set(void **state)
{
    fake_env env = { {
        { "SPLUNK_SNAPSHOT_PROFILER_ENABLED", "true" },
        { "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL", "20" },
        { "OTEL_SERVICE_NAME", "shop" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 0);
    assert_true(sp_config_flag(c, SP_SETTING_SNAPSHOT_PROFILER_ENABLED));
    assert_int_equal(sp_config_origin(c,
        SP_SETTING_SNAPSHOT_PROFILER_ENABLED), SP_ORIGIN_ENV);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 20);
    assert_string_equal(sp_config_text(c, SP_SETTING_SERVICE_NAME), "shop");
    sp_config_destroy(c);
}

static void
a_directive_wins_over_the_environment(void **state)
{
    fake_env env = { {
        { "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL", "20" },
        { "OTEL_SERVICE_NAME", "from-env" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    assert_int_equal(directive(c, SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL,
                               "30", msg), SP_OK);
    assert_int_equal(directive(c, SP_SETTING_SERVICE_NAME, "from-directive",
                               msg), SP_OK);
    complete_with(c, &env, &w);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 30);
    assert_string_equal(sp_config_text(c, SP_SETTING_SERVICE_NAME),
                        "from-directive");
    assert_int_equal(sp_config_origin(c, SP_SETTING_SERVICE_NAME),
                     SP_ORIGIN_DIRECTIVE);
    sp_config_destroy(c);
}

static void
an_empty_variable_counts_as_unset(void **state)
{
    fake_env env = { {
        { "OTEL_EXPORTER_OTLP_ENDPOINT", "" },
        { "SPLUNK_PROFILER_ENABLED", "" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 0);
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_ENDPOINT),
                        "http://localhost:4317");
    assert_int_equal(sp_config_origin(c, SP_SETTING_OTLP_ENDPOINT),
                     SP_ORIGIN_DEFAULT);
    sp_config_destroy(c);
}

static void
aliases_apply_only_without_the_primary_variable(void **state)
{
    fake_env alias_only = { {
        { "SPLUNK_SNAPSHOT_SELECTION_RATE", "0.05" },
        { "SPLUNK_SNAPSHOT_PROFILER_SAMPLING_INTERVAL", "7" },
        { NULL, NULL } } };
    fake_env both = { {
        { "SPLUNK_SNAPSHOT_SELECTION_RATE", "0.05" },
        { "SPLUNK_SNAPSHOT_SELECTION_PROBABILITY", "0.02" },
        { "SPLUNK_SNAPSHOT_PROFILER_SAMPLING_INTERVAL", "7" },
        { "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL", "8" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c;

    (void)state;
    c = complete_with(sp_config_create(SP_SERVER_NGINX), &alias_only, &w);
    assert_true(sp_config_number(c,
        SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY) == 0.05);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 7);
    sp_config_destroy(c);

    c = complete_with(sp_config_create(SP_SERVER_NGINX), &both, &w);
    assert_true(sp_config_number(c,
        SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY) == 0.02);
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 8);
    assert_int_equal(w.count, 0);
    sp_config_destroy(c);
}

static void
a_bad_variable_warns_once_and_keeps_the_default(void **state)
{
    fake_env env = { {
        { "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL", "fast" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL"));
    assert_non_null(strstr(w.last, "\"fast\""));
    assert_non_null(strstr(w.last, "1ms to 1000ms"));
    assert_non_null(strstr(w.last, "using the default"));
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 10);
    assert_int_equal(sp_config_origin(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), SP_ORIGIN_DEFAULT);
    sp_config_destroy(c);
}

static void
a_bad_directive_is_an_error_naming_directive_value_and_allowed(void **state)
{
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    assert_int_equal(sp_config_set_directive(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL,
        "spanprof_snapshot_sampling_interval", "2000", 4, msg, sizeof(msg)),
        SP_ERR_INVALID);
    assert_string_equal(msg, "invalid value \"2000\" in "
        "\"spanprof_snapshot_sampling_interval\" directive, allowed: "
        "a duration from 1ms to 1000ms (a number of milliseconds, or with "
        "the suffix \"ms\" or \"s\")");
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), 10);
    assert_int_equal(sp_config_origin(c,
        SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL), SP_ORIGIN_DEFAULT);
    sp_config_destroy(c);
}

static void
otel_sdk_disabled_true_turns_everything_off(void **state)
{
    fake_env on = { { { "OTEL_SDK_DISABLED", "TRUE" }, { NULL, NULL } } };
    fake_env off = { { { "OTEL_SDK_DISABLED", "false" }, { NULL, NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c;

    (void)state;
    c = complete_with(sp_config_create(SP_SERVER_NGINX), &on, &w);
    assert_false(sp_config_flag(c, SP_SETTING_ENABLED));
    sp_config_destroy(c);

    c = complete_with(sp_config_create(SP_SERVER_NGINX), &off, &w);
    assert_true(sp_config_flag(c, SP_SETTING_ENABLED));
    sp_config_destroy(c);

    /* The directive is the positive switch: "spanprof off". */
    c = sp_config_create(SP_SERVER_NGINX);
    assert_int_equal(directive(c, SP_SETTING_ENABLED, "off", msg), SP_OK);
    complete_with(c, &off, &w);
    assert_false(sp_config_flag(c, SP_SETTING_ENABLED));
    sp_config_destroy(c);
    assert_int_equal(w.count, 0);
}

static void
probability_is_bounded_and_clamped(void **state)
{
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    sp_setting p = SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY;

    (void)state;
    assert_int_equal(directive(c, p, "0.10", msg), SP_OK);
    assert_string_equal(msg, "");
    assert_true(sp_config_number(c, p) == 0.10);
    assert_int_equal(directive(c, p, "0.000001", msg), SP_OK);
    assert_true(sp_config_number(c, p) == 0.000001);

    assert_int_equal(directive(c, p, "0.5", msg), SP_OK);
    assert_non_null(strstr(msg, "clamped to 0.10"));
    assert_true(sp_config_number(c, p) == 0.10);

    assert_int_equal(directive(c, p, "0", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "0.0", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "-0.01", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "1e-2", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "0.0.1", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, ".", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "nan", msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, p, "", msg), SP_ERR_INVALID);
    assert_true(sp_config_number(c, p) == 0.10);
    sp_config_destroy(c);
}

static void
switches_at_odds_say_which_wins(void **state)
{
    fake_env   off = { { { "OTEL_SDK_DISABLED", "TRUE" }, { NULL, NULL } } };
    fake_env   none = { { { NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    /* The directive at the top level wins over the variable, said once. */
    assert_int_equal(directive(c, SP_SETTING_ENABLED, "on", msg), SP_OK);
    complete_with(c, &off, &w);
    assert_true(sp_config_flag(c, SP_SETTING_ENABLED));
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "\"spanprof on\" at http level "
                                   "overrides"));
    sp_config_destroy(c);

    /* The variable turns the server off: an inner "on" does nothing. */
    memset(&w, 0, sizeof(w));
    c = sp_config_create(SP_SERVER_HTTPD);
    sp_config_note_scope_on(c);
    complete_with(c, &off, &w);
    assert_false(sp_config_flag(c, SP_SETTING_ENABLED));
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "\"Spanprof On\" in a virtual host"));
    assert_non_null(strstr(w.last, "has no effect"));
    sp_config_destroy(c);

    /* Nothing at odds: no warning. */
    memset(&w, 0, sizeof(w));
    c = sp_config_create(SP_SERVER_NGINX);
    sp_config_note_scope_on(c);
    complete_with(c, &none, &w);
    assert_int_equal(w.count, 0);
    sp_config_destroy(c);
}

static void
probability_from_the_environment_is_clamped_with_a_warning(void **state)
{
    fake_env env = { {
        { "SPLUNK_SNAPSHOT_SELECTION_PROBABILITY", "0.25" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "SPLUNK_SNAPSHOT_SELECTION_PROBABILITY"));
    assert_non_null(strstr(w.last, "clamped to 0.10"));
    assert_true(sp_config_number(c,
        SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY) == 0.10);
    assert_int_equal(sp_config_origin(c,
        SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY), SP_ORIGIN_ENV);
    sp_config_destroy(c);
}

typedef struct {
    sp_setting  setting;
    const char *good;
    uint64_t    integer;    /* expected for integer kinds */
    const char *bad[6];
} case_row;

static void
every_setting_accepts_its_forms_and_rejects_others(void **state)
{
    static const case_row rows[] = {
        { SP_SETTING_SNAPSHOT_PROFILER_ENABLED, "On", 1,
          { "yes", "1", "", "onn", NULL } },
        { SP_SETTING_PROFILER_ENABLED, "false", 0,
          { "no", "0", "enabled", NULL } },
        { SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "1000", 1000,
          { "0", "1001", "2s", "10 ms", "-5", "10m", } },
        { SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "1s", 1000, { NULL } },
        { SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "1", 1, { NULL } },
        { SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "25ms", 25, { NULL } },
        { SP_SETTING_PROFILER_CALL_STACK_INTERVAL, "3600s", 3600000,
          { "3601s", "0ms", "99999999999999999999", NULL } },
        { SP_SETTING_OTLP_TIMEOUT, "2500", 2500, { "0", "x", NULL } },
        { SP_SETTING_PROFILER_EXPORT_INTERVAL, "500ms", 500,
          { "0", "1.5", NULL } },
        { SP_SETTING_BSP_SCHEDULE_DELAY, "100", 100, { "0", NULL } },
        { SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE, "1", 1,
          { "0", "1000001", "1k", NULL } },
        { SP_SETTING_BSP_MAX_QUEUE_SIZE, "1000000", 1000000,
          { "0", "1000001", NULL } },
        { SP_SETTING_PROFILER_MAX_STACK_DEPTH, "1024", 1024,
          { "0", "1025", "64frames", NULL } },
        { SP_SETTING_TRACES_EXPORTER, "console", SP_EXPORTER_CONSOLE,
          { "zipkin", "OTLP", "", NULL } },
        { SP_SETTING_LOGS_EXPORTER, "none", SP_EXPORTER_NONE,
          { "otlp,console", "jaeger", NULL } },
        { SP_SETTING_TRACES_SAMPLER, "traceidratio",
          SP_SAMPLER_TRACEIDRATIO, { "ratio", "always", NULL } },
        { SP_SETTING_TRACES_SAMPLER, "parentbased_always_off",
          SP_SAMPLER_PARENTBASED_ALWAYS_OFF, { NULL } },
        { SP_SETTING_PROPAGATORS, "baggage", SP_PROPAGATOR_BAGGAGE,
          { "b3", "none,baggage", "tracecontext,,baggage", "", NULL } },
        { SP_SETTING_PROPAGATORS, "tracecontext , baggage",
          SP_PROPAGATOR_TRACECONTEXT | SP_PROPAGATOR_BAGGAGE, { NULL } },
        { SP_SETTING_PROPAGATORS, "none", 0, { NULL } },
    };
    char   msg[SP_CONFIG_MESSAGE_SIZE];
    size_t i, j;

    (void)state;
    for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sp_config *c = sp_config_create(SP_SERVER_NGINX);
        uint64_t   got;

        assert_int_equal(directive(c, rows[i].setting, rows[i].good, msg),
                         SP_OK);
        got = rows[i].setting == SP_SETTING_SNAPSHOT_PROFILER_ENABLED
              || rows[i].setting == SP_SETTING_PROFILER_ENABLED
              ? (uint64_t)sp_config_flag(c, rows[i].setting)
              : sp_config_integer(c, rows[i].setting);
        assert_int_equal(got, rows[i].integer);
        for (j = 0; j < 6 && rows[i].bad[j] != NULL; j++) {
            if (directive(c, rows[i].setting, rows[i].bad[j], msg)
                != SP_ERR_INVALID)
            {
                fail_msg("setting %d accepted \"%s\"", rows[i].setting,
                         rows[i].bad[j]);
            }
            assert_non_null(strstr(msg, "test_directive"));
            assert_non_null(strstr(msg,
                                   sp_setting_allowed(rows[i].setting)));
        }
        /* A rejected value never replaces the good one. */
        got = rows[i].setting == SP_SETTING_SNAPSHOT_PROFILER_ENABLED
              || rows[i].setting == SP_SETTING_PROFILER_ENABLED
              ? (uint64_t)sp_config_flag(c, rows[i].setting)
              : sp_config_integer(c, rows[i].setting);
        assert_int_equal(got, rows[i].integer);
        sp_config_destroy(c);
    }
}

static void
sampler_argument_is_a_ratio(void **state)
{
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    assert_true(sp_config_number(c, SP_SETTING_TRACES_SAMPLER_ARG) == 1.0);
    assert_int_equal(directive(c, SP_SETTING_TRACES_SAMPLER_ARG, "0", msg),
                     SP_OK);
    assert_true(sp_config_number(c, SP_SETTING_TRACES_SAMPLER_ARG) == 0);
    assert_int_equal(directive(c, SP_SETTING_TRACES_SAMPLER_ARG, "0.25",
                               msg), SP_OK);
    assert_true(sp_config_number(c, SP_SETTING_TRACES_SAMPLER_ARG) == 0.25);
    assert_int_equal(directive(c, SP_SETTING_TRACES_SAMPLER_ARG, "1.01",
                               msg), SP_ERR_INVALID);
    assert_int_equal(directive(c, SP_SETTING_TRACES_SAMPLER_ARG, "half",
                               msg), SP_ERR_INVALID);
    sp_config_destroy(c);
}

static void
endpoints_are_grpc_urls_and_fall_back_to_the_otlp_endpoint(void **state)
{
    static const char *good[] = {
        "http://collector:4317", "https://ingest.example.com",
        "HTTPS://10.0.0.1:443/", "http://[::1]:4317", "collector:4317",
        "[::1]:4317/", "http://a_b.local:1",
    };
    static const char *bad[] = {
        "collector", "grpc://collector:4317", "http://", "http://:4317",
        ":4317", "collector:", "http:4317x",
        "http://host:0", "http://host:65536", "http://host:43x7",
        "http://host:4317/v1/logs", "http://ho st:1", "http://[::1",
        "http://[]:1",
    };
    fake_env env = { {
        { "OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    size_t     i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (directive(c, SP_SETTING_OTLP_TRACES_ENDPOINT, good[i], msg)
            != SP_OK)
        {
            fail_msg("rejected %s: %s", good[i], msg);
        }
    }
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (directive(c, SP_SETTING_PROFILER_LOGS_ENDPOINT, bad[i], msg)
            != SP_ERR_INVALID)
        {
            fail_msg("accepted %s", bad[i]);
        }
    }
    complete_with(c, &env, &w);
    assert_string_equal(sp_config_text(c, SP_SETTING_PROFILER_LOGS_ENDPOINT),
                        "http://otel:4317");
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_TRACES_ENDPOINT),
                        "http://a_b.local:1");
    sp_config_destroy(c);
}

static void
headers_are_validated_and_never_shown(void **state)
{
    fake_env env = { {
        { "OTEL_EXPORTER_OTLP_HEADERS", "X-SF-Token=s3cr3t%zz" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    char       line[4096];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    assert_int_equal(directive(c, SP_SETTING_OTLP_HEADERS, "novalue", msg),
                     SP_ERR_INVALID);
    assert_null(strstr(msg, "novalue"));
    assert_non_null(strstr(msg, "not shown"));

    complete_with(c, &env, &w);
    assert_int_equal(w.count, 1);
    assert_null(strstr(w.last, "s3cr3t"));
    assert_null(sp_config_text(c, SP_SETTING_OTLP_HEADERS));

    assert_int_equal(directive(c, SP_SETTING_OTLP_HEADERS,
                               "X-SF-Token=abc123,team=a%20b", msg), SP_OK);
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_HEADERS),
                        "X-SF-Token=abc123,team=a%20b");
    sp_config_describe(c, line, sizeof(line));
    assert_null(strstr(line, "abc123"));
    assert_null(strstr(line, "a%20b"));
    assert_non_null(strstr(line,
        "OTEL_EXPORTER_OTLP_HEADERS=X-SF-Token=***,team=*** (directive)"));
    sp_config_destroy(c);
}

static void
resource_attributes_must_be_a_key_value_list(void **state)
{
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    sp_config *c = sp_config_create(SP_SERVER_HTTPD);

    (void)state;
    assert_int_equal(directive(c, SP_SETTING_RESOURCE_ATTRIBUTES,
                               "deployment.environment=prod,team=web", msg),
                     SP_OK);
    assert_int_equal(directive(c, SP_SETTING_RESOURCE_ATTRIBUTES,
                               "deployment.environment", msg),
                     SP_ERR_INVALID);
    assert_non_null(strstr(msg, "\"deployment.environment\""));
    assert_int_equal(directive(c, SP_SETTING_RESOURCE_ATTRIBUTES, "=x", msg),
                     SP_ERR_INVALID);
    assert_string_equal(sp_config_text(c, SP_SETTING_RESOURCE_ATTRIBUTES),
                        "deployment.environment=prod,team=web");
    assert_int_equal(directive(c, SP_SETTING_SERVICE_NAME, "", msg),
                     SP_ERR_INVALID);
    sp_config_destroy(c);
}

static void
certificate_must_be_a_readable_pem_file(void **state)
{
    static const char cert[] = "# trust anchors\n"
                               "-----BEGIN CERTIFICATE-----\nMIIB\n";
    static const char key[] = "-----BEGIN PRIVATE KEY-----\nMIIE\n";
    char       path[] = "/tmp/sp_test_cert_XXXXXX";
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    int        fd = mkstemp(path);
    sp_config *c = sp_config_create(SP_SERVER_NGINX);

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, cert, sizeof(cert) - 1),
                     (ssize_t)sizeof(cert) - 1);
    assert_int_equal(directive(c, SP_SETTING_OTLP_CERTIFICATE, path, msg),
                     SP_OK);
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_CERTIFICATE),
                        path);
    /* readable, but not what the exporter can load: a key, an empty file */
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(pwrite(fd, key, sizeof(key) - 1, 0),
                     (ssize_t)sizeof(key) - 1);
    assert_int_equal(directive(c, SP_SETTING_OTLP_CERTIFICATE, path, msg),
                     SP_ERR_INVALID);
    assert_non_null(strstr(msg, "readable PEM file of certificates"));
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(directive(c, SP_SETTING_OTLP_CERTIFICATE, path, msg),
                     SP_ERR_INVALID);
    close(fd);
    unlink(path);
    assert_int_equal(directive(c, SP_SETTING_OTLP_CERTIFICATE, path, msg),
                     SP_ERR_INVALID);
    assert_non_null(strstr(msg, "readable PEM file"));
    /* a directory opens, but does not read */
    assert_int_equal(directive(c, SP_SETTING_OTLP_CERTIFICATE, "/tmp", msg),
                     SP_ERR_INVALID);
    assert_string_equal(sp_config_text(c, SP_SETTING_OTLP_CERTIFICATE),
                        path);
    sp_config_destroy(c);
}

static void
pem_text_needs_a_certificate(void **state)
{
    static const char cert[] = "-----BEGIN CERTIFICATE-----\n";
    static const char nul[] = "-----BEGIN CERTIFICATE-----\n\0";

    (void)state;
    assert_true(sp_config_pem_text(cert, sizeof(cert) - 1));
    assert_false(sp_config_pem_text(cert, sizeof(cert) - 3));
    assert_false(sp_config_pem_text("", 0));
    assert_false(sp_config_pem_text(nul, sizeof(nul) - 1));
    assert_false(sp_config_pem_text(cert, SP_CONFIG_PEM_MAX + 1));
}

static void
batch_size_larger_than_the_queue_is_reduced_with_a_warning(void **state)
{
    fake_env env = { {
        { "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "600" },
        { "OTEL_BSP_MAX_QUEUE_SIZE", "100" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    sp_config *c = complete_with(sp_config_create(SP_SERVER_NGINX), &env,
                                 &w);

    (void)state;
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE (600)"));
    assert_int_equal(sp_config_integer(c,
        SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE), 100);
    sp_config_destroy(c);
}

static void
messages_escape_unprintable_bytes_and_cut_long_values(void **state)
{
    char   msg[SP_CONFIG_MESSAGE_SIZE];
    char   long_value[200];

    (void)state;
    sp_config_invalid_message(msg, sizeof(msg), SP_SETTING_SERVICE_NAME,
                              SP_ORIGIN_DIRECTIVE, "SpanprofServiceName",
                              "a\"b\n\x01", 5);
    assert_string_equal(msg, "invalid value \"a\\\"b\\x0a\\x01\" in "
                        "\"SpanprofServiceName\" directive, allowed: "
                        "a non-empty name");

    memset(long_value, 'x', sizeof(long_value));
    sp_config_invalid_message(msg, sizeof(msg), SP_SETTING_SERVICE_NAME,
                              SP_ORIGIN_ENV, "OTEL_SERVICE_NAME",
                              long_value, sizeof(long_value));
    assert_non_null(strstr(msg, "xxx...\" in environment variable "
                           "OTEL_SERVICE_NAME"));
    assert_true(strlen(msg) < 200);

    /* A tiny buffer is never overrun and stays terminated. */
    assert_true(sp_config_invalid_message(msg, 8, SP_SETTING_SERVICE_NAME,
                    SP_ORIGIN_ENV, "X", "y", 1) > 8);
    assert_int_equal(strlen(msg), 7);
}

static void
describe_shows_every_setting_with_its_origin(void **state)
{
    fake_env env = { {
        { "SPLUNK_PROFILER_ENABLED", "true" },
        { NULL, NULL } } };
    warnings   w = { 0 };
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    char       line[4096];
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    int        i;

    (void)state;
    directive(c, SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "5", msg);
    complete_with(c, &env, &w);
    assert_true(sp_config_describe(c, line, sizeof(line)) < sizeof(line));
    assert_true(strncmp(line, "spanprof " SP_VERSION " configuration: ",
                        23) == 0);
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        assert_non_null(strstr(line, sp_setting_env_name((sp_setting)i)));
    }
    assert_non_null(strstr(line, "OTEL_SDK_DISABLED=false,"));
    assert_non_null(strstr(line, "SPLUNK_PROFILER_ENABLED=true (env)"));
    assert_non_null(strstr(line,
        "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=5ms (directive)"));
    assert_non_null(strstr(line,
        "SPLUNK_SNAPSHOT_SELECTION_PROBABILITY=0.01,"));
    assert_non_null(strstr(line, "OTEL_SERVICE_NAME=unknown_service:nginx"));
    assert_non_null(strstr(line, "OTEL_PROPAGATORS=tracecontext,baggage"));
    sp_config_destroy(c);
}

static void
value_text_carries_the_effective_configuration_through_the_environment(
    void **state)
{
    static const struct { sp_setting s; const char *v; } set[] = {
        { SP_SETTING_SNAPSHOT_PROFILER_ENABLED, "on" },
        { SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY, "0.05" },
        { SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, "7" },
        { SP_SETTING_PROFILER_CALL_STACK_INTERVAL, "2s" },
        { SP_SETTING_OTLP_ENDPOINT, "https://collector:4317" },
        { SP_SETTING_OTLP_HEADERS, "X-SF-Token=secret%2Cvalue,a=b" },
        { SP_SETTING_TRACES_EXPORTER, "console" },
        { SP_SETTING_TRACES_SAMPLER, "traceidratio" },
        { SP_SETTING_TRACES_SAMPLER_ARG, "0.25" },
        { SP_SETTING_PROPAGATORS, "baggage" },
        { SP_SETTING_BSP_MAX_QUEUE_SIZE, "100" },
        { SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE, "50" },
        { SP_SETTING_SERVICE_NAME, "edge" },
    };
    char       text[SP_SETTING_COUNT][512], again[512];
    char       msg[SP_CONFIG_MESSAGE_SIZE];
    fake_env   env = { { { NULL } } }, none = { { { NULL } } };
    warnings   w = { 0 };
    sp_config *c = sp_config_create(SP_SERVER_HTTPD);
    sp_config *d = sp_config_create(SP_SERVER_HTTPD);
    size_t     i, n = 0;

    (void)state;
    for (i = 0; i < sizeof(set) / sizeof(set[0]); i++) {
        assert_int_equal(directive(c, set[i].s, set[i].v, msg), SP_OK);
    }
    complete_with(c, &none, &w);
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        if (sp_config_value_text(c, (sp_setting)i, text[i], sizeof(text[i]))
            > 0)
        {
            env.pairs[n][0] = sp_setting_env_name((sp_setting)i);
            env.pairs[n][1] = text[i];
            n++;
        }
    }
    /* Unset settings (certificate, resource attributes) stay unset. */
    assert_int_equal(sp_config_value_text(c, SP_SETTING_OTLP_CERTIFICATE,
                                          again, sizeof(again)), 0);
    assert_string_equal(again, "");
    /* The secret is carried whole, not masked as in the startup line. */
    assert_int_equal(sp_config_value_text(c, SP_SETTING_OTLP_HEADERS, again,
                                          sizeof(again)),
                     strlen("X-SF-Token=secret%2Cvalue,a=b"));

    complete_with(d, &env, &w);
    assert_int_equal(w.count, 0);
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        sp_config_value_text(d, (sp_setting)i, again, sizeof(again));
        if (sp_config_value_text(c, (sp_setting)i, msg, sizeof(msg)) > 0) {
            assert_string_equal(again, msg);
        }
    }
    assert_true(sp_config_flag(d, SP_SETTING_SNAPSHOT_PROFILER_ENABLED));
    assert_int_equal(sp_config_integer(d,
        SP_SETTING_PROFILER_CALL_STACK_INTERVAL), 2000);
    assert_string_equal(sp_config_text(d, SP_SETTING_OTLP_HEADERS),
                        sp_config_text(c, SP_SETTING_OTLP_HEADERS));
    sp_config_destroy(c);
    sp_config_destroy(d);
}

static void
parse_flag_for_per_scope_switches(void **state)
{
    bool on = false;

    (void)state;
    assert_int_equal(sp_config_parse_flag("ON", 2, &on), SP_OK);
    assert_true(on);
    assert_int_equal(sp_config_parse_flag("false", 5, &on), SP_OK);
    assert_false(on);
    assert_int_equal(sp_config_parse_flag("onx", 3, &on), SP_ERR_INVALID);
    assert_int_equal(sp_config_parse_flag("o", 1, &on), SP_ERR_INVALID);
    /* blanks around a value are dropped, as for every setting */
    assert_int_equal(sp_config_parse_flag(" on\t", 4, &on), SP_OK);
    assert_true(on);
    assert_int_equal(sp_config_parse_flag("o n", 3, &on), SP_ERR_INVALID);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_follow_spec_section_1),
        cmocka_unit_test(httpd_samples_continuously_every_10s),
        cmocka_unit_test(environment_applies_when_no_directive_is_set),
        cmocka_unit_test(a_directive_wins_over_the_environment),
        cmocka_unit_test(an_empty_variable_counts_as_unset),
        cmocka_unit_test(aliases_apply_only_without_the_primary_variable),
        cmocka_unit_test(a_bad_variable_warns_once_and_keeps_the_default),
        cmocka_unit_test(
            a_bad_directive_is_an_error_naming_directive_value_and_allowed),
        cmocka_unit_test(otel_sdk_disabled_true_turns_everything_off),
        cmocka_unit_test(probability_is_bounded_and_clamped),
        cmocka_unit_test(
            probability_from_the_environment_is_clamped_with_a_warning),
        cmocka_unit_test(switches_at_odds_say_which_wins),
        cmocka_unit_test(every_setting_accepts_its_forms_and_rejects_others),
        cmocka_unit_test(sampler_argument_is_a_ratio),
        cmocka_unit_test(
            value_text_carries_the_effective_configuration_through_the_environment),
        cmocka_unit_test(
            endpoints_are_grpc_urls_and_fall_back_to_the_otlp_endpoint),
        cmocka_unit_test(headers_are_validated_and_never_shown),
        cmocka_unit_test(resource_attributes_must_be_a_key_value_list),
        cmocka_unit_test(certificate_must_be_a_readable_pem_file),
        cmocka_unit_test(pem_text_needs_a_certificate),
        cmocka_unit_test(
            batch_size_larger_than_the_queue_is_reduced_with_a_warning),
        cmocka_unit_test(
            messages_escape_unprintable_bytes_and_cut_long_values),
        cmocka_unit_test(describe_shows_every_setting_with_its_origin),
        cmocka_unit_test(parse_flag_for_per_scope_switches),
    };

    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
