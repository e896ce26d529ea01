/*
 * spanprof-exporter: the one process per server that ships what the
 * workers record (sp_exporter.h). Started by the server's module with
 * sp_exporter_spawn (sp_exporter_launch.h), which gives it:
 *   fd SPANPROF_REGION_FD   the shared region (sp_shm.h)
 *   the environment         every setting's variable at its effective
 *                           value, SPANPROF_SERVER, SPANPROF_SERVER_VERSION,
 *                           SPANPROF_SERVER_EXE
 *   stderr                  the server's error log
 *   SPANPROF_LOG_SYSLOG     its syslog too, if it has one (sp_syslog.h)
 *   SIGTERM, SIGINT         blocked until the handler below is in place;
 *                           SIGTERM stops it, SIGINT stops it fast
 * Its own knobs (README, "The exporter"): SPANPROF_CONSOLE_PATH,
 * SPANPROF_PROFILING_FORMAT=text, SPANPROF_EXPORTER_MAX_BYTES,
 * SPANPROF_DEBUG_DIRS, SPANPROF_DEBUG_MAX_BYTES,
 * SPANPROF_COUNTERS_INTERVAL_MS.
 *
 * Every log line is in the error log format of the server it serves,
 * "... spanprof-exporter: message" (sp_log_prefix.h), or without
 * SPANPROF_SERVER "spanprof-exporter[PID]: LEVEL: message"; one write
 * each, so lines from its two threads never mix inside the server's log.
 */
#include "sp_config.h"
#include "sp_exporter.h"
#include "sp_exporter_launch.h"
#include "sp_log_prefix.h"
#include "sp_otlp_client.h"
#include "sp_ring.h"
#include "sp_shm.h"
#include "sp_syslog.h"

#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/*
 * The loop the stop signals stop, and how many of their handlers may be
 * using it: a handler runs on whichever thread the kernel picks, gRPC's
 * included, so main waits for none to be left before it frees the loop.
 */
static _Atomic(sp_exporter_loop *) sp_running;
static atomic_int                  sp_handlers_running;
/* The most verbose sp_log_level written (SP_EXPORTER_LOG_LEVEL_ENV); -1:
 * none, for a server that logs only what is worse than an error. */
static int sp_log_max = SP_LOG_INFO;
/* A stop, and a fast one, asked before the loop existed. */
static atomic_int sp_stop_asked;
static atomic_int sp_stop_fast_asked;
/* The server's error log format, from SPANPROF_SERVER (sp_log_prefix.h). */
static sp_log_style sp_style = SP_LOG_STYLE_PLAIN;

static const char *const sp_level_names[] = { "error", "warn", "info",
                                              "debug" };

/* The server's syslog, when its error log goes there too
 * (SP_EXPORTER_SYSLOG_ENV). */
static sp_syslog sp_syslog_to;
static bool      sp_syslog_on;

/*
 * The line in the syslog message's form: nginx's is the error log line,
 * httpd's that line without its time (its stamp is "[time] [spanprof:
 * level] "); line holds stamp bytes of stamp, then the rest, n in all,
 * without the newline.
 */
static void
sp_syslog_line(sp_log_level level, const struct timespec *now,
               const char *line, size_t stamp, size_t n)
{
    char         msg[1600];
    size_t       m;
    struct tm    tm;
    unsigned int pid = (unsigned int)getpid();

    if (localtime_r(&now->tv_sec, &tm) == NULL) {
        memset(&tm, 0, sizeof(tm));
    }
    m = sp_syslog_header(&sp_syslog_to, sp_style,
                         sp_syslog_severity(level), &tm, pid, msg,
                         sizeof(msg));
    if (sp_style == SP_LOG_STYLE_HTTPD) {
        sp_log_put(msg, sizeof(msg), &m, "[spanprof:");
        sp_log_put(msg, sizeof(msg), &m, sp_level_names[level]);
        sp_log_put(msg, sizeof(msg), &m, "] ");
        line += stamp;
        n -= stamp;
    }
    if (n > sizeof(msg) - m) {
        n = sizeof(msg) - m;
    }
    memcpy(msg + m, line, n);
    sp_syslog_send(&sp_syslog_to, msg, m + n);
}

/* The line to the error log (descriptor 2), to syslog, or to both. */
static void
sp_write_line(sp_log_level level, const char *message, bool to_log,
              bool to_syslog)
{
    char            line[1200];
    size_t          n, stamp, off = 0;
    struct timespec now;
    const char     *name = sp_level_names[level];

    clock_gettime(CLOCK_REALTIME, &now);
    stamp = sp_log_stamp(line, sizeof(line), sp_style, &now, name);
    n = sp_log_ids(line, sizeof(line) - 1, stamp, sp_style, name,
                   (unsigned int)getpid(), (unsigned int)gettid());
    /* A longer message is cut: one write keeps the line whole. */
    sp_log_put(line, sizeof(line) - 1, &n, message);
    if (to_syslog) {
        sp_syslog_line(level, &now, line, stamp, n);
    }
    if (!to_log) {
        return;
    }
    line[n++] = '\n';
    while (off < n) {
        ssize_t w = write(STDERR_FILENO, line + off, n - off);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return;
        }
        off += (size_t)w;
    }
}

static void
sp_say(sp_log_level level, const char *message)
{
    bool to_log = (int)level <= sp_log_max;
    bool to_syslog = sp_syslog_on && (int)level <= sp_syslog_to.max_level;

    if (to_log || to_syslog) {
        sp_write_line(level, message, to_log, to_syslog);
    }
}

/* The server's level, as the module passed it on. */
static void
sp_log_level_from_env(void)
{
    const char *v = getenv(SP_EXPORTER_LOG_LEVEL_ENV);

    if (v != NULL) {
        (void)sp_log_level_named(v, strlen(v), &sp_log_max);
    }
}

/* The server's syslog, as the module passed it on. */
static void
sp_syslog_from_env(void)
{
    const char *v = getenv(SP_EXPORTER_SYSLOG_ENV);
    char        msg[300];

    if (v == NULL) {
        return;
    }
    if (sp_syslog_parse(v, &sp_syslog_to) == SP_OK) {
        sp_syslog_on = true;
        return;
    }
    snprintf(msg, sizeof(msg), "%s=\"%.200s\" is not a syslog, its lines "
             "are not sent there", SP_EXPORTER_SYSLOG_ENV, v);
    sp_say(SP_LOG_WARN, msg);
}

static void
sp_log_line(void *ctx, sp_log_level level, const char *message)
{
    (void)ctx;
    sp_say(level, message);
}

static void
sp_grpc_log(void *ctx, const char *severity, const char *message)
{
    (void)ctx;
    /* gRPC's errors reach us as call results; its lines are for debugging
     * gRPC itself. */
    if (strcmp(severity, "error") == 0 && getenv("SPANPROF_GRPC_LOG")) {
        sp_write_line(SP_LOG_DEBUG, message, true, false);
    }
}

static void
sp_warn(void *ctx, const char *message)
{
    (void)ctx;
    sp_say(SP_LOG_WARN, message);
}

static const char *
sp_env(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* SIGTERM: stop; SIGINT: stop fast (sp_exporter_launch.h). */
static void
sp_on_signal(int sig)
{
    sp_exporter_loop *e;
    int               saved = errno;

    /* Counted before the loop is looked at: main, which clears the loop
     * first, then sees this handler and waits. */
    atomic_fetch_add(&sp_handlers_running, 1);
    if (sig == SIGINT) {
        atomic_store(&sp_stop_fast_asked, 1);
    }
    atomic_store(&sp_stop_asked, 1);
    e = atomic_load(&sp_running);
    if (e != NULL) {
        if (sig == SIGINT) {
            sp_exporter_stop_fast(e);
        } else {
            sp_exporter_stop(e);
        }
    }
    atomic_fetch_sub(&sp_handlers_running, 1);
    errno = saved;
}

static uint64_t
sp_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    char       *end;
    unsigned long long n;

    if (v == NULL || v[0] == '\0') {
        return dflt;
    }
    errno = 0;
    n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0') {
        return dflt;
    }
    return n;
}

/*
 * An endpoint as the client reaches it: "host:port" was written without a
 * scheme, and whether it is TLS depends on OTEL_EXPORTER_OTLP_INSECURE,
 * which the operator should not have to work out.
 */
static const char *
sp_endpoint_shown(const sp_config *c, sp_setting s, char *buf, size_t size)
{
    const char      *text = sp_config_text(c, s);
    sp_endpoint      ep;

    if (text == NULL || sp_endpoint_parse(text, strlen(text), &ep) != SP_OK
        || ep.scheme)
    {
        return text;
    }
    sp_otlp_endpoint_insecure(&ep, sp_config_flag(c,
                                                  SP_SETTING_OTLP_INSECURE));
    snprintf(buf, size, "%s://%s:%u", ep.tls ? "https" : "http", ep.host,
             (unsigned)ep.port);
    return buf;
}

/*
 * glibc's heap, set for the exporter's one big allocation per export: the
 * drain thread writes a batch's spans into a buffer of about the last
 * one's size (512 spans, 172 KiB in bench/servers/exporter_cpu.pl), which
 * the sender frees after the call. glibc's own thresholds (mmap above the
 * largest mmapped chunk freed so far, trim above twice that) left the
 * heap's top to grow by such a buffer and shrink again about once a
 * call: a brk each way, and in the drain thread a page fault for each
 * 4 KiB written: 13 to 18 % of the exporter's CPU under nginx. Now a buffer
 * under 1 MiB comes from the heap (larger ones, rarer, are mapped, as
 * glibc starts out doing) and the top is trimmed past 2 MiB. What that
 * holds: RSS under nginx's load 0.2 MiB more, peak RSS under
 * bench/exporter/run.sh's flood within its runs' spread (about 1 MiB).
 */
#define SP_MMAP_THRESHOLD  (1 << 20)
#define SP_TRIM_THRESHOLD  (2 << 20)

static const char *
sp_exporter_word(const sp_config *c, sp_setting s)
{
    switch ((sp_exporter)sp_config_integer(c, s)) {
    case SP_EXPORTER_OTLP:    return "otlp";
    case SP_EXPORTER_CONSOLE: return "console";
    default:                  return "none";
    }
}

int
main(int argc, char **argv)
{
    const char         *server = getenv(SP_EXPORTER_SERVER_ENV);
    const char         *fd_text = getenv(SP_SHM_FD_ENV);
    const char         *format = getenv(SP_EXPORTER_FORMAT_ENV);
    sp_exporter_options o;
    sp_exporter_loop   *e = NULL;
    sp_config          *c;
    sp_shm              shm;
    sp_region          *region = NULL;
    struct sigaction    sa;
    sigset_t            stops;
    char                err[512], msg[900];
    char                logs_url[SP_ENDPOINT_HOST_MAX + 16];
    char                traces_url[SP_ENDPOINT_HOST_MAX + 16];
    int                 fd;
    uint32_t            layout;
    sp_status           st;

    (void)argc;
    (void)argv;
    mallopt(M_MMAP_THRESHOLD, SP_MMAP_THRESHOLD);
    mallopt(M_TRIM_THRESHOLD, SP_TRIM_THRESHOLD);
    prctl(PR_SET_NAME, "spanprof-export");
    sp_style = sp_log_style_of(server);
    sp_log_level_from_env();
    sp_syslog_from_env();

    c = sp_config_create(server != NULL && strcmp(server, "httpd") == 0
                         ? SP_SERVER_HTTPD : SP_SERVER_NGINX);
    if (c == NULL) {
        sp_say(SP_LOG_ERROR, "out of memory");
        return 1;
    }
    sp_config_complete(c, sp_env, NULL, sp_warn, NULL);

    fd = fd_text != NULL ? atoi(fd_text) : -1;
    layout = 0;
    st = fd < 0 ? SP_ERR_INVALID : sp_shm_open_fd(fd, &shm);
    if (st == SP_OK) {
        st = sp_region_attach(shm.base, shm.size, &region);
        if (st != SP_OK) {
            layout = sp_region_layout(shm.base, shm.size);
        }
    }
    if (st != SP_OK) {
        if (layout != 0 && layout != SP_RING_LAYOUT_VERSION) {
            snprintf(msg, sizeof(msg), "the server's spanprof module is of "
                     "another version than this exporter (its shared memory "
                     "has layout %u, this exporter reads layout %u), so "
                     "nothing it records can be exported: run the module "
                     "installed with this exporter (after an upgrade, nginx "
                     "keeps the module it loaded across reloads: a restart "
                     "or \"service nginx upgrade\" loads the new one)",
                     (unsigned)layout, (unsigned)SP_RING_LAYOUT_VERSION);
        } else {
            snprintf(msg, sizeof(msg), "no usable region on descriptor "
                     "%s=%s: start me from the server module",
                     SP_SHM_FD_ENV, fd_text != NULL ? fd_text : "(unset)");
        }
        sp_say(SP_LOG_ERROR, msg);
        sp_config_destroy(c);
        return 1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = sp_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    /* sp_exporter_spawn starts us with them blocked: one that came
     * meanwhile is handled now. */
    sp_exporter_stop_signals(&stops);
    sigprocmask(SIG_UNBLOCK, &stops, NULL);

    sp_otlp_init(sp_grpc_log, NULL);

    memset(&o, 0, sizeof(o));
    o.config = c;
    o.region = region;
    o.server = server;
    o.server_version = getenv(SP_EXPORTER_VERSION_ENV);
    o.server_exe = getenv(SP_EXPORTER_EXE_ENV);
    o.console_path = getenv(SP_EXPORTER_CONSOLE_ENV);
    o.text_format = format != NULL && strcmp(format, "text") == 0;
    o.max_queue_bytes = (size_t)sp_env_u64("SPANPROF_EXPORTER_MAX_BYTES", 0);
    o.debug_dirs = getenv("SPANPROF_DEBUG_DIRS");
    o.max_debug_bytes = (size_t)sp_env_u64("SPANPROF_DEBUG_MAX_BYTES", 0);
    o.counters_interval_ms = sp_env_u64("SPANPROF_COUNTERS_INTERVAL_MS", 0);
    o.log = sp_log_line;

    st = sp_exporter_create(&o, &e, err, sizeof(err));
    if (st != SP_OK) {
        snprintf(msg, sizeof(msg), "cannot start: %s",
                 err[0] != '\0' ? err : "out of memory");
        sp_say(SP_LOG_ERROR, msg);
        sp_otlp_shutdown();
        sp_region_detach(region);
        sp_shm_close(&shm);
        sp_config_destroy(c);
        return 1;
    }
    /* A stop asked before the handler could see the loop. */
    atomic_store(&sp_running, e);
    if (atomic_load(&sp_stop_fast_asked)) {
        sp_exporter_stop_fast(e);
    } else if (atomic_load(&sp_stop_asked)) {
        sp_exporter_stop(e);
    }

    /* Endpoints carry no secret; headers are never logged. */
    snprintf(msg, sizeof(msg),
             "started for %s %s: logs %s %s, traces %s %s, %u rings%s",
             server != NULL ? server : "?",
             o.server_version != NULL ? o.server_version : "",
             sp_exporter_word(c, SP_SETTING_LOGS_EXPORTER),
             sp_endpoint_shown(c, SP_SETTING_PROFILER_LOGS_ENDPOINT,
                               logs_url, sizeof(logs_url)),
             sp_exporter_word(c, SP_SETTING_TRACES_EXPORTER),
             sp_endpoint_shown(c, SP_SETTING_OTLP_TRACES_ENDPOINT,
                               traces_url, sizeof(traces_url)),
             sp_region_slot_count(region),
             o.text_format ? ", text profiling format" : "");
    sp_say(SP_LOG_INFO, msg);

    sp_exporter_run(e);
    atomic_store(&sp_running, NULL);
    while (atomic_load(&sp_handlers_running) > 0) {
        sched_yield();
    }
    sp_exporter_destroy(e);
    sp_otlp_shutdown();
    sp_region_detach(region);
    sp_shm_close(&shm);
    sp_config_destroy(c);
    sp_say(SP_LOG_INFO, "stopped");
    return 0;
}
