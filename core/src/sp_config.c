#include "sp_config.h"
#include "sp_endpoint.h"
#include "sp_http_method.h"
#include "sp_kvlist.h"
#include "sp_percent.h"
#include "sp_selection.h"
#include "sp_text.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

typedef enum sp_kind {
    SP_KIND_FLAG,
    SP_KIND_PROBABILITY,   /* (0, limit], clamped above the limit */
    SP_KIND_RATIO,         /* [0, 1] */
    SP_KIND_DURATION,      /* milliseconds, "N", "Nms" or "Ns" */
    SP_KIND_COUNT,
    SP_KIND_ENDPOINT,
    SP_KIND_KVLIST,
    SP_KIND_PATH,
    SP_KIND_TEXT,
    SP_KIND_EXPORTER,
    SP_KIND_SAMPLER,
    SP_KIND_PROPAGATORS,
    SP_KIND_METHODS        /* sp_http_method.h; kept as parsed */
} sp_kind;

typedef struct sp_setting_desc {
    const char *env;
    const char *env_alias;
    sp_kind     kind;
    uint64_t    min;       /* durations and counts */
    uint64_t    max;
    const char *allowed;
    bool        env_inverted; /* OTEL_SDK_DISABLED=true is enabled=false */
    bool        secret;       /* never shown in a message or a log */
} sp_setting_desc;

typedef struct sp_value {
    uint64_t integer;
    double   number;
    char    *text;
} sp_value;

struct sp_config {
    sp_server server;
    sp_value  value[SP_SETTING_COUNT];
    sp_origin origin[SP_SETTING_COUNT];
    bool      scope_on;    /* sp_config_note_scope_on */
};

#define SP_HOUR_MS 3600000

#define SP_ENDPOINT_ALLOWED \
    "an OTLP/gRPC endpoint \"http://host[:port]\" (plaintext), " \
    "\"https://host[:port]\" (TLS) or \"host:port\" (TLS unless " \
    "OTEL_EXPORTER_OTLP_INSECURE is true), a host of at most 255 bytes"
_Static_assert(SP_ENDPOINT_HOST_MAX == 255, "SP_ENDPOINT_ALLOWED says 255");

static const sp_setting_desc sp_settings[SP_SETTING_COUNT] = {
    [SP_SETTING_ENABLED] = {
        "OTEL_SDK_DISABLED", NULL, SP_KIND_FLAG, 0, 0,
        "\"on\" or \"off\" (\"true\" or \"false\")", true, false },
    [SP_SETTING_SNAPSHOT_PROFILER_ENABLED] = {
        "SPLUNK_SNAPSHOT_PROFILER_ENABLED", NULL, SP_KIND_FLAG, 0, 0,
        "\"on\" or \"off\" (\"true\" or \"false\")", false, false },
    [SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY] = {
        "SPLUNK_SNAPSHOT_SELECTION_PROBABILITY",
        "SPLUNK_SNAPSHOT_SELECTION_RATE", SP_KIND_PROBABILITY, 0, 0,
        "a decimal number greater than 0 and at most 0.10 "
        "(larger values are clamped to 0.10)", false, false },
    [SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL] = {
        "SPLUNK_SNAPSHOT_SAMPLING_INTERVAL",
        "SPLUNK_SNAPSHOT_PROFILER_SAMPLING_INTERVAL", SP_KIND_DURATION,
        1, 1000,
        "a duration from 1ms to 1000ms (a number of milliseconds, "
        "or with the suffix \"ms\" or \"s\")", false, false },
    [SP_SETTING_PROFILER_ENABLED] = {
        "SPLUNK_PROFILER_ENABLED", NULL, SP_KIND_FLAG, 0, 0,
        "\"on\" or \"off\" (\"true\" or \"false\")", false, false },
    [SP_SETTING_PROFILER_CALL_STACK_INTERVAL] = {
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL", NULL, SP_KIND_DURATION,
        1, SP_HOUR_MS,
        "a duration from 1ms to 1h (a number of milliseconds, "
        "or with the suffix \"ms\" or \"s\")", false, false },
    [SP_SETTING_PROFILER_LOGS_ENDPOINT] = {
        "SPLUNK_PROFILER_LOGS_ENDPOINT", NULL, SP_KIND_ENDPOINT, 0, 0,
        SP_ENDPOINT_ALLOWED, false, false },
    [SP_SETTING_OTLP_ENDPOINT] = {
        "OTEL_EXPORTER_OTLP_ENDPOINT", NULL, SP_KIND_ENDPOINT, 0, 0,
        SP_ENDPOINT_ALLOWED, false, false },
    [SP_SETTING_OTLP_TRACES_ENDPOINT] = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", NULL, SP_KIND_ENDPOINT, 0, 0,
        SP_ENDPOINT_ALLOWED, false, false },
    [SP_SETTING_OTLP_HEADERS] = {
        "OTEL_EXPORTER_OTLP_HEADERS", NULL, SP_KIND_KVLIST, 0, 0,
        "a list \"key=value,key2=value2\" with percent-encoded values",
        false, true },
    [SP_SETTING_OTLP_TIMEOUT] = {
        "OTEL_EXPORTER_OTLP_TIMEOUT", NULL, SP_KIND_DURATION,
        1, SP_HOUR_MS,
        "a duration from 1ms to 1h (a number of milliseconds, "
        "or with the suffix \"ms\" or \"s\")", false, false },
    [SP_SETTING_OTLP_CERTIFICATE] = {
        "OTEL_EXPORTER_OTLP_CERTIFICATE", NULL, SP_KIND_PATH, 0, 0,
        "the path of a readable PEM file of certificates "
        "(\"-----BEGIN CERTIFICATE-----\")", false, false },
    [SP_SETTING_OTLP_INSECURE] = {
        "OTEL_EXPORTER_OTLP_INSECURE", NULL, SP_KIND_FLAG, 0, 0,
        "\"on\" or \"off\" (\"true\" or \"false\")", false, false },
    [SP_SETTING_SERVICE_NAME] = {
        "OTEL_SERVICE_NAME", NULL, SP_KIND_TEXT, 0, 0,
        "a non-empty name", false, false },
    [SP_SETTING_RESOURCE_ATTRIBUTES] = {
        "OTEL_RESOURCE_ATTRIBUTES", NULL, SP_KIND_KVLIST, 0, 0,
        "a list \"key=value,key2=value2\" with percent-encoded values",
        false, false },
    [SP_SETTING_TRACES_EXPORTER] = {
        "OTEL_TRACES_EXPORTER", NULL, SP_KIND_EXPORTER, 0, 0,
        "\"otlp\", \"console\" or \"none\"", false, false },
    [SP_SETTING_LOGS_EXPORTER] = {
        "OTEL_LOGS_EXPORTER", NULL, SP_KIND_EXPORTER, 0, 0,
        "\"otlp\", \"console\" or \"none\"", false, false },
    [SP_SETTING_TRACES_SAMPLER] = {
        "OTEL_TRACES_SAMPLER", NULL, SP_KIND_SAMPLER, 0, 0,
        "\"always_on\", \"always_off\", \"traceidratio\", "
        "\"parentbased_always_on\", \"parentbased_always_off\" or "
        "\"parentbased_traceidratio\"", false, false },
    [SP_SETTING_TRACES_SAMPLER_ARG] = {
        "OTEL_TRACES_SAMPLER_ARG", NULL, SP_KIND_RATIO, 0, 0,
        "a decimal number from 0 to 1", false, false },
    [SP_SETTING_PROPAGATORS] = {
        "OTEL_PROPAGATORS", NULL, SP_KIND_PROPAGATORS, 0, 0,
        "a comma-separated list of \"tracecontext\" and \"baggage\", "
        "or \"none\"", false, false },
    [SP_SETTING_PROFILER_EXPORT_INTERVAL] = {
        "SPLUNK_PROFILER_EXPORT_INTERVAL", NULL, SP_KIND_DURATION,
        1, SP_HOUR_MS,
        "a duration from 1ms to 1h (a number of milliseconds, "
        "or with the suffix \"ms\" or \"s\")", false, false },
    [SP_SETTING_BSP_SCHEDULE_DELAY] = {
        "OTEL_BSP_SCHEDULE_DELAY", NULL, SP_KIND_DURATION, 1, SP_HOUR_MS,
        "a duration from 1ms to 1h (a number of milliseconds, "
        "or with the suffix \"ms\" or \"s\")", false, false },
    [SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE] = {
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", NULL, SP_KIND_COUNT, 1, 1000000,
        "an integer from 1 to 1000000, at most the queue size",
        false, false },
    [SP_SETTING_BSP_MAX_QUEUE_SIZE] = {
        "OTEL_BSP_MAX_QUEUE_SIZE", NULL, SP_KIND_COUNT, 1, 1000000,
        "an integer from 1 to 1000000", false, false },
    [SP_SETTING_PROFILER_MAX_STACK_DEPTH] = {
        "SPLUNK_PROFILER_MAX_STACK_DEPTH", NULL, SP_KIND_COUNT, 1, 1024,
        "an integer from 1 to 1024", false, false },
    [SP_SETTING_HTTP_KNOWN_METHODS] = {
        "OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS", NULL, SP_KIND_METHODS,
        0, 0,
        "a comma-separated list of HTTP methods, case-sensitive, such as "
        "\"GET,POST,PURGE\" (at most 32, 255 characters)", false, false },
};

static const char *const sp_exporter_names[] = {
    [SP_EXPORTER_OTLP] = "otlp",
    [SP_EXPORTER_CONSOLE] = "console",
    [SP_EXPORTER_NONE] = "none",
};

static const char *const sp_sampler_names[] = {
    [SP_SAMPLER_ALWAYS_ON] = "always_on",
    [SP_SAMPLER_ALWAYS_OFF] = "always_off",
    [SP_SAMPLER_TRACEIDRATIO] = "traceidratio",
    [SP_SAMPLER_PARENTBASED_ALWAYS_ON] = "parentbased_always_on",
    [SP_SAMPLER_PARENTBASED_ALWAYS_OFF] = "parentbased_always_off",
    [SP_SAMPLER_PARENTBASED_TRACEIDRATIO] = "parentbased_traceidratio",
};

#define SP_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef enum sp_parse_result {
    SP_PARSE_OK,
    SP_PARSE_CLAMPED,
    SP_PARSE_INVALID
} sp_parse_result;

static bool
sp_equals_nocase(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(s, word, len) == 0;
}

sp_status
sp_config_parse_flag(const char *value, size_t len, bool *out)
{
    /* As for every other value: the per-scope switches ("spanprof",
     * "Spanprof") come here straight from the adapters. */
    sp_trim_ows(&value, &len);

    if (sp_equals_nocase(value, len, "on")
        || sp_equals_nocase(value, len, "true"))
    {
        *out = true;
        return SP_OK;
    }
    if (sp_equals_nocase(value, len, "off")
        || sp_equals_nocase(value, len, "false"))
    {
        *out = false;
        return SP_OK;
    }
    return SP_ERR_INVALID;
}

/*
 * A plain decimal ("0.05", "1", ".5"), parsed by hand: strtod depends on
 * the locale and accepts hex, infinities and exponents nobody means here.
 * One division of two exact integers gives the correctly rounded value, so
 * "0.1" here is the same double as the literal 0.1.
 */
static bool
sp_parse_decimal(const char *s, size_t len, double *out)
{
    uint64_t mantissa = 0;
    double   scale = 1;
    bool     point = false;
    size_t   i, digits = 0;

    for (i = 0; i < len; i++) {
        if (s[i] == '.' && !point) {
            point = true;
        } else if (s[i] >= '0' && s[i] <= '9') {
            if (++digits > 18) {
                return false;
            }
            mantissa = mantissa * 10 + (uint64_t)(s[i] - '0');
            if (point) {
                scale *= 10;
            }
        } else {
            return false;
        }
    }
    *out = (double)mantissa / scale;
    return digits > 0;
}

static bool
sp_parse_unsigned(const char *s, size_t len, uint64_t *out)
{
    uint64_t value = 0;
    size_t   i;

    if (len == 0) {
        return false;
    }
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        if (value > (UINT64_MAX - 9) / 10) {
            return false;
        }
        value = value * 10 + (uint64_t)(s[i] - '0');
    }
    *out = value;
    return true;
}

static bool
sp_parse_duration(const char *s, size_t len, uint64_t *ms)
{
    uint64_t unit = 1;

    if (len > 2 && s[len - 2] == 'm' && s[len - 1] == 's') {
        len -= 2;
    } else if (len > 1 && s[len - 1] == 's') {
        len -= 1;
        unit = 1000;
    }
    if (!sp_parse_unsigned(s, len, ms) || *ms > UINT64_MAX / unit) {
        return false;
    }
    *ms *= unit;
    return true;
}

bool
sp_config_pem_text(const char *text, size_t len)
{
    static const char begin[] = "-----BEGIN CERTIFICATE-----";

    return len <= SP_CONFIG_PEM_MAX && memchr(text, '\0', len) == NULL
           && memmem(text, len, begin, sizeof(begin) - 1) != NULL;
}

sp_status
sp_config_pem_read(const char *path, char **out)
{
    FILE  *f = fopen(path, "rb");
    char  *buf;
    size_t n;
    int    err;

    *out = NULL;
    if (f == NULL) {
        return SP_ERR_IO;
    }
    buf = malloc(SP_CONFIG_PEM_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return SP_ERR_NOMEM;
    }
    n = fread(buf, 1, SP_CONFIG_PEM_MAX + 1, f);
    if (ferror(f)) {
        err = errno;
        fclose(f);
        free(buf);
        errno = err;
        return SP_ERR_IO;
    }
    fclose(f);
    if (!sp_config_pem_text(buf, n)) {
        free(buf);
        return SP_ERR_INVALID;
    }
    buf[n] = '\0';
    *out = buf;
    return SP_OK;
}

/*
 * Readable is not enough: the exporter reads the file when it starts, and
 * a file of something else (a key, DER, a wrong path to a text file) made
 * every exporter exit at once, restarted by the server forever, with the
 * configuration test passing.
 */
static bool
sp_pem_file(const char *path)
{
    char  *buf;

    if (sp_config_pem_read(path, &buf) != SP_OK) {
        return false;
    }
    free(buf);
    return true;
}

static bool
sp_parse_choice(const char *s, size_t len, const char *const *names,
                size_t n, uint64_t *out)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strlen(names[i]) == len && memcmp(s, names[i], len) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

static bool
sp_parse_propagators(const char *s, size_t len, uint64_t *out)
{
    uint64_t bits = 0;
    bool     none = false, any = false;
    size_t   start = 0, end;

    while (start <= len) {
        const char *item;
        size_t      n;

        for (end = start; end < len && s[end] != ','; end++) {
            /* find the end of the item */
        }
        item = s + start;
        n = end - start;
        sp_trim_ows(&item, &n);
        if (sp_equals_nocase(item, n, "tracecontext")) {
            bits |= SP_PROPAGATOR_TRACECONTEXT;
        } else if (sp_equals_nocase(item, n, "baggage")) {
            bits |= SP_PROPAGATOR_BAGGAGE;
        } else if (sp_equals_nocase(item, n, "none")) {
            none = true;
        } else {
            return false;
        }
        any = true;
        start = end + 1;
    }
    if (!any || (none && bits != 0)) {
        return false;
    }
    *out = bits;
    return true;
}

static char *
sp_strndup(const char *s, size_t len)
{
    char *copy = malloc(len + 1);

    if (copy != NULL) {
        memcpy(copy, s, len);
        copy[len] = '\0';
    }
    return copy;
}

/*
 * Parses value for setting s into *out (text freshly allocated). Leaves
 * *out untouched when the value is invalid.
 */
static sp_parse_result
sp_parse_value(sp_setting s, const char *value, size_t len, bool inverted,
               sp_value *out)
{
    const sp_setting_desc *d = &sp_settings[s];
    sp_parse_result        result = SP_PARSE_OK;
    bool                   flag;
    double                 number;
    uint64_t               integer;
    char                  *text;

    sp_trim_ows(&value, &len);

    switch (d->kind) {
    case SP_KIND_FLAG:
        if (sp_config_parse_flag(value, len, &flag) != SP_OK) {
            return SP_PARSE_INVALID;
        }
        out->integer = (flag != inverted);
        return SP_PARSE_OK;

    case SP_KIND_PROBABILITY:
        if (!sp_parse_decimal(value, len, &number) || !(number > 0)) {
            return SP_PARSE_INVALID;
        }
        if (number > SP_SELECTION_PROBABILITY_MAX) {
            number = SP_SELECTION_PROBABILITY_MAX;
            result = SP_PARSE_CLAMPED;
        }
        out->number = number;
        return result;

    case SP_KIND_RATIO:
        if (!sp_parse_decimal(value, len, &number) || number > 1) {
            return SP_PARSE_INVALID;
        }
        out->number = number;
        return SP_PARSE_OK;

    case SP_KIND_DURATION:
        if (!sp_parse_duration(value, len, &integer)) {
            return SP_PARSE_INVALID;
        }
        goto bounded;

    case SP_KIND_COUNT:
        if (!sp_parse_unsigned(value, len, &integer)) {
            return SP_PARSE_INVALID;
        }
    bounded:
        if (integer < d->min || integer > d->max) {
            return SP_PARSE_INVALID;
        }
        out->integer = integer;
        return SP_PARSE_OK;

    case SP_KIND_EXPORTER:
        if (!sp_parse_choice(value, len, sp_exporter_names,
                             SP_COUNT_OF(sp_exporter_names), &integer))
        {
            return SP_PARSE_INVALID;
        }
        out->integer = integer;
        return SP_PARSE_OK;

    case SP_KIND_SAMPLER:
        if (!sp_parse_choice(value, len, sp_sampler_names,
                             SP_COUNT_OF(sp_sampler_names), &integer))
        {
            return SP_PARSE_INVALID;
        }
        out->integer = integer;
        return SP_PARSE_OK;

    case SP_KIND_PROPAGATORS:
        if (!sp_parse_propagators(value, len, &integer)) {
            return SP_PARSE_INVALID;
        }
        out->integer = integer;
        return SP_PARSE_OK;

    case SP_KIND_ENDPOINT:
        if (sp_endpoint_parse(value, len, NULL) != SP_OK) {
            return SP_PARSE_INVALID;
        }
        break;

    case SP_KIND_KVLIST:
        if (len == 0 || sp_kvlist_validate(value, len) != SP_OK) {
            return SP_PARSE_INVALID;
        }
        break;

    case SP_KIND_PATH:
        if (len == 0 || memchr(value, '\0', len) != NULL) {
            return SP_PARSE_INVALID;
        }
        text = sp_strndup(value, len);
        if (text == NULL || !sp_pem_file(text)) {
            free(text);
            return SP_PARSE_INVALID;
        }
        free(out->text);
        out->text = text;
        return SP_PARSE_OK;

    case SP_KIND_TEXT:
        if (len == 0) {
            return SP_PARSE_INVALID;
        }
        break;

    case SP_KIND_METHODS: {
        sp_http_methods methods;

        if (sp_http_methods_parse(value, len, &methods) != SP_OK) {
            return SP_PARSE_INVALID;
        }
        text = sp_strndup(methods.text, strlen(methods.text));
        if (text == NULL) {
            return SP_PARSE_INVALID;
        }
        free(out->text);
        out->text = text;
        return SP_PARSE_OK;
    }
    }

    /* The remaining kinds keep the (trimmed) text as given. */
    if (memchr(value, '\0', len) != NULL) {
        return SP_PARSE_INVALID;
    }
    text = sp_strndup(value, len);
    if (text == NULL) {
        return SP_PARSE_INVALID;
    }
    free(out->text);
    out->text = text;
    return SP_PARSE_OK;
}

sp_config *
sp_config_create(sp_server server)
{
    sp_config *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->server = server;
    c->value[SP_SETTING_ENABLED].integer = 1;
    c->value[SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY].number =
        SP_SELECTION_PROBABILITY_DEFAULT;
    c->value[SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL].integer = 10;
    /* nginx workers are single-threaded; httpd children run many. */
    c->value[SP_SETTING_PROFILER_CALL_STACK_INTERVAL].integer =
        server == SP_SERVER_NGINX ? 1000 : 10000;
    c->value[SP_SETTING_OTLP_ENDPOINT].text =
        sp_strndup("http://localhost:4317", 21);
    c->value[SP_SETTING_OTLP_TIMEOUT].integer = 10000;
    c->value[SP_SETTING_TRACES_SAMPLER].integer =
        SP_SAMPLER_PARENTBASED_ALWAYS_ON;
    c->value[SP_SETTING_TRACES_SAMPLER_ARG].number = 1.0;
    c->value[SP_SETTING_PROPAGATORS].integer =
        SP_PROPAGATOR_TRACECONTEXT | SP_PROPAGATOR_BAGGAGE;
    c->value[SP_SETTING_PROFILER_EXPORT_INTERVAL].integer = 1000;
    c->value[SP_SETTING_BSP_SCHEDULE_DELAY].integer = 5000;
    c->value[SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE].integer = 512;
    c->value[SP_SETTING_BSP_MAX_QUEUE_SIZE].integer = 2048;
    c->value[SP_SETTING_PROFILER_MAX_STACK_DEPTH].integer = 128;
    c->value[SP_SETTING_HTTP_KNOWN_METHODS].text =
        sp_strndup(SP_HTTP_METHODS_STANDARD,
                   sizeof(SP_HTTP_METHODS_STANDARD) - 1);

    if (c->value[SP_SETTING_OTLP_ENDPOINT].text == NULL
        || c->value[SP_SETTING_HTTP_KNOWN_METHODS].text == NULL)
    {
        free(c->value[SP_SETTING_OTLP_ENDPOINT].text);
        free(c->value[SP_SETTING_HTTP_KNOWN_METHODS].text);
        free(c);
        return NULL;
    }
    return c;
}

void
sp_config_destroy(sp_config *c)
{
    int i;

    if (c == NULL) {
        return;
    }
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        free(c->value[i].text);
    }
    free(c);
}

static bool
sp_valid_setting(sp_setting s)
{
    return (unsigned)s < SP_SETTING_COUNT;
}

/* Writes value quoted, escaping what a terminal or a log would mangle. */
static size_t
sp_quote(char *buf, size_t size, const char *value, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const size_t      shown_max = 64;
    size_t            n = 0, i;

#define SP_PUT(ch) do { if (n + 1 < size) { buf[n] = (ch); } n++; } while (0)

    SP_PUT('"');
    for (i = 0; i < len && i < shown_max; i++) {
        unsigned char c = (unsigned char)value[i];

        if (c == '"' || c == '\\') {
            SP_PUT('\\');
            SP_PUT((char)c);
        } else if (c < 0x20 || c > 0x7e) {
            SP_PUT('\\');
            SP_PUT('x');
            SP_PUT(hex[c >> 4]);
            SP_PUT(hex[c & 0xf]);
        } else {
            SP_PUT((char)c);
        }
    }
    if (len > shown_max) {
        SP_PUT('.');
        SP_PUT('.');
        SP_PUT('.');
    }
    SP_PUT('"');
#undef SP_PUT

    if (size > 0) {
        buf[n < size ? n : size - 1] = '\0';
    }
    return n;
}

size_t
sp_config_invalid_message(char *buf, size_t size, sp_setting s,
                          sp_origin origin, const char *source_name,
                          const char *value, size_t len)
{
    char quoted[4 * 64 + 8];

    if (!sp_valid_setting(s)) {
        return (size_t)snprintf(buf, size, "unknown setting");
    }
    if (sp_settings[s].secret) {
        snprintf(quoted, sizeof(quoted), "(not shown: it holds secrets)");
    } else {
        sp_quote(quoted, sizeof(quoted), value, len);
    }
    if (origin == SP_ORIGIN_ENV) {
        return (size_t)snprintf(buf, size,
            "invalid value %s in environment variable %s, allowed: %s; "
            "using the default", quoted, source_name,
            sp_settings[s].allowed);
    }
    return (size_t)snprintf(buf, size,
        "invalid value %s in \"%s\" directive, allowed: %s",
        quoted, source_name, sp_settings[s].allowed);
}

static void
sp_clamp_message(char *buf, size_t size, sp_origin origin,
                 const char *source_name, const char *value, size_t len)
{
    char quoted[4 * 64 + 8];

    sp_quote(quoted, sizeof(quoted), value, len);
    snprintf(buf, size, "value %s %s%s%s is above the maximum 0.10 "
             "and is clamped to 0.10", quoted,
             origin == SP_ORIGIN_ENV ? "of environment variable " : "in \"",
             source_name,
             origin == SP_ORIGIN_ENV ? "" : "\" directive");
}

sp_status
sp_config_set_directive(sp_config *c, sp_setting s, const char *directive,
                        const char *value, size_t len, char *msg,
                        size_t msg_size)
{
    sp_parse_result result;

    if (msg_size > 0) {
        msg[0] = '\0';
    }
    if (!sp_valid_setting(s)) {
        return SP_ERR_INVALID;
    }
    result = sp_parse_value(s, value, len, false, &c->value[s]);
    if (result == SP_PARSE_INVALID) {
        sp_config_invalid_message(msg, msg_size, s, SP_ORIGIN_DIRECTIVE,
                                  directive, value, len);
        return SP_ERR_INVALID;
    }
    if (result == SP_PARSE_CLAMPED) {
        sp_clamp_message(msg, msg_size, SP_ORIGIN_DIRECTIVE, directive,
                         value, len);
    }
    c->origin[s] = SP_ORIGIN_DIRECTIVE;
    return SP_OK;
}

static void
sp_apply_env(sp_config *c, sp_setting s, const char *name,
             const char *value, sp_config_warn warn, void *warn_ctx)
{
    char            msg[SP_CONFIG_MESSAGE_SIZE];
    size_t          len = strlen(value);
    sp_parse_result result;

    result = sp_parse_value(s, value, len, sp_settings[s].env_inverted,
                            &c->value[s]);
    if (result == SP_PARSE_INVALID) {
        sp_config_invalid_message(msg, sizeof(msg), s, SP_ORIGIN_ENV, name,
                                  value, len);
        warn(warn_ctx, msg);
        return;
    }
    if (result == SP_PARSE_CLAMPED) {
        sp_clamp_message(msg, sizeof(msg), SP_ORIGIN_ENV, name, value, len);
        warn(warn_ctx, msg);
    }
    c->origin[s] = SP_ORIGIN_ENV;
}

void
sp_config_note_scope_on(sp_config *c)
{
    c->scope_on = true;
}

/*
 * Which of the two server-wide switches wins, said when the operator set
 * both ways or switched a scope on under a server that is off: the
 * directive at the top level wins over OTEL_SDK_DISABLED (SPEC 1), and
 * nothing runs at all under a top level that is off.
 */
static void
sp_warn_switches(const sp_config *c, const char *disabled_env,
                 sp_config_warn warn, void *warn_ctx)
{
    char        msg[SP_CONFIG_MESSAGE_SIZE];
    bool        nginx = c->server == SP_SERVER_NGINX;
    bool        env_off = false;
    const char *name = nginx ? "spanprof" : "Spanprof";
    const char *on = nginx ? "on" : "On";
    const char *top = nginx ? "at http level"
                            : "in the main server configuration";
    const char *inner = nginx ? "in a server or location"
                              : "in a virtual host or a directory section";

    if (disabled_env != NULL) {
        (void)sp_config_parse_flag(disabled_env, strlen(disabled_env),
                                   &env_off);
    }
    if (c->origin[SP_SETTING_ENABLED] == SP_ORIGIN_DIRECTIVE) {
        if (c->value[SP_SETTING_ENABLED].integer != 0 && env_off) {
            snprintf(msg, sizeof(msg), "\"%s %s\" %s overrides the "
                     "environment variable OTEL_SDK_DISABLED=true: "
                     "spanprof is on (a directive wins over the "
                     "environment)", name, on, top);
            warn(warn_ctx, msg);
        } else if (c->value[SP_SETTING_ENABLED].integer == 0 && c->scope_on) {
            snprintf(msg, sizeof(msg), "\"%s %s\" %s has no effect: "
                     "\"%s %s\" %s turns spanprof off for the whole "
                     "server", name, on, inner, name, nginx ? "off" : "Off",
                     top);
            warn(warn_ctx, msg);
        }
    } else if (c->value[SP_SETTING_ENABLED].integer == 0 && c->scope_on) {
        snprintf(msg, sizeof(msg), "\"%s %s\" %s has no effect: the "
                 "environment variable OTEL_SDK_DISABLED=true turns "
                 "spanprof off for the whole server (\"%s %s\" %s would "
                 "win over it)", name, on, inner, name, on, top);
        warn(warn_ctx, msg);
    }
}

void
sp_config_complete(sp_config *c, sp_env_lookup lookup, void *lookup_ctx,
                   sp_config_warn warn, void *warn_ctx)
{
    char        msg[SP_CONFIG_MESSAGE_SIZE];
    int         i;
    uint64_t    batch, queue;

    for (i = 0; i < SP_SETTING_COUNT; i++) {
        const sp_setting_desc *d = &sp_settings[i];
        const char            *name = d->env;
        const char            *value;

        if (c->origin[i] == SP_ORIGIN_DIRECTIVE) {
            continue;
        }
        value = lookup(lookup_ctx, d->env);
        if ((value == NULL || value[0] == '\0') && d->env_alias != NULL) {
            name = d->env_alias;
            value = lookup(lookup_ctx, d->env_alias);
        }
        if (value == NULL || value[0] == '\0') {
            continue;
        }
        sp_apply_env(c, (sp_setting)i, name, value, warn, warn_ctx);
    }
    sp_warn_switches(c, lookup(lookup_ctx,
                               sp_settings[SP_SETTING_ENABLED].env),
                     warn, warn_ctx);

    /* OpenTelemetry's batch span processor: a batch never exceeds the
     * queue it is taken from. */
    batch = c->value[SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE].integer;
    queue = c->value[SP_SETTING_BSP_MAX_QUEUE_SIZE].integer;
    if (batch > queue) {
        snprintf(msg, sizeof(msg),
                 "%s (%llu) is larger than %s (%llu); using %llu",
                 sp_settings[SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE].env,
                 (unsigned long long)batch,
                 sp_settings[SP_SETTING_BSP_MAX_QUEUE_SIZE].env,
                 (unsigned long long)queue, (unsigned long long)queue);
        warn(warn_ctx, msg);
        c->value[SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE].integer = queue;
    }
}

/* 0 when the user can open path for reading, else the errno it got. */
static int
sp_open_errno_as(const char *path, uint32_t uid, uint32_t gid,
                 const char *user, bool groups)
{
    pid_t pid = fork();
    int   status, fd;

    if (pid < 0) {
        return 0;   /* cannot tell: say nothing */
    }
    if (pid == 0) {
        if ((groups && user != NULL ? initgroups(user, (gid_t)gid)
                                    : setgroups(0, NULL)) != 0
            || setgid((gid_t)gid) != 0 || setuid((uid_t)uid) != 0)
        {
            _exit(0);
        }
        fd = open(path, O_RDONLY);
        _exit(fd >= 0 ? 0 : errno > 0 && errno < 256 ? errno : EACCES);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            return 0;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

void
sp_config_check_exporter_user(sp_config *c, uint32_t uid, uint32_t gid,
                              const char *user, bool groups,
                              sp_config_warn warn, void *warn_ctx)
{
    char        msg[SP_CONFIG_MESSAGE_SIZE], quoted[4 * 64 + 8];
    sp_value   *v = &c->value[SP_SETTING_OTLP_CERTIFICATE];
    const char *source;
    int         err;

    if (v->text == NULL || (uid_t)uid == geteuid()) {
        return;
    }
    err = sp_open_errno_as(v->text, uid, gid, user, groups);
    if (err == 0) {
        return;
    }
    source = c->origin[SP_SETTING_OTLP_CERTIFICATE] == SP_ORIGIN_DIRECTIVE
             ? "directive" : "environment variable";
    sp_quote(quoted, sizeof(quoted), v->text, strlen(v->text));
    snprintf(msg, sizeof(msg), "the certificate file %s (%s "
             "OTEL_EXPORTER_OTLP_CERTIFICATE) cannot be read by %s%s%s"
             "uid %lu, which the exporter runs as: %s; the exporter uses "
             "the system trust store (a CA certificate is no secret: let "
             "that user read it)", quoted, source,
             user != NULL ? "user " : "", user != NULL ? user : "",
             user != NULL ? ", " : "", (unsigned long)uid, strerror(err));
    warn(warn_ctx, msg);
    free(v->text);
    v->text = NULL;
    c->origin[SP_SETTING_OTLP_CERTIFICATE] = SP_ORIGIN_DEFAULT;
}

sp_origin
sp_config_origin(const sp_config *c, sp_setting s)
{
    return sp_valid_setting(s) ? c->origin[s] : SP_ORIGIN_DEFAULT;
}

bool
sp_config_flag(const sp_config *c, sp_setting s)
{
    return sp_valid_setting(s) && sp_settings[s].kind == SP_KIND_FLAG
           && c->value[s].integer != 0;
}

double
sp_config_number(const sp_config *c, sp_setting s)
{
    if (!sp_valid_setting(s) || (sp_settings[s].kind != SP_KIND_PROBABILITY
                                 && sp_settings[s].kind != SP_KIND_RATIO))
    {
        return 0;
    }
    return c->value[s].number;
}

uint64_t
sp_config_integer(const sp_config *c, sp_setting s)
{
    if (!sp_valid_setting(s)) {
        return 0;
    }
    switch (sp_settings[s].kind) {
    case SP_KIND_DURATION:
    case SP_KIND_COUNT:
    case SP_KIND_EXPORTER:
    case SP_KIND_SAMPLER:
    case SP_KIND_PROPAGATORS:
        return c->value[s].integer;
    default:
        return 0;
    }
}

const char *
sp_config_text(const sp_config *c, sp_setting s)
{
    if (!sp_valid_setting(s)) {
        return NULL;
    }
    switch (sp_settings[s].kind) {
    case SP_KIND_ENDPOINT:
        if (c->value[s].text == NULL) {
            return c->value[SP_SETTING_OTLP_ENDPOINT].text;
        }
        return c->value[s].text;
    case SP_KIND_KVLIST:
    case SP_KIND_PATH:
    case SP_KIND_TEXT:
    case SP_KIND_METHODS:
        return c->value[s].text;
    default:
        return NULL;
    }
}

const char *
sp_setting_env_name(sp_setting s)
{
    return sp_valid_setting(s) ? sp_settings[s].env : NULL;
}

const char *
sp_setting_env_alias(sp_setting s)
{
    return sp_valid_setting(s) ? sp_settings[s].env_alias : NULL;
}

const char *
sp_setting_allowed(sp_setting s)
{
    return sp_valid_setting(s) ? sp_settings[s].allowed : NULL;
}

/* "k=***,k2=***": the keys help an operator, the values are secrets. */
static size_t
sp_format_masked(const char *list, char *buf, size_t size)
{
    size_t n = 0;
    bool   in_value = false;

    for (; *list != '\0'; list++) {
        if (*list == ',') {
            in_value = false;
        } else if (in_value) {
            continue;
        }
        if (n + 1 < size) {
            buf[n] = *list;
        }
        n++;
        if (*list == '=') {
            in_value = true;
            if (n + 3 < size) {
                memcpy(buf + n, "***", 3);
            }
            n += 3;
        }
    }
    if (size > 0) {
        buf[n < size ? n : size - 1] = '\0';
    }
    return n;
}

static size_t
sp_format_value(const sp_config *c, sp_setting s, const sp_value *v,
                bool for_log, char *buf, size_t size)
{
    const sp_setting_desc *d = &sp_settings[s];
    const char            *text;

    switch (d->kind) {
    case SP_KIND_FLAG:
        return (size_t)snprintf(buf, size, "%s",
                                (v->integer != 0) != d->env_inverted
                                ? "true" : "false");
    case SP_KIND_PROBABILITY:
    case SP_KIND_RATIO:
        return (size_t)snprintf(buf, size, "%g", v->number);
    case SP_KIND_DURATION:
        return (size_t)snprintf(buf, size, "%llums",
                                (unsigned long long)v->integer);
    case SP_KIND_COUNT:
        return (size_t)snprintf(buf, size, "%llu",
                                (unsigned long long)v->integer);
    case SP_KIND_EXPORTER:
        return (size_t)snprintf(buf, size, "%s",
                                sp_exporter_names[v->integer]);
    case SP_KIND_SAMPLER:
        return (size_t)snprintf(buf, size, "%s",
                                sp_sampler_names[v->integer]);
    case SP_KIND_PROPAGATORS:
        return (size_t)snprintf(buf, size, "%s",
            v->integer == 0 ? "none"
            : v->integer == SP_PROPAGATOR_TRACECONTEXT ? "tracecontext"
            : v->integer == SP_PROPAGATOR_BAGGAGE ? "baggage"
            : "tracecontext,baggage");
    default:
        break;
    }

    text = sp_config_text(c, s);
    if (text == NULL && !for_log) {
        if (size > 0) {
            buf[0] = '\0';
        }
        return 0;
    }
    if (text == NULL) {
        if (s == SP_SETTING_SERVICE_NAME) {
            return (size_t)snprintf(buf, size, "unknown_service:%s",
                c->server == SP_SERVER_NGINX ? "nginx" : "httpd");
        }
        return (size_t)snprintf(buf, size, "(none)");
    }
    if (d->secret && for_log) {
        return sp_format_masked(text, buf, size);
    }
    return (size_t)snprintf(buf, size, "%s", text);
}

size_t
sp_config_value_text(const sp_config *c, sp_setting s, char *buf,
                     size_t size)
{
    if ((unsigned)s >= SP_SETTING_COUNT) {
        if (size > 0) {
            buf[0] = '\0';
        }
        return 0;
    }
    return sp_format_value(c, s, &c->value[s], false, buf, size);
}

size_t
sp_config_describe(const sp_config *c, char *buf, size_t size)
{
    static const char *const origin_suffix[] = {
        [SP_ORIGIN_DEFAULT] = "",
        [SP_ORIGIN_ENV] = " (env)",
        [SP_ORIGIN_DIRECTIVE] = " (directive)",
    };
    char   value[256];
    size_t n;
    int    i;

    n = (size_t)snprintf(buf, size, "spanprof %s configuration:",
                         SP_VERSION);
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        size_t len = sp_format_value(c, (sp_setting)i, &c->value[i], true,
                                     value, sizeof(value));

        if (len >= sizeof(value)) {
            /* Long lists stay readable; the log line has a size limit. */
            memcpy(value + sizeof(value) - 4, "...", 4);
        }
        n += (size_t)snprintf(n < size ? buf + n : NULL,
                              n < size ? size - n : 0, "%s %s=%s%s",
                              i == 0 ? "" : ",", sp_settings[i].env, value,
                              origin_suffix[c->origin[i]]);
    }
    return n;
}
