/*
 * spanprof for Apache httpd: the adapter between httpd and spanprof's core.
 *
 * The parent creates the shared memory (a memfd the exporter maps too) once
 * per process, kept in the process pool across restarts, and starts the
 * exporter the way mod_cgid starts its daemon: as the children's User,
 * watched with apr_proc_other_child_register, replaced on every restart.
 * Each child claims a ring. A request's entry span starts in
 * post_read_request and ends as httpd logs the initial request, as its
 * pool goes; the trace headers reach mod_proxy through r->headers_in, set
 * in fixups; the thread (or process, under prefork) serving it is sampled
 * on the wall clock, so the time it spends blocked on a backend is
 * sampled too.
 */

#include "httpd.h"
#include "http_config.h"
#include "http_connection.h"
#include "http_main.h"
#include "http_core.h"
#include "http_log.h"
#include "http_protocol.h"
#include "http_request.h"
#include "ap_mpm.h"
#include "mpm_common.h"
#include "unixd.h"

#include "apr_atomic.h"
#include "apr_lib.h"
#include "apr_strings.h"
#include "apr_thread_proc.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include <sp_clock.h>
#include <sp_config.h>
#include <sp_entry.h>
#include <sp_exporter_launch.h>
#include <sp_ring.h>
#include <sp_sampler.h>
#include <sp_shm.h>

#define SPANPROF_SLOTS           256
#define SPANPROF_SLOTS_SPARE     16
#define SPANPROF_RING_BYTES      (1024 * 1024)
#define SPANPROF_RING_BYTES_MIN  (256 * 1024)
#define SPANPROF_RINGS_BYTES_MAX ((apr_uint64_t) 512 * 1024 * 1024)
#define SPANPROF_SHM_KEY     "spanprof-shm"

/* Where a traceparent, "00-{trace-id}-{parent-id}-{flags}", has the ids in
 * hex. */
#define SPANPROF_TP_TRACE_ID  3
#define SPANPROF_TP_SPAN_ID   (SPANPROF_TP_TRACE_ID + 2 * SP_TRACE_ID_SIZE + 1)

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

/*
 * route: a <Location>'s (or <LocationMatch>'s) own path or regex as
 * written, set in post_config on that section's record only; merged, the
 * last section that sets it wins, as with httpd's own directives. NULL
 * elsewhere (<Directory>, <Files>, <If>, a server's defaults).
 */
typedef struct {
    spanprof_switch  enable;
    const char      *route;
    apr_size_t       route_len;
} spanprof_dir_conf;

/*
 * The request headers spanprof reads, as the client sent them: read once,
 * as the request begins (spanprof_find_headers, which needs the names
 * that share a first letter next to each other).
 */
typedef enum {
    SPANPROF_H_TRACEPARENT,
    SPANPROF_H_TRACESTATE,
    SPANPROF_H_BAGGAGE,
    SPANPROF_H_FORWARDED,
    SPANPROF_H_X_FORWARDED_PROTO,
    SPANPROF_H_X_FORWARDED_HOST,
    SPANPROF_H_HOST,
    SPANPROF_H_USER_AGENT,
    SPANPROF_H_UPGRADE,
    SPANPROF_H_COUNT
} spanprof_header_id;

/*
 * One request's entry span, kept with the initial request. spanprof_begin
 * sets the fields up to baggage and clears the rest, from sampling on.
 */
typedef struct spanprof_request spanprof_request;
typedef struct spanprof_conn spanprof_conn;

struct spanprof_request {
    sp_entry      entry;
    request_rec  *initial;
    spanprof_conn     *conn;   /* whose spare it goes back to; NULL: in
                                  the request's pool */
    spanprof_request  *next;   /* among the spares */
    const char   *traceparent;
    char          trace_id[2 * SP_TRACE_ID_SIZE + 1];   /* hex, for the */
    char          span_id[2 * SP_SPAN_ID_SIZE + 1];     /* variables */
    const char   *tracestate;
    const char   *baggage;
    /* Cleared as the span begins, from here to the end. */
    int           sampling;    /* its span is open in the sampler */
    int           upgrading;   /* core's handler switches the protocol:
                                  the new protocol's requests are spans */
    int           injected;    /* ours went into a request's headers_in,
                                  which a redirect's request shares */
    apr_os_thread_t  thread;   /* the one that entered it */
    int           finished;
    apr_uint64_t  end_ns;      /* 0: as it is logged */
    ap_filter_t  *stream_end;  /* on its HTTP/2 stream's connection */
    const char   *header[SPANPROF_H_COUNT];    /* NULL: not sent */
};

/*
 * What a connection keeps for its requests, in its conn_config slot, in
 * its pool: the records of its requests that ended, which its next ones
 * take again, and its span cache. Not on a mod_http2 stream's secondary
 * connection, whose streams run on several threads at once and whose
 * requests a stream's purge frees on another.
 */
struct spanprof_conn {
    spanprof_request  *spare;
    sp_entry_cache    *cache;   /* from its second span on */
    int                spans;   /* one has ended */
    const char        *peer;    /* c->client_ip as it was accepted */
    size_t             peer_len;
};

/* Per child process. */
static sp_region        *spanprof_region;
static sp_ring          *spanprof_ring;
static sp_sampler       *spanprof_sampler;
/* Continuous samples run in this child: a recorded request that is not
 * profiled is open in the sampler too, for their ids. */
static int               spanprof_continuous;
static volatile apr_uint32_t  spanprof_polled_at;
static volatile apr_uint32_t  spanprof_polling;
/* The child's id generator: its threads' own are made from the kernel
 * (spanprof_thread_ids); this one is for a thread that could not make
 * its own, under spanprof_ids_lock. */
static sp_idgen         *spanprof_ids;
static pthread_mutex_t   spanprof_ids_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t     spanprof_ids_key;
static int               spanprof_ids_keyed;
/* Initial-exec: read at an offset from the thread pointer, not through
 * __tls_get_addr (~13 instructions a request, callgrind). It asks nothing
 * more of the loader: the sampler's thread slot (sp_sampler.c) is
 * initial-exec already, so the module is marked STATIC_TLS and its whole
 * TLS block, this included, is in the static TLS as it loads. */
static __thread sp_idgen *spanprof_ids_own
    __attribute__((tls_model("initial-exec")));
static sp_entry_policy   spanprof_policy;
/* This child's, for its spans: getpid() is a system call each time. */
static uint32_t          spanprof_pid;
static int               spanprof_active;
/* "Spanprof On" in a <Location> or the like, in this configuration: a
 * request of a server that is off may end there. Read with it, kept by
 * the children it forks. */
static int               spanprof_on_inside;
/* "Spanprof On" in a virtual host or a directory section, in this reading
 * of the configuration (sp_config_note_scope_on). */
static int               spanprof_scope_on;
/* spanprof_stream_end_filter's, registered once per load. */
static ap_filter_rec_t  *spanprof_stream_end_handle;
static apr_status_t spanprof_stream_end_forget(void *data);

/* Variables for LogFormat's %{...}e. */
static const char *const spanprof_env_names[] = {
    "SPANPROF_TRACE_ID", "SPANPROF_SPAN_ID", "SPANPROF_TRACEPARENT",
    "SPANPROF_BAGGAGE", "SPANPROF_SNAPSHOT"
};
#define SPANPROF_ENV_COUNT \
    (sizeof(spanprof_env_names) / sizeof(spanprof_env_names[0]))

/* The SPANPROF_* variables, in order, with empty values: a request's are
 * added from it (spanprof_add_env). Made in post_config, read only after
 * that, by every thread. */
static apr_table_t      *spanprof_env_template;

/*
 * In the parent: one exporter process, watched from its start to its
 * death. The record outlives the configuration it was started for: after
 * a restart the MPM reaps the old generation's exporter, which must still
 * be known (else "long lost child came home!"). Its registration does
 * not: it names spanprof_exporter_event, in this module, which httpd
 * unloads with the configuration and loads again, maybe elsewhere. The
 * parent called the old address when it reaped an exporter after a
 * graceful restart and at every stop (APR unregisters what is left when
 * the process pool goes): a segmentation fault. So each registration is
 * made in pconf, whose clearing unregisters it while this code is still
 * there, and the next configuration registers the records of exporters
 * still unreaped again (spanprof_exporters_watch), from a list kept in
 * the process pool.
 */
typedef struct spanprof_exporter_rec {
    struct spanprof_exporter_rec *next;
    apr_proc_t  proc;
    int         stopping;   /* asked to go: its death calls for no new one */
} spanprof_exporter_rec;

#define SPANPROF_EXPORTERS_KEY "spanprof-exporters"

/* The current generation's exporter, NULL while none runs. */
static spanprof_exporter_rec *spanprof_exporter;
/* The current generation is going (restart, stop): nothing starts. */
static int               spanprof_generation_stopping;
/* Exits soon after starting delay the next start (sp_exporter_launch.h):
 * until this time, when not 0; the monitor hook starts it then. */
static sp_exporter_restarts  spanprof_restarts;
static apr_time_t        spanprof_restart_at;
/* How long httpd's exit waits for its exporter's flush, in ms
 * (sp_exporter_stop_ms of the configuration it was started with). */
static apr_uint64_t      spanprof_exporter_stop_ms;
/* The configuration's pool, where exporters are registered. */
static apr_pool_t       *spanprof_pconf;

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
    conf->route = NULL;
    conf->route_len = 0;
    return conf;
}

static void *
spanprof_merge_dir_config(apr_pool_t *p, void *base_conf, void *add_conf)
{
    spanprof_dir_conf *base = base_conf;
    spanprof_dir_conf *add = add_conf;
    spanprof_dir_conf *conf = apr_palloc(p, sizeof(*conf));

    conf->enable = add->enable != SPANPROF_UNSET ? add->enable : base->enable;
    if (add->route != NULL) {
        conf->route = add->route;
        conf->route_len = add->route_len;
    } else {
        conf->route = base->route;
        conf->route_len = base->route_len;
    }
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
    if (on && cmd->path != NULL) {
        spanprof_on_inside = 1;
    }

    if (cmd->path == NULL && !cmd->server->is_virtual) {
        (void) sp_config_set_directive(spanprof_main_conf(cmd->server)->config,
                                       SP_SETTING_ENABLED, cmd->cmd->name,
                                       arg, strlen(arg), msg, sizeof(msg));
    } else if (on) {
        /* Of no effect when the server-wide switch is off: said then. */
        spanprof_scope_on = 1;
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
                     "spanprof: %s (%s:%d)", msg, cmd->directive->filename,
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
        if (spanprof_scope_on) {
            sp_config_note_scope_on(conf->config);
        }
        sp_config_complete(conf->config, spanprof_getenv, NULL,
                           quiet ? spanprof_ignore_warning : spanprof_warn,
                           s);
        /* The exporter runs as User/Group without supplementary groups
         * (spanprof_exporter_spawn). */
        if (!quiet && geteuid() == 0
            && ap_unixd_config.user_id != (uid_t) -1
            && sp_config_flag(conf->config, SP_SETTING_ENABLED))
        {
            sp_config_check_exporter_user(conf->config,
                                          (uint32_t) ap_unixd_config.user_id,
                                          (uint32_t) ap_unixd_config.group_id,
                                          ap_unixd_config.user_name, 0,
                                          spanprof_warn, s);
        }
        conf->completed = 1;
    }
}

static void
spanprof_test_config(apr_pool_t *pconf, server_rec *s)
{
    spanprof_complete(s, 0);
}

/*
 * A ring for each child the MPM may run at once (ServerLimit, which httpd
 * changes only on a full stop, as long as the shared memory lives) and
 * spare ones for children started before a dead one's ring is drained;
 * at least SPANPROF_SLOTS, at most SP_REGION_MAX_SLOTS. Past
 * SPANPROF_RINGS_BYTES_MAX in all (a page of shared memory is taken only
 * once written) the rings are smaller: that many children are prefork's,
 * each serving one request at a time.
 */
static void
spanprof_shm_shape(apr_uint32_t *slots, apr_size_t *ring_bytes)
{
    int  limit = 0;

    *slots = SPANPROF_SLOTS;
    *ring_bytes = SPANPROF_RING_BYTES;
    if (ap_mpm_query(AP_MPMQ_HARD_LIMIT_DAEMONS, &limit) != APR_SUCCESS
        || limit <= SPANPROF_SLOTS - SPANPROF_SLOTS_SPARE)
    {
        return;
    }
    *slots = limit < SP_REGION_MAX_SLOTS - SPANPROF_SLOTS_SPARE
             ? (apr_uint32_t) limit + SPANPROF_SLOTS_SPARE
             : SP_REGION_MAX_SLOTS;
    while (*ring_bytes > SPANPROF_RING_BYTES_MIN
           && (apr_uint64_t) *slots * *ring_bytes > SPANPROF_RINGS_BYTES_MAX)
    {
        *ring_bytes /= 2;
    }
}

/*
 * The shared memory lives as long as the parent: in the process pool,
 * which survives restarts (module statics do not: httpd reloads modules).
 */
static sp_shm *
spanprof_shm(server_rec *s)
{
    apr_pool_t   *pp = s->process->pool;
    sp_shm       *shm = NULL;
    apr_uint32_t  slots;
    apr_size_t    ring_bytes;

    apr_pool_userdata_get((void **) &shm, SPANPROF_SHM_KEY, pp);
    if (shm != NULL) {
        return shm->base != NULL ? shm : NULL;
    }
    shm = apr_pcalloc(pp, sizeof(*shm));
    spanprof_shm_shape(&slots, &ring_bytes);
    if (sp_shm_create(slots, ring_bytes, shm) != SP_OK) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, errno, s,
                     "spanprof: shared memory could not be created, spans "
                     "and profiles are not recorded");
        shm->base = NULL;
    }
    apr_pool_userdata_set(shm, SPANPROF_SHM_KEY, apr_pool_cleanup_null, pp);
    return shm->base != NULL ? shm : NULL;
}

/*
 * A restart that turns spanprof off for the whole server: no child of this
 * generation and no exporter uses the shared memory, so the parent lets
 * it go (every page its rings were written to) rather than hold it until
 * it stops. Children and the exporter of the old generation keep their own
 * mappings of it until they end; a restart that turns spanprof on again
 * creates a new one (the record, a few bytes of the process pool, stays).
 */
static void
spanprof_shm_release(server_rec *s)
{
    apr_pool_t  *pp = s->process->pool;
    sp_shm      *shm = NULL;

    apr_pool_userdata_get((void **) &shm, SPANPROF_SHM_KEY, pp);
    if (shm == NULL) {
        return;
    }
    sp_shm_close(shm);
    apr_pool_userdata_set(NULL, SPANPROF_SHM_KEY, apr_pool_cleanup_null, pp);
}

static void spanprof_exporter_event(int reason, void *data, int status);

/* Every exporter not yet reaped, of any generation (the list's head). */
static spanprof_exporter_rec **
spanprof_exporters(void)
{
    apr_pool_t             *pp = ap_server_conf->process->pool;
    spanprof_exporter_rec **head = NULL;

    apr_pool_userdata_get((void **) &head, SPANPROF_EXPORTERS_KEY, pp);
    if (head == NULL) {
        head = apr_pcalloc(pp, sizeof(*head));
        apr_pool_userdata_set(head, SPANPROF_EXPORTERS_KEY,
                              apr_pool_cleanup_null, pp);
    }
    return head;
}

/* The records of earlier configurations, under this one's callback. */
static void
spanprof_exporters_watch(apr_pool_t *pconf)
{
    spanprof_exporter_rec *rec;

    for (rec = *spanprof_exporters(); rec != NULL; rec = rec->next) {
        apr_proc_other_child_register(&rec->proc, spanprof_exporter_event,
                                      rec, NULL, pconf);
    }
}

/* The facilities of "ErrorLog syslog:facility", in log.c's order: the
 * first whose name begins with what is written is taken. */
static const struct {
    const char *name;
    int         value;
} spanprof_facilities[] = {
    { "auth", LOG_AUTH },       { "authpriv", LOG_AUTHPRIV },
    { "cron", LOG_CRON },       { "daemon", LOG_DAEMON },
    { "ftp", LOG_FTP },         { "kern", LOG_KERN },
    { "lpr", LOG_LPR },         { "mail", LOG_MAIL },
    { "news", LOG_NEWS },       { "syslog", LOG_SYSLOG },
    { "user", LOG_USER },       { "uucp", LOG_UUCP },
    { "local0", LOG_LOCAL0 },   { "local1", LOG_LOCAL1 },
    { "local2", LOG_LOCAL2 },   { "local3", LOG_LOCAL3 },
    { "local4", LOG_LOCAL4 },   { "local5", LOG_LOCAL5 },
    { "local6", LOG_LOCAL6 },   { "local7", LOG_LOCAL7 }
};

/*
 * The main server's "ErrorLog syslog[:facility[:tag]]" as
 * SP_EXPORTER_SYSLOG_ENV's value, in buf; NULL when its error log is not
 * syslog. httpd then points its stderr, which the exporter writes to, at
 * /dev/null: every exporter line was lost. It goes where httpd's go, as
 * log.c's openlog() reads the name: local7 by default, the tag
 * ap_server_argv0 unless one is written, to the system's logger.
 */
static const char *
spanprof_syslog(server_rec *s, const char *level, char *buf, apr_size_t size)
{
    const char *name = s->error_fname, *facility, *tag = ap_server_argv0;
    apr_size_t  len, i, n = sizeof(spanprof_facilities)
                            / sizeof(spanprof_facilities[0]);
    int         value = LOG_LOCAL7;

    if (s->error_log != NULL || name == NULL
        || strncasecmp(name, "syslog", 6) != 0)
    {
        return NULL;
    }
    facility = strchr(name, ':');
    if (facility != NULL) {
        facility++;
        tag = strchr(facility, ':');
        len = tag != NULL ? (apr_size_t) (tag - facility) : strlen(facility);
        tag = tag != NULL && tag[1] != '\0' ? tag + 1 : ap_server_argv0;
        if (len > 0) {
            for (i = 0; i < n; i++) {
                if (strncasecmp(facility, spanprof_facilities[i].name, len)
                    == 0)
                {
                    break;
                }
            }
            if (i == n) {
                return NULL;
            }
            value = spanprof_facilities[i].value;
        }
    }
    apr_snprintf(buf, size, "%s,%d,,unix:%s,%s", level, value >> 3,
                 _PATH_LOG, tag);
    return buf;
}

static apr_status_t
spanprof_exporter_spawn(server_rec *s)
{
    sp_exporter_launch      l;
    char                    exe[4096], to_syslog[1024];
    int                     pid, level;
    sp_shm                 *shm = spanprof_shm(s);
    spanprof_exporter_rec  *rec;

    if (shm == NULL) {
        return APR_EGENERAL;
    }
    if (sp_exporter_default_path(exe, sizeof(exe)) == 0
        || strlen(exe) >= sizeof(exe))
    {
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, s,
                     "spanprof: exporter executable not found, set "
                     SP_EXPORTER_PATH_ENV);
        return APR_EGENERAL;
    }
    memset(&l, 0, sizeof(l));
    l.path = exe;
    l.config = spanprof_main_conf(s)->config;
    l.server = "httpd";
    l.server_version = ap_get_server_description();
    l.server_exe = "/proc/self/exe";
    l.region_fd = shm->fd;
    l.log_fd = -1;          /* the parent's stderr is the error log,
                               unless that log is syslog */
    level = ap_get_server_module_loglevel(s, APLOG_MODULE_INDEX);
    l.log_level = level >= APLOG_NOTICE ? "info"
                  : level == APLOG_WARNING ? "warn"
                  : level == APLOG_ERR ? "error"
                  : "crit";
    l.syslog = spanprof_syslog(s, l.log_level, to_syslog,
                               sizeof(to_syslog));
    l.title = "spanprof-exporter: httpd";
    if (geteuid() == 0) {
        l.set_ids = true;
        l.uid = ap_unixd_config.user_id;
        l.gid = ap_unixd_config.group_id;
    }
    rec = calloc(1, sizeof(*rec));
    if (rec == NULL || sp_exporter_spawn(&l, &pid) != SP_OK) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, errno, s,
                     "spanprof: exporter \"%s\" could not be started", exe);
        free(rec);
        return APR_EGENERAL;
    }
    rec->proc.pid = pid;
    spanprof_exporter_stop_ms = sp_exporter_stop_ms(l.config);
    apr_proc_other_child_register(&rec->proc, spanprof_exporter_event, rec,
                                  NULL, spanprof_pconf);
    rec->next = *spanprof_exporters();
    *spanprof_exporters() = rec;
    spanprof_exporter = rec;
    sp_exporter_restarts_started(&spanprof_restarts,
                                 (uint64_t) apr_time_as_msec(apr_time_now()));
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                 "spanprof: exporter process %d started", pid);
    return APR_SUCCESS;
}

/*
 * What befalls an exporter. Its death: the current one's is followed by
 * another, now or after a delay; one asked to go (restart, stop) is only
 * forgotten. A restart: it is asked to go. APR calls with UNREGISTER from
 * within our own unregistering, on a record about to be freed, and when
 * pconf goes, on one the next configuration watches again.
 */
static void
spanprof_exporter_event(int reason, void *data, int status)
{
    spanprof_exporter_rec *rec = data;
    server_rec            *s = ap_server_conf;
    uint64_t               delay;
    pid_t                  pid = rec->proc.pid;
    int                    current = rec == spanprof_exporter;
    int                    wanted = current && !rec->stopping
                                    && !spanprof_generation_stopping;
    char                   next[128];
    spanprof_exporter_rec **link;

    switch (reason) {
    case APR_OC_REASON_DEATH:
    case APR_OC_REASON_LOST:
        apr_proc_other_child_unregister(rec);
        for (link = spanprof_exporters(); *link != NULL;
             link = &(*link)->next)
        {
            if (*link == rec) {
                *link = rec->next;
                break;
            }
        }
        free(rec);
        if (current) {
            spanprof_exporter = NULL;
        }
        if (!wanted) {
            break;
        }
        /* APR gives the exit code or the signal, without saying which.
         * Warn: what it held is lost, the next one goes on. */
        delay = sp_exporter_restarts_delay(&spanprof_restarts,
                    (uint64_t) apr_time_as_msec(apr_time_now()));
        apr_cpystrn(next, ", starting another", sizeof(next));
        if (delay > 0) {
            apr_snprintf(next, sizeof(next), " soon after it started, %u "
                         "times in a row, the next starts in %"
                         APR_UINT64_T_FMT " s", spanprof_restarts.quick_exits,
                         (apr_uint64_t) delay / 1000);
        }
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                     "spanprof: exporter process %" APR_PID_T_FMT
                     " exited (status %d)%s", pid, status, next);
        if (delay == 0) {
            (void) spanprof_exporter_spawn(s);
        } else {
            spanprof_restart_at = apr_time_now()
                                  + apr_time_from_msec(delay);
        }
        break;
    case APR_OC_REASON_RESTART:
        rec->stopping = 1;
        if (pid > 0) {
            kill(pid, SIGTERM);
        }
        break;
    default:
        break;
    }
}

/*
 * httpd exits: waits for the flush of every exporter not yet reaped, this
 * generation's and those of earlier ones, which a graceful restart asked
 * to go but did not wait for: one of them may still hold the region and
 * read what the workers wrote before the restart. A container's first
 * process, or a systemd unit with KillMode=mixed (Debian's
 * apache2.service), takes every process left with it: without the wait
 * the spans they held were lost. They flush at once, within one
 * exporter's stop.
 */
static void
spanprof_exporters_wait(void)
{
    pid_t                  pid;
    apr_uint64_t           end, now;
    spanprof_exporter_rec *rec;

    end = sp_monotonic_ms() + spanprof_exporter_stop_ms;
    for (rec = *spanprof_exporters(); rec != NULL; rec = rec->next) {
        pid = rec->proc.pid;
        now = sp_monotonic_ms();
        if (pid > 0 && !sp_exporter_wait_exit(pid, end > now ? end - now : 0))
        {
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, ap_server_conf,
                         "spanprof: exporter process %" APR_PID_T_FMT
                         " did not stop within %" APR_UINT64_T_FMT " ms, "
                         "what it still holds may be lost",
                         pid, spanprof_exporter_stop_ms);
        }
    }
}

/* Runs when pconf goes (restart, stop): the exporter of this generation
 * flushes and leaves; the next post_config starts a new one, and on a
 * stop httpd waits for it and for any left from earlier generations. */
static apr_status_t
spanprof_exporter_stop(void *data)
{
    pid_t pid;

    spanprof_generation_stopping = 1;
    if (spanprof_exporter != NULL) {
        spanprof_exporter->stopping = 1;
        pid = spanprof_exporter->proc.pid;
        if (pid > 0) {
            kill(pid, SIGTERM);
        }
    }
    spanprof_exporter = NULL;
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_EXITING) {
        spanprof_exporters_wait();
    }
    return APR_SUCCESS;
}

/*
 * A start the last exit put off. The parent's maintenance loop runs this
 * every ten seconds or so: delays come out a little longer than asked.
 */
static int
spanprof_monitor(apr_pool_t *p, server_rec *s)
{
    if (spanprof_restart_at == 0 || apr_time_now() < spanprof_restart_at
        || spanprof_exporter != NULL || spanprof_generation_stopping)
    {
        return DECLINED;
    }
    spanprof_restart_at = 0;
    (void) spanprof_exporter_spawn(s);
    return DECLINED;
}

static void
spanprof_start_exporter(apr_pool_t *pconf, server_rec *s)
{
    spanprof_exporter = NULL;
    spanprof_generation_stopping = 0;
    spanprof_restart_at = 0;
    spanprof_pconf = pconf;
    apr_pool_cleanup_register(pconf, NULL, spanprof_exporter_stop,
                              apr_pool_cleanup_null);
    (void) spanprof_exporter_spawn(s);
}

/* ---- children */

/* A thread's generator, when the thread ends. */
static void
spanprof_ids_free(void *ids)
{
    sp_idgen_destroy(ids);
}

static apr_status_t
spanprof_child_exit(void *data)
{
    /* The MPM joined the threads that served requests: each freed its
     * own generator; a thread left (none is, today) keeps its own. */
    if (spanprof_ids_keyed) {
        (void) pthread_key_delete(spanprof_ids_key);
        spanprof_ids_keyed = 0;
    }
    sp_sampler_destroy(spanprof_sampler);
    spanprof_sampler = NULL;
    if (spanprof_ring != NULL) {
        sp_region_release(spanprof_ring);
        spanprof_ring = NULL;
    }
    spanprof_active = 0;
    return APR_SUCCESS;
}

static void
spanprof_child_init(apr_pool_t *pchild, server_rec *s)
{
    sp_config          *c = spanprof_main_conf(s)->config;
    sp_shm             *shm;
    sp_sampler_options  o;
    sp_status           st;

    apr_pool_userdata_get((void **) &shm, SPANPROF_SHM_KEY,
                          s->process->pool);
    if (!sp_config_flag(c, SP_SETTING_ENABLED) || shm == NULL
        || shm->base == NULL
        || sp_region_attach(shm->base, shm->size, &spanprof_region) != SP_OK)
    {
        return;
    }
    spanprof_pid = (uint32_t) getpid();
    spanprof_ring = sp_region_claim(spanprof_region, spanprof_pid);
    spanprof_ids = sp_idgen_create();
    spanprof_ids_keyed = pthread_key_create(&spanprof_ids_key,
                                            spanprof_ids_free) == 0;
    if (spanprof_ring == NULL || spanprof_ids == NULL) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, s,
                     "spanprof: no ring left in the shared memory, nothing "
                     "is recorded by this child");
        spanprof_ring = NULL;
        return;
    }
    sp_entry_policy_from_config(c, &spanprof_policy);
    spanprof_active = 1;
    apr_pool_cleanup_register(pchild, NULL, spanprof_child_exit,
                              apr_pool_cleanup_null);

    memset(&o, 0, sizeof(o));
    if (sp_config_flag(c, SP_SETTING_SNAPSHOT_PROFILER_ENABLED)) {
        o.snapshot_interval_ms = (uint32_t) sp_config_integer(c,
            SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL);
    }
    if (sp_config_flag(c, SP_SETTING_PROFILER_ENABLED)) {
        o.continuous_interval_ms = (uint32_t) sp_config_integer(c,
            SP_SETTING_PROFILER_CALL_STACK_INTERVAL);
    }
    if (o.snapshot_interval_ms == 0 && o.continuous_interval_ms == 0) {
        return;
    }
    o.max_depth = (uint16_t) sp_config_integer(c,
        SP_SETTING_PROFILER_MAX_STACK_DEPTH);
    /* Wall clock: a request blocked on a backend is sampled too. */
    o.clock = SP_SAMPLER_CLOCK_WALL;
    /* A request is logged and freed with its last bucket, maybe by another
     * thread than the one that served it. */
    o.spans_end_anywhere = true;
    st = sp_sampler_create(&o, spanprof_ring, &spanprof_sampler);
    if (st == SP_OK) {
        st = sp_sampler_start(spanprof_sampler);
    }
    if (st != SP_OK) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                     "spanprof: %s, this child runs without profiling",
                     st == SP_ERR_SIGNAL_BUSY ? "another module owns SIGPROF"
                                              : "the sampler could not start");
        sp_sampler_destroy(spanprof_sampler);
        spanprof_sampler = NULL;
        return;
    }
    spanprof_continuous = o.continuous_interval_ms > 0;
}

/* ---- requests */

/* The request of the main chain a subrequest works for: the one running. */
static request_rec *
spanprof_top(request_rec *r)
{
    while (r->main != NULL) {
        r = r->main;
    }
    return r;
}

static request_rec *
spanprof_initial(request_rec *r)
{
    r = spanprof_top(r);
    while (r->prev != NULL) {
        r = r->prev;
    }
    return r;
}

/*
 * The client went away before the response was complete. Over HTTP/2 the
 * stream's own connection is marked aborted when the stream is done, which
 * may be before the request is logged: there it says nothing.
 */
static int
spanprof_client_gone(request_rec *r)
{
    return r->connection->aborted && r->proto_num < HTTP_VERSION(2, 0);
}

/* The request an internal redirect ended in: the one logged. */
static request_rec *
spanprof_final(request_rec *r)
{
    while (r->next != NULL) {
        r = r->next;
    }
    return r;
}

static spanprof_request *
spanprof_request_of(request_rec *r)
{
    return ap_get_module_config(spanprof_initial(r)->request_config,
                                &spanprof_module);
}

/*
 * httpd's internal dummy connection: to wake a child it told to exit
 * (prefork's idle-server maintenance, a graceful restart), httpd connects
 * to its own listener and sends "OPTIONS * HTTP/1.0" with the user agent
 * "<server version> (internal dummy connection)". No client made it: no
 * span (each was one, an OPTIONS * span per child told to exit).
 */
static APR_INLINE int
spanprof_dummy_connection(request_rec *r)
{
    static const char  mark[] = " (internal dummy connection)";
    const char        *ua;
    size_t             n;

    if (r->method_number != M_OPTIONS || r->uri == NULL
        || strcmp(r->uri, "*") != 0
        || strcmp(r->connection->client_ip, r->connection->local_ip) != 0)
    {
        return 0;
    }
    ua = apr_table_get(r->headers_in, "User-Agent");
    n = ua != NULL ? strlen(ua) : 0;
    return n >= sizeof(mark) - 1
           && strcmp(ua + n - (sizeof(mark) - 1), mark) == 0;
}

static APR_INLINE int
spanprof_conf_on(const spanprof_dir_conf *d)
{
    return d == NULL || d->enable != SPANPROF_OFF;
}

static int
spanprof_enabled_here(request_rec *r)
{
    return spanprof_conf_on(ap_get_module_config(r->per_dir_config,
                                                 &spanprof_module));
}

/*
 * The span's sampling ends, from whichever thread ends it: closed for
 * every thread, left on this one if it is the one that entered.
 */
static void
spanprof_stop_sampling(spanprof_request *sr)
{
    if (!sr->sampling) {
        return;
    }
    sr->sampling = 0;
    sp_sampler_span_close(spanprof_sampler, sr->entry.ctx.span_id);
    if (apr_os_thread_equal(sr->thread, apr_os_thread_current())) {
        sp_sampler_leave(spanprof_sampler);
    }
}

/* Our names, in spanprof_header_id's order; the key_checksum APR gives an
 * entry of each, and where a compare of the rest starts after it
 * (spanprof_note_header_sums). */
static const char *const spanprof_header_names[SPANPROF_H_COUNT] = {
    "traceparent", "tracestate", "baggage", "forwarded",
    "x-forwarded-proto", "x-forwarded-host", "host", "user-agent", "upgrade"
};
static apr_uint32_t spanprof_header_sums[SPANPROF_H_COUNT];
static apr_size_t   spanprof_header_rest[SPANPROF_H_COUNT];

/* The same names as HTTP/1.x clients usually write them (HTTP/2's are in
 * lower case, as above): a key spelled so is found by a compare of its
 * bytes, which costs less than one that ignores case (spanprof_entry_is).
 */
static const char *const spanprof_header_usual[SPANPROF_H_COUNT] = {
    "traceparent", "tracestate", "baggage", "Forwarded",
    "X-Forwarded-Proto", "X-Forwarded-Host", "Host", "User-Agent", "Upgrade"
};

/* Ours whose checksums have a top byte (their first letter, in either
 * case): count of them from first on. */
typedef struct {
    unsigned char  first;
    unsigned char  count;
} spanprof_letter;

static spanprof_letter spanprof_by_letter[256];

/*
 * APR's checksum of a table key (its first four bytes, in either case)
 * for each of our names, taken from APR itself: a table of them made once
 * in the parent, whose children inherit the sums. A checksum matches a
 * letter in either case and nothing else, so for a name whose first four
 * bytes are letters the compare starts after them; for another
 * (x-forwarded-*), at its start. Keys equal but for case have the same
 * checksum (APR's lookups rely on it), so its top byte sorts an entry by
 * its first letter without reading the key.
 */
static void
spanprof_note_header_sums(apr_pool_t *p)
{
    apr_table_t              *t = apr_table_make(p, SPANPROF_H_COUNT);
    const apr_table_entry_t  *e;
    const char               *name;
    spanprof_letter          *l;
    int                       i;

    for (i = 0; i < SPANPROF_H_COUNT; i++) {
        apr_table_addn(t, spanprof_header_names[i], "");
    }
    e = (const apr_table_entry_t *) apr_table_elts(t)->elts;
    for (i = 0; i < SPANPROF_H_COUNT; i++) {
        name = spanprof_header_names[i];
        spanprof_header_sums[i] = e[i].key_checksum;
        spanprof_header_rest[i] = apr_isalpha(name[0]) && apr_isalpha(name[1])
                                  && apr_isalpha(name[2])
                                  && apr_isalpha(name[3]) ? 4 : 0;
    }
    memset(spanprof_by_letter, 0, sizeof(spanprof_by_letter));
    for (i = SPANPROF_H_COUNT - 1; i >= 0; i--) {
        l = &spanprof_by_letter[spanprof_header_sums[i] >> 24];
        l->first = (unsigned char) i;
        l->count++;
    }
}

/*
 * Whether entry e's key is our name id, in any case, as apr_table_get()
 * compares: its checksum first, then what the checksum does not cover,
 * first as the name is usually spelled in the key's case (its first
 * letter's): a User-Agent's strcasecmp() cost ~40 instructions, a
 * strcmp() ~20 (callgrind).
 */
static APR_INLINE int
spanprof_entry_is(const apr_table_entry_t *e, int id)
{
    apr_size_t   from = spanprof_header_rest[id];
    const char  *rest = spanprof_header_names[id] + from;
    const char  *usual;

    if (e->key_checksum != spanprof_header_sums[id]) {
        return 0;
    }
    if (rest[0] == '\0') {
        return e->key[from] == '\0';
    }
    usual = (e->key[0] >= 'a' ? spanprof_header_names[id]
                              : spanprof_header_usual[id]) + from;
    return strcmp(e->key + from, usual) == 0
           || strcasecmp(e->key + from, rest) == 0;
}

/*
 * The first value of each of our names in t, as apr_table_get() would
 * give it, in one walk, as the request begins: an apr_table_get() each
 * cost ~25 instructions for a name found early and ~55 for one a request
 * does not have, whose search passes every entry (callgrind, 9 names a
 * request). The first letter turns away nearly every other header, by a
 * table (a switch on it cost ~20 instructions more a request), taken from
 * the entry's checksum, not its key (~3 instructions fewer a header).
 * Read here, the values are the client's, whatever a module (mod_headers)
 * makes of the table later.
 */
static APR_INLINE __attribute__((always_inline)) void
spanprof_find_headers(const apr_table_t *t, const char **found)
{
    const apr_array_header_t  *arr = apr_table_elts(t);
    const apr_table_entry_t   *e = (const apr_table_entry_t *) arr->elts;
    const spanprof_letter     *range;
    int                        i, id, last;

    for (i = 0; i < arr->nelts; i++, e++) {
        /* ours that start with the letter: adjacent in spanprof_header_id */
        range = &spanprof_by_letter[e->key_checksum >> 24];
        if (range->count == 0) {
            continue;
        }
        id = range->first;
        last = id + range->count - 1;
        for (; id <= last; id++) {
            if (spanprof_entry_is(e, id)) {
                if (found[id] == NULL) {
                    found[id] = e->val;
                }
                break;
            }
        }
    }
}

/* A header the request came with, and its length; NULL and 0 when not. */
static const char *
spanprof_header(const spanprof_request *sr, spanprof_header_id id,
                size_t *len)
{
    const char  *value = sr->header[id];

    *len = value != NULL ? strlen(value) : 0;
    return value;
}

/* A string's length, 0 for none. */
static APR_INLINE size_t
spanprof_len(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

/*
 * url.path as the client sent it, and its length; NULL: none. httpd
 * decodes and normalizes r->parsed_uri.path in place. An absolute-form
 * target's path follows its authority; the query and a fragment end it,
 * as apr_uri_parse() says. *query and *query_len: r->parsed_uri.query and
 * its length, made the query as the client sent it where they are not.
 */
static const char *
spanprof_target_path(request_rec *r, const char **query, size_t *query_len,
                     size_t *len)
{
    const char *path = r->unparsed_uri, *scheme_end;
    size_t      n, cut;

    *len = 0;
    if (path == NULL) {
        return NULL;
    }
    /*
     * An origin-form target, which apr_uri_parse() parsed as a path (not
     * CONNECT's host:port, which has none): the query it cut after the
     * first '?' runs to the end when there is no fragment, so the path
     * is the rest. A strcspn() for every request was ~40 instructions
     * more (callgrind). r->args is that query: httpd's modules replace
     * it rather than change it, but one that unescaped it in place made
     * it shorter than what the client sent, and its length could land on
     * a later '?' ("/a?b?%41", the query made "b?A": the path was "/a?b"):
     * so the tail must be the query, byte for byte, and a query that is
     * not falls to the search.
     */
    if (path[0] == '/' && r->parsed_uri.path != NULL
        && r->parsed_uri.fragment == NULL)
    {
        n = strlen(path);
        if (*query == NULL) {
            *len = n;
            return path;
        }
        cut = *query_len + 1;
        if (cut <= n && path[n - cut] == '?'
            && memcmp(path + n - *query_len, *query, *query_len) == 0)
        {
            *len = n - cut;
            return path;
        }
    }
    if (path[0] != '/' && r->parsed_uri.hostname != NULL) {
        scheme_end = strstr(path, "://");
        if (scheme_end == NULL) {
            return NULL;
        }
        path = scheme_end + 3;
        path += strcspn(path, "/?#");
    }
    *len = strcspn(path, "?#");
    if (*query != NULL && path[*len] == '?') {
        *query = path + *len + 1;
        *query_len = strcspn(*query, "#");
    }
    return path;
}

/*
 * The connection's spanprof_conn, made as it begins (pre_connection) or
 * at its first request; NULL for a mod_http2 stream's. Inlined: called
 * from two places, gcc left it out of line (~9 instructions more a
 * request, callgrind).
 */
static APR_INLINE __attribute__((always_inline)) spanprof_conn *
spanprof_conn_of(conn_rec *c)
{
    spanprof_conn *sc;

    if (c->master != NULL) {
        return NULL;
    }
    sc = ap_get_module_config(c->conn_config, &spanprof_module);
    if (sc == NULL) {
        sc = apr_pcalloc(c->pool, sizeof(*sc));
        ap_set_module_config(c->conn_config, &spanprof_module, sc);
    }
    return sc;
}

/*
 * The length of c->client_ip, taken once per connection for the string
 * httpd made as it accepted it (spanprof_pre_connection), which nothing
 * writes again (mod_remoteip names another client in r->useragent_ip).
 * Its strlen() for every request: -8 instructions a request (callgrind).
 * Another string is measured: a module that sets c->client_ip for a
 * request (in the request's pool, or in a buffer of its own) may give
 * one at the address an earlier request's had, with other bytes.
 */
static APR_INLINE size_t
spanprof_peer_len(conn_rec *c, spanprof_conn *sc)
{
    if (sc != NULL && sc->peer == c->client_ip) {
        return sc->peer_len;
    }
    return spanprof_len(c->client_ip);
}

/*
 * The connection's sp_entry_cache (sp_entry.h: the attributes of its
 * spans its later requests repeat), made at its second span, so that a
 * connection that serves one request pays only the mark: from then on
 * each span copies six attributes instead of writing them. NULL when
 * there is none.
 */
static sp_entry_cache *
spanprof_conn_cache(conn_rec *c, spanprof_conn *sc)
{
    if (sc == NULL) {
        return NULL;
    }
    if (sc->cache == NULL) {
        if (!sc->spans) {
            sc->spans = 1;
            return NULL;
        }
        sc->cache = apr_palloc(c->pool, sizeof(sp_entry_cache));
        sp_entry_cache_init(sc->cache);
    }
    return sc->cache;
}

/* spanprof_record() sets each field of sp_entry_http by name, without
 * clearing it first: a field added to it must be named there. */
_Static_assert(sizeof(sp_entry_http) == 33 * sizeof(void *)
               && offsetof(sp_entry_http, cache) + sizeof(void *)
                  == sizeof(sp_entry_http),
               "spanprof_record() must set every field of sp_entry_http");

/*
 * The span record of sr, whose initial request is logged, in a scope that
 * is on; last is the request it ended in, d our configuration there.
 * Inlined into its one caller: gcc left it out of line (~25 instructions
 * more a request, callgrind).
 */
static APR_INLINE __attribute__((always_inline)) void
spanprof_record(spanprof_request *sr, request_rec *last,
                const spanprof_dir_conf *d)
{
    request_rec       *r = sr->initial;
    conn_rec          *c = r->connection;
    const char        *version;
    sp_entry_http      h;

    if (spanprof_ring == NULL
        || (sr->upgrading && r->status == HTTP_SWITCHING_PROTOCOLS))
    {
        return;
    }

    /*
     * Each field set where it is found, in h itself: found into locals
     * and copied into h at the end (an initializer naming each field),
     * the values found before the calls between were kept on the stack
     * and copied again (~25 instructions a request, callgrind); cleared
     * first, h took a rep stos (~35). The last fields, where a field
     * added to sp_entry_http could hide in the padding after pid, are
     * cleared; one added anywhere else changes the size: name it below.
     */
    memset((char *) &h + offsetof(sp_entry_http, status), 0,
           sizeof(h) - offsetof(sp_entry_http, status));
    h.method = r->method;
    h.forwarded = sr->header[SPANPROF_H_FORWARDED];
    h.forwarded_proto = sr->header[SPANPROF_H_X_FORWARDED_PROTO];
    h.forwarded_host = sr->header[SPANPROF_H_X_FORWARDED_HOST];
    /* Without an authority (HTTP/1.0 with no Host): the server's name and
     * the port the request came in on. Measured by the span only then:
     * its strlen() for every request, -18 instructions a request
     * (callgrind). */
    h.server_address = r->hostname;
    h.server_address_len = SP_ENTRY_TO_NUL;
    h.server_port = c->local_addr != NULL ? c->local_addr->port : 0;
    h.client_address = r->useragent_ip;
    h.peer_address = c->client_ip;
    h.user_agent = sr->header[SPANPROF_H_USER_AGENT];
    h.pid = spanprof_pid;
    h.end_ns = sr->end_ns;

    /* The <Location> the final request ended in (the last httpd merged),
     * else its handler. A content type in the handler's place
     * ("httpd/unix-directory", "application/x-httpd-php") names a file's
     * type, not a route. */
    if (d != NULL && d->route != NULL) {
        h.route = d->route;
        h.route_len = d->route_len;
    } else if (last->handler != NULL
               && strcmp(last->handler, "default-handler")
               && strchr(last->handler, '/') == NULL)
    {
        h.route = last->handler;
        h.route_len = strlen(last->handler);
    } else {
        h.route = NULL;
        h.route_len = 0;
    }
    h.query = r->parsed_uri.query;
    h.query_len = spanprof_len(h.query);
    h.path = spanprof_target_path(r, &h.query, &h.query_len, &h.path_len);
    /* An absolute-form target names the server in the request line; else
     * Host, which mod_http2 makes of :authority. r->hostname has lost the
     * port. */
    h.authority = r->parsed_uri.hostname != NULL ? r->parsed_uri.hostinfo
                  : sr->header[SPANPROF_H_HOST];
    /* The same string where no mod_remoteip named another client. */
    h.peer_address_len = spanprof_peer_len(c, sr->conn);
    h.client_address_len = r->useragent_ip == c->client_ip
                           ? h.peer_address_len
                           : spanprof_len(r->useragent_ip);
    h.scheme = ap_http_scheme(r);
    /* HTTP/2 is mod_http2's streams, on their secondary connections: a
     * request line may claim "HTTP/2.0" or "HTTP/3.0" too, and httpd
     * serves it over HTTP/1.1. */
    version = r->proto_num >= HTTP_VERSION(2, 0) && c->master != NULL ? "2"
              : r->proto_num == HTTP_VERSION(1, 0) ? "1.0"
              : r->proto_num == HTTP_VERSION(0, 9) ? "0.9"
              : "1.1";
    /* httpd's default, 1.0, is also what a request line it cut short
     * (414) has: it read no version there, and the span says none. The
     * line is searched only when the request failed, not for every
     * HTTP/1.0 client's (ab's). */
    if (r->proto_num == HTTP_VERSION(1, 0) && last->status >= 400
        && (r->the_request == NULL || strstr(r->the_request, " HTTP/") == NULL))
    {
        version = NULL;
    }
    h.protocol_version = version;
    h.protocol_version_len = version == NULL ? 0
                             : version[1] == '\0' ? 1 : 3;
    /* The status logged (%>s); no log hook changes it or the connection.
     * A 101's response was whole when it went: the tunnel after it (a
     * proxied WebSocket) ends when either side closes, and mod_proxy
     * marks the connection aborted when a write to a client that closed
     * fails, as one does while the backend still sends. Not a client
     * that gave up on a response. */
    h.status = last->status < 400 && spanprof_client_gone(r)
               && last->status != HTTP_SWITCHING_PROTOCOLS ? 499
               : last->status;
    h.method_len = spanprof_len(h.method);
    h.scheme_len = spanprof_len(h.scheme);
    h.forwarded_len = spanprof_len(h.forwarded);
    h.forwarded_proto_len = spanprof_len(h.forwarded_proto);
    h.forwarded_host_len = spanprof_len(h.forwarded_host);
    h.authority_len = spanprof_len(h.authority);
    h.user_agent_len = spanprof_len(h.user_agent);
    h.cache = spanprof_conn_cache(c, sr->conn);

    (void) sp_entry_finish(&spanprof_policy, &sr->entry, &h, spanprof_ring);
}

/* sr's span is over: its sampling ends, whether or not it is recorded.
 * Most spans are not sampled: no call for them. */
static APR_INLINE void
spanprof_close(spanprof_request *sr)
{
    if (sr->stream_end != NULL) {
        sr->stream_end->ctx = NULL;     /* the filter outlives the request */
    }
    if (sr->sampling) {
        spanprof_stop_sampling(sr);
    }
}

/* Once its span is written, sr goes back to its connection's spares: the
 * request's pool goes right after its log hooks, and no hook of ours
 * reads sr after them. */
static APR_INLINE void
spanprof_spare(spanprof_request *sr)
{
    spanprof_conn *sc = sr->conn;

    sr->finished = 1;
    if (sc != NULL) {
        sr->next = sc->spare;
        sc->spare = sr;
    }
}

/*
 * The variables put into env, all with the same function: addn or setn.
 * The values are in the initial request's pool: the table keeps
 * pointers.
 */
static APR_INLINE void
spanprof_put_env(apr_table_t *env, const spanprof_request *sr,
                 void (*put)(apr_table_t *, const char *, const char *))
{
    put(env, spanprof_env_names[0], sr->trace_id);
    put(env, spanprof_env_names[1], sr->span_id);
    put(env, spanprof_env_names[2], sr->traceparent);
    put(env, spanprof_env_names[3], sr->baggage ? sr->baggage : "");
    put(env, spanprof_env_names[4],
        sr->entry.selection.profiled ? "1" : "0");
}

/*
 * The variables of a request whose table has none of them: added, as
 * setting them would compare each name with every "SPANPROF_" one before
 * it (~500 instructions a request, callgrind). The five entries are
 * appended at once from spanprof_env_template, as apr_table_addn() would
 * have made them (what APR_OVERLAP_TABLES_ADD says it does), then given
 * the request's values: five apr_table_addn() cost ~300 instructions a
 * request, this ~100 (callgrind).
 */
static APR_INLINE void
spanprof_add_env(request_rec *r, const spanprof_request *sr)
{
#ifdef APR_OVERLAP_TABLES_ADD
    apr_table_t               *env = r->subprocess_env;
    const apr_array_header_t  *arr = apr_table_elts(env);
    apr_table_entry_t         *e;
    int                        n = arr->nelts;

    apr_table_overlap(env, spanprof_env_template, APR_OVERLAP_TABLES_ADD);
    e = (apr_table_entry_t *) arr->elts + n;
    e[0].val = (char *) sr->trace_id;
    e[1].val = (char *) sr->span_id;
    e[2].val = (char *) sr->traceparent;
    e[3].val = (char *) (sr->baggage ? sr->baggage : "");
    e[4].val = sr->entry.selection.profiled ? "1" : "0";
#else
    spanprof_put_env(r->subprocess_env, sr, apr_table_addn);
#endif
}

/* The variables set to sr's values; sr NULL: none of them. */
static void
spanprof_set_env(request_rec *r, spanprof_request *sr)
{
    int i;

    if (sr == NULL) {
        for (i = 0; i < (int) SPANPROF_ENV_COUNT; i++) {
            apr_table_unset(r->subprocess_env, spanprof_env_names[i]);
        }
        return;
    }
    /* An internal redirect's table has ours renamed REDIRECT_*; a module
     * may have set one (SetEnv). */
    if (apr_table_get(r->subprocess_env, spanprof_env_names[0]) == NULL) {
        spanprof_add_env(r, sr);
        return;
    }
    spanprof_put_env(r->subprocess_env, sr, apr_table_setn);
}

/*
 * An HTTP/1.1 request asking to change protocols that the server will
 * switch (h2c: core's upgrade handler, mod_http2): the new connection
 * serves it again, as its first stream, with the headers it came with.
 * That one is the client's request and gets the entry span; this one gets
 * none, lends it no parent, and its thread, which goes on to run the
 * whole HTTP/2 session, is not sampled for it. The same test as core's;
 * upgrade is the Upgrade header the request came with.
 */
static int
spanprof_switches_protocol(request_rec *r, const char *upgrade)
{
    conn_rec           *c = r->connection;
    const char         *connection, *protocol;
    apr_array_header_t *offers = NULL;

    if (upgrade == NULL || *upgrade == '\0' || c->master != NULL) {
        return 0;
    }
    connection = apr_table_get(r->headers_in, "Connection");
    if (connection == NULL || !ap_find_token(r->pool, connection, "upgrade")
        || ap_parse_token_list_strict(r->pool, upgrade, &offers, 0) != NULL
        || offers == NULL || offers->nelts == 0)
    {
        return 0;
    }
    protocol = ap_select_protocol(c, r, NULL, offers);
    return protocol != NULL && strcmp(protocol, ap_get_protocol(c)) != 0;
}

/*
 * A value sp_entry_begin gave, kept as long as the request: one in the
 * scratch is copied into the pool; one outside it is a constant (the
 * baggage member the snapshot profiler sends on for a request that came
 * without baggage, sp_entry.h) and kept as it is. Copied too, it cost
 * ~45 instructions a request with the snapshot profiler on (callgrind).
 */
static APR_INLINE const char *
spanprof_keep(apr_pool_t *p, const char *v, size_t len, const char *scratch)
{
    if (v == NULL
        || (uintptr_t) v - (uintptr_t) scratch >= SP_ENTRY_SCRATCH_SIZE)
    {
        return v;
    }
    return apr_pstrmemdup(p, v, len);
}

/*
 * New ids for a span begun on this thread. An sp_idgen is not thread-safe
 * (sp_ids.h): the child's one, shared by its threads, gave two requests
 * begun at the same instant the same trace and span ids (both threads
 * read the state before either wrote it back: ~20 in 40,000 requests of
 * 16 clients, t/httpd_thread_ids.t). Each thread draws from its own, made
 * from the kernel at its first span and freed when it ends; a thread that
 * cannot make one (no memory) draws from the child's, one at a time.
 */
static APR_INLINE __attribute__((always_inline)) void
spanprof_begin_entry(sp_entry_headers *in, char *scratch, size_t size,
                     sp_entry *out)
{
    sp_idgen *ids = spanprof_ids_own;

    if (ids == NULL && spanprof_ids_keyed && (ids = sp_idgen_create()) != NULL)
    {
        if (pthread_setspecific(spanprof_ids_key, ids) != 0) {
            sp_idgen_destroy(ids);
            ids = NULL;
        }
        spanprof_ids_own = ids;
    }
    if (ids != NULL) {
        sp_entry_begin(&spanprof_policy, ids, in, scratch, size, out);
        return;
    }
    pthread_mutex_lock(&spanprof_ids_lock);
    sp_entry_begin(&spanprof_policy, spanprof_ids, in, scratch, size, out);
    pthread_mutex_unlock(&spanprof_ids_lock);
}

/* What spanprof_begin clears of a record: from sampling to the end, in
 * two pieces. */
#define SPANPROF_REST \
    (sizeof(spanprof_request) - offsetof(spanprof_request, sampling))
_Static_assert(SPANPROF_REST <= 128,
               "spanprof_begin clears a record's rest in two pieces");

/*
 * The entry span of an initial request, kept in its request_config until
 * httpd logs the request (spanprof_log_transaction). Inline in its two
 * callers, with what it calls once (spanprof_find_headers,
 * spanprof_begin_entry): out of line, gcc kept each apart, and the
 * calls, their frames and the registers each saved cost ~32 instructions
 * a request more (callgrind). The rare one, spanprof_log_unusual, has a
 * copy.
 */
static APR_INLINE __attribute__((always_inline)) spanprof_request *
spanprof_begin(request_rec *r)
{
    char              scratch[SP_ENTRY_SCRATCH_SIZE];
    sp_entry_headers  in;
    spanprof_request *sr;
    spanprof_conn    *sc;

    char             *rest;

    /* Not in the request's pool: its 384 bytes there moved where httpd's
     * later allocations fall, and glibc's strcmp() of them in the
     * location and directory walks took a slower way (~77 instructions a
     * request). Taken from the connection's spares, the walks cost what
     * they do without spanprof: -15 a request in the child (callgrind). */
    sc = spanprof_conn_of(r->connection);
    if (sc != NULL && sc->spare != NULL) {
        sr = sc->spare;
        sc->spare = sr->next;
    } else {
        sr = apr_palloc(sc != NULL ? r->connection->pool : r->pool,
                        sizeof(*sr));
    }
    sr->conn = sc;
    /* sp_entry_begin sets the whole entry and the fields before sampling
     * are set below: not all of the record is cleared (~40 instructions a
     * request, callgrind). The rest is cleared in two pieces of at most 64
     * bytes, which gcc clears with vector stores of a zeroed register: a
     * memset of it all was a rep stos (~10 instructions more), a copy of
     * a static array of zeros a vector load for each store (~7 more). */
    rest = (char *) sr + offsetof(spanprof_request, sampling);
    memset(rest, 0, SPANPROF_REST < 64 ? SPANPROF_REST : 64);
    if (SPANPROF_REST > 64) {
        memset(rest + 64, 0, SPANPROF_REST - 64);
    }
    spanprof_find_headers(r->headers_in, sr->header);
    memset(&in, 0, sizeof(in));
    in.traceparent = spanprof_header(sr, SPANPROF_H_TRACEPARENT,
                                     &in.traceparent_len);
    in.tracestate = spanprof_header(sr, SPANPROF_H_TRACESTATE,
                                    &in.tracestate_len);
    in.baggage = spanprof_header(sr, SPANPROF_H_BAGGAGE, &in.baggage_len);

    spanprof_begin_entry(&in, scratch, sizeof(scratch), &sr->entry);
    sr->initial = r;
    sr->traceparent = sr->entry.traceparent;   /* sr lasts as the request */
    /* The ids as the variables show them are in the traceparent already,
     * in the same lower-case hex: copied, not formatted again (~75
     * instructions, callgrind). */
    memcpy(sr->trace_id, sr->traceparent + SPANPROF_TP_TRACE_ID,
           2 * SP_TRACE_ID_SIZE);
    sr->trace_id[2 * SP_TRACE_ID_SIZE] = '\0';
    memcpy(sr->span_id, sr->traceparent + SPANPROF_TP_SPAN_ID,
           2 * SP_SPAN_ID_SIZE);
    sr->span_id[2 * SP_SPAN_ID_SIZE] = '\0';
    sr->tracestate = spanprof_keep(r->pool, sr->entry.tracestate,
                                   sr->entry.tracestate_len, scratch);
    sr->baggage = spanprof_keep(r->pool, sr->entry.baggage,
                                sr->entry.baggage_len, scratch);
    sr->entry.tracestate = sr->tracestate;
    sr->entry.baggage = sr->baggage;
    ap_set_module_config(r->request_config, &spanprof_module, sr);
    return sr;
}

/* The initial request is about to be switched (h2c): it is no span. */
static int
spanprof_upgrade(request_rec *r, spanprof_request *sr)
{
    if (sr->header[SPANPROF_H_UPGRADE] == NULL || r != sr->initial
        || !spanprof_switches_protocol(r, sr->header[SPANPROF_H_UPGRADE]))
    {
        return 0;
    }
    sr->upgrading = 1;
    spanprof_set_env(r, NULL);
    spanprof_stop_sampling(sr);
    return 1;
}

/*
 * The threaded MPMs block every signal in the threads they make after
 * child_init: without this, continuous profiling (SIGPROF from the
 * sampler's thread) reached none of a worker or event child's threads.
 * Where a thread starts work, it takes the sampler's signal from then on
 * (once; a check of a thread-local flag after that).
 */
static int
spanprof_pre_connection(conn_rec *c, void *csd)
{
    spanprof_conn *sc;

    sp_sampler_admit(spanprof_sampler);
    /* The peer's address as httpd made it (spanprof_peer_len). */
    if (spanprof_active) {
        sc = spanprof_conn_of(c);
        if (sc != NULL) {
            sc->peer = c->client_ip;
            sc->peer_len = spanprof_len(c->client_ip);
        }
    }
    return OK;
}

/*
 * The event MPM lets go of a connection on the thread that served it: its
 * response's last bytes left to write completion, or to wait for its next
 * request. The thread goes back to wait for work while the span lives on
 * until the request is logged: it kept the span's ids, and was sampled
 * idle under it (wall clock), and whatever it served meanwhile (another
 * connection's handshake, a lingering close) carried them too. Prefork
 * and worker never call this: a connection stays on its thread.
 */
static void
spanprof_suspend_connection(conn_rec *c, request_rec *r)
{
    sp_sampler_leave(spanprof_sampler);
}

/*
 * This thread samples for sr's span, if it is to be sampled: as the
 * request begins, and again where a scope that was off before its final
 * one (an internal redirect's) stopped it. A recorded request that is not
 * profiled: its thread's continuous samples carry its ids too (SPEC 4),
 * until it ends.
 */
static APR_INLINE __attribute__((always_inline)) void
spanprof_start_sampling(spanprof_request *sr)
{
    if ((sr->entry.selection.profiled
            || (spanprof_continuous && sr->entry.recorded))
        && sp_sampler_span_open(spanprof_sampler, sr->entry.ctx.span_id)
           == SP_OK)
    {
        sr->thread = apr_os_thread_current();
        sr->sampling = 1;
        if (sr->entry.selection.profiled) {
            sp_sampler_enter(spanprof_sampler, sr->entry.ctx.trace_id,
                             sr->entry.ctx.span_id);
        } else {
            sp_sampler_enter_unselected(spanprof_sampler,
                                        sr->entry.ctx.trace_id,
                                        sr->entry.ctx.span_id);
        }
    }
}

static int
spanprof_post_read_request(request_rec *r)
{
    spanprof_request *sr;

    /* A thread that has served no connection of its own yet (event MPM:
     * a request of a connection another thread accepted). Here and below
     * the sampler's calls are not made without one (tracing only). */
    if (spanprof_sampler != NULL) {
        sp_sampler_admit(spanprof_sampler);
    }

    /* Where a scope inside turns it on, the request begins as any; the
     * scope it ends in decides (fixups, spanprof_log_transaction). */
    if (!spanprof_active || r->main != NULL || r->prev != NULL
        || (!spanprof_on_inside && !spanprof_enabled_here(r))
        || spanprof_dummy_connection(r))
    {
        return DECLINED;
    }
    sr = spanprof_begin(r);
    /* Here, not only in fixups: a response decided before them (a rewrite
     * to 503) is logged with its ids too. The table was made with the
     * request and this hook runs first: it has none of ours yet, no need
     * to look (~30 instructions a request, callgrind). */
    spanprof_add_env(r, sr);
    /* A connection filter: the EOR goes to the connection's filters. */
    if (r->connection->master != NULL) {
        sr->stream_end = ap_add_output_filter_handle(
            spanprof_stream_end_handle, sr, NULL, r->connection);
        if (sr->stream_end != NULL) {
            apr_pool_cleanup_register(r->pool, sr->stream_end,
                                      spanprof_stream_end_forget,
                                      apr_pool_cleanup_null);
        }
    }
    /*
     * Core switches an "OPTIONS *" (the upgrade RFC 7540 3.2 suggests
     * where the first request should not wait) in its map_to_storage
     * hook, which ends the request before any fixups: judged here, as it
     * begins. Else it was a second span beside its stream's, as long as
     * the whole HTTP/2 session its thread then runs, and sampled all that
     * time. Judged in a map_to_storage hook of ours, just before core's,
     * it cost every request ~13 instructions (callgrind).
     */
    if (sr->header[SPANPROF_H_UPGRADE] != NULL
        && r->method_number == M_OPTIONS && r->uri != NULL
        && strcmp(r->uri, "*") == 0 && spanprof_upgrade(r, sr))
    {
        return DECLINED;
    }
    if (spanprof_sampler == NULL) {
        return DECLINED;
    }

    /* This thread may still carry a span whose request is not logged yet
     * (its last bucket waits for write completion): none of that one's. */
    sp_sampler_leave(spanprof_sampler);
    spanprof_start_sampling(sr);
    return DECLINED;
}

/*
 * The stream's filter, which outlives the request, forgets sr with the
 * request's pool: the log hook does as it ends the span, but a request
 * whose pool goes unlogged (none in stock httpd) would leave it sr's
 * freed memory. HTTP/2 streams only: HTTP/1.x requests pay nothing.
 */
static apr_status_t
spanprof_stream_end_forget(void *data)
{
    ap_filter_t *f = data;

    f->ctx = NULL;
    return APR_SUCCESS;
}

/*
 * An HTTP/2 stream's request ends on its secondary connection when its
 * EOR bucket passes, on the worker thread that served it. mod_http2 keeps
 * that bucket, and so logs the request (where its span ends) and frees
 * its pool, only when the main connection next purges finished streams:
 * with another stream of the session still running, seconds later.
 * Until then the span lasted seconds it did not, and the worker, waiting
 * idle for its next stream, was sampled under it at the snapshot
 * interval.
 */
static apr_status_t
spanprof_stream_end_filter(ap_filter_t *f, apr_bucket_brigade *bb)
{
    spanprof_request *sr = f->ctx;
    apr_bucket       *b;

    if (sr == NULL) {
        return ap_pass_brigade(f->next, bb);
    }
    for (b = APR_BRIGADE_FIRST(bb); b != APR_BRIGADE_SENTINEL(bb);
         b = APR_BUCKET_NEXT(b))
    {
        if (AP_BUCKET_IS_EOR(b)) {
            /* Sampling stops before the end is read, as in the log hook:
             * a thread preempted between the two took a sample, named
             * the span, as it ran again, after that end. */
            spanprof_stop_sampling(sr);
            sr->end_ns = sp_realtime_ns();
            break;
        }
    }
    return ap_pass_brigade(f->next, bb);
}

/* Header name of t set to value, or removed when there is none. */
static void
spanprof_put_header(apr_table_t *t, const char *name, const char *value)
{
    if (value != NULL) {
        apr_table_setn(t, name, value);
    } else {
        apr_table_unset(t, name);
    }
}

/*
 * The trace headers mod_proxy and CGI pass on, as the propagators have
 * them, set to these values (NULL: removed). The values live in the
 * initial request's pool, as long as any request made from it.
 * tracestate first: the table compares a name with strcasecmp only to
 * the entries that start with the same four letters, and traceparent,
 * once added, would be one of them (~95 instructions a request,
 * callgrind). Two different names, so the table ends the same in either
 * order.
 */
static APR_INLINE void
spanprof_put_trace_headers(request_rec *r, const char *traceparent,
                           const char *tracestate, const char *baggage)
{
    if (spanprof_policy.propagators & SP_PROPAGATOR_TRACECONTEXT) {
        spanprof_put_header(r->headers_in, "tracestate", tracestate);
        spanprof_put_header(r->headers_in, "traceparent", traceparent);
    }
    if (spanprof_policy.propagators & SP_PROPAGATOR_BAGGAGE) {
        spanprof_put_header(r->headers_in, "baggage", baggage);
    }
}

/* Before the handler of every (redirected) request: headers for mod_proxy
 * and, where an internal redirect renamed them, the variables again. */
static int
spanprof_fixups(request_rec *r)
{
    spanprof_request *sr = spanprof_request_of(r);

    if (sr == NULL) {
        return DECLINED;
    }
    /* Only now is the scope known: off there means no ids for the log and
     * no profiling, though post_read_request began both. A subrequest's
     * scope is not the span's (the one its initial request ends in is):
     * one off (an include of a <Location> that is off) ended the page's
     * sampling with the rest of its work to come. One that is on in a
     * page that is off would send a backend the parent of a span never
     * exported: it is off too. */
    if (!spanprof_enabled_here(r)
        || (r->main != NULL && !spanprof_enabled_here(spanprof_top(r))))
    {
        spanprof_set_env(r, NULL);
        if (r->main == NULL) {
            spanprof_stop_sampling(sr);
        }
        /* A request before it in its chain (one an internal redirect or
         * ErrorDocument left) put ours into the table they share: the
         * client's go back, or mod_proxy would send the parent of a span
         * that is never exported. */
        if (sr->injected) {
            spanprof_put_trace_headers(r, sr->header[SPANPROF_H_TRACEPARENT],
                                       sr->header[SPANPROF_H_TRACESTATE],
                                       sr->header[SPANPROF_H_BAGGAGE]);
        }
        return DECLINED;
    }
    /*
     * Core's handler, which runs first, is about to switch the connection
     * (h2c): the requests of the new protocol carry the client's headers
     * and are the spans; this one's thread runs the whole session. Only
     * here: a response decided before the handler (a 403, a redirect) goes
     * out over HTTP/1.1 and is this request's span.
     */
    if (sr->header[SPANPROF_H_UPGRADE] != NULL && spanprof_upgrade(r, sr)) {
        return DECLINED;
    }
    spanprof_put_trace_headers(r, sr->traceparent, sr->tracestate,
                               sr->baggage);
    sr->injected = spanprof_policy.propagators != 0;
    if (r->prev != NULL) {
        spanprof_set_env(r, sr);
        /* The final scope decides, and a request before this one in its
         * chain, in a scope that is off (a vhost's whose ErrorDocument is
         * on), stopped the sampling: a selected span, exported, had none
         * of the time its ErrorDocument waited for a backend. */
        if (!sr->sampling && r->main == NULL && spanprof_sampler != NULL) {
            spanprof_start_sampling(sr);
        }
    }
    return DECLINED;
}

/*
 * The sampler wants polling now and then (object table, drop warnings).
 * Children have no timer of their own, so at most one request thread a
 * second does it, on its way out; an idle child has nothing to report.
 * Not inline: the log hook then keeps no registers where there is no
 * sampler (spanprof_log_request).
 */
static __attribute__((noinline)) void
spanprof_poll(request_rec *r)
{
    apr_uint32_t  now, last;
    uint64_t      dropped;

    now = (apr_uint32_t) apr_time_sec(r->request_time);
    last = apr_atomic_read32(&spanprof_polled_at);
    if (now == last
        || apr_atomic_cas32(&spanprof_polled_at, now, last) != last)
    {
        return;
    }
    if (apr_atomic_cas32(&spanprof_polling, 1, 0) != 0) {
        return;
    }
    dropped = sp_sampler_poll(spanprof_sampler);
    apr_atomic_set32(&spanprof_polling, 0);
    if (dropped > 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, r->server,
                     "spanprof: %" APR_UINT64_T_FMT " samples dropped, the "
                     "ring was full (the exporter is not keeping up)",
                     (apr_uint64_t) dropped);
    }
}

/*
 * Our configuration for a request httpd never mapped (no translate_name
 * gave it a file name): one a quick handler served, mod_cache's cached
 * response with CacheQuickHandler On (the default), or one refused
 * before. Its per_dir_config is still its server's defaults: a cached
 * response in a <Location> with "Spanprof Off" was exported, with its
 * ids in the access log; one where only a <Location> is on was not; the
 * others lost their route (the span of a hit named "GET", of its miss
 * "GET /c"). Merged here as httpd merges a request's before
 * translate_name (<Location>, then <If>), for these rare requests only.
 * <Directory> and <Proxy> need the file name it never got. The request
 * keeps the configuration httpd gave it: a module that logs after ours
 * (mod_log_debug) reads that one.
 */
static spanprof_dir_conf *
spanprof_unmapped_conf(request_rec *r)
{
    ap_conf_vector_t  *httpd_own = r->per_dir_config;
    char              *uri = r->uri, *path;
    spanprof_dir_conf *d;

    /* The path as httpd maps it: decoded but for %2F ("/c/%6Fff" is
     * "/c/off"), without dot segments. */
    if (uri != NULL && uri[0] == '/') {
        path = apr_pstrdup(r->pool, uri);
        if (ap_unescape_url_keep2f(path, 0) == OK) {
            ap_getparents(path);
            r->uri = path;
            if (ap_location_walk(r) == OK) {
                (void) ap_if_walk(r);
            }
            r->uri = uri;
        }
    }
    d = ap_get_module_config(r->per_dir_config, &spanprof_module);
    r->per_dir_config = httpd_own;
    return d;
}

/*
 * The rest of spanprof_log_transaction, for an initial request r that
 * ended in last, sr's (NULL: it has none): for the few that are refused,
 * off, unmapped, a dummy connection or have no span yet; *d: our
 * configuration where it ended. The span to record, or NULL. Apart, the
 * hook saves no registers for it on the way of every other request (~15
 * instructions a request, callgrind).
 */
static __attribute__((noinline)) spanprof_request *
spanprof_log_unusual(request_rec *r, spanprof_request *sr,
                     request_rec *last, spanprof_dir_conf **d)
{
    if (spanprof_dummy_connection(r)) {
        return NULL;
    }
    if (last->filename == NULL) {
        *d = spanprof_unmapped_conf(last);
    }
    /*
     * Refused before fixups (a 403 of Require, a 401, a 400) or served
     * by a quick handler in a scope that is off: fixups, which take back
     * what post_read_request set, never ran. Without this the access log
     * had the ids of a span that is never exported.
     */
    if (!spanprof_conf_on(*d)) {
        if (sr != NULL) {
            spanprof_set_env(last, NULL);
            spanprof_close(sr);
            spanprof_spare(sr);
        }
        return NULL;
    }
    if (sr == NULL) {
        sr = spanprof_begin(r);
        sr->entry.start_ns = (uint64_t) r->request_time * 1000;
        spanprof_set_env(r, sr);
    }
    return sr;
}

/*
 * A redirected request logged in its initial one's place, which stock
 * httpd never does: its initial request's span, NULL if it has none, it
 * ended already or in a scope that is off; *last: the request it ended
 * in, *d: our configuration there.
 */
static __attribute__((noinline)) spanprof_request *
spanprof_log_redirected(request_rec *r, request_rec **last,
                        spanprof_dir_conf **d)
{
    spanprof_request *sr = spanprof_request_of(r);

    if (sr == NULL || sr->finished) {
        return NULL;
    }
    *last = spanprof_final(sr->initial);
    *d = ap_get_module_config((*last)->per_dir_config, &spanprof_module);
    if (!spanprof_conf_on(*d)) {
        spanprof_close(sr);
        spanprof_spare(sr);
        return NULL;
    }
    return sr;
}

/*
 * First of the log_transaction hooks: the request's span ends here, as
 * httpd logs the request, and mod_log_config has the ids. httpd logs it
 * as its last bucket goes (HTTP/1.x: when the response is written; an
 * HTTP/2 stream's when the main connection purges it), in a cleanup of
 * its pool that runs before any other: the span ends where a cleanup of
 * our own had it end. Without that cleanup's registration (and its 32
 * bytes in the pool) and a second, last log hook for the sampler, the
 * child runs ~80 instructions fewer a request (callgrind). The status and
 * the connection are the logged ones: no log hook changes them.
 *
 * An initial request without a span where one was due was refused while
 * httpd read it (a malformed request line or header, a URI or headers too
 * long), or by a module's post_read_request. A request all the same, as
 * the access log says: its span begins when the request did, with what
 * headers httpd had read, and ends here.
 */
/*
 * The rest of spanprof_log_transaction, for a request of spanprof's
 * (neither a subrequest nor a connection that timed out before a request
 * line). Apart, and called last, the hook keeps no registers of its own:
 * ~10 instructions a request fewer (callgrind) than when gcc split it
 * itself, saving five registers in each part.
 */
static __attribute__((noinline)) int
spanprof_log_request(request_rec *r)
{
    spanprof_request  *sr;
    request_rec       *last;
    spanprof_dir_conf *d;

    if (r->prev == NULL) {
        /* r is the initial request, sr's if it has one: the request it
         * ended in is found once, for the outcome and the scope (~10
         * instructions a request, callgrind). */
        sr = ap_get_module_config(r->request_config, &spanprof_module);
        /* Logged already: a module ran the log hooks itself, then httpd
         * did. Written again, its record went among the spares twice. */
        if (sr != NULL && sr->finished) {
            return DECLINED;
        }
        last = spanprof_final(r);
        d = ap_get_module_config(last->per_dir_config, &spanprof_module);
        /* No file name: never mapped (spanprof_unmapped_conf). */
        if (sr == NULL || last->filename == NULL || !spanprof_conf_on(d)) {
            sr = spanprof_log_unusual(r, sr, last, &d);
        }
    } else {
        sr = spanprof_log_redirected(r, &last, &d);
    }
    if (sr == NULL) {
        return DECLINED;
    }
    /* mod_log_config reads the variables of the request r ended in. One
     * made before they were set (the ErrorDocument of a request refused
     * while read) or that never reached fixups (its ErrorDocument refused
     * too) had only REDIRECT_* copies, or none: the access log said "-"
     * for a span that is exported. Redirected requests only. */
    if (last != sr->initial) {
        spanprof_set_env(last, sr);
    }
    spanprof_close(sr);
    spanprof_record(sr, last, d);
    spanprof_spare(sr);
    return DECLINED;
}

static int
spanprof_log_transaction(request_rec *r)
{
    /* The thread's work for a request, any request, is over: now and
     * then the sampler is polled. */
    if (spanprof_sampler != NULL) {
        spanprof_poll(r);
    }
    /*
     * httpd logs a connection's first read that timed out before a whole
     * request line came as a 408 "-" too: mostly a client that opened a
     * connection and sent nothing on it (a browser's unused
     * preconnection). No request came: no span (nginx logs nothing for
     * such a connection). A line cut short goes with it: httpd keeps
     * nothing of it to tell the two apart.
     */
    if (r->the_request == NULL && r->status == HTTP_REQUEST_TIME_OUT) {
        return DECLINED;
    }
    if (!spanprof_active || r->main != NULL) {
        return DECLINED;
    }
    return spanprof_log_request(r);
}

/*
 * Each <Location> and <LocationMatch> (every server's sec_url, which for a
 * virtual host holds the main server's too) gets its path, or its regex as
 * written, as its route: "/" included, it is what the operator configured.
 * A section without a Spanprof directive has no record of ours yet: it gets
 * one, in the configuration's pool like the section itself. Requests read
 * the merged pointer and length, nothing more.
 */
static void
spanprof_note_locations(apr_pool_t *pconf, server_rec *s)
{
    core_server_config  *sconf;
    core_dir_config     *core;
    spanprof_dir_conf   *conf;
    ap_conf_vector_t   **sec;
    int                  i;

    for (; s != NULL; s = s->next) {
        sconf = ap_get_core_module_config(s->module_config);
        if (sconf == NULL || sconf->sec_url == NULL) {
            continue;
        }
        sec = (ap_conf_vector_t **) sconf->sec_url->elts;
        for (i = 0; i < sconf->sec_url->nelts; i++) {
            core = ap_get_core_module_config(sec[i]);
            if (core == NULL || core->d == NULL) {
                continue;
            }
            conf = ap_get_module_config(sec[i], &spanprof_module);
            if (conf == NULL) {
                conf = spanprof_create_dir_config(pconf, core->d);
                ap_set_module_config(sec[i], &spanprof_module, conf);
            }
            conf->route = core->d;
            conf->route_len = strlen(core->d);
        }
    }
}

/*
 * "AllowOverrideList Spanprof" lets a .htaccess file say "Spanprof On",
 * which httpd reads only while it maps a request, after post_read_request
 * has passed over a request of a scope that is off: such a scope may be
 * inside from the start. Else a child's first request there had a span
 * made as it was logged, without trace headers for what served it, the
 * variables or profiling.
 */
static void
spanprof_note_override_lists(server_rec *s)
{
    core_server_config  *sconf;
    core_dir_config     *core;
    ap_conf_vector_t   **sec;
    int                  i;

    for (; s != NULL && !spanprof_on_inside; s = s->next) {
        sconf = ap_get_core_module_config(s->module_config);
        if (sconf == NULL || sconf->sec_dir == NULL) {
            continue;
        }
        sec = (ap_conf_vector_t **) sconf->sec_dir->elts;
        for (i = 0; i < sconf->sec_dir->nelts; i++) {
            core = ap_get_core_module_config(sec[i]);
            if (core != NULL && core->override_list != NULL
                && apr_table_get(core->override_list, "Spanprof") != NULL)
            {
                spanprof_on_inside = 1;
                break;
            }
        }
    }
}

static int
spanprof_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                     server_rec *s)
{
    char   *line;
    size_t  len, i;

    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        spanprof_complete(s, 1);
        return OK;
    }
    spanprof_complete(s, 0);
    spanprof_exporters_watch(pconf);
    spanprof_note_locations(pconf, s);
    spanprof_note_header_sums(ptemp);
    /* In pconf, an ancestor of every request's pool (APR_POOL_DEBUG
     * checks that of apr_table_overlap's tables). */
    spanprof_env_template = apr_table_make(pconf, SPANPROF_ENV_COUNT);
    for (i = 0; i < SPANPROF_ENV_COUNT; i++) {
        apr_table_addn(spanprof_env_template, spanprof_env_names[i], "");
    }
    spanprof_note_override_lists(s);
    len = sp_config_describe(spanprof_main_conf(s)->config, NULL, 0) + 1;
    line = apr_palloc(ptemp, len);
    sp_config_describe(spanprof_main_conf(s)->config, line, len);
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "%s", line);

    if (!sp_config_flag(spanprof_main_conf(s)->config, SP_SETTING_ENABLED)) {
        spanprof_shm_release(s);
        return OK;
    }
    if (spanprof_shm(s) == NULL) {
        return OK;
    }
    spanprof_start_exporter(pconf, s);
    return OK;
}

/* Each reading of the configuration starts without a scope that is on. */
static int
spanprof_pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    spanprof_on_inside = 0;
    spanprof_scope_on = 0;
    return OK;
}

static void
spanprof_register_hooks(apr_pool_t *p)
{
    ap_hook_test_config(spanprof_test_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_pre_config(spanprof_pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(spanprof_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(spanprof_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_monitor(spanprof_monitor, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_pre_connection(spanprof_pre_connection, NULL, NULL,
                           APR_HOOK_REALLY_FIRST);
    ap_hook_suspend_connection(spanprof_suspend_connection, NULL, NULL,
                               APR_HOOK_MIDDLE);
    ap_hook_post_read_request(spanprof_post_read_request, NULL, NULL,
                              APR_HOOK_REALLY_FIRST);
    ap_hook_fixups(spanprof_fixups, NULL, NULL, APR_HOOK_REALLY_LAST);
    ap_hook_log_transaction(spanprof_log_transaction, NULL, NULL,
                            APR_HOOK_REALLY_FIRST);
    spanprof_stream_end_handle = ap_register_output_filter(
        "SPANPROF_STREAM_END", spanprof_stream_end_filter, NULL,
        AP_FTYPE_CONNECTION);
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
    AP_INIT_TAKE1("SpanprofOtlpInsecure", spanprof_set_setting,
                  (void *) SP_SETTING_OTLP_INSECURE, RSRC_CONF,
                  "plaintext for a host:port endpoint; see the README"),
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
    AP_INIT_TAKE1("SpanprofHttpKnownMethods", spanprof_set_setting,
                  (void *) SP_SETTING_HTTP_KNOWN_METHODS, RSRC_CONF,
                  "the request methods spans name as sent; see the README"),
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
