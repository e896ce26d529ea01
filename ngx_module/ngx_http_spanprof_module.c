
/*
 * Copyright (C) spanprof authors
 *
 * spanprof for nginx: the adapter between nginx and spanprof's core.
 *
 * The master creates the shared memory (a memfd, so the exporter, a
 * separate program, can map it too). Each worker claims a ring in it. A
 * request's entry span starts in the POST_READ phase and ends with the main
 * request's pool; its trace headers are given to upstreams by rewriting
 * the request's own headers before the content phase, so proxy, fastcgi,
 * uwsgi and grpc pass them on. Every phase checker, our filters at the
 * top of the three chains and a profiled request's client connection
 * events tell the sampler whose work runs now. The exporter is
 * started and watched by a cache-manager-style path manager that the
 * master spawns, respawns and replaces on reload.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_channel.h>

#include <sp_config.h>
#include <sp_entry.h>
#include <sp_exporter_launch.h>
#include <sp_ring.h>
#include <sp_sampler.h>
#include <sp_shm.h>


/* The shared memory: slots for workers of this and the previous
 * generation during a reload (at least twice worker_processes, and some
 * for workers still finishing from earlier reloads), and a ring each. */
#define NGX_HTTP_SPANPROF_SLOTS        128
#define NGX_HTTP_SPANPROF_SLOTS_SPARE  16
#define NGX_HTTP_SPANPROF_RING_BYTES   (1024 * 1024)
#define NGX_HTTP_SPANPROF_POLL         60000
#define NGX_HTTP_SPANPROF_FREE_MAX     256


typedef struct {
    sp_config        *config;
    sp_entry_policy   policy;
    ngx_uint_t        mask;              /* NGX_HTTP_SPANPROF_* the
                                            configured propagators own */
    ngx_flag_t        enabled;
    ngx_flag_t        profiling;
    ngx_flag_t        locations_differ;  /* a location's spanprof or
                                            spanprof_propagate is not the
                                            one around it */
    ngx_flag_t        refused_redirect;  /* a server's error_page may send
                                            a request it refused on */
    ngx_array_t       notes;             /* ngx_str_t: warnings about the
                                            environment, for init_module */
} ngx_http_spanprof_main_conf_t;


typedef struct {
    ngx_flag_t   enable;
    ngx_flag_t   propagate;
} ngx_http_spanprof_loc_conf_t;


typedef struct ngx_http_spanprof_ctx_s  ngx_http_spanprof_ctx_t;

struct ngx_http_spanprof_ctx_s {
    sp_entry                  entry;
    ngx_http_spanprof_ctx_t  *next;         /* in the free list */
    /* In the main request's pool's cleanups, though the context is not
     * the pool's: ngx_pool_cleanup_add() and its allocation in the pool
     * cost ~60 instructions a request (callgrind). */
    ngx_pool_cleanup_t        cleanup;
    ngx_http_request_t       *request;      /* the main request */
    /* As received: error_page makes the method GET. */
    ngx_str_t                 method;
    /* The connection's peer before realip, the client after it: its
     * pool cleanup puts the peer back before ours runs. */
    ngx_str_t                 peer;
    ngx_str_t                 client;
    /* Where a proxy says the client sent the request. */
    ngx_table_elt_t          *forwarded;
    ngx_table_elt_t          *forwarded_proto;
    ngx_table_elt_t          *forwarded_host;
    ngx_str_t                 tracestate;   /* pool copies of what goes */
    ngx_str_t                 baggage;      /* upstream */
    ngx_array_t              *orig;         /* the received trace headers
                                               our values replaced, to put
                                               back */
    unsigned                  injected:1;
    unsigned                  off:1;        /* the location says off */
    unsigned                  finished:1;
    unsigned                  watched:1;    /* counted in nprofiled:
                                               profiled, or recorded with
                                               continuous profiling on */
};


/* The request headers spanprof reads, as bits of a mask; it owns the
 * first three (puts its own in their place). */
#define NGX_HTTP_SPANPROF_TRACEPARENT       0x1
#define NGX_HTTP_SPANPROF_TRACESTATE        0x2
#define NGX_HTTP_SPANPROF_BAGGAGE           0x4
#define NGX_HTTP_SPANPROF_FORWARDED         0x8
#define NGX_HTTP_SPANPROF_X_FORWARDED_HOST  0x10
#define NGX_HTTP_SPANPROF_X_FORWARDED_PROTO 0x20

static ngx_str_t  ngx_http_spanprof_headers[] = {
    ngx_string("traceparent"),
    ngx_string("tracestate"),
    ngx_string("baggage"),
    ngx_string("forwarded"),
    ngx_string("x-forwarded-host"),
    ngx_string("x-forwarded-proto")
};

/* ngx_hash_key() of each name, computed once at configuration: a pushed
 * header needs it, and it was ~90 instructions a request. */
static ngx_uint_t  ngx_http_spanprof_hashes[3];

/*
 * Which of our names (NGX_HTTP_SPANPROF_* bits) a header may have, by the
 * low byte of its hash: nginx's hash of its name in lowercase, which the
 * parsers set and proxy's copy of the request headers relies on too. Most
 * headers are turned away by one load, without looking at their name: a
 * User-Agent or Connection header, of tracestate's length, cost ~12
 * instructions more (ab's four headers: ~23 a request, callgrind).
 */
static u_char  ngx_http_spanprof_by_hash[256];


/*
 * Where the trace headers are in a request's header list, from one walk
 * over it: reading them and putting ours in their place then need no
 * other walk unless a header is repeated or must go.
 */
typedef struct {
    ngx_table_elt_t  *first[NGX_HTTP_SPANPROF_X_FORWARDED_PROTO + 1];
                                    /* by bit */
    ngx_uint_t        order[6];     /* bits, in the list's order */
    ngx_uint_t        n;            /* of order */
    ngx_uint_t        seen;         /* bits */
    ngx_uint_t        repeated;     /* bits */
} ngx_http_spanprof_found_t;


static sp_shm                      ngx_http_spanprof_shm = { -1, NULL, 0 };
static ngx_uint_t                  ngx_http_spanprof_slots;
static sp_region                  *ngx_http_spanprof_region;
static sp_ring                    *ngx_http_spanprof_ring;
static sp_sampler                 *ngx_http_spanprof_sampler;
static sp_idgen                   *ngx_http_spanprof_ids;
static ngx_http_spanprof_ctx_t    *ngx_http_spanprof_current;
static ngx_http_spanprof_ctx_t    *ngx_http_spanprof_free;
static ngx_uint_t                  ngx_http_spanprof_nfree;
static ngx_http_phase_handler_pt  *ngx_http_spanprof_checkers;
static ngx_http_phase_handler_t   *ngx_http_spanprof_phase_base;
static ngx_uint_t                  ngx_http_spanprof_nphases;
static ngx_uint_t                  ngx_http_spanprof_nprofiled;
/* Continuous samples run in this worker: recorded requests that are not
 * profiled are watched too, so that their samples carry their ids. */
static ngx_uint_t                  ngx_http_spanprof_continuous;
static ngx_uint_t                  ngx_http_spanprof_nested;
/* nginx's ngx_http_request_handler (static there), as a request's client
 * connection has it for both events from its phases on. */
static ngx_event_handler_pt        ngx_http_spanprof_request_handler;
static ngx_pid_t                   ngx_http_spanprof_exporter = -1;
static ngx_msec_t                  ngx_http_spanprof_exporter_stop;
static ngx_flag_t                  ngx_http_spanprof_at_exit;
static sp_exporter_restarts        ngx_http_spanprof_restarts;
static ngx_msec_t                  ngx_http_spanprof_start_at;
static ngx_file_uniq_t             ngx_http_spanprof_log_ino;
static dev_t                       ngx_http_spanprof_log_dev;
static ngx_flag_t                  ngx_http_spanprof_log_known;
static ngx_event_t                 ngx_http_spanprof_poll_ev;
static char                        ngx_http_spanprof_scratch[
                                       SP_ENTRY_SCRATCH_SIZE];

static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;
static ngx_http_request_body_filter_pt   ngx_http_next_request_body_filter;


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
static void ngx_http_spanprof_note(void *ctx, const char *message);
static ngx_int_t ngx_http_spanprof_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_spanprof_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_spanprof_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_spanprof_keep_env(ngx_conf_t *cf);
static ngx_int_t ngx_http_spanprof_keep_env_name(ngx_core_conf_t *ccf,
    const char *name);
static void ngx_http_spanprof_address(ngx_str_t *text, const char **data,
    size_t *len);
static ngx_int_t ngx_http_spanprof_state_dir(ngx_conf_t *cf, ngx_str_t *dir);
static ngx_int_t ngx_http_spanprof_add_exporter_path(ngx_conf_t *cf,
    ngx_http_spanprof_main_conf_t *smcf);
static ngx_msec_t ngx_http_spanprof_manager(void *data);
static void ngx_http_spanprof_manager_exit(void);
static bool ngx_http_spanprof_terminating(void *data);
static ngx_int_t ngx_http_spanprof_log_moved(void);
static const char *ngx_http_spanprof_log_level(ngx_uint_t level);
static char *ngx_http_spanprof_syslog(u_char *buf, size_t size);
static ngx_int_t ngx_http_spanprof_init_process(ngx_cycle_t *cycle);
static void ngx_http_spanprof_exit_process(ngx_cycle_t *cycle);
static void ngx_http_spanprof_poll(ngx_event_t *ev);
static ngx_inline void *ngx_http_spanprof_cleanup_data(ngx_pool_t *pool,
    ngx_pool_cleanup_pt handler);
static ngx_http_spanprof_ctx_t *ngx_http_spanprof_get_ctx(
    ngx_http_request_t *r);
static void ngx_http_spanprof_switch(ngx_http_spanprof_ctx_t *ctx);
static ngx_inline ngx_http_spanprof_ctx_t *ngx_http_spanprof_enter(
    ngx_http_spanprof_ctx_t *ctx);
static ngx_inline void ngx_http_spanprof_leave(ngx_http_spanprof_ctx_t *prev);
static void ngx_http_spanprof_watch(ngx_http_spanprof_ctx_t *ctx);
static void ngx_http_spanprof_unwatch(ngx_http_spanprof_ctx_t *ctx);
static void ngx_http_spanprof_wrap(ngx_connection_t *c);
static void ngx_http_spanprof_event(ngx_event_t *ev);
static ngx_int_t ngx_http_spanprof_checker(ngx_http_request_t *r,
    ngx_http_phase_handler_t *ph);
static ngx_inline ngx_http_spanprof_ctx_t *ngx_http_spanprof_begin(
    ngx_http_request_t *r, ngx_http_spanprof_main_conf_t *smcf,
    ngx_http_spanprof_loc_conf_t *slcf, ngx_http_spanprof_found_t *found);
static ngx_inline void ngx_http_spanprof_sample(
    ngx_http_spanprof_ctx_t *ctx);
static ngx_int_t ngx_http_spanprof_post_read(ngx_http_request_t *r);
static ngx_int_t ngx_http_spanprof_post_read_phase(ngx_http_request_t *r,
    ngx_http_phase_handler_t *ph);
static ngx_int_t ngx_http_spanprof_location(ngx_http_request_t *r);
static ngx_int_t ngx_http_spanprof_log(ngx_http_request_t *r);
static ngx_http_spanprof_ctx_t *ngx_http_spanprof_begin_late(
    ngx_http_request_t *r);
static ngx_inline ngx_table_elt_t *ngx_http_spanprof_next_header(
    ngx_list_part_t **part, ngx_uint_t *i);
static ngx_inline void ngx_http_spanprof_find(ngx_list_t *headers,
    ngx_http_spanprof_found_t *f);
static ngx_inline void ngx_http_spanprof_read_headers(ngx_http_request_t *r,
    ngx_http_spanprof_found_t *f, sp_entry_headers *in);
static void ngx_http_spanprof_join(ngx_http_request_t *r,
    ngx_http_spanprof_found_t *f, sp_entry_headers *in);
static ngx_inline ngx_uint_t ngx_http_spanprof_header_bit(ngx_table_elt_t *h);
static ngx_inline ngx_int_t ngx_http_spanprof_inject(ngx_http_request_t *r,
    ngx_http_spanprof_ctx_t *ctx, ngx_uint_t mask,
    ngx_http_spanprof_found_t *f);
static ngx_inline ngx_int_t ngx_http_spanprof_add(ngx_http_request_t *r,
    ngx_http_spanprof_ctx_t *ctx, ngx_uint_t mask);
static ngx_int_t ngx_http_spanprof_replace(ngx_http_request_t *r,
    ngx_http_spanprof_ctx_t *ctx, ngx_uint_t mask,
    ngx_http_spanprof_found_t *f);
static ngx_int_t ngx_http_spanprof_restore(ngx_http_request_t *r,
    ngx_http_spanprof_ctx_t *ctx, ngx_uint_t mask);
static ngx_int_t ngx_http_spanprof_rebuild(ngx_http_request_t *r,
    ngx_uint_t mask, ngx_array_t *removed);
static ngx_inline ngx_int_t ngx_http_spanprof_push(ngx_http_request_t *r,
    ngx_uint_t i, ngx_str_t *value);
static void ngx_http_spanprof_finish(void *data);
static void ngx_http_spanprof_authority(ngx_http_request_t *r,
    sp_entry_http *h);
static ngx_inline void ngx_http_spanprof_record(
    ngx_http_spanprof_ctx_t *ctx);
static void ngx_http_spanprof_cache_free(void *data);
static ngx_int_t ngx_http_spanprof_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_spanprof_request_body_filter(
    ngx_http_request_t *r, ngx_chain_t *in);
static ngx_int_t ngx_http_spanprof_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_spanprof_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


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

    { ngx_string("spanprof_propagate"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_spanprof_loc_conf_t, propagate),
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
    { ngx_string("spanprof_otlp_insecure"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_OTLP_INSECURE,
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
    { ngx_string("spanprof_http_known_methods"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_spanprof_set_setting,
      NGX_HTTP_MAIN_CONF_OFFSET,
      SP_SETTING_HTTP_KNOWN_METHODS,
      NULL },
      ngx_null_command
};


static ngx_http_module_t  ngx_http_spanprof_module_ctx = {
    ngx_http_spanprof_add_variables,       /* preconfiguration */
    ngx_http_spanprof_init,                /* postconfiguration */

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
    ngx_http_spanprof_init_process,        /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_spanprof_exit_process,        /* exit process */
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

    if (ngx_array_init(&smcf->notes, cf->pool, 2, sizeof(ngx_str_t))
        != NGX_OK)
    {
        sp_config_destroy(smcf->config);
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
     * The master reads the environment (and "env NAME=value;" lines) once
     * per configuration load; the workers inherit the result.
     */
    sp_config_complete(smcf->config, ngx_http_spanprof_getenv,
                       ngx_get_conf(cf->cycle->conf_ctx, ngx_core_module),
                       ngx_http_spanprof_note, cf);

    sp_entry_policy_from_config(smcf->config, &smcf->policy);

    smcf->mask = 0;

    if (smcf->policy.propagators & SP_PROPAGATOR_TRACECONTEXT) {
        smcf->mask |= NGX_HTTP_SPANPROF_TRACEPARENT
                      |NGX_HTTP_SPANPROF_TRACESTATE;
    }

    if (smcf->policy.propagators & SP_PROPAGATOR_BAGGAGE) {
        smcf->mask |= NGX_HTTP_SPANPROF_BAGGAGE;
    }

    smcf->enabled = sp_config_flag(smcf->config, SP_SETTING_ENABLED);
    smcf->profiling = smcf->enabled
        && (sp_config_flag(smcf->config, SP_SETTING_SNAPSHOT_PROFILER_ENABLED)
            || sp_config_flag(smcf->config, SP_SETTING_PROFILER_ENABLED));

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
    slcf->propagate = NGX_CONF_UNSET;

    return slcf;
}


static char *
ngx_http_spanprof_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_spanprof_loc_conf_t *prev = parent;
    ngx_http_spanprof_loc_conf_t *conf = child;

    ngx_http_core_loc_conf_t       *clcf;
    ngx_http_core_srv_conf_t       *cscf;
    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spanprof_module);

    /* Unset everywhere: OTEL_SDK_DISABLED decides. */
    ngx_conf_merge_value(conf->enable, prev->enable,
                         sp_config_flag(smcf->config, SP_SETTING_ENABLED));
    ngx_conf_merge_value(conf->propagate, prev->propagate, 1);

    /*
     * A location (not a server's own configuration, merged from http)
     * that differs from the one around it: only then may the final
     * location change what POST_READ did with the server's.
     */
    cscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_core_module);

    if (cscf->ctx->loc_conf[ngx_http_spanprof_module.ctx_index] != conf) {
        if (conf->enable != prev->enable
            || conf->propagate != prev->propagate)
        {
            smcf->locations_differ = 1;
        }

        return NGX_CONF_OK;
    }

    /*
     * A request nginx refuses while reading it never runs POST_READ; the
     * server's error_page (nginx merged its own first) may send it on
     * through the phases, to an upstream that must see our span.
     */
    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->error_pages != NULL) {
        smcf->refused_redirect = 1;
    }

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

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spanprof_module);

    if (cf->cmd_type == NGX_HTTP_MAIN_CONF) {
        /* At http level it is the server-wide switch the startup line and
         * the exporter follow, so it overrides OTEL_SDK_DISABLED. */
        (void) sp_config_set_directive(smcf->config, SP_SETTING_ENABLED,
                                       (char *) cmd->name.data,
                                       (char *) value[1].data, value[1].len,
                                       msg, sizeof(msg));

    } else if (on) {
        /* Of no effect when the server-wide switch is off: said then. */
        sp_config_note_scope_on(smcf->config);
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
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "spanprof: %s", msg);
    }

    return NGX_CONF_OK;
}


static void
ngx_http_spanprof_cleanup_config(void *data)
{
    sp_config_destroy(data);
}


/*
 * A variable of the master's environment, or of an "env NAME=value;" line
 * above the http block: nginx sets those only in the processes it starts,
 * but an operator who writes one for a setting means spanprof to see it.
 * The first line of a name wins, as getenv() would find it in the
 * environment nginx builds from them.
 */
static const char *
ngx_http_spanprof_getenv(void *ctx, const char *name)
{
    size_t            len;
    ngx_str_t        *var;
    ngx_uint_t        i;
    ngx_core_conf_t  *ccf = ctx;

    len = ngx_strlen(name);
    var = ccf->env.elts;

    for (i = 0; i < ccf->env.nelts; i++) {
        /*
         * "env" keeps the name's length and the word as written, which
         * the parser ends with a NUL: the value is a C string.
         */
        if (var[i].len == len && var[i].data[len] == '='
            && ngx_strncmp(var[i].data, name, len) == 0)
        {
            return (const char *) var[i].data + len + 1;
        }
    }

    return getenv(name);
}


static void
ngx_http_spanprof_warn(void *ctx, const char *message)
{
    ngx_log_error(NGX_LOG_WARN, (ngx_log_t *) ctx, 0, "spanprof: %s",
                  message);
}


/*
 * A warning about the environment (a bad value, a switch it loses to):
 * until the new cycle opens its error_log, a configuration is read with
 * the log nginx started with, which is only stderr for Debian's nginx
 * (--error-log-path=stderr). Logged there, a first start's warning would
 * miss the error log the startup line goes to, and nobody runs "nginx -t"
 * with the service's environment. Kept for init_module, which has the new
 * log; "nginx -t" says it at once, as it says a directive's.
 */
static void
ngx_http_spanprof_note(void *ctx, const char *message)
{
    size_t                          len;
    u_char                         *data;
    ngx_str_t                      *note;
    ngx_conf_t                     *cf;
    ngx_http_spanprof_main_conf_t  *smcf;

    cf = ctx;

    if (!ngx_test_config) {
        smcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_spanprof_module);
        len = ngx_strlen(message);
        data = ngx_pnalloc(cf->pool, len);
        note = data != NULL ? ngx_array_push(&smcf->notes) : NULL;

        if (note != NULL) {
            ngx_memcpy(data, message, len);
            note->data = data;
            note->len = len;
            return;
        }
    }

    ngx_http_spanprof_warn(cf->log, message);
}


/*
 * A reload that turns spanprof off for the whole server: this cycle's
 * workers and no exporter use the shared memory, so the master lets it
 * go (every page its rings were written to) rather than hold it until
 * it exits. Workers and the exporter of the old cycle keep their own
 * mappings of it until they end; a reload that turns spanprof on again
 * creates a new one. Only with the cycle committed: init_module runs
 * after nothing can fail back to the old one.
 */
static void
ngx_http_spanprof_shm_release(void)
{
    if (ngx_test_config || ngx_http_spanprof_shm.base == NULL) {
        return;
    }

    sp_shm_close(&ngx_http_spanprof_shm);
    ngx_http_spanprof_slots = 0;
}


static ngx_int_t
ngx_http_spanprof_init_module(ngx_cycle_t *cycle)
{
    size_t                          len;
    u_char                         *line;
    ngx_str_t                      *note;
    ngx_uint_t                      i, slots;
    ngx_core_conf_t                *ccf;
    ngx_http_phase_handler_t       *ph;
    ngx_http_core_main_conf_t      *cmcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_spanprof_module);

    if (smcf == NULL) {
        ngx_http_spanprof_shm_release();
        return NGX_OK;
    }

    /* The phase engine is built once every module's postconfiguration
     * has run: our POST_READ handler gets its own checker only now. */
    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);

    for (ph = cmcf->phase_engine.handlers; ph->checker; ph++) {
        if (ph->handler == ngx_http_spanprof_post_read) {
            ph->checker = ngx_http_spanprof_post_read_phase;
        }
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    note = smcf->notes.elts;

    for (i = 0; i < smcf->notes.nelts; i++) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0, "spanprof: %V", &note[i]);
    }

    smcf->notes.nelts = 0;

    /* The exporter runs as "user" with its groups (the manager process it
     * is started from does): known only now, after every directive. */
    if (smcf->enabled && geteuid() == 0
        && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT)
    {
        sp_config_check_exporter_user(smcf->config, (uint32_t) ccf->user,
                                      (uint32_t) ccf->group, ccf->username,
                                      1, ngx_http_spanprof_warn, cycle->log);
    }

    if (ngx_test_config) {
        return NGX_OK;
    }

    if (!smcf->enabled) {
        ngx_http_spanprof_shm_release();
    }

    /*
     * Once, in the master, before the first workers are forked; it is kept
     * across reloads (the module's statics survive them), so workers of
     * the old and the new generation write into the same memory.
     */
    slots = 2 * (ngx_uint_t) ccf->worker_processes
            + NGX_HTTP_SPANPROF_SLOTS_SPARE;

    if (smcf->enabled && ngx_http_spanprof_shm.base == NULL) {
        ngx_http_spanprof_slots = ngx_max(slots, NGX_HTTP_SPANPROF_SLOTS);

        if (sp_shm_create((uint32_t) ngx_http_spanprof_slots,
                          NGX_HTTP_SPANPROF_RING_BYTES,
                          &ngx_http_spanprof_shm)
            != SP_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
                          "spanprof: shared memory could not be created, "
                          "spans and profiles are not recorded");
        }

    } else if (smcf->enabled && slots > ngx_http_spanprof_slots) {
        /* Old workers still write into it: it cannot grow on reload. */
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "spanprof: %ui worker processes need %ui rings, the "
                      "shared memory has %ui until nginx is restarted; "
                      "workers without one record nothing",
                      (ngx_uint_t) ccf->worker_processes, slots,
                      ngx_http_spanprof_slots);
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


/* ---- variables */

typedef enum {
    NGX_HTTP_SPANPROF_VAR_TRACE_ID,
    NGX_HTTP_SPANPROF_VAR_SPAN_ID,
    NGX_HTTP_SPANPROF_VAR_TRACEPARENT,
    NGX_HTTP_SPANPROF_VAR_BAGGAGE,
    NGX_HTTP_SPANPROF_VAR_SNAPSHOT
} ngx_http_spanprof_var_e;


static ngx_http_variable_t  ngx_http_spanprof_vars[] = {

    { ngx_string("spanprof_trace_id"), NULL, ngx_http_spanprof_variable,
      NGX_HTTP_SPANPROF_VAR_TRACE_ID, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("spanprof_span_id"), NULL, ngx_http_spanprof_variable,
      NGX_HTTP_SPANPROF_VAR_SPAN_ID, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("spanprof_traceparent"), NULL, ngx_http_spanprof_variable,
      NGX_HTTP_SPANPROF_VAR_TRACEPARENT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("spanprof_baggage"), NULL, ngx_http_spanprof_variable,
      NGX_HTTP_SPANPROF_VAR_BAGGAGE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("spanprof_snapshot"), NULL, ngx_http_spanprof_variable,
      NGX_HTTP_SPANPROF_VAR_SNAPSHOT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_int_t
ngx_http_spanprof_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_spanprof_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_spanprof_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                        *p;
    size_t                         len;
    ngx_http_spanprof_ctx_t       *ctx;
    ngx_http_spanprof_loc_conf_t  *slcf;

    ctx = ngx_http_spanprof_get_ctx(r);
    slcf = ngx_http_get_module_loc_conf(r->main, ngx_http_spanprof_module);

    if (ctx == NULL || !slcf->enable) {
        v->not_found = 1;
        return NGX_OK;
    }

    switch (data) {

    case NGX_HTTP_SPANPROF_VAR_TRACE_ID:
    case NGX_HTTP_SPANPROF_VAR_SPAN_ID:
        len = data == NGX_HTTP_SPANPROF_VAR_TRACE_ID ? 32 : 16;
        p = ngx_pnalloc(r->pool, len + 1);
        if (p == NULL) {
            return NGX_ERROR;
        }
        sp_hex_format(data == NGX_HTTP_SPANPROF_VAR_TRACE_ID
                      ? ctx->entry.ctx.trace_id : ctx->entry.ctx.span_id,
                      len / 2, (char *) p);
        break;

    case NGX_HTTP_SPANPROF_VAR_TRACEPARENT:
        p = (u_char *) ctx->entry.traceparent;
        len = SP_TRACEPARENT_LEN;
        break;

    case NGX_HTTP_SPANPROF_VAR_BAGGAGE:
        p = ctx->baggage.data;
        len = ctx->baggage.len;
        break;

    default: /* NGX_HTTP_SPANPROF_VAR_SNAPSHOT */
        p = (u_char *) (ctx->entry.selection.profiled ? "1" : "0");
        len = 1;
        break;
    }

    v->data = p;
    v->len = len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* ---- configuration: phases, filters, the exporter's manager */

static ngx_int_t
ngx_http_spanprof_init(ngx_conf_t *cf)
{
    ngx_uint_t                      i, hash;
    ngx_array_t                    *log;
    ngx_http_handler_pt            *h;
    ngx_http_core_main_conf_t      *cmcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spanprof_module);

    /*
     * Off too: a new binary (nginx's online upgrade) that lost
     * OTEL_SDK_DISABLED=true would turn spanprof on.
     */
    if (ngx_http_spanprof_keep_env(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!smcf->enabled) {
        return NGX_OK;
    }

    for (i = 0; i < 6; i++) {
        hash = ngx_hash_key(ngx_http_spanprof_headers[i].data,
                            ngx_http_spanprof_headers[i].len);
        ngx_http_spanprof_by_hash[hash & 0xff] |= 1 << i;

        if (i < 3) {
            ngx_http_spanprof_hashes[i] = hash;
        }
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_POST_READ_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_spanprof_post_read;

    /* First of the LOG phase: a request nginx refused gets its span there,
     * and the access log's $spanprof_* variables then have its ids. */
    log = &cmcf->phases[NGX_HTTP_LOG_PHASE].handlers;

    h = ngx_array_push(log);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h = log->elts;
    ngx_memmove(&h[1], &h[0], (log->nelts - 1) * sizeof(ngx_http_handler_pt));
    h[0] = ngx_http_spanprof_log;

    /* Where every location is as its server, the location's handler
     * would find nothing to change: one phase handler less a request
     * (~70 instructions, callgrind). */
    if (smcf->locations_differ || smcf->refused_redirect) {
        h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }
        *h = ngx_http_spanprof_location;
    }

    /* The filters only tell the sampler whose work runs: none without
     * a profiler. */
    if (smcf->profiling) {
        ngx_http_next_header_filter = ngx_http_top_header_filter;
        ngx_http_top_header_filter = ngx_http_spanprof_header_filter;

        ngx_http_next_body_filter = ngx_http_top_body_filter;
        ngx_http_top_body_filter = ngx_http_spanprof_body_filter;

        ngx_http_next_request_body_filter = ngx_http_top_request_body_filter;
        ngx_http_top_request_body_filter =
                                      ngx_http_spanprof_request_body_filter;
    }

    return ngx_http_spanprof_add_exporter_path(cf, smcf);
}


/*
 * The variables the module reads: each setting's (SPEC 1), and the ones
 * the exporter takes from the server's environment as they are
 * (SP_EXPORTER_PASSED_ENV: SPANPROF_CONSOLE_PATH, SSL_CERT_FILE...), and
 * where the exporter is. nginx clears the environment of the processes it
 * starts but for TZ and the names of its env directives: the exporter's
 * manager would not see them, nor would a new binary (nginx's online
 * upgrade, which Debian's package upgrade does), which would read another
 * configuration than the old one. Each is added as "env NAME;" would,
 * unless one names it already.
 */
static ngx_int_t
ngx_http_spanprof_keep_env(ngx_conf_t *cf)
{
    ngx_uint_t        i;
    sp_setting        s;
    ngx_core_conf_t  *ccf;

    static const char *const  passed[] = SP_EXPORTER_PASSED_ENV;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    for (i = 0; passed[i] != NULL; i++) {
        if (ngx_http_spanprof_keep_env_name(ccf, passed[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    for (s = 0; s < SP_SETTING_COUNT; s++) {
        if (ngx_http_spanprof_keep_env_name(ccf, sp_setting_env_name(s))
            != NGX_OK
            || ngx_http_spanprof_keep_env_name(ccf, sp_setting_env_alias(s))
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_spanprof_keep_env_name(ccf, SP_EXPORTER_PATH_ENV);
}


static ngx_int_t
ngx_http_spanprof_keep_env_name(ngx_core_conf_t *ccf, const char *name)
{
    size_t      len;
    ngx_str_t  *var;
    ngx_uint_t  j;

    if (name == NULL) {
        return NGX_OK;
    }

    len = ngx_strlen(name);
    var = ccf->env.elts;

    for (j = 0; j < ccf->env.nelts; j++) {
        /* "env NAME=value;" keeps the name's length too */
        if (var[j].len == len && ngx_strncmp(var[j].data, name, len) == 0) {
            return NGX_OK;
        }
    }

    var = ngx_array_push(&ccf->env);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->data = (u_char *) name;
    var->len = len;

    return NGX_OK;
}


/*
 * Where nginx keeps its state, for the exporter path's directory: beside
 * the client body temp path (Debian's /var/lib/nginx, nginx.org's
 * /var/cache/nginx), which nginx must be able to write, rather than under
 * its prefix (Debian's /usr/share/nginx), which a hardened host mounts
 * read-only and where nginx would then fail to start. A master running as
 * root takes only a directory that root owns and nobody else may write:
 * it chowns the path it creates, following a link, so a name in a
 * world-writable directory (/tmp) could be made to point elsewhere. One
 * that is not root (nginx-unprivileged, "nginx -g 'daemon off;'" as a
 * container's user) never chowns, and cannot create anything in a prefix
 * owned by root: it takes the directory if it may write it (its temp
 * paths moved to /tmp: /tmp/spanprof). NGX_DECLINED: none such.
 */
static ngx_int_t
ngx_http_spanprof_state_dir(ngx_conf_t *cf, ngx_str_t *dir)
{
    u_char                     *p, *last;
    ngx_str_t                   body;
    ngx_file_info_t             fi;
    ngx_http_core_loc_conf_t   *clcf;
    ngx_http_core_srv_conf_t  **cscfp;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    if (cmcf->servers.nelts == 0) {
        return NGX_DECLINED;
    }

    /* merged by now: postconfiguration runs after the servers' merge */
    cscfp = cmcf->servers.elts;
    clcf = cscfp[0]->ctx->loc_conf[ngx_http_core_module.ctx_index];
    if (clcf->client_body_temp_path == NULL) {
        return NGX_DECLINED;
    }

    body = clcf->client_body_temp_path->name;
    last = body.data + body.len;
    while (last > body.data && last[-1] == '/') {
        last--;
    }

    for (p = last; p > body.data && p[-1] != '/'; p--) {
        /* void */
    }
    while (p > body.data + 1 && p[-1] == '/') {
        p--;
    }

    /* none, or "/" */
    if (p <= body.data + 1 || body.data[0] != '/') {
        return NGX_DECLINED;
    }

    dir->len = p - body.data;
    dir->data = ngx_pnalloc(cf->pool, dir->len + 1);
    if (dir->data == NULL) {
        return NGX_ERROR;
    }
    ngx_memcpy(dir->data, body.data, dir->len);
    dir->data[dir->len] = '\0';

    if (ngx_file_info(dir->data, &fi) == NGX_FILE_ERROR || !ngx_is_dir(&fi)) {
        return NGX_DECLINED;
    }

    if (geteuid() != 0) {
        return access((char *) dir->data, W_OK | X_OK) == 0 ? NGX_OK
                                                            : NGX_DECLINED;
    }

    if (fi.st_uid != 0 || (fi.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * nginx's one master-supervised helper a module can have: a path with a
 * manager. The master spawns its process as the workers' user, respawns
 * it, and replaces it on reload; the manager starts the exporter from it
 * and starts it again if it dies. The directory is created by nginx and
 * holds nothing.
 */
static ngx_int_t
ngx_http_spanprof_add_exporter_path(ngx_conf_t *cf,
    ngx_http_spanprof_main_conf_t *smcf)
{
    ngx_int_t    rc;
    ngx_str_t    dir;
    ngx_path_t  *path;
    ngx_str_t    name = ngx_string("spanprof");

    path = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
    if (path == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_spanprof_state_dir(cf, &dir);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_OK) {
        path->name.len = dir.len + sizeof("/spanprof") - 1;
        path->name.data = ngx_pnalloc(cf->pool, path->name.len + 1);
        if (path->name.data == NULL) {
            return NGX_ERROR;
        }
        ngx_sprintf(path->name.data, "%V/spanprof%Z", &dir);

    } else {
        path->name = name;
        if (ngx_conf_full_name(cf->cycle, &path->name, 0) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    path->manager = ngx_http_spanprof_manager;
    path->data = smcf;
    path->conf_file = cf->conf_file->file.name.data;
    path->line = cf->conf_file->line;

    return ngx_add_path(cf, &path);
}


static ngx_msec_t
ngx_http_spanprof_manager(void *data)
{
    ngx_http_spanprof_main_conf_t *smcf = data;

    int                  pid, status;
    char                 exe[NGX_MAX_PATH], version[32];
    u_char               to_syslog[NGX_SOCKADDR_STRLEN + NGX_MAXHOSTNAMELEN
                                + 64];
    uint64_t             delay;
    sp_status            st;
    ngx_log_t           *file;
    ngx_pid_t            r;
    ngx_msec_int_t       wait;
    sp_exporter_launch   l;
    ngx_file_info_t      fi;

    if (ngx_http_spanprof_shm.base == NULL) {
        return 3600000;
    }

    if (ngx_http_spanprof_exporter > 0) {
        r = waitpid(ngx_http_spanprof_exporter, &status, WNOHANG);

        if (r == 0) {
            if (!ngx_http_spanprof_log_moved()) {
                return 1000;
            }

            /*
             * The error log was reopened on another file (nginx -s reopen
             * after a rotation): the exporter still writes to the old one.
             * It flushes on SIGTERM and exits (nginx reaps it); the next
             * one, given the new file, waits for it to give up the
             * shared memory.
             */
            ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                          "spanprof: the error log was reopened, exporter "
                          "process %P is replaced",
                          ngx_http_spanprof_exporter);

            if (kill(ngx_http_spanprof_exporter, SIGTERM) == -1) {
                ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                              "spanprof: kill(%P, SIGTERM) failed",
                              ngx_http_spanprof_exporter);
            }

        } else {
            /* Gone: reaped here, or already by nginx's SIGCHLD handler,
             * which logs how it ended. */
            delay = sp_exporter_restarts_delay(&ngx_http_spanprof_restarts,
                                               ngx_current_msec);
            if (delay > 0) {
                ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                              "spanprof: exporter process %P exited soon "
                              "after it started, %uD times in a row, the "
                              "next starts in %uL s",
                              ngx_http_spanprof_exporter,
                              ngx_http_spanprof_restarts.quick_exits,
                              delay / 1000);
                ngx_http_spanprof_start_at = ngx_current_msec
                                             + (ngx_msec_t) delay;
            }
        }

        ngx_http_spanprof_exporter = -1;
    }

    wait = (ngx_msec_int_t) (ngx_http_spanprof_start_at - ngx_current_msec);
    if (ngx_http_spanprof_start_at != 0 && wait > 0) {
        return (ngx_msec_t) wait;
    }

    ngx_http_spanprof_start_at = 0;

    ngx_memzero(&l, sizeof(l));
    if (sp_exporter_default_path(exe, sizeof(exe)) == 0
        || ngx_strlen(exe) >= sizeof(exe))
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "spanprof: exporter executable not found, set "
                      SP_EXPORTER_PATH_ENV);
        return 60000;
    }

    ngx_snprintf((u_char *) version, sizeof(version), "%s%Z",
                 NGINX_VERSION);

    l.path = exe;
    l.config = smcf->config;
    l.server = "nginx";
    l.server_version = version;
    l.server_exe = "/proc/self/exe";
    l.region_fd = ngx_http_spanprof_shm.fd;

    /*
     * The first file log of the main context, at its own level: nginx's
     * stderr leads there too. The head of the list is the most verbose
     * log, which need not be a file: with a syslog (or memory) log first
     * the exporter wrote at that log's level into the stderr nginx had
     * pointed at the file, and into no syslog.
     */
    file = ngx_log_get_file_log(ngx_cycle->log);
    l.log_fd = file != NULL ? file->file->fd : -1;
    l.log_level = ngx_http_spanprof_log_level(file != NULL ? file->log_level
                                                           : NGX_LOG_ERR);
    l.syslog = ngx_http_spanprof_syslog(to_syslog, sizeof(to_syslog));
    ngx_http_spanprof_log_known = 0;
    l.title = "spanprof-exporter: nginx";

    st = sp_exporter_spawn(&l, &pid);
    if (st != SP_OK) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      "spanprof: exporter \"%s\" could not be started", exe);
        return 5000;
    }

    ngx_http_spanprof_exporter = pid;
    sp_exporter_restarts_started(&ngx_http_spanprof_restarts,
                                 ngx_current_msec);

    ngx_http_spanprof_exporter_stop =
                           (ngx_msec_t) sp_exporter_stop_ms(smcf->config);

    if (!ngx_http_spanprof_at_exit
        && atexit(ngx_http_spanprof_manager_exit) == 0)
    {
        ngx_http_spanprof_at_exit = 1;
    }

    if (l.log_fd != -1 && ngx_fd_info(l.log_fd, &fi) != NGX_FILE_ERROR) {
        ngx_http_spanprof_log_known = 1;
        ngx_http_spanprof_log_dev = fi.st_dev;
        ngx_http_spanprof_log_ino = ngx_file_uniq(&fi);
    }
    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "spanprof: exporter process %P started", (ngx_pid_t) pid);

    return 1000;
}


/*
 * The manager process leaves with exit() (nginx calls no module's
 * exit_process for it) on reload and on stop. The exporter flushes what
 * it holds when it gets SIGTERM; the master waits for the manager but
 * not for the exporter, and a container's (or systemd's KillMode=mixed)
 * stop kills every process left once the master is gone: without this
 * wait the spans the exporter held were lost on every "docker stop".
 * Bounded by the exporter's own stop (sp_exporter_stop_ms).
 *
 * A fast stop (TERM or INT to the master, also one that comes during a
 * graceful stop's wait) is another matter: the master SIGKILLs its
 * children about 1.5 s later, the manager with an "exited on signal 9"
 * alert, and the exporter, its parent gone, went on flushing after the
 * master had left. The exporter gets SIGINT instead, its fast stop,
 * which sends what it can within SP_EXPORTER_FAST_STOP_MS and drops the
 * rest, and the manager leaves before the master's SIGKILL.
 */
static void
ngx_http_spanprof_manager_exit(void)
{
    int        status;
    ngx_pid_t  pid;
    ngx_uint_t fast;

    pid = ngx_http_spanprof_exporter;
    if (pid <= 0) {
        return;
    }

    ngx_http_spanprof_exporter = -1;
    fast = ngx_terminate;

    /* 0: still this process's child, so the pid is not another's */
    if (waitpid(pid, &status, WNOHANG) != 0
        || kill(pid, fast ? SIGINT : SIGTERM) == -1)
    {
        return;
    }

    if (!fast) {
        if (sp_exporter_wait_exit_unless(pid, ngx_http_spanprof_exporter_stop,
                                         ngx_http_spanprof_terminating, NULL))
        {
            return;
        }

        if (!ngx_terminate) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "spanprof: exporter process %P did not stop within "
                          "%M ms, what it still holds may be lost",
                          pid, ngx_http_spanprof_exporter_stop);
            return;
        }

        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "spanprof: fast stop during the exporter's flush, "
                      "exporter process %P is told to stop fast", pid);

        if (kill(pid, SIGINT) == -1) {
            return;
        }
    }

    if (sp_exporter_wait_exit(pid, SP_EXPORTER_FAST_WAIT_MS)) {
        return;
    }

    /* Hung: left running, it would outlive the master. */
    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                  "spanprof: exporter process %P did not stop within %d ms "
                  "of a fast stop, killed, what it held is lost",
                  pid, SP_EXPORTER_FAST_WAIT_MS);

    if (kill(pid, SIGKILL) == 0) {
        (void) sp_exporter_wait_exit(pid, SP_EXPORTER_FAST_WAIT_MS);
    }
}


/*
 * Whether the master asked for a fast stop since this process left its
 * event loop: it tells its helpers over their channel (which that loop
 * read), not with a signal, until it sends SIGKILL.
 */
static bool
ngx_http_spanprof_terminating(void *data)
{
    ngx_channel_t  ch;

    while (!ngx_terminate && ngx_channel != (ngx_socket_t) -1) {
        ngx_memzero(&ch, sizeof(ngx_channel_t));
        ch.fd = -1;

        /* the bytes read, else NGX_AGAIN or NGX_ERROR */
        if (ngx_read_channel(ngx_channel, &ch, sizeof(ngx_channel_t),
                             ngx_cycle->log)
            <= 0)
        {
            break;
        }

        if (ch.command == NGX_CMD_TERMINATE) {
            ngx_terminate = 1;

        } else if (ch.command == NGX_CMD_OPEN_CHANNEL && ch.fd != -1) {
            (void) close(ch.fd);
        }
    }

    return ngx_terminate != 0;
}


/*
 * Whether the error log the exporter was given is not the file the
 * manager's error log is now: nginx reopens its logs on SIGUSR1 (USR1 to
 * the master, which logrotate's postrotate sends), and the exporter holds
 * the descriptor of the old one. A reopen of the same file changes
 * nothing.
 */
static ngx_int_t
ngx_http_spanprof_log_moved(void)
{
    ngx_fd_t         fd;
    ngx_log_t       *file;
    ngx_file_info_t  fi;

    file = ngx_log_get_file_log(ngx_cycle->log);

    if (!ngx_http_spanprof_log_known || file == NULL) {
        return 0;
    }

    fd = file->file->fd;

    if (fd == NGX_INVALID_FILE || ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        return 0;
    }

    return fi.st_dev != ngx_http_spanprof_log_dev
           || ngx_file_uniq(&fi) != ngx_http_spanprof_log_ino;
}


/* A log's level as SP_EXPORTER_LOG_LEVEL_ENV names it. */
static const char *
ngx_http_spanprof_log_level(ngx_uint_t level)
{
    return level >= NGX_LOG_NOTICE ? "info"
           : level == NGX_LOG_WARN ? "warn"
           : level == NGX_LOG_ERR ? "error"
           : "crit";
}


/*
 * The first syslog log of the main context as SP_EXPORTER_SYSLOG_ENV's
 * value, in buf; NULL when there is none. The exporter writes there as
 * ngx_syslog_writer does: its facility, tag and host name (none with
 * "nohostname"), the severity of each line. nginx's own address, as
 * numbers: the exporter resolves nothing.
 */
static char *
ngx_http_spanprof_syslog(u_char *buf, size_t size)
{
    u_char             *p, addr[NGX_SOCKADDR_STRLEN];
    size_t              n;
    ngx_str_t           host;
    ngx_log_t          *log;
    ngx_syslog_peer_t  *peer;

    for (log = ngx_cycle->log; log != NULL; log = log->next) {
        if (log->writer == ngx_syslog_writer) {
            break;
        }
    }

    if (log == NULL) {
        return NULL;
    }

    peer = log->wdata;
    n = ngx_sock_ntop(peer->server.sockaddr, peer->server.socklen, addr,
                      NGX_SOCKADDR_STRLEN, 1);

    if (peer->nohostname) {
        ngx_str_null(&host);

    } else {
        host = ngx_cycle->hostname;
    }

    p = ngx_snprintf(buf, size - 1, "%s,%ui,%V,%*s,%V",
                     ngx_http_spanprof_log_level(log->log_level),
                     peer->facility, &host, n, addr, &peer->tag);
    *p = '\0';

    return (char *) buf;
}


/* ---- the worker */

static ngx_int_t
ngx_http_spanprof_init_process(ngx_cycle_t *cycle)
{
    sp_status                       st;
    sp_sampler_options              o;
    ngx_uint_t                      i, n;
    ngx_http_phase_handler_t       *ph;
    ngx_http_core_main_conf_t      *cmcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    smcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_spanprof_module);

    if (smcf == NULL || !smcf->enabled || ngx_http_spanprof_shm.base == NULL)
    {
        return NGX_OK;
    }

    /*
     * The exporter is started by a helper process of the master: without
     * one nothing would read the ring. Recording for no one would only
     * cost, and a reload here keeps this process, whose phase engine
     * (ngx_http_spanprof_watch) would then be the old cycle's.
     */
    if (ngx_process == NGX_PROCESS_SINGLE) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "spanprof: no exporter runs with \"master_process "
                      "off\", so nothing is traced or profiled");
        return NGX_OK;
    }

    if (sp_region_attach(ngx_http_spanprof_shm.base,
                         ngx_http_spanprof_shm.size,
                         &ngx_http_spanprof_region)
        != SP_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "spanprof: shared memory is damaged, "
                      "nothing is recorded by this worker");
        return NGX_OK;
    }

    ngx_http_spanprof_ring = sp_region_claim(ngx_http_spanprof_region,
                                             (uint32_t) ngx_pid);
    ngx_http_spanprof_ids = sp_idgen_create();

    if (ngx_http_spanprof_ring == NULL || ngx_http_spanprof_ids == NULL) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "spanprof: no ring left in the shared memory, "
                      "nothing is recorded by this worker");
        ngx_http_spanprof_ring = NULL;
        return NGX_OK;
    }

    if (!smcf->profiling) {
        return NGX_OK;
    }

    ngx_memzero(&o, sizeof(o));
    if (sp_config_flag(smcf->config, SP_SETTING_SNAPSHOT_PROFILER_ENABLED)) {
        o.snapshot_interval_ms = (uint32_t) sp_config_integer(smcf->config,
            SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL);
    }
    if (sp_config_flag(smcf->config, SP_SETTING_PROFILER_ENABLED)) {
        o.continuous_interval_ms = (uint32_t) sp_config_integer(smcf->config,
            SP_SETTING_PROFILER_CALL_STACK_INTERVAL);
    }
    o.max_depth = (uint16_t) sp_config_integer(smcf->config,
                                      SP_SETTING_PROFILER_MAX_STACK_DEPTH);
    o.clock = SP_SAMPLER_CLOCK_CPU;

    st = sp_sampler_create(&o, ngx_http_spanprof_ring,
                           &ngx_http_spanprof_sampler);
    if (st == SP_OK) {
        st = sp_sampler_start(ngx_http_spanprof_sampler);
    }

    if (st != SP_OK) {
        ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                      "spanprof: %s, this worker runs without profiling",
                      st == SP_ERR_SIGNAL_BUSY
                      ? "another module owns SIGPROF"
                      : "the sampler could not start");
        sp_sampler_destroy(ngx_http_spanprof_sampler);
        ngx_http_spanprof_sampler = NULL;
        return NGX_OK;
    }

    ngx_http_spanprof_continuous = o.continuous_interval_ms > 0;

    /*
     * While a profiled request is in the worker, every phase checker
     * tells the sampler whose work runs now (ngx_http_spanprof_watch()):
     * the originals are kept here.
     */
    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);
    ph = cmcf->phase_engine.handlers;
    for (n = 0; ph[n].checker; n++) { /* void */ }

    ngx_http_spanprof_checkers = ngx_alloc(
                               n * sizeof(ngx_http_phase_handler_pt),
                               cycle->log);
    if (ngx_http_spanprof_checkers != NULL) {
        for (i = 0; i < n; i++) {
            ngx_http_spanprof_checkers[i] = ph[i].checker;
        }
        ngx_http_spanprof_phase_base = ph;
        ngx_http_spanprof_nphases = n;
    }

    ngx_http_spanprof_poll_ev.handler = ngx_http_spanprof_poll;
    ngx_http_spanprof_poll_ev.log = cycle->log;
    ngx_http_spanprof_poll_ev.data = cycle;
    ngx_http_spanprof_poll_ev.cancelable = 1;
    ngx_add_timer(&ngx_http_spanprof_poll_ev, NGX_HTTP_SPANPROF_POLL);

    return NGX_OK;
}


static void
ngx_http_spanprof_poll(ngx_event_t *ev)
{
    uint64_t  dropped;

    dropped = sp_sampler_poll(ngx_http_spanprof_sampler);
    if (dropped > 0) {
        ngx_log_error(NGX_LOG_WARN, ev->log, 0,
                      "spanprof: %uL samples dropped, the ring was full "
                      "(the exporter is not keeping up)", dropped);
    }

    if (!ngx_exiting) {
        ngx_add_timer(ev, NGX_HTTP_SPANPROF_POLL);
    }
}


static void
ngx_http_spanprof_exit_process(ngx_cycle_t *cycle)
{
    sp_sampler_destroy(ngx_http_spanprof_sampler);
    ngx_http_spanprof_sampler = NULL;

    if (ngx_http_spanprof_ring != NULL) {
        sp_region_release(ngx_http_spanprof_ring);
        ngx_http_spanprof_ring = NULL;
    }
}


/* ---- requests */

/*
 * The data of the first cleanup of pool with this handler, which marks
 * what the module keeps there (nginx has no slot for a module's data on
 * a pool or a connection); NULL when it has none.
 */
static ngx_inline void *
ngx_http_spanprof_cleanup_data(ngx_pool_t *pool, ngx_pool_cleanup_pt handler)
{
    ngx_pool_cleanup_t  *cln;

    for (cln = pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == handler) {
            return cln->data;
        }
    }

    return NULL;
}


static ngx_http_spanprof_ctx_t *
ngx_http_spanprof_get_ctx(ngx_http_request_t *r)
{
    ngx_http_spanprof_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_spanprof_module);
    if (ctx != NULL) {
        return ctx;
    }

    /* An internal redirect clears the module contexts; the pool cleanup
     * that ends the span still holds it. */
    ctx = ngx_http_spanprof_cleanup_data(r->main->pool,
                                         ngx_http_spanprof_finish);
    if (ctx != NULL) {
        ngx_http_set_ctx(r->main, ctx, ngx_http_spanprof_module);
    }

    return ctx;
}


static void
ngx_http_spanprof_switch(ngx_http_spanprof_ctx_t *ctx)
{
    /*
     * Only a watched request (profiled; or recorded, with continuous
     * profiling on) is remembered as current: the many switches among
     * requests that are not (most of them) then cost a comparison, and
     * never reach the sampler. Watched is counted, with the checkers that
     * end its sampling in place.
     */
    if (ctx != NULL && (!ctx->watched || ctx->finished || ctx->off)) {
        ctx = NULL;
    }

    if (ngx_http_spanprof_current == ctx) {
        return;
    }

    ngx_http_spanprof_current = ctx;

    if (ctx != NULL && ctx->entry.selection.profiled) {
        sp_sampler_enter(ngx_http_spanprof_sampler, ctx->entry.ctx.trace_id,
                         ctx->entry.ctx.span_id);

    } else if (ctx != NULL) {
        /* Watched for the continuous samples only. */
        sp_sampler_enter_unselected(ngx_http_spanprof_sampler,
                                    ctx->entry.ctx.trace_id,
                                    ctx->entry.ctx.span_id);

    } else {
        sp_sampler_leave(ngx_http_spanprof_sampler);
    }
}


/*
 * The phase checkers are ours only while a profiled request is in the
 * worker: with none (most of the time, at the default 1 %) requests run
 * nginx's own, at no cost (~30 instructions a checker, twenty a request,
 * callgrind). The first profiled request puts ours in, the last one to
 * finish takes them out. nginx reads a checker from the array at each
 * call, so a change takes effect at the next one.
 */
static void
ngx_http_spanprof_watch(ngx_http_spanprof_ctx_t *ctx)
{
    ngx_uint_t  i;

    if (ngx_http_spanprof_nprofiled++ == 0) {
        for (i = 0; i < ngx_http_spanprof_nphases; i++) {
            ngx_http_spanprof_phase_base[i].checker =
                                                  ngx_http_spanprof_checker;
        }
    }

    ctx->watched = 1;

    ngx_http_spanprof_wrap(ctx->request->connection);
}


static void
ngx_http_spanprof_unwatch(ngx_http_spanprof_ctx_t *ctx)
{
    ngx_uint_t         i;
    ngx_connection_t  *c;

    if (!ctx->watched) {
        return;
    }

    ctx->watched = 0;

    /* Never left to a later request of the connection, or to what nginx
     * makes of it (keep-alive, lingering close, a recycled HTTP/2
     * stream): its data is no request of ours then. */
    c = ctx->request->connection;

    if (c->read->handler == ngx_http_spanprof_event) {
        c->read->handler = ngx_http_spanprof_request_handler;
    }

    if (c->write->handler == ngx_http_spanprof_event) {
        c->write->handler = ngx_http_spanprof_request_handler;
    }

    if (--ngx_http_spanprof_nprofiled == 0) {
        for (i = 0; i < ngx_http_spanprof_nphases; i++) {
            ngx_http_spanprof_phase_base[i].checker =
                                              ngx_http_spanprof_checkers[i];
        }
    }
}


/*
 * A watched request's client connection events, ours while it lives: what
 * runs in them outside its phases and filters is its work too (its body
 * read as it comes, to a temporary file or an upstream, then the
 * handler that waited for it; a body discarded; a tunnel's client
 * side). nginx sets both to its request handler before the phases begin,
 * and to another one of its own when the request is done with them
 * (keep-alive, lingering close), or again to its request handler (a
 * special response: the request's later events are then nginx's).
 */
static void
ngx_http_spanprof_wrap(ngx_connection_t *c)
{
    if (c->read->handler != c->write->handler
        || c->read->handler == ngx_http_spanprof_event)
    {
        return;
    }

    if (ngx_http_spanprof_request_handler == NULL) {
        ngx_http_spanprof_request_handler = c->read->handler;

    } else if (c->read->handler != ngx_http_spanprof_request_handler) {
        return;
    }

    c->read->handler = ngx_http_spanprof_event;
    c->write->handler = ngx_http_spanprof_event;
}


/* nginx's request handler, for the request of c->data (the main request
 * or one of its subrequests), as a checker runs a phase. */
static void
ngx_http_spanprof_event(ngx_event_t *ev)
{
    ngx_connection_t         *c;
    ngx_http_spanprof_ctx_t  *prev;

    c = ev->data;

    prev = ngx_http_spanprof_enter(ngx_http_spanprof_get_ctx(c->data));
    ngx_http_spanprof_request_handler(ev);
    ngx_http_spanprof_leave(prev);
}


static ngx_int_t
ngx_http_spanprof_checker(ngx_http_request_t *r, ngx_http_phase_handler_t *ph)
{
    ngx_int_t                 rc;
    ngx_http_spanprof_ctx_t  *ctx, *prev;

    prev = ngx_http_spanprof_current;
    ctx = ngx_http_get_module_ctx(r->main, ngx_http_spanprof_module);

    /*
     * A request that is not profiled, while none is current: nothing to
     * tell the sampler before or after (a request runs some twenty
     * checkers; the full way below cost ~40 instructions each, callgrind).
     * A request without its context yet (before POST_READ, or after an
     * internal redirect) takes the full way, which finds it.
     */
    if (ctx != NULL && !ctx->watched && prev == NULL) {
        rc = ngx_http_spanprof_checkers[ph - ngx_http_spanprof_phase_base](r,
                                                                         ph);
        if (ngx_http_spanprof_current != NULL) {
            ngx_http_spanprof_switch(NULL);
        }

        return rc;
    }

    prev = ngx_http_spanprof_enter(ctx != NULL ? ctx
                                               : ngx_http_spanprof_get_ctx(r));
    rc = ngx_http_spanprof_checkers[ph - ngx_http_spanprof_phase_base](r, ph);
    ngx_http_spanprof_leave(prev);

    return rc;
}


/*
 * Around work done for a request (a phase, a filter, a client event): the
 * sampler is told whose it is, and what it was told before once it ends.
 * Work nests (a filter inside a phase, a subrequest's inside its
 * parent's); the count says a frame up the stack holds a context to go
 * back to, which a request ending meanwhile must not free
 * (ngx_http_spanprof_finish).
 */
static ngx_inline ngx_http_spanprof_ctx_t *
ngx_http_spanprof_enter(ngx_http_spanprof_ctx_t *ctx)
{
    ngx_http_spanprof_ctx_t  *prev;

    prev = ngx_http_spanprof_current;
    ngx_http_spanprof_switch(ctx);
    ngx_http_spanprof_nested++;

    return prev;
}


static ngx_inline void
ngx_http_spanprof_leave(ngx_http_spanprof_ctx_t *prev)
{
    ngx_http_spanprof_nested--;
    ngx_http_spanprof_switch(prev);
}


/*
 * A header value sp_entry_begin() gave (*data, *len; NULL: none) as s, in
 * the pool when it is in the worker's scratch, which the next request
 * reuses; *data then points to the copy. A constant, which the baggage
 * of a request that brought none is (the selection's member), is not
 * copied (ngx_pstrdup() was ~30 instructions a request, callgrind).
 * Without memory, none.
 */
static ngx_inline void
ngx_http_spanprof_keep(ngx_pool_t *pool, const char **data, size_t *len,
    ngx_str_t *s)
{
    u_char  *p;

    if (*data == NULL) {
        ngx_str_null(s);
        return;
    }

    p = (u_char *) *data;

    if ((uintptr_t) *data - (uintptr_t) ngx_http_spanprof_scratch
        < sizeof(ngx_http_spanprof_scratch))
    {
        p = ngx_pnalloc(pool, *len);
        if (p == NULL) {
            ngx_str_null(s);
            *data = NULL;
            *len = 0;
            return;
        }

        ngx_memcpy(p, *data, *len);
        *data = (char *) p;
    }

    s->data = p;
    s->len = *len;
}


/*
 * The entry span of a request, its context and the pool cleanup that ends
 * it; found: where the trace headers are. NULL when there is no memory.
 */
static ngx_inline __attribute__((always_inline)) ngx_http_spanprof_ctx_t *
ngx_http_spanprof_begin(ngx_http_request_t *r,
    ngx_http_spanprof_main_conf_t *smcf, ngx_http_spanprof_loc_conf_t *slcf,
    ngx_http_spanprof_found_t *found)
{
    sp_entry_headers          in;
    ngx_http_spanprof_ctx_t  *ctx;

    ngx_http_spanprof_read_headers(r, found, &in);

    /*
     * Not from the request's pool: its ~250 bytes there filled the pool's
     * first block sooner, and nginx's later allocations then looked
     * through more blocks (~70 instructions a request, callgrind).
     */
    ctx = ngx_http_spanprof_free;

    if (ctx != NULL) {
        ngx_http_spanprof_free = ctx->next;
        ngx_http_spanprof_nfree--;

    } else {
        ctx = ngx_alloc(sizeof(ngx_http_spanprof_ctx_t), r->connection->log);
        if (ctx == NULL) {
            return NULL;
        }
    }

    sp_entry_begin(&smcf->policy, ngx_http_spanprof_ids, &in,
                   ngx_http_spanprof_scratch,
                   sizeof(ngx_http_spanprof_scratch), &ctx->entry);

    /* Every field is set here (sp_entry_begin() sets all of ctx->entry):
     * zeroing the whole context first cost ~30 instructions. */
    ngx_http_spanprof_keep(r->pool, &ctx->entry.tracestate,
                           &ctx->entry.tracestate_len, &ctx->tracestate);
    ngx_http_spanprof_keep(r->pool, &ctx->entry.baggage,
                           &ctx->entry.baggage_len, &ctx->baggage);

    ctx->next = NULL;
    ctx->request = r;
    ctx->method = r->method_name;
    ctx->peer = r->connection->addr_text;
    ngx_str_null(&ctx->client);
    ctx->forwarded = found->first[NGX_HTTP_SPANPROF_FORWARDED];
    ctx->forwarded_proto = found->first[NGX_HTTP_SPANPROF_X_FORWARDED_PROTO];
    ctx->forwarded_host = found->first[NGX_HTTP_SPANPROF_X_FORWARDED_HOST];
    ctx->orig = NULL;
    ctx->injected = 0;
    ctx->off = !slcf->enable;
    ctx->finished = 0;
    ctx->watched = 0;

    /* As ngx_pool_cleanup_add() links it; ngx_http_spanprof_finish()
     * keeps the context until the pool has read cleanup.next. */
    ctx->cleanup.handler = ngx_http_spanprof_finish;
    ctx->cleanup.data = ctx;
    ctx->cleanup.next = r->pool->cleanup;
    r->pool->cleanup = &ctx->cleanup;

    ngx_http_set_ctx(r, ctx, ngx_http_spanprof_module);

    return ctx;
}


/*
 * A request's span begins. Inline in the POST_READ checker, with
 * ngx_http_spanprof_begin() and ngx_http_spanprof_inject(): one frame,
 * its registers saved once (~15 instructions a request, callgrind).
 */
static ngx_inline __attribute__((always_inline)) void
ngx_http_spanprof_start(ngx_http_request_t *r)
{
    ngx_http_spanprof_ctx_t        *ctx;
    ngx_http_spanprof_found_t       found;
    ngx_http_spanprof_loc_conf_t   *slcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    /* No walk over the pool's cleanups for the context, as
     * ngx_http_spanprof_get_ctx() does: only an internal redirect loses
     * it, and a redirect never comes back to POST_READ. */
    if (r != r->main || ngx_http_spanprof_ring == NULL
        || ngx_http_get_module_ctx(r, ngx_http_spanprof_module) != NULL)
    {
        return;
    }

    smcf = ngx_http_get_module_main_conf(r, ngx_http_spanprof_module);

    /* Here the server's configuration applies; the location the request
     * ends in may still turn it on or off. */
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_spanprof_module);

    ctx = ngx_http_spanprof_begin(r, smcf, slcf, &found);
    if (ctx == NULL) {
        return;
    }

    /*
     * Before any other module's handler: subrequests made in the access
     * phase (auth_request) copy these headers and must already see the
     * entry span as their parent.
     */
    if (!ctx->off && slcf->propagate) {
        (void) ngx_http_spanprof_inject(r, ctx, smcf->mask, &found);
    }

    ngx_http_spanprof_sample(ctx);
}


/*
 * From here a request's work is sampled, by the checkers of its phases.
 * When they were ours already, this runs inside one, which ends the
 * sampling when it returns; when they were nginx's, nothing would: then
 * the next phase's checker, ours now, starts it. With continuous
 * profiling, every recorded request is watched: a sample taken while the
 * worker works for it carries its ids (SPEC 4), not only one of a
 * profiled request.
 */
static ngx_inline __attribute__((always_inline)) void
ngx_http_spanprof_sample(ngx_http_spanprof_ctx_t *ctx)
{
    ngx_uint_t  watching;

    if ((ctx->entry.selection.profiled
         || (ngx_http_spanprof_continuous && ctx->entry.recorded))
        && ngx_http_spanprof_sampler != NULL
        && ngx_http_spanprof_checkers != NULL)
    {
        watching = ngx_http_spanprof_nprofiled > 0;

        ngx_http_spanprof_watch(ctx);

        if (watching) {
            ngx_http_spanprof_switch(ctx);
        }
    }
}


/* The POST_READ handler, run by the checker below. */
static ngx_int_t
ngx_http_spanprof_post_read(ngx_http_request_t *r)
{
    ngx_http_spanprof_start(r);

    return NGX_DECLINED;
}


/*
 * The checker of our POST_READ handler, in place of nginx's generic one,
 * which called it through ph->handler and tested what it returned: it
 * always declines (~20 instructions a request, callgrind).
 */
static ngx_int_t
ngx_http_spanprof_post_read_phase(ngx_http_request_t *r,
    ngx_http_phase_handler_t *ph)
{
    ngx_http_spanprof_start(r);

    r->phase_handler++;

    return NGX_AGAIN;
}


/* The next element of a header list, or NULL after the last; start with
 * *part at the list's first part and *i at 0. */
static ngx_inline ngx_table_elt_t *
ngx_http_spanprof_next_header(ngx_list_part_t **part, ngx_uint_t *i)
{
    ngx_table_elt_t  *h;

    while (*i >= (*part)->nelts) {
        if ((*part)->next == NULL) {
            return NULL;
        }
        *part = (*part)->next;
        *i = 0;
    }

    h = (*part)->elts;

    return &h[(*i)++];
}


/*
 * One walk over the list (each walk cost ~100 instructions a request, and
 * there were three): the first header of each of our names, and which
 * names came more than once. A loop over each part's array, as nginx's
 * own walks are: ngx_http_spanprof_next_header() looked at the part for
 * every header (~8 instructions a header, callgrind).
 */
static ngx_inline void
ngx_http_spanprof_find(ngx_list_t *headers, ngx_http_spanprof_found_t *f)
{
    ngx_uint_t        i, bit;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    f->first[NGX_HTTP_SPANPROF_TRACEPARENT] = NULL;
    f->first[NGX_HTTP_SPANPROF_TRACESTATE] = NULL;
    f->first[NGX_HTTP_SPANPROF_BAGGAGE] = NULL;
    f->first[NGX_HTTP_SPANPROF_FORWARDED] = NULL;
    f->first[NGX_HTTP_SPANPROF_X_FORWARDED_HOST] = NULL;
    f->first[NGX_HTTP_SPANPROF_X_FORWARDED_PROTO] = NULL;
    f->n = 0;
    f->seen = 0;
    f->repeated = 0;

    for (part = &headers->part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {
            if (ngx_http_spanprof_by_hash[h[i].hash & 0xff] == 0) {
                continue;
            }

            bit = ngx_http_spanprof_header_bit(&h[i]);
            if (bit == 0) {
                continue;
            }

            if (f->seen & bit) {
                f->repeated |= bit;
                continue;
            }

            f->seen |= bit;
            f->first[bit] = &h[i];
            f->order[f->n++] = bit;
        }
    }
}


/*
 * The traceparent when it came once: it is no list header, so two make
 * one invalid value (RFC 9110 section 5.3; httpd joins them so), and a
 * new trace starts, as W3C's test suite asks (test_traceparent_duplicated).
 * tracestate and baggage are list headers, so repeated ones are joined
 * with "," as one value (W3C says so for both).
 */
static ngx_inline __attribute__((always_inline)) void
ngx_http_spanprof_read_headers(ngx_http_request_t *r,
    ngx_http_spanprof_found_t *f, sp_entry_headers *in)
{
    ngx_table_elt_t  *h;

    ngx_memzero(in, sizeof(sp_entry_headers));

    ngx_http_spanprof_find(&r->headers_in.headers, f);

    if (f->seen == 0) {
        return;
    }

    h = f->first[NGX_HTTP_SPANPROF_TRACEPARENT];
    if (h != NULL && !(f->repeated & NGX_HTTP_SPANPROF_TRACEPARENT)) {
        in->traceparent = (char *) h->value.data;
        in->traceparent_len = h->value.len;
    }

    h = f->first[NGX_HTTP_SPANPROF_TRACESTATE];
    if (h != NULL) {
        in->tracestate = (char *) h->value.data;
        in->tracestate_len = h->value.len;
    }

    h = f->first[NGX_HTTP_SPANPROF_BAGGAGE];
    if (h != NULL) {
        in->baggage = (char *) h->value.data;
        in->baggage_len = h->value.len;
    }

    if (f->repeated
        & (NGX_HTTP_SPANPROF_TRACESTATE|NGX_HTTP_SPANPROF_BAGGAGE))
    {
        ngx_http_spanprof_join(r, f, in);
    }
}


/*
 * The repeated tracestate or baggage headers joined with "," in the list's
 * order, each name into one buffer sized in a first walk: appending them
 * one by one, each into a new copy of all before, took n * n / 2 bytes of
 * the pool (90 MiB for 990 baggage headers of 190 bytes).
 */
static void
ngx_http_spanprof_join(ngx_http_request_t *r, ngx_http_spanprof_found_t *f,
    sp_entry_headers *in)
{
    u_char           *p[2], *dst;
    size_t            len[2];
    ngx_uint_t        i, k, pass;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    /* [0] tracestate, [1] baggage; the first pass sizes, the second
     * copies. */
    len[0] = 0;
    len[1] = 0;
    p[0] = NULL;
    p[1] = NULL;

    for (pass = 0; pass < 2; pass++) {
        part = &r->headers_in.headers.part;
        i = 0;

        while ((h = ngx_http_spanprof_next_header(&part, &i)) != NULL) {
            switch (ngx_http_spanprof_header_bit(h) & f->repeated) {

            case NGX_HTTP_SPANPROF_TRACESTATE:
                k = 0;
                break;

            case NGX_HTTP_SPANPROF_BAGGAGE:
                k = 1;
                break;

            default:
                continue;
            }

            if (pass == 0) {
                len[k] += (len[k] ? 1 : 0) + h->value.len;
                continue;
            }

            if (p[k] == NULL) {
                continue;
            }

            dst = p[k] + len[k];
            if (len[k]) {
                *dst++ = ',';
            }
            len[k] = ngx_cpymem(dst, h->value.data, h->value.len) - p[k];
        }

        if (pass == 0) {
            for (k = 0; k < 2; k++) {
                p[k] = len[k] ? ngx_pnalloc(r->pool, len[k]) : NULL;
                len[k] = 0;
            }
        }
    }

    /* Without memory, the first header alone, as read. */
    if (p[0] != NULL) {
        in->tracestate = (char *) p[0];
        in->tracestate_len = len[0];
    }

    if (p[1] != NULL) {
        in->baggage = (char *) p[1];
        in->baggage_len = len[1];
    }
}


/*
 * 0 for a header that is not ours, else its NGX_HTTP_SPANPROF_* bit. Our
 * names differ in length, so the length picks the one name to compare,
 * and its first letter turns most others away without a call (a letter
 * and its capital differ only in 0x20; ngx_tolower() took ~14
 * instructions for each User-Agent and Connection header).
 */
static ngx_inline ngx_uint_t
ngx_http_spanprof_header_bit(ngx_table_elt_t *h)
{
    ngx_uint_t  i;

    switch (h->key.len) {

    case sizeof("traceparent") - 1:
        i = 0;
        break;

    case sizeof("tracestate") - 1:
        i = 1;
        break;

    case sizeof("baggage") - 1:
        i = 2;
        break;

    case sizeof("forwarded") - 1:
        i = 3;
        break;

    case sizeof("x-forwarded-host") - 1:
        i = 4;
        break;

    case sizeof("x-forwarded-proto") - 1:
        i = 5;
        break;

    default:
        return 0;
    }

    if ((h->key.data[0] | 0x20) != ngx_http_spanprof_headers[i].data[0]
        || ngx_strncasecmp(h->key.data, ngx_http_spanprof_headers[i].data,
                           h->key.len) != 0)
    {
        return 0;
    }

    return (ngx_uint_t) 1 << i;
}


/*
 * The location decides, on entering it: the REWRITE phase runs for every
 * location a request enters (after a rewrite, an internal redirect, a
 * named location), before the access phase, whose subrequests
 * (auth_request) copy the headers. One that is off, or does not
 * propagate, gets the received headers back; one that does gets ours.
 */
static ngx_int_t
ngx_http_spanprof_location(ngx_http_request_t *r)
{
    ngx_uint_t                      propagate;
    ngx_http_spanprof_ctx_t        *ctx;
    ngx_http_spanprof_found_t       found;
    ngx_http_spanprof_loc_conf_t   *slcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_spanprof_get_ctx(r);

    if (ctx == NULL) {
        /*
         * One nginx refused, sent here by error_page: its work from here
         * on (an upstream's answer, gzip) is sampled as that of a request
         * begun in POST_READ; its selection, which the baggage tells the
         * upstream, had no samples.
         */
        ctx = ngx_http_spanprof_begin_late(r);
        if (ctx == NULL) {
            return NGX_DECLINED;
        }

        ngx_http_spanprof_sample(ctx);
    }

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_spanprof_module);
    smcf = ngx_http_get_module_main_conf(r, ngx_http_spanprof_module);

    if (!slcf->enable && !ctx->off) {
        ctx->off = 1;
        if (ngx_http_spanprof_current == ctx) {
            ngx_http_spanprof_switch(NULL);
        }

    } else if (slcf->enable && ctx->off) {
        ctx->off = 0;
        ngx_http_spanprof_switch(ctx);
    }

    propagate = slcf->enable && slcf->propagate;

    if (propagate && !ctx->injected) {
        ngx_http_spanprof_find(&r->headers_in.headers, &found);
        (void) ngx_http_spanprof_inject(r, ctx, smcf->mask, &found);

    } else if (!propagate && ctx->injected) {
        (void) ngx_http_spanprof_restore(r, ctx,
                                         smcf->mask);
    }

    return NGX_DECLINED;
}


/*
 * The main request is logged before its pool goes, whichever way it ends:
 * the client's address as realip left it, which its pool cleanup undoes
 * before ours runs. Its context is almost always where POST_READ set it:
 * the other ways are out of line (with them inline, this saved registers
 * and cost ~15 instructions a request more, callgrind).
 */
static ngx_int_t
ngx_http_spanprof_log(ngx_http_request_t *r)
{
    ngx_http_spanprof_ctx_t  *ctx;

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_spanprof_module);

    if (ctx == NULL) {
        ctx = ngx_http_spanprof_begin_late(r);
        if (ctx == NULL) {
            return NGX_OK;
        }
    }

    ctx->client = r->connection->addr_text;

    return NGX_OK;
}


/*
 * The context of a main request that lost it (an internal redirect), or
 * that has none: nginx refused the request before its phases ran (a
 * malformed request line or header, headers too large, a client too slow
 * to send them), and logs it now or sent it on with error_page. A request
 * all the same, as the access log says: its span begins when the request
 * did, with what headers nginx had read.
 */
static __attribute__((noinline)) ngx_http_spanprof_ctx_t *
ngx_http_spanprof_begin_late(ngx_http_request_t *r)
{
    u_char                     *space;
    ngx_http_spanprof_ctx_t    *ctx;
    ngx_http_spanprof_found_t   found;

    ctx = ngx_http_spanprof_get_ctx(r);

    if (ctx == NULL && ngx_http_spanprof_ring != NULL) {
        ctx = ngx_http_spanprof_begin(r,
                  ngx_http_get_module_main_conf(r, ngx_http_spanprof_module),
                  ngx_http_get_module_loc_conf(r, ngx_http_spanprof_module),
                  &found);

        if (ctx != NULL) {
            ctx->entry.start_ns = (uint64_t) r->start_sec * 1000000000
                                  + (uint64_t) r->start_msec * 1000000;

            /*
             * error_page made it a GET: the method it came with begins
             * its request line, where nginx read that whole (HTTP/2 makes
             * one of the pseudo-headers, and refuses some before: then
             * :method as read); none, as for a request nginx only logs,
             * where it did not (too long, malformed).
             */
            ngx_str_null(&ctx->method);

            if (r->http_version >= NGX_HTTP_VERSION_20
                && r->request_line.len == 0)
            {
                ctx->method = r->method_name;

            } else if (r->request_end != NULL
                       || r->http_version >= NGX_HTTP_VERSION_20)
            {
                ctx->method.data = r->request_line.data;
                space = ngx_strlchr(r->request_line.data,
                                    r->request_line.data
                                    + r->request_line.len, ' ');
                ctx->method.len = space != NULL
                                  ? (size_t) (space - r->request_line.data)
                                  : r->request_line.len;
            }
        }
    }

    return ctx;
}


/*
 * Our traceparent, tracestate and baggage in r->headers_in, which proxy,
 * fastcgi, uwsgi and grpc copy upstream, and so do subrequests made
 * later. Usually each received header (f: where they are now) is replaced
 * in place or ours is added; a repeated one, or one to drop (a tracestate
 * that came with an invalid traceparent), takes a copy of the list
 * without them. What was received is kept for ngx_http_spanprof_restore.
 */
static ngx_inline __attribute__((always_inline)) ngx_int_t
ngx_http_spanprof_inject(ngx_http_request_t *r, ngx_http_spanprof_ctx_t *ctx,
    ngx_uint_t mask, ngx_http_spanprof_found_t *f)
{
    /* An HTTP/0.9 request has no headers: nginx never made the list. */
    if (r->headers_in.headers.last == NULL
        && ngx_list_init(&r->headers_in.headers, r->pool, 3,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    ctx->injected = 1;

    /*
     * Most requests have none of the received headers ours replace: ours
     * are then only added, without the bookkeeping of what to keep and
     * put back (~60 instructions a request, callgrind), which keeps its
     * registers and frame out of line.
     */
    if ((f->seen & mask) == 0) {
        return ngx_http_spanprof_add(r, ctx, mask);
    }

    return ngx_http_spanprof_replace(r, ctx, mask, f);
}


/* Ours, in this order, where the request brought none of them. */
static ngx_inline __attribute__((always_inline)) ngx_int_t
ngx_http_spanprof_add(ngx_http_request_t *r, ngx_http_spanprof_ctx_t *ctx,
    ngx_uint_t mask)
{
    ngx_str_t  traceparent;

    if (mask & NGX_HTTP_SPANPROF_TRACEPARENT) {
        traceparent.data = (u_char *) ctx->entry.traceparent;
        traceparent.len = SP_TRACEPARENT_LEN;

        if (ngx_http_spanprof_push(r, 0, &traceparent) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if ((mask & NGX_HTTP_SPANPROF_TRACESTATE) && ctx->tracestate.len
        && ngx_http_spanprof_push(r, 1, &ctx->tracestate) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((mask & NGX_HTTP_SPANPROF_BAGGAGE) && ctx->baggage.len
        && ngx_http_spanprof_push(r, 2, &ctx->baggage) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Ours where the request brought some of the headers ours replace. */
static __attribute__((noinline)) ngx_int_t
ngx_http_spanprof_replace(ngx_http_request_t *r,
    ngx_http_spanprof_ctx_t *ctx, ngx_uint_t mask,
    ngx_http_spanprof_found_t *f)
{
    ngx_str_t         value[NGX_HTTP_SPANPROF_BAGGAGE + 1]; /* by bit */
    ngx_uint_t        i, bit, ours, empty;
    ngx_table_elt_t  *h, *o;

    /* The received headers ours replace. */
    ours = f->seen & mask;

    value[NGX_HTTP_SPANPROF_TRACEPARENT].data =
        (u_char *) ctx->entry.traceparent;
    value[NGX_HTTP_SPANPROF_TRACEPARENT].len = SP_TRACEPARENT_LEN;
    value[NGX_HTTP_SPANPROF_TRACESTATE] = ctx->tracestate;
    value[NGX_HTTP_SPANPROF_BAGGAGE] = ctx->baggage;

    empty = 0;
    for (i = 0; i < 3; i++) {
        bit = (ngx_uint_t) 1 << i;
        if (value[bit].len == 0) {
            empty |= bit;
        }
    }

    if (ctx->orig == NULL) {
        ctx->orig = ngx_array_create(r->pool, 2, sizeof(ngx_table_elt_t));
        if (ctx->orig == NULL) {
            return NGX_ERROR;
        }
    }

    /* In place, unless a header is repeated or must go. */
    if (ours & (f->repeated | empty)) {
        if (ngx_http_spanprof_rebuild(r, mask, ctx->orig) != NGX_OK) {
            return NGX_ERROR;
        }
        ours = 0;
    }

    for (i = 0; i < f->n; i++) {
        bit = f->order[i];
        if (!(ours & bit)) {
            continue;
        }

        h = f->first[bit];

        o = ngx_array_push(ctx->orig);
        if (o == NULL) {
            return NGX_ERROR;
        }

        *o = *h;
        h->value = value[bit];
    }

    for (i = 0; i < 3; i++) {
        bit = (ngx_uint_t) 1 << i;

        if ((mask & bit) && !(ours & bit) && !(empty & bit)) {
            if (ngx_http_spanprof_push(r, i, &value[bit]) != NGX_OK) {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/* The headers as received, for a location that does not propagate. */
static ngx_int_t
ngx_http_spanprof_restore(ngx_http_request_t *r, ngx_http_spanprof_ctx_t *ctx,
    ngx_uint_t mask)
{
    ngx_uint_t        i;
    ngx_table_elt_t  *o, *h;

    ctx->injected = 0;

    if (ngx_http_spanprof_rebuild(r, mask, NULL) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->orig == NULL) {
        return NGX_OK;
    }

    o = ctx->orig->elts;

    for (i = 0; i < ctx->orig->nelts; i++) {
        h = ngx_list_push(&r->headers_in.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }
        *h = o[i];
    }

    ctx->orig->nelts = 0;

    return NGX_OK;
}


/*
 * A copy of r->headers_in.headers without the headers of mask (they go
 * to removed, when given). ngx_list_t cannot drop an element; the fields
 * of r->headers_in that point to others (host, user_agent...) keep
 * pointing to the old elements, which stay in the pool unchanged.
 */
static ngx_int_t
ngx_http_spanprof_rebuild(ngx_http_request_t *r, ngx_uint_t mask,
    ngx_array_t *removed)
{
    ngx_uint_t        i, n;
    ngx_list_t        old;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *c;

    old = r->headers_in.headers;

    n = 0;
    for (part = &old.part; part; part = part->next) {
        n += part->nelts;
    }

    if (ngx_list_init(&r->headers_in.headers, r->pool, n + 3,
                      sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        r->headers_in.headers = old;
        return NGX_ERROR;
    }

    part = &old.part;
    i = 0;

    while ((h = ngx_http_spanprof_next_header(&part, &i)) != NULL) {
        if (ngx_http_spanprof_header_bit(h) & mask) {
            c = removed ? ngx_array_push(removed) : NULL;

        } else {
            c = ngx_list_push(&r->headers_in.headers);
        }

        if (c != NULL) {
            *c = *h;
        }
    }

    return NGX_OK;
}


static ngx_inline ngx_int_t
ngx_http_spanprof_push(ngx_http_request_t *r, ngx_uint_t i, ngx_str_t *value)
{
    ngx_list_t       *list;
    ngx_table_elt_t  *h;

    /* Where the last part has room, as it mostly has, without the call
     * to ngx_list_push() (~16 instructions a header, callgrind). */
    list = &r->headers_in.headers;

    if (list->last->nelts < list->nalloc) {
        h = (ngx_table_elt_t *) list->last->elts + list->last->nelts++;

    } else {
        h = ngx_list_push(list);
        if (h == NULL) {
            return NGX_ERROR;
        }
    }

    h->key = ngx_http_spanprof_headers[i];
    h->lowcase_key = ngx_http_spanprof_headers[i].data;
    h->hash = ngx_http_spanprof_hashes[i];
    h->value = *value;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


/*
 * The main request's pool goes: the request is done, whichever way. Its
 * one caller is ngx_destroy_pool(), once: the context is linked into the
 * cleanups of one pool only, once (ngx_http_spanprof_begin()). A test of
 * finished first made gcc split the function, a call and a jump more a
 * request (callgrind).
 */
static void
ngx_http_spanprof_finish(void *data)
{
    ngx_http_spanprof_ctx_t *ctx = data;

    ctx->finished = 1;
    if (ngx_http_spanprof_current == ctx) {
        ngx_http_spanprof_switch(NULL);
    }

    ngx_http_spanprof_unwatch(ctx);

    ngx_http_spanprof_record(ctx);

    /*
     * Nothing reaches the context through the request once its pool is
     * destroyed, but a checker or filter further up the stack may hold it
     * as the context to go back to (prev), and reads it on the way out:
     * while one does, it stays in the free list, whatever its length.
     */
    ctx->next = ngx_http_spanprof_free;
    ngx_http_spanprof_free = ctx;
    ngx_http_spanprof_nfree++;

    if (ngx_http_spanprof_nested > 0) {
        return;
    }

    /*
     * Never the first, this one: ngx_destroy_pool() reads its cleanup.next
     * when this returns. Every other one's was read as its own finish
     * returned (t/nginx_many_open.t).
     */
    while (ngx_http_spanprof_nfree > NGX_HTTP_SPANPROF_FREE_MAX) {
        ctx = ngx_http_spanprof_free->next;
        ngx_http_spanprof_free->next = ctx->next;
        ngx_http_spanprof_nfree--;
        ngx_free(ctx);
    }
}


/*
 * The authority the client addressed the request to, as it sent it: an
 * absolute-form request target's (nginx keeps where its host and port
 * are), else Host, which HTTP/2's :authority also becomes. nginx's own
 * r->headers_in.server has lost the port.
 */
static void
ngx_http_spanprof_authority(ngx_http_request_t *r, sp_entry_http *h)
{
    u_char  *p, *last;

    if (r->host_start != NULL && r->host_end != NULL) {
        /* r->request_line is emptied once the request is freed */
        p = r->host_end;
        last = r->request_end;

        if (p < last && *p == ':') {
            do {
                p++;
            } while (p < last && *p >= '0' && *p <= '9');
        }

        h->authority = (char *) r->host_start;
        h->authority_len = p - r->host_start;

    } else if (r->headers_in.host != NULL) {
        h->authority = (char *) r->headers_in.host->value.data;
        h->authority_len = r->headers_in.host->value.len;
    }
}


/*
 * An address as the conventions write it: nginx's text for a peer of a
 * unix-domain listener is "unix:" and the socket's name, which such a
 * peer seldom has; the name alone, or none.
 */
static void
ngx_http_spanprof_address(ngx_str_t *text, const char **data, size_t *len)
{
    *data = (char *) text->data;
    *len = text->len;

    /* the first byte alone tells an IP address (ngx_strncmp() for every
     * request cost ~30 instructions each, callgrind) */
    if (text->len >= sizeof("unix:") - 1 && text->data[0] == 'u'
        && ngx_strncmp(text->data, "unix:", sizeof("unix:") - 1) == 0)
    {
        *data += sizeof("unix:") - 1;
        *len -= sizeof("unix:") - 1;
    }
}


/*
 * The cleanup of c->pool whose data is the connection's sp_entry_cache,
 * which it frees; its handler marks it.
 */
static void
ngx_http_spanprof_cache_free(void *data)
{
    ngx_free(data);
}


/*
 * The connection's sp_entry_cache (sp_entry.h: the attributes of its
 * spans its later requests repeat), made at its second request, so that
 * a connection that serves one request pays nothing for it: from then on
 * each span copies six attributes instead of writing them. HTTP/1.x only:
 * an HTTP/2 connection's streams are requests of their own. It is found
 * by its cleanup entry in c->pool: nginx has no slot for a module's data
 * on a connection, and the list is short (empty on a plain keep-alive
 * connection; an ssl one adds a few): with the call, ~20 instructions a
 * request (callgrind). Not in the pool: larger than what c->pool keeps
 * in its blocks (connection_pool_size), it went to the pool's list of
 * large allocations, which nginx walks at each keep-alive request's end
 * (ngx_pfree(), ~6 instructions a request). NULL when there is none.
 */
static sp_entry_cache *
ngx_http_spanprof_cache(ngx_http_request_t *r)
{
    sp_entry_cache      *cache;
    ngx_connection_t    *c;
    ngx_pool_cleanup_t  *cln;

    c = r->connection;

    /* c->destroyed says nothing here: nginx sets it as the request's
     * pool goes, before the connection's. */
    if (c->requests < 2 || r->stream != NULL) {
        return NULL;
    }

    cache = ngx_http_spanprof_cleanup_data(c->pool,
                                           ngx_http_spanprof_cache_free);
    if (cache != NULL) {
        return cache;
    }

    /* The memory first: a cleanup added without it would stay, empty,
     * and each later request would add another. */
    cache = ngx_alloc(sizeof(sp_entry_cache), c->log);
    if (cache == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(c->pool, 0);
    if (cln == NULL) {
        ngx_free(cache);
        return NULL;
    }

    sp_entry_cache_init(cache);
    cln->data = cache;
    cln->handler = ngx_http_spanprof_cache_free;

    return cache;
}


/* The fields of an sp_entry_http h from the field from up to the field
 * to, cleared. */
#define ngx_http_spanprof_clear(h, from, to)                                \
    ngx_memzero(&(h).from,                                                  \
                offsetof(sp_entry_http, to) - offsetof(sp_entry_http, from))

/* The runs of sp_entry_http's fields that ngx_http_spanprof_record()
 * always sets, as long as they were: a field added to one makes it
 * longer and fails here, one added between them is cleared. */
#define ngx_http_spanprof_run(from, to, size)                               \
    _Static_assert(offsetof(sp_entry_http, to)                              \
                   - offsetof(sp_entry_http, from) == (size),               \
                   "sp_entry_http: a field between " #from " and " #to      \
                   " that ngx_http_spanprof_record() neither sets nor "      \
                   "clears")

ngx_http_spanprof_run(method, route, 2 * sizeof(void *));
ngx_http_spanprof_run(path, query, 2 * sizeof(void *));
ngx_http_spanprof_run(scheme, forwarded, 2 * sizeof(void *));
ngx_http_spanprof_run(client_address, user_agent, 6 * sizeof(void *));
ngx_http_spanprof_run(status, end_ns, 2 * sizeof(void *));
_Static_assert(offsetof(sp_entry_http, method) == 0
               && offsetof(sp_entry_http, route)
                  < offsetof(sp_entry_http, path)
               && offsetof(sp_entry_http, query)
                  < offsetof(sp_entry_http, scheme)
               && offsetof(sp_entry_http, forwarded)
                  < offsetof(sp_entry_http, client_address)
               && offsetof(sp_entry_http, user_agent)
                  < offsetof(sp_entry_http, status)
               && offsetof(sp_entry_http, end_ns)
                  < offsetof(sp_entry_http, cache)
               && offsetof(sp_entry_http, cache) + sizeof(void *)
                  == sizeof(sp_entry_http),
               "sp_entry_http: its fields in another order than "
               "ngx_http_spanprof_record() sets and clears them");

/* ngx_inet_get_port(), without its call (~8 instructions a request,
 * callgrind). */
static ngx_inline in_port_t
ngx_http_spanprof_port(struct sockaddr *sa)
{
    switch (sa->sa_family) {

#if (NGX_HAVE_INET6)
    case AF_INET6:
        return ntohs(((struct sockaddr_in6 *) sa)->sin6_port);
#endif

    case AF_INET:
        return ntohs(((struct sockaddr_in *) sa)->sin_port);

    default: /* AF_UNIX */
        return 0;
    }
}


/* The span record of a request, into the worker's ring. Inline in
 * ngx_http_spanprof_finish(), its one caller: one frame (~10
 * instructions a request, callgrind). */
static ngx_inline __attribute__((always_inline)) void
ngx_http_spanprof_record(ngx_http_spanprof_ctx_t *ctx)
{
    u_char                        *query, *last, *hash;
    ngx_uint_t                     status, refused;
    sp_entry_http                  h;
    ngx_connection_t              *c;
    ngx_http_request_t            *r;
    ngx_str_t                      *client, target;
    ngx_http_core_loc_conf_t       *clcf;
    ngx_http_spanprof_loc_conf_t   *slcf;
    ngx_http_spanprof_main_conf_t  *smcf;

    r = ctx->request;
    c = r->connection;

    /* The location the request ended in, also when it never reached the
     * content phase (return, error_page). */
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_spanprof_module);

    if (!slcf->enable || !ctx->entry.recorded
        || ngx_http_spanprof_ring == NULL)
    {
        return;
    }

    /*
     * Cleared where the code below may leave a field unset, in runs of
     * at most 64 bytes, which gcc clears with vector stores (a longer
     * memset was a rep stos, a word a turn), and not where it always sets
     * them: clearing the whole took ~6 instructions a request more
     * (callgrind). The asserts above keep a field added later from going
     * unset.
     */
    ngx_http_spanprof_clear(h, route, path);
    ngx_http_spanprof_clear(h, query, scheme);
    ngx_http_spanprof_clear(h, forwarded, server_address);
    ngx_http_spanprof_clear(h, server_address, client_address);
    ngx_http_spanprof_clear(h, user_agent, status);
    ngx_http_spanprof_clear(h, end_ns, cache);

    h.method = (char *) ctx->method.data;
    h.method_len = ctx->method.len;

    /* Never NULL, as slcf above: every location's configuration, and
     * the server's a request has before one is found, has both. */
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    if (clcf->name.len > 0) {
        h.route = (char *) clcf->name.data;
        h.route_len = clcf->name.len;
    }

    /*
     * The target as the client sent it: r->uri is decoded and normalized
     * ("%3F" is a "?" there), and rewrites and redirects change it and
     * r->args; nothing changes r->unparsed_uri.
     */
    target = r->unparsed_uri;
    refused = 0;

    /*
     * nginx sets it only once the target has parsed: one it refuses
     * (400 for "/%ZZ") is still where the request line was read. An
     * HTTP/2 :path it refuses ("/a b?x") is whole there, though its
     * parser stopped at the bad byte, before any '#' or '?' it notes.
     */
    if (target.len == 0 && r->uri_start != NULL
        && r->uri_end > r->uri_start)
    {
        target.data = r->uri_start;
        target.len = r->uri_end - r->uri_start;
        refused = 1;
    }

    /*
     * A fragment a client sent ("/a#top") is no part of the path or the
     * query (RFC 3986), a '?' after the '#' neither; nginx's parser marks
     * a target with a '#' complex, so most requests skip the search.
     */
    if (r->complex_uri || refused) {
        hash = memchr(target.data, '#', target.len);
        if (hash != NULL) {
            target.len = hash - target.data;
        }
    }

    /*
     * nginx's parser notes where the query starts (args_start) at a '?',
     * but in a target it marks complex or quoted, or whose path is empty,
     * where it may pass one or reuse args_start: any other target without
     * args_start holds no '?' (but one refused part way may), and most
     * requests skip the search (-18 instructions a request, callgrind).
     */
    last = target.data + target.len;
    query = NULL;

    if (r->args_start != NULL || r->complex_uri || r->quoted_uri
        || r->empty_path_in_uri || refused)
    {
        query = memchr(target.data, '?', target.len);
    }

    h.path = (char *) target.data;
    h.path_len = (query != NULL ? query : last) - target.data;

    if (query != NULL) {
        h.query = (char *) query + 1;
        h.query_len = last - query - 1;
    }

    h.scheme = "http";
    h.scheme_len = sizeof("http") - 1;

    /*
     * The module is built --with-compat, without ssl: NGX_HTTP_SSL is not
     * set here, but a server built with it fills c->ssl, which compat
     * builds keep in the structure.
     */
#if (NGX_SSL || NGX_COMPAT)
    if (c->ssl) {
        h.scheme = "https";
        h.scheme_len = sizeof("https") - 1;
    }
#endif

    if (ctx->forwarded != NULL) {
        h.forwarded = (char *) ctx->forwarded->value.data;
        h.forwarded_len = ctx->forwarded->value.len;
    }

    if (ctx->forwarded_proto != NULL) {
        h.forwarded_proto = (char *) ctx->forwarded_proto->value.data;
        h.forwarded_proto_len = ctx->forwarded_proto->value.len;
    }

    if (ctx->forwarded_host != NULL) {
        h.forwarded_host = (char *) ctx->forwarded_host->value.data;
        h.forwarded_host_len = ctx->forwarded_host->value.len;
    }

    ngx_http_spanprof_authority(r, &h);

    /* Without one (HTTP/1.0 with no Host): the port the request came in
     * on. The listening socket's address has it even when it is a
     * wildcard: no getsockname() for the local address itself. */
    if (c->local_socklen > 0) {
        h.server_port = ngx_http_spanprof_port(c->local_sockaddr);
    }

    client = ctx->client.len > 0 ? &ctx->client : &c->addr_text;
    ngx_http_spanprof_address(client, &h.client_address,
                              &h.client_address_len);
    ngx_http_spanprof_address(&ctx->peer, &h.peer_address,
                              &h.peer_address_len);

    h.protocol_version = "1.1";
    h.protocol_version_len = 3;

    switch (r->http_version) {

    case NGX_HTTP_VERSION_20:
        h.protocol_version = "2";
        h.protocol_version_len = 1;
        break;

#ifdef NGX_HTTP_VERSION_30
    /* nginx 1.25 and later, built with HTTP/3 */
    case NGX_HTTP_VERSION_30:
        h.protocol_version = "3";
        h.protocol_version_len = 1;
        break;
#endif

    case NGX_HTTP_VERSION_10:
        /*
         * Also nginx's value before it read a version: a request line it
         * refused (too long, malformed) had none it knows of, and nginx
         * logs no $server_protocol for it.
         */
        if (r->request_end == NULL) {
            h.protocol_version = NULL;
            h.protocol_version_len = 0;
            break;
        }

        h.protocol_version = "1.0";
        break;

    case NGX_HTTP_VERSION_9:
        h.protocol_version = "0.9";
        break;
    }

    if (r->headers_in.user_agent != NULL) {
        h.user_agent = (char *) r->headers_in.user_agent->value.data;
        h.user_agent_len = r->headers_in.user_agent->value.len;
    }

    status = r->err_status ? r->err_status : r->headers_out.status;
    if (status == 0 && (c->error || r->connection->destroyed)) {
        status = NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }
    h.status = (int64_t) status;
    h.pid = (uint32_t) ngx_pid;
    h.cache = ngx_http_spanprof_cache(r);

    smcf = ngx_http_get_module_main_conf(r, ngx_http_spanprof_module);

    (void) sp_entry_finish(&smcf->policy, &ctx->entry, &h,
                           ngx_http_spanprof_ring);
}


/* ---- filters: at the top of both chains, over everything below them */

static ngx_int_t
ngx_http_spanprof_header_filter(ngx_http_request_t *r)
{
    ngx_int_t                 rc;
    ngx_http_spanprof_ctx_t  *prev;

    /* With no profiled request in the worker there is nothing to tell. */
    if (ngx_http_spanprof_nprofiled == 0) {
        return ngx_http_next_header_filter(r);
    }

    prev = ngx_http_spanprof_enter(ngx_http_spanprof_get_ctx(r));
    rc = ngx_http_next_header_filter(r);
    ngx_http_spanprof_leave(prev);

    return rc;
}


/*
 * An HTTP/2 request's body comes in the connection's read handler, with
 * the frames of all its streams: what the filters do with a stream's
 * data (to a temporary file) is that request's work. Over HTTP/1.x it
 * runs in the request's own events, ours already when it is watched.
 */
static ngx_int_t
ngx_http_spanprof_request_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in)
{
    ngx_int_t                 rc;
    ngx_http_spanprof_ctx_t  *prev;

    if (ngx_http_spanprof_nprofiled == 0) {
        return ngx_http_next_request_body_filter(r, in);
    }

    prev = ngx_http_spanprof_enter(ngx_http_spanprof_get_ctx(r));
    rc = ngx_http_next_request_body_filter(r, in);
    ngx_http_spanprof_leave(prev);

    return rc;
}


static ngx_int_t
ngx_http_spanprof_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                 rc;
    ngx_http_spanprof_ctx_t  *prev;

    if (ngx_http_spanprof_nprofiled == 0) {
        return ngx_http_next_body_filter(r, in);
    }

    prev = ngx_http_spanprof_enter(ngx_http_spanprof_get_ctx(r));
    rc = ngx_http_next_body_filter(r, in);
    ngx_http_spanprof_leave(prev);

    return rc;
}
