/*
 * Starting the exporter process (build/spanprof-exporter) from the server
 * process that supervises it: nginx's cache-manager-style helper, httpd's
 * parent. The exporter is a separate program so that gRPC, elfutils and
 * protobuf-c are never loaded into a server process that forks.
 *
 * What the exporter receives:
 *   descriptor 3        the region (sp_shm.h), SP_SHM_FD_ENV names it
 *   descriptors 1, 2    log_fd (the server's error log), else inherited
 *                       (and the server's syslog, SP_EXPORTER_SYSLOG_ENV)
 *   descriptor 0        /dev/null
 *   environment         each setting's variable (sp_config.h) set to its
 *                       effective value, directives included, plus
 *                       SPANPROF_SERVER, SPANPROF_SERVER_VERSION,
 *                       SPANPROF_SERVER_EXE, PATH and the few variables of
 *                       the parent that TLS and the console exporter read
 *                       (SP_EXPORTER_PASSED_ENV); nothing else.
 *   signals             default dispositions but SIGHUP, ignored
 *                       (httpd's prefork signals its process group with
 *                       it on a restart; SIGTERM is the exporter's
 *                       stop, SIGINT its fast stop: see
 *                       SP_EXPORTER_FAST_STOP_MS); SIGTERM and SIGINT
 *                       blocked, nothing else:
 *                       the exporter unblocks them once its handler is
 *                       in place, so a stop that comes while it loads its
 *                       libraries (a stop right after a start) is
 *                       handled then instead of killing it with what it
 *                       was to read. A wrapper in its place must exec it.
 *                       SIGTERM when the supervising process dies
 *                       (PR_SET_PDEATHSIG).
 * Every other descriptor is closed: listening sockets and log files of the
 * server never leak into it.
 */
#ifndef SP_EXPORTER_LAUNCH_H
#define SP_EXPORTER_LAUNCH_H

#include "sp_common.h"
#include "sp_config.h"

#include <signal.h>

#define SP_EXPORTER_NAME          "spanprof-exporter"
#define SP_EXPORTER_PATH_ENV      "SPANPROF_EXPORTER_PATH"
#define SP_EXPORTER_REGION_FD     3
#define SP_EXPORTER_SERVER_ENV    "SPANPROF_SERVER"
#define SP_EXPORTER_VERSION_ENV   "SPANPROF_SERVER_VERSION"
#define SP_EXPORTER_EXE_ENV       "SPANPROF_SERVER_EXE"
#define SP_EXPORTER_CONSOLE_ENV   "SPANPROF_CONSOLE_PATH"
/* The least severe lines the exporter writes: "crit" (none), "error",
 * "warn" or "info" (the default); the server's error log level. */
#define SP_EXPORTER_LOG_LEVEL_ENV "SPANPROF_LOG_LEVEL"
/*
 * Where the server's error log goes to syslog, the exporter's lines go
 * there too (descriptors 1 and 2 then lead to another log, or to
 * /dev/null: httpd's stderr with "ErrorLog syslog"). The value is
 * "LEVEL,FACILITY,HOSTNAME,ADDRESS,TAG": that log's level as above, the
 * facility's number (LOG_LOCAL1 >> 3 is 17), the host name of the
 * header (empty: none, nginx's "nohostname"), where the messages go
 * ("127.0.0.1:514", "[::1]:514", "unix:/dev/log"; numeric) and the tag,
 * which may hold commas and ends the value. The header is the server's
 * own (sp_syslog.h). Unset: no syslog.
 */
#define SP_EXPORTER_SYSLOG_ENV    "SPANPROF_LOG_SYSLOG"
/* The deprecated text format of the profiling logs: "text" (SPEC 5). */
#define SP_EXPORTER_FORMAT_ENV    "SPANPROF_PROFILING_FORMAT"

/*
 * Variables of the supervising process passed on unchanged when set: the
 * exporter's own knobs, and what OpenSSL (gRPC's TLS) and libdw read.
 */
#define SP_EXPORTER_PASSED_ENV \
    { SP_EXPORTER_CONSOLE_ENV, SP_EXPORTER_FORMAT_ENV, \
      "SPANPROF_EXPORTER_MAX_BYTES", "SPANPROF_DEBUG_DIRS", \
      "SPANPROF_DEBUG_MAX_BYTES", "SPANPROF_COUNTERS_INTERVAL_MS", \
      "SPANPROF_GRPC_LOG", \
      "SSL_CERT_FILE", "SSL_CERT_DIR", \
      "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "TZ", NULL }

typedef struct sp_exporter_launch {
    const char      *path;          /* the executable */
    const sp_config *config;        /* the effective configuration */
    const char      *server;        /* "nginx" or "httpd" */
    const char      *server_version;
    const char      *server_exe;    /* process.executable.name comes from it;
                                       a link ("/proc/self/exe") is read by
                                       the server before the exporter starts */
    int              region_fd;
    int              log_fd;        /* -1: keep the parent's stdout/stderr */
    const char      *log_level;     /* SP_EXPORTER_LOG_LEVEL_ENV's value;
                                       NULL: the exporter's default */
    const char      *syslog;        /* SP_EXPORTER_SYSLOG_ENV's value;
                                       NULL: none */
    const char      *title;         /* argv[0]; NULL: SP_EXPORTER_NAME */
    /* Extra arguments after argv[0], NULL-terminated; NULL for none. For
     * tests and for running the exporter under a wrapper. */
    const char *const *args;
    /* When set, the child takes these ids before exec (httpd's parent runs
     * as root; the exporter runs as the children's User/Group). */
    bool             set_ids;
    uint32_t         uid;
    uint32_t         gid;
} sp_exporter_launch;

/*
 * Forks and execs the exporter as described above; *pid is the child's.
 * Everything the child needs is prepared before fork, so nothing between
 * fork and exec allocates. SP_ERR_INVALID for a missing path, config or
 * region_fd; SP_ERR_NOMEM; SP_ERR_IO when fork fails (errno kept). A
 * failing exec shows as the child exiting with status 127.
 */
SP_API sp_status sp_exporter_spawn(const sp_exporter_launch *l, int *pid);

/*
 * The stops (SIGTERM, SIGINT) the exporter is started with blocked, into
 * set: sp_exporter_spawn blocks them, the exporter unblocks them once its
 * handler is in place. One list, so the two cannot disagree.
 */
SP_API void sp_exporter_stop_signals(sigset_t *set);

/*
 * The server exits: waits up to timeout_ms for the exporter it started
 * (and sent SIGTERM) to end its flush and exit, and reaps it. A
 * container's first process, or a systemd unit with KillMode=mixed, takes
 * every process left with it when it exits. true when it is gone (also
 * when someone else reaped it: ECHILD); false when it still runs.
 */
SP_API bool sp_exporter_wait_exit(int pid, uint64_t timeout_ms);

/*
 * As sp_exporter_wait_exit, but also returns false as soon as hurry(ctx)
 * is true, which it asks every 10 ms (the server was told to stop fast
 * while it waited).
 */
SP_API bool sp_exporter_wait_exit_unless(int pid, uint64_t timeout_ms,
    bool (*hurry)(void *ctx), void *ctx);

/*
 * The exporter's fast stop (SIGINT): what it cannot send within this
 * (or the export timeout, if shorter) is dropped. nginx kills its helper
 * processes about 1.5 s after its own fast stop (TERM or INT) began; the
 * exporter gets this much of it, and the supervisor waits
 * SP_EXPORTER_FAST_WAIT_MS for it to end (a SIGINT at most that long
 * after the stop began).
 */
#define SP_EXPORTER_FAST_STOP_MS    500
#define SP_EXPORTER_FAST_WAIT_MS    1000

/*
 * The timeout_ms for it: the exporter's stop takes at most the export
 * timeout of configuration c, and then a second to drain and exit.
 */
#define SP_EXPORTER_EXIT_SLACK_MS   1000
SP_API uint64_t sp_exporter_stop_ms(const sp_config *c);

/*
 * Where the exporter is: $SPANPROF_EXPORTER_PATH when set, else
 * SP_EXPORTER_NAME in the directory of the shared object this code is
 * linked into (the server module: installed side by side). Returns the
 * length snprintf would; 0 when neither can be found.
 */
SP_API size_t sp_exporter_default_path(char *buf, size_t size);

/*
 * When the supervisor starts an exporter that exited again. After a run
 * of SP_EXPORTER_STEADY_MS or more (a crash, a kill -9): at once, so data
 * flows again within a second. After runs shorter than that, one after
 * another (an exporter that cannot start: a missing library, a bad
 * binary), the first SP_EXPORTER_QUICK_RETRIES at once too, then after a
 * delay that doubles from 2 s up to SP_EXPORTER_RETRY_MAX_MS: the error
 * log gets a pair of lines a minute rather than a second, and the next
 * good start is never more than that away.
 */
#define SP_EXPORTER_STEADY_MS       10000
#define SP_EXPORTER_QUICK_RETRIES   2
#define SP_EXPORTER_RETRY_MAX_MS    60000

typedef struct sp_exporter_restarts {
    uint64_t started_ms;    /* when the last one started, any clock */
    uint32_t quick_exits;   /* short runs in a row */
} sp_exporter_restarts;

/* Zeroed: no exporter started yet. */
SP_API void sp_exporter_restarts_started(sp_exporter_restarts *r,
    uint64_t now_ms);

/* The exporter exited at now_ms: milliseconds to wait before starting the
 * next one (0: now). */
SP_API uint64_t sp_exporter_restarts_delay(sp_exporter_restarts *r,
    uint64_t now_ms);

#endif
