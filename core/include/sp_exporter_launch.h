/*
 * Starting the exporter process (build/spanprof-exporter) from the server
 * process that supervises it: nginx's cache-manager-style helper, httpd's
 * parent. The exporter is a separate program so that gRPC, elfutils and
 * protobuf-c are never loaded into a server process that forks.
 *
 * What the exporter receives:
 *   descriptor 3        the region (sp_shm.h), SP_SHM_FD_ENV names it
 *   descriptors 1, 2    log_fd (the server's error log), else inherited
 *   descriptor 0        /dev/null
 *   environment         each setting's variable (sp_config.h) set to its
 *                       effective value, directives included, plus
 *                       SPANPROF_SERVER, SPANPROF_SERVER_VERSION,
 *                       SPANPROF_SERVER_EXE, PATH and the few variables of
 *                       the parent that TLS and the console exporter read
 *                       (SP_EXPORTER_PASSED_ENV); nothing else.
 *   signals             default dispositions, nothing blocked; SIGTERM
 *                       when the supervising process dies
 *                       (PR_SET_PDEATHSIG).
 * Every other descriptor is closed: listening sockets and log files of the
 * server never leak into it.
 */
#ifndef SP_EXPORTER_LAUNCH_H
#define SP_EXPORTER_LAUNCH_H

#include "sp_common.h"
#include "sp_config.h"

#define SP_EXPORTER_NAME          "spanprof-exporter"
#define SP_EXPORTER_PATH_ENV      "SPANPROF_EXPORTER_PATH"
#define SP_EXPORTER_REGION_FD     3
#define SP_EXPORTER_SERVER_ENV    "SPANPROF_SERVER"
#define SP_EXPORTER_VERSION_ENV   "SPANPROF_SERVER_VERSION"
#define SP_EXPORTER_EXE_ENV       "SPANPROF_SERVER_EXE"
#define SP_EXPORTER_CONSOLE_ENV   "SPANPROF_CONSOLE_PATH"
/* The deprecated text format of the profiling logs: "text" (SPEC 5). */
#define SP_EXPORTER_FORMAT_ENV    "SPANPROF_PROFILING_FORMAT"

/*
 * Variables of the supervising process passed on unchanged when set: the
 * exporter's own knobs, and what OpenSSL (gRPC's TLS) and libdw read.
 */
#define SP_EXPORTER_PASSED_ENV \
    { SP_EXPORTER_CONSOLE_ENV, SP_EXPORTER_FORMAT_ENV, \
      "SPANPROF_EXPORTER_MAX_BYTES", "SPANPROF_DEBUG_DIRS", \
      "SPANPROF_COUNTERS_INTERVAL_MS", \
      "SSL_CERT_FILE", "SSL_CERT_DIR", \
      "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "TZ", NULL }

typedef struct sp_exporter_launch {
    const char      *path;          /* the executable */
    const sp_config *config;        /* the effective configuration */
    const char      *server;        /* "nginx" or "httpd" */
    const char      *server_version;
    const char      *server_exe;    /* process.executable.name comes from it */
    int              region_fd;
    int              log_fd;        /* -1: keep the parent's stdout/stderr */
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
 * Where the exporter is: $SPANPROF_EXPORTER_PATH when set, else
 * SP_EXPORTER_NAME in the directory of the shared object this code is
 * linked into (the server module: installed side by side). Returns the
 * length snprintf would; 0 when neither can be found.
 */
SP_API size_t sp_exporter_default_path(char *buf, size_t size);

#endif
