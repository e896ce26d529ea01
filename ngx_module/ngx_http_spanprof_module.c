
/*
 * Copyright (C) spanprof authors
 *
 * spanprof for nginx: the adapter between nginx and spanprof's core.
 * For now: the directives of every setting, their merge down the
 * configuration levels, and the startup line with the effective
 * configuration.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sp_config.h>


typedef struct {
    sp_config   *config;
} ngx_http_spanprof_main_conf_t;


typedef struct {
    ngx_flag_t   enable;
} ngx_http_spanprof_loc_conf_t;


static void *ngx_http_spanprof_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_spanprof_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_spanprof_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_spanprof_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_spanprof_enable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_spanprof_set_setting(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static void ngx_http_spanprof_cleanup_config(void *data);
static const char *ngx_http_spanprof_getenv(void *ctx, const char *name);
static void ngx_http_spanprof_warn(void *ctx, const char *message);
static ngx_int_t ngx_http_spanprof_init_module(ngx_cycle_t *cycle);


/*
 * The directives of the settings share one handler; each command's offset
 * field carries its sp_setting instead of a field offset, since every
 * setting lives in the one sp_config of the main configuration.
 */
static ngx_command_t  ngx_http_spanprof_commands[] = {

    { ngx_string("spanprof"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_enable,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("spanprof_snapshot"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_SNAPSHOT_PROFILER_ENABLED,
      NULL },
    { ngx_string("spanprof_snapshot_selection_probability"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY,
      NULL },
    { ngx_string("spanprof_snapshot_sampling_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL,
      NULL },
    { ngx_string("spanprof_profiler"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROFILER_ENABLED,
      NULL },
    { ngx_string("spanprof_profiler_call_stack_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROFILER_CALL_STACK_INTERVAL,
      NULL },
    { ngx_string("spanprof_profiler_logs_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROFILER_LOGS_ENDPOINT,
      NULL },
    { ngx_string("spanprof_otlp_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_ENDPOINT,
      NULL },
    { ngx_string("spanprof_otlp_traces_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_TRACES_ENDPOINT,
      NULL },
    { ngx_string("spanprof_otlp_headers"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_HEADERS,
      NULL },
    { ngx_string("spanprof_otlp_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_TIMEOUT,
      NULL },
    { ngx_string("spanprof_otlp_certificate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_CERTIFICATE,
      NULL },
    { ngx_string("spanprof_service_name"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_SERVICE_NAME,
      NULL },
    { ngx_string("spanprof_resource_attributes"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_RESOURCE_ATTRIBUTES,
      NULL },
    { ngx_string("spanprof_traces_exporter"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_TRACES_EXPORTER,
      NULL },
    { ngx_string("spanprof_logs_exporter"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_LOGS_EXPORTER,
      NULL },
    { ngx_string("spanprof_traces_sampler"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_TRACES_SAMPLER,
      NULL },
    { ngx_string("spanprof_traces_sampler_arg"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_TRACES_SAMPLER_ARG,
      NULL },
    { ngx_string("spanprof_propagators"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROPAGATORS,
      NULL },
    { ngx_string("spanprof_profiler_export_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROFILER_EXPORT_INTERVAL,
      NULL },
    { ngx_string("spanprof_bsp_schedule_delay"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_BSP_SCHEDULE_DELAY,
      NULL },
    { ngx_string("spanprof_bsp_max_export_batch_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE,
      NULL },
    { ngx_string("spanprof_bsp_max_queue_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_BSP_MAX_QUEUE_SIZE,
      NULL },
    { ngx_string("spanprof_profiler_max_stack_depth"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_PROFILER_MAX_STACK_DEPTH,
      NULL },
      ngx_null_command
};


static ngx_http_module_t  ngx_http_spanprof_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_spanprof_create_main_conf,    /* create main configuration */
    ngx_http_spanprof_init_main_conf,      /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_spanprof_create_loc_conf,     /* create location configuration */
    ngx_http_spanprof_merge_loc_conf       /* merge location configuration */
};


ngx_module_t  ngx_http_spanprof_module = {
    NGX_MODULE_V1,
    &ngx_http_spanprof_module_ctx,         /* module context */
    ngx_http_spanprof_commands,            /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_spanprof_init_module,         /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_spanprof_create_main_conf(ngx_conf_t *cf)
{
    ngx_pool_cleanup_t             *cln;
    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_spanprof_main_conf_t));
    if (smcf == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    smcf->config = sp_config_create(SP_SERVER_NGINX);
    if (smcf->config == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_spanprof_cleanup_config;
    cln->data = smcf->config;

    return smcf;
}


static char *
ngx_http_spanprof_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_spanprof_main_conf_t *smcf = conf;

    /*
     * The master reads the environment once per configuration load; the
     * workers inherit the result, whatever nginx's "env" directive keeps.
     */
    sp_config_complete(smcf->config, ngx_http_spanprof_getenv, NULL,
                       ngx_http_spanprof_warn, cf->log);

    return NGX_CONF_OK;
}


static void *
ngx_http_spanprof_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_spanprof_loc_conf_t  *slcf;

    slcf = ngx_palloc(cf->pool, sizeof(ngx_http_spanprof_loc_conf_t));
    if (slcf == NULL) {
        return NULL;
    }

    slcf->enable = NGX_CONF_UNSET;

    return slcf;
}


static char *
ngx_http_spanprof_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_spanprof_loc_conf_t *prev = parent;
    ngx_http_spanprof_loc_conf_t *conf = child;

    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spanprof_module);

    /* Unset everywhere: OTEL_SDK_DISABLED decides. */
    ngx_conf_merge_value(conf->enable, prev->enable,
                         sp_config_flag(smcf->config, SP_SETTING_ENABLED));

    return NGX_CONF_OK;
}


static char *
ngx_http_spanprof_enable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_spanprof_loc_conf_t *slcf = conf;

    bool                            on;
    char                            msg[SP_CONFIG_MESSAGE_SIZE];
    ngx_str_t                      *value;
    ngx_http_spanprof_main_conf_t  *smcf;

    if (slcf->enable != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (sp_config_parse_flag((char *) value[1].data, value[1].len, &on)
        != SP_OK)
    {
        sp_config_invalid_message(msg, sizeof(msg), SP_SETTING_ENABLED,
                                  SP_ORIGIN_DIRECTIVE, (char *) cmd->name.data,
                                  (char *) value[1].data, value[1].len);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", msg);
        return NGX_CONF_ERROR;
    }

    slcf->enable = on;

    if (cf->cmd_type == NGX_HTTP_MAIN_CONF) {
        /* At http level it is the server-wide switch the startup line and
         * the exporter follow, so it overrides OTEL_SDK_DISABLED. */
        smcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_spanprof_module);
        (void) sp_config_set_directive(smcf->config, SP_SETTING_ENABLED,
                                       (char *) cmd->name.data,
                                       (char *) value[1].data, value[1].len,
                                       msg, sizeof(msg));
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_spanprof_set_setting(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_spanprof_main_conf_t *smcf = conf;

    char         msg[SP_CONFIG_MESSAGE_SIZE];
    ngx_str_t   *value;
    sp_setting   setting;

    setting = (sp_setting) cmd->offset;

    if (sp_config_origin(smcf->config, setting) == SP_ORIGIN_DIRECTIVE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (sp_config_set_directive(smcf->config, setting,
                                (char *) cmd->name.data,
                                (char *) value[1].data, value[1].len,
                                msg, sizeof(msg))
        != SP_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", msg);
        return NGX_CONF_ERROR;
    }

    if (msg[0] != '\0') {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "%s", msg);
    }

    return NGX_CONF_OK;
}


static void
ngx_http_spanprof_cleanup_config(void *data)
{
    sp_config_destroy(data);
}


static const char *
ngx_http_spanprof_getenv(void *ctx, const char *name)
{
    return getenv(name);
}


static void
ngx_http_spanprof_warn(void *ctx, const char *message)
{
    ngx_log_error(NGX_LOG_WARN, (ngx_log_t *) ctx, 0, "spanprof: %s",
                  message);
}


static ngx_int_t
ngx_http_spanprof_init_module(ngx_cycle_t *cycle)
{
    size_t                          len;
    u_char                         *line;
    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_spanprof_module);

    if (smcf == NULL || ngx_test_config) {
        return NGX_OK;
    }

    len = sp_config_describe(smcf->config, NULL, 0) + 1;

    line = ngx_pnalloc(cycle->pool, len);
    if (line == NULL) {
        return NGX_ERROR;
    }

    sp_config_describe(smcf->config, (char *) line, len);

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0, "%s", line);

    return NGX_OK;
}
