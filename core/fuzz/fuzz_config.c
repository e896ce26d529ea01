/*
 * Every setting's parser, from a directive and from the environment. The
 * first byte picks the setting, the rest is the value. Checks that what is
 * accepted stays within its bounds and that the messages and the startup
 * line are always terminated and never show a header value.
 */
#include "sp_config.h"
#include "sp_selection.h"

#include <stdlib.h>
#include <string.h>

static const char *fuzz_env_name;
static const char *fuzz_env_value;

static const char *
fuzz_lookup(void *ctx, const char *name)
{
    (void)ctx;
    return strcmp(name, fuzz_env_name) == 0 ? fuzz_env_value : NULL;
}

static void
fuzz_warn(void *ctx, const char *message)
{
    (*(int *)ctx)++;
    if (strlen(message) >= SP_CONFIG_MESSAGE_SIZE) {
        abort();
    }
}

static void
check_bounds(const sp_config *c)
{
    double p = sp_config_number(c, SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY);
    double r = sp_config_number(c, SP_SETTING_TRACES_SAMPLER_ARG);
    uint64_t i = sp_config_integer(c, SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL);

    if (!(p > 0 && p <= SP_SELECTION_PROBABILITY_MAX) || !(r >= 0 && r <= 1)
        || i < 1 || i > 1000
        || sp_config_integer(c, SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE)
           > sp_config_integer(c, SP_SETTING_BSP_MAX_QUEUE_SIZE)
        || sp_config_integer(c, SP_SETTING_PROFILER_MAX_STACK_DEPTH) > 1024)
    {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char        msg[SP_CONFIG_MESSAGE_SIZE];
    char        line[8192];
    char       *value;
    sp_setting  s;
    sp_config  *c;
    int         warnings = 0;
    const char *headers;

    if (size < 1) {
        return 0;
    }
    s = (sp_setting)(data[0] % SP_SETTING_COUNT);
    value = malloc(size);
    if (value == NULL) {
        return 0;
    }
    memcpy(value, data + 1, size - 1);
    value[size - 1] = '\0';

    c = sp_config_create(data[0] & 0x80 ? SP_SERVER_HTTPD : SP_SERVER_NGINX);
    if (c == NULL) {
        free(value);
        return 0;
    }
    if (sp_config_set_directive(c, s, "fuzz", value, size - 1, msg,
                                sizeof(msg)) != SP_OK
        && msg[0] == '\0')
    {
        abort();
    }
    if (strlen(msg) >= sizeof(msg)) {
        abort();
    }
    fuzz_env_name = sp_setting_env_name((sp_setting)((data[0] + 1)
                                                     % SP_SETTING_COUNT));
    fuzz_env_value = value;
    sp_config_complete(c, fuzz_lookup, NULL, fuzz_warn, &warnings);
    check_bounds(c);

    sp_config_describe(c, line, sizeof(line));
    headers = sp_config_text(c, SP_SETTING_OTLP_HEADERS);
    if (headers != NULL) {
        const char *p = strstr(line, "OTEL_EXPORTER_OTLP_HEADERS=");
        const char *end = strstr(line, ", OTEL_EXPORTER_OTLP_TIMEOUT=");

        /* Inside the headers' part, every value reads "***" (or its start,
         * where a long list was cut with "..."). */
        if (p == NULL || end == NULL) {
            abort();
        }
        if (end - p > 12 && strncmp(end - 12, " (directive)", 12) == 0) {
            end -= 12;
        } else if (end - p > 6 && strncmp(end - 6, " (env)", 6) == 0) {
            end -= 6;
        }
        if (end - p > 3 && strncmp(end - 3, "...", 3) == 0) {
            end -= 3;
        }
        for (p = strchr(p, '=') + 1; p < end; p++) {
            int i;

            if (*p != '=') {
                continue;
            }
            for (i = 1; i <= 3 && p + i < end; i++) {
                if (p[i] != '*') {
                    abort();
                }
            }
            if (p + 4 < end && p[4] != ',' && p[4] != ' ') {
                abort();
            }
        }
    }
    sp_config_destroy(c);
    free(value);
    return 0;
}
