/*
 * spanprof for Apache httpd: the adapter between httpd and spanprof's core.
 * For now: the directives of every setting, their merge, and the startup
 * line with the effective configuration.
 */

#include "httpd.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"

#include "apr_strings.h"

#include <stdlib.h>

#include <sp_config.h>

APLOG_USE_MODULE(spanprof);

module AP_MODULE_DECLARE_DATA spanprof_module;

typedef struct {
    sp_config  *config;       /* used in the main server's record only */
    int         completed;    /* the environment has been read */
} spanprof_server_conf;

typedef enum {
    SPANPROF_UNSET = -1,
    SPANPROF_OFF = 0,
    SPANPROF_ON = 1
} spanprof_switch;

typedef struct {
    spanprof_switch  enable;
} spanprof_dir_conf;

static apr_status_t
spanprof_destroy_config(void *data)
{
    sp_config_destroy(data);
    return APR_SUCCESS;
}

static void *
spanprof_create_server_config(apr_pool_t *p, server_rec *s)
{
    spanprof_server_conf *conf = apr_pcalloc(p, sizeof(*conf));

    conf->config = sp_config_create(SP_SERVER_HTTPD);
    if (conf->config == NULL) {
        return NULL;
    }
    apr_pool_cleanup_register(p, conf->config, spanprof_destroy_config,
                              apr_pool_cleanup_null);
    return conf;
}

static void *
spanprof_create_dir_config(apr_pool_t *p, char *dir)
{
    spanprof_dir_conf *conf = apr_palloc(p, sizeof(*conf));

    conf->enable = SPANPROF_UNSET;
    return conf;
}

static void *
spanprof_merge_dir_config(apr_pool_t *p, void *base_conf, void *add_conf)
{
    spanprof_dir_conf *base = base_conf;
    spanprof_dir_conf *add = add_conf;
    spanprof_dir_conf *conf = apr_palloc(p, sizeof(*conf));

    conf->enable = add->enable != SPANPROF_UNSET ? add->enable : base->enable;
    return conf;
}

static spanprof_server_conf *
spanprof_main_conf(server_rec *s)
{
    return ap_get_module_config(s->module_config, &spanprof_module);
}

/* "Spanprof On|Off": per server and directory; in the main server's own
 * scope it is the server-wide switch that overrides OTEL_SDK_DISABLED. */
static const char *
spanprof_set_enable(cmd_parms *cmd, void *dconf, const char *arg)
{
    spanprof_dir_conf *conf = dconf;
    char               msg[SP_CONFIG_MESSAGE_SIZE];
    bool               on;

    if (sp_config_parse_flag(arg, strlen(arg), &on) != SP_OK) {
        sp_config_invalid_message(msg, sizeof(msg), SP_SETTING_ENABLED,
                                  SP_ORIGIN_DIRECTIVE, cmd->cmd->name, arg,
                                  strlen(arg));
        return apr_pstrdup(cmd->pool, msg);
    }
    conf->enable = on ? SPANPROF_ON : SPANPROF_OFF;

    if (cmd->path == NULL && !cmd->server->is_virtual) {
        (void) sp_config_set_directive(spanprof_main_conf(cmd->server)->config,
                                       SP_SETTING_ENABLED, cmd->cmd->name,
                                       arg, strlen(arg), msg, sizeof(msg));
    }
    return NULL;
}

/* Every other setting: one exporter serves the whole server, so they live
 * in the main server's configuration only. cmd_data carries the setting. */
static const char *
spanprof_set_setting(cmd_parms *cmd, void *dconf, const char *arg)
{
    sp_setting        setting = (sp_setting) (intptr_t) cmd->info;
    const char       *err;
    char              msg[SP_CONFIG_MESSAGE_SIZE];

    err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err != NULL) {
        return err;
    }
    if (sp_config_set_directive(spanprof_main_conf(cmd->server)->config,
                                setting, cmd->cmd->name, arg, strlen(arg),
                                msg, sizeof(msg))
        != SP_OK)
    {
        return apr_pstrdup(cmd->pool, msg);
    }
    if (msg[0] != '\0') {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, cmd->server,
                     "%s (%s:%d)", msg, cmd->directive->filename,
                     cmd->directive->line_num);
    }
    return NULL;
}

static const char *
spanprof_getenv(void *ctx, const char *name)
{
    return getenv(name);
}

static void
spanprof_ignore_warning(void *ctx, const char *message)
{
}

static void
spanprof_warn(void *ctx, const char *message)
{
    ap_log_error(APLOG_MARK, APLOG_WARNING, 0, (server_rec *) ctx,
                 "spanprof: %s", message);
}

/*
 * The parent reads the environment once per configuration load. httpd
 * loads its configuration twice at startup and the first load is a dry
 * run: warning there too would say everything twice.
 */
static void
spanprof_complete(server_rec *s, int quiet)
{
    spanprof_server_conf *conf = spanprof_main_conf(s);

    if (!conf->completed) {
        sp_config_complete(conf->config, spanprof_getenv, NULL,
                           quiet ? spanprof_ignore_warning : spanprof_warn,
                           s);
        conf->completed = 1;
    }
}

static void
spanprof_test_config(apr_pool_t *pconf, server_rec *s)
{
    spanprof_complete(s, 0);
}

static int
spanprof_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                     server_rec *s)
{
    char   *line;
    size_t  len;

    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        spanprof_complete(s, 1);
        return OK;
    }
    spanprof_complete(s, 0);
    len = sp_config_describe(spanprof_main_conf(s)->config, NULL, 0) + 1;
    line = apr_palloc(ptemp, len);
    sp_config_describe(spanprof_main_conf(s)->config, line, len);
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "%s", line);
    return OK;
}

static void
spanprof_register_hooks(apr_pool_t *p)
{
    ap_hook_test_config(spanprof_test_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(spanprof_post_config, NULL, NULL, APR_HOOK_MIDDLE);
}

static const command_rec spanprof_commands[] = {
    AP_INIT_TAKE1("Spanprof", spanprof_set_enable, NULL,
                  RSRC_CONF | ACCESS_CONF,
                  "On or Off: trace requests in this scope"),
    AP_INIT_TAKE1("SpanprofSnapshot", spanprof_set_setting,
                  (void *) SP_SETTING_SNAPSHOT_PROFILER_ENABLED, RSRC_CONF,
                  "snapshot profiler enabled; see the README"),
    AP_INIT_TAKE1("SpanprofSnapshotSelectionProbability", spanprof_set_setting,
                  (void *) SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY, RSRC_CONF,
                  "snapshot selection probability; see the README"),
    AP_INIT_TAKE1("SpanprofSnapshotSamplingInterval", spanprof_set_setting,
                  (void *) SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL, RSRC_CONF,
                  "snapshot sampling interval; see the README"),
    AP_INIT_TAKE1("SpanprofProfiler", spanprof_set_setting,
                  (void *) SP_SETTING_PROFILER_ENABLED, RSRC_CONF,
                  "profiler enabled; see the README"),
    AP_INIT_TAKE1("SpanprofProfilerCallStackInterval", spanprof_set_setting,
                  (void *) SP_SETTING_PROFILER_CALL_STACK_INTERVAL, RSRC_CONF,
                  "profiler call stack interval; see the README"),
    AP_INIT_TAKE1("SpanprofProfilerLogsEndpoint", spanprof_set_setting,
                  (void *) SP_SETTING_PROFILER_LOGS_ENDPOINT, RSRC_CONF,
                  "profiler logs endpoint; see the README"),
    AP_INIT_TAKE1("SpanprofOtlpEndpoint", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_ENDPOINT, RSRC_CONF,
                  "otlp endpoint; see the README"),
    AP_INIT_TAKE1("SpanprofOtlpTracesEndpoint", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_TRACES_ENDPOINT, RSRC_CONF,
                  "otlp traces endpoint; see the README"),
    AP_INIT_TAKE1("SpanprofOtlpHeaders", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_HEADERS, RSRC_CONF,
                  "otlp headers; see the README"),
    AP_INIT_TAKE1("SpanprofOtlpTimeout", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_TIMEOUT, RSRC_CONF,
                  "otlp timeout; see the README"),
    AP_INIT_TAKE1("SpanprofOtlpCertificate", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_CERTIFICATE, RSRC_CONF,
                  "otlp certificate; see the README"),
    AP_INIT_TAKE1("SpanprofServiceName", spanprof_set_setting,
                  (void *) SP_SETTING_SERVICE_NAME, RSRC_CONF,
                  "service name; see the README"),
    AP_INIT_TAKE1("SpanprofResourceAttributes", spanprof_set_setting,
                  (void *) SP_SETTING_RESOURCE_ATTRIBUTES, RSRC_CONF,
                  "resource attributes; see the README"),
    AP_INIT_TAKE1("SpanprofTracesExporter", spanprof_set_setting,
                  (void *) SP_SETTING_TRACES_EXPORTER, RSRC_CONF,
                  "traces exporter; see the README"),
    AP_INIT_TAKE1("SpanprofLogsExporter", spanprof_set_setting,
                  (void *) SP_SETTING_LOGS_EXPORTER, RSRC_CONF,
                  "logs exporter; see the README"),
    AP_INIT_TAKE1("SpanprofTracesSampler", spanprof_set_setting,
                  (void *) SP_SETTING_TRACES_SAMPLER, RSRC_CONF,
                  "traces sampler; see the README"),
    AP_INIT_TAKE1("SpanprofTracesSamplerArg", spanprof_set_setting,
                  (void *) SP_SETTING_TRACES_SAMPLER_ARG, RSRC_CONF,
                  "traces sampler arg; see the README"),
    AP_INIT_TAKE1("SpanprofPropagators", spanprof_set_setting,
                  (void *) SP_SETTING_PROPAGATORS, RSRC_CONF,
                  "propagators; see the README"),
    AP_INIT_TAKE1("SpanprofProfilerExportInterval", spanprof_set_setting,
                  (void *) SP_SETTING_PROFILER_EXPORT_INTERVAL, RSRC_CONF,
                  "profiler export interval; see the README"),
    AP_INIT_TAKE1("SpanprofBspScheduleDelay", spanprof_set_setting,
                  (void *) SP_SETTING_BSP_SCHEDULE_DELAY, RSRC_CONF,
                  "bsp schedule delay; see the README"),
    AP_INIT_TAKE1("SpanprofBspMaxExportBatchSize", spanprof_set_setting,
                  (void *) SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE, RSRC_CONF,
                  "bsp max export batch size; see the README"),
    AP_INIT_TAKE1("SpanprofBspMaxQueueSize", spanprof_set_setting,
                  (void *) SP_SETTING_BSP_MAX_QUEUE_SIZE, RSRC_CONF,
                  "bsp max queue size; see the README"),
    AP_INIT_TAKE1("SpanprofProfilerMaxStackDepth", spanprof_set_setting,
                  (void *) SP_SETTING_PROFILER_MAX_STACK_DEPTH, RSRC_CONF,
                  "profiler max stack depth; see the README"),
    { NULL }
};

module AP_MODULE_DECLARE_DATA spanprof_module = {
    STANDARD20_MODULE_STUFF,
    spanprof_create_dir_config,
    spanprof_merge_dir_config,
    spanprof_create_server_config,
    NULL,
    spanprof_commands,
    spanprof_register_hooks,
    AP_MODULE_FLAG_NONE
};
