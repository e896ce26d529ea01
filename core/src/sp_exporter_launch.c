/*
 * Starting the exporter: see sp_exporter_launch.h for what the child gets.
 *
 * Between fork and exec only async-signal-safe calls run (the server may
 * have threads, httpd's event MPM parent does not but a module's might):
 * argv and envp are built in one allocation before fork, as is the time
 * of the line written should execve fail, and the child uses dup2, fcntl,
 * close, sigaction, prctl and execve alone (getpid and write after a
 * failed execve).
 */
#include "sp_clock.h"
#include "sp_exporter_launch.h"
#include "sp_log_prefix.h"
#include "sp_shm.h"
#include "sp_text.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SP_LAUNCH_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
#define SP_LAUNCH_MAX_ARGS     32
/* Descriptors are moved above this before being put in place, so that a
 * region or log descriptor that is already 0..3 is not overwritten. */
#define SP_LAUNCH_FD_SCRATCH   10

typedef struct sp_launch_plan {
    char  *block;       /* every string below lives here */
    char **argv;
    char **envp;
    /* The time and level of the line the child writes if execve fails,
     * in the server's format: localtime_r may not run in the child. The
     * fork's second, and for httpd its microsecond. */
    sp_log_style style;
    char         stamp[96];
} sp_launch_plan;

static const char *const sp_passed_env[] = SP_EXPORTER_PASSED_ENV;

/* Appends "name=value" to the block at *used; returns it. */
static char *
sp_plan_put(char *block, size_t *used, const char *name, const char *value)
{
    char  *p = block + *used;
    size_t n = strlen(name), v = strlen(value);

    memcpy(p, name, n);
    p[n] = '=';
    memcpy(p + n + 1, value, v + 1);
    *used += n + v + 2;
    return p;
}

static char *
sp_plan_copy(char *block, size_t *used, const char *s)
{
    char  *p = block + *used;
    size_t n = strlen(s);

    memcpy(p, s, n + 1);
    *used += n + 1;
    return p;
}

/*
 * The server's executable as this process sees it: a link such as
 * "/proc/self/exe" (what the adapters pass) read here, in the server,
 * since the exporter would read its own there and the server's
 * /proc/PID/exe is not readable to it (another user, or not dumpable).
 * The kernel's " (deleted)" mark of a replaced binary is dropped: the
 * path names the program again once the new one is in place.
 */
static const char *
sp_server_exe(const char *path, char *buf, size_t size)
{
    static const char deleted[] = " (deleted)";
    size_t            d = sizeof(deleted) - 1;
    ssize_t           n;

    if (path == NULL || path[0] == '\0') {
        return "";
    }
    n = readlink(path, buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) {
        return path;
    }
    buf[n] = '\0';
    if ((size_t)n > d && memcmp(buf + n - d, deleted, d) == 0) {
        buf[n - d] = '\0';
    }
    return buf;
}

static sp_status
sp_plan_build(const sp_exporter_launch *l, sp_launch_plan *plan)
{
    char        fdtext[16], value[8192], exe[PATH_MAX];
    const char *path_env = getenv("PATH");
    const char *fixed[6][2];
    size_t      i, nfixed, bytes = 0, used, nenv = 0, nargs = 0, nptr;
    char       *strings;

    snprintf(fdtext, sizeof(fdtext), "%d", SP_EXPORTER_REGION_FD);
    fixed[0][0] = SP_SHM_FD_ENV;
    fixed[0][1] = fdtext;
    fixed[1][0] = SP_EXPORTER_SERVER_ENV;
    fixed[1][1] = l->server != NULL ? l->server : "";
    fixed[2][0] = SP_EXPORTER_VERSION_ENV;
    fixed[2][1] = l->server_version != NULL ? l->server_version : "";
    fixed[3][0] = SP_EXPORTER_EXE_ENV;
    fixed[3][1] = sp_server_exe(l->server_exe, exe, sizeof(exe));
    fixed[4][0] = SP_EXPORTER_LOG_LEVEL_ENV;
    fixed[4][1] = l->log_level != NULL ? l->log_level : "";
    fixed[5][0] = SP_EXPORTER_SYSLOG_ENV;
    fixed[5][1] = l->syslog;
    nfixed = l->syslog != NULL ? 6 : 5;
    if (path_env == NULL || path_env[0] == '\0') {
        path_env = SP_LAUNCH_DEFAULT_PATH;
    }

    /* First pass: sizes. */
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        size_t len = sp_config_value_text(l->config, (sp_setting)i, value,
                                          sizeof(value));
        if (len == 0) {
            continue;
        }
        if (len >= sizeof(value)) {
            return SP_ERR_TOO_LONG;
        }
        bytes += strlen(sp_setting_env_name((sp_setting)i)) + len + 2;
        nenv++;
    }
    for (i = 0; i < nfixed; i++) {
        bytes += strlen(fixed[i][0]) + strlen(fixed[i][1]) + 2;
        nenv++;
    }
    bytes += strlen("PATH") + strlen(path_env) + 2;
    nenv++;
    for (i = 0; sp_passed_env[i] != NULL; i++) {
        const char *v = getenv(sp_passed_env[i]);
        if (v != NULL) {
            bytes += strlen(sp_passed_env[i]) + strlen(v) + 2;
            nenv++;
        }
    }
    bytes += strlen(l->title != NULL ? l->title : SP_EXPORTER_NAME) + 1;
    if (l->args != NULL) {
        for (nargs = 0; l->args[nargs] != NULL; nargs++) {
            if (nargs == SP_LAUNCH_MAX_ARGS) {
                return SP_ERR_TOO_LONG;
            }
            bytes += strlen(l->args[nargs]) + 1;
        }
    }

    nptr = (nargs + 2) + (nenv + 1);
    plan->block = malloc(nptr * sizeof(char *) + bytes);
    if (plan->block == NULL) {
        return SP_ERR_NOMEM;
    }
    plan->argv = (char **)(void *)plan->block;
    plan->envp = plan->argv + nargs + 2;
    strings = (char *)(plan->envp + nenv + 1);
    used = 0;

    /* Second pass: the strings. */
    plan->argv[0] = sp_plan_copy(strings, &used,
                                 l->title != NULL ? l->title
                                                  : SP_EXPORTER_NAME);
    for (i = 0; i < nargs; i++) {
        plan->argv[i + 1] = sp_plan_copy(strings, &used, l->args[i]);
    }
    plan->argv[nargs + 1] = NULL;

    nenv = 0;
    for (i = 0; i < SP_SETTING_COUNT; i++) {
        if (sp_config_value_text(l->config, (sp_setting)i, value,
                                 sizeof(value)) > 0)
        {
            plan->envp[nenv++] = sp_plan_put(strings, &used,
                sp_setting_env_name((sp_setting)i), value);
        }
    }
    for (i = 0; i < nfixed; i++) {
        plan->envp[nenv++] = sp_plan_put(strings, &used, fixed[i][0],
                                         fixed[i][1]);
    }
    plan->envp[nenv++] = sp_plan_put(strings, &used, "PATH", path_env);
    for (i = 0; sp_passed_env[i] != NULL; i++) {
        const char *v = getenv(sp_passed_env[i]);
        if (v != NULL) {
            plan->envp[nenv++] = sp_plan_put(strings, &used,
                                             sp_passed_env[i], v);
        }
    }
    plan->envp[nenv] = NULL;
    /* The value buffer held secrets (headers). */
    explicit_bzero(value, sizeof(value));
    return SP_OK;
}

static void
sp_close_from(int first)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)first, ~0u, 0u) == 0) {
        return;
    }
#endif
    for (int fd = first; fd < 65536; fd++) {
        close(fd);
    }
}

/*
 * Why execve failed, on the log the exporter would have written to, in
 * its line format (the server's: sp_log_prefix.h): else the log shows
 * only a process that exited with 127, and the operator has to guess
 * between a wrong path, a directory the workers' user may not enter and
 * a missing library (which the dynamic linker reports itself).
 * Async-signal-safe: no stdio, no strerror (it may allocate for a code it
 * does not know); the stamp was made before fork.
 */
static void
sp_child_say_exec_failed(const sp_launch_plan *plan, const char *path,
                         int err)
{
    char         line[PATH_MAX + 256];
    size_t       n = 0, size = sizeof(line) - 1;
    unsigned int pid = (unsigned int)getpid();
    const char  *why;

    switch (err) {
    case ENOENT:
        why = "no such file";
        break;
    case EACCES:
        why = "permission denied (the workers' user must be able to "
              "execute it and enter every directory above it)";
        break;
    case ENOEXEC:
        why = "not an executable";
        break;
    case ENOTDIR:
        why = "a part of the path is not a directory";
        break;
    default:
        why = NULL;
    }
    sp_log_put(line, size, &n, plan->stamp);
    /* One thread: its id is the pid. */
    n = sp_log_ids(line, size, n, plan->style, "error", pid, pid);
    sp_log_put(line, size, &n, "cannot run ");
    sp_log_put(line, size, &n, path);
    sp_log_put(line, size, &n, ": ");
    if (why != NULL) {
        sp_log_put(line, size, &n, why);
    } else {
        sp_log_put(line, size, &n, "error ");
        sp_put_decimal(line, size, &n, (uint64_t)err);
    }
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}

/*
 * A parent that died before the death signal was asked for tells nobody.
 * Its death is then a stop asked at the start, as the signal would have
 * been: SIGTERM left pending (every signal is blocked here) reaches the
 * exporter's handler, and it exports what the workers wrote before it
 * leaves. Leaving at once lost it all, without a line in the log.
 */
static void
sp_child_stop_if_orphaned(pid_t parent)
{
    if (getppid() != parent) {
        kill(getpid(), SIGTERM);
    }
}

/* The child, between fork and exec: async-signal-safe calls only. */
static void __attribute__((noreturn))
sp_child(const sp_exporter_launch *l, const sp_launch_plan *plan,
         pid_t parent)
{
    struct sigaction dfl;
    sigset_t         stops;
    int              region, log, null_fd, sig;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++) {
        /* SIGKILL, SIGSTOP and libc's internal signals refuse: fine. */
        sigaction(sig, &dfl, NULL);
    }
    /*
     * Except SIGHUP, ignored: httpd's prefork parent passes "-k restart"
     * on to its whole process group as SIGHUP, the exporter included,
     * which died of it at once with what it held. Its supervisor asks it
     * to go with SIGTERM (flush, then exit); an ignored disposition lasts
     * through execve, so no moment of its start is exposed.
     */
    dfl.sa_handler = SIG_IGN;
    sigaction(SIGHUP, &dfl, NULL);

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
        _exit(126);
    }
    sp_child_stop_if_orphaned(parent);

    region = fcntl(l->region_fd, F_DUPFD, SP_LAUNCH_FD_SCRATCH);
    log = l->log_fd >= 0 ? fcntl(l->log_fd, F_DUPFD, SP_LAUNCH_FD_SCRATCH)
                         : -1;
    if (region < 0 || (l->log_fd >= 0 && log < 0)) {
        _exit(126);
    }
    null_fd = open("/dev/null", O_RDWR);
    if (null_fd < 0 || dup2(null_fd, 0) < 0) {
        _exit(126);
    }
    if (log >= 0 && (dup2(log, 1) < 0 || dup2(log, 2) < 0)) {
        _exit(126);
    }
    if (dup2(region, SP_EXPORTER_REGION_FD) < 0) {
        _exit(126);
    }
    sp_close_from(SP_EXPORTER_REGION_FD + 1);

    if (l->set_ids) {
        if (setgroups(0, NULL) != 0 && errno != EPERM) {
            _exit(126);
        }
        if (setgid((gid_t)l->gid) != 0 || setuid((uid_t)l->uid) != 0) {
            _exit(126);
        }
        /* Changing ids clears the death signal. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
            _exit(126);
        }
        sp_child_stop_if_orphaned(parent);
    }

    /*
     * SIGTERM and SIGINT stay blocked through execve, until the exporter
     * has its handler: one that came while it loaded its libraries (a
     * stop right after the start) killed it with what it was given, and
     * without its log lines. Pending, it is a stop asked at its start.
     */
    sp_exporter_stop_signals(&stops);
    sigprocmask(SIG_SETMASK, &stops, NULL);
    execve(l->path, plan->argv, plan->envp);
    sp_child_say_exec_failed(plan, l->path, errno);
    _exit(127);
}

void
sp_exporter_stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
}

sp_status
sp_exporter_spawn(const sp_exporter_launch *l, int *pid)
{
    sp_launch_plan  plan;
    sigset_t        all, old;
    pid_t           parent, child;
    sp_status       st;
    int             saved;
    struct timespec now;

    if (l == NULL || pid == NULL || l->path == NULL || l->path[0] == '\0'
        || l->config == NULL || l->region_fd < 0)
    {
        return SP_ERR_INVALID;
    }
    st = sp_plan_build(l, &plan);
    if (st != SP_OK) {
        return st;
    }
    plan.style = sp_log_style_of(l->server);
    clock_gettime(CLOCK_REALTIME, &now);
    sp_log_stamp(plan.stamp, sizeof(plan.stamp), plan.style, &now, "error");

    /* No handler of the parent may run in the child before the reset. */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    parent = getpid();
    child = fork();
    if (child == 0) {
        sp_child(l, &plan, parent);
    }
    saved = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    explicit_bzero(plan.block, (size_t)((char *)plan.envp - plan.block));
    free(plan.block);
    if (child < 0) {
        errno = saved;
        return saved == ENOMEM || saved == EAGAIN ? SP_ERR_NOMEM : SP_ERR_IO;
    }
    *pid = (int)child;
    return SP_OK;
}

bool
sp_exporter_wait_exit(int pid, uint64_t timeout_ms)
{
    return sp_exporter_wait_exit_unless(pid, timeout_ms, NULL, NULL);
}

bool
sp_exporter_wait_exit_unless(int pid, uint64_t timeout_ms,
                             bool (*hurry)(void *ctx), void *ctx)
{
    struct timespec tick = { 0, 10 * 1000000 };
    uint64_t        end = sp_monotonic_ms() + timeout_ms;
    int             status;
    pid_t           r;

    if (pid <= 0) {
        return true;
    }
    for (;;) {
        r = waitpid((pid_t)pid, &status, WNOHANG);
        if (r == (pid_t)pid || (r == -1 && errno == ECHILD)) {
            return true;
        }
        if (sp_monotonic_ms() >= end || (hurry != NULL && hurry(ctx))) {
            return false;
        }
        nanosleep(&tick, NULL);
    }
}

uint64_t
sp_exporter_stop_ms(const sp_config *c)
{
    return sp_config_integer(c, SP_SETTING_OTLP_TIMEOUT)
           + SP_EXPORTER_EXIT_SLACK_MS;
}

size_t
sp_exporter_default_path(char *buf, size_t size)
{
    const char *env = getenv(SP_EXPORTER_PATH_ENV);
    char        self[PATH_MAX];
    const char *object = NULL, *slash;
    Dl_info     info;

    if (env != NULL && env[0] != '\0') {
        return (size_t)snprintf(buf, size, "%s", env);
    }
    /* dladdr names a shared object by the path it was loaded from; for the
     * main program it may give argv[0], which servers overwrite. */
    if (dladdr((void *)(uintptr_t)sp_exporter_default_path, &info) != 0
        && info.dli_fname != NULL && info.dli_fname[0] == '/')
    {
        object = info.dli_fname;
    } else {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0) {
            if (size > 0) {
                buf[0] = '\0';
            }
            return 0;
        }
        self[n] = '\0';
        object = self;
    }
    slash = strrchr(object, '/');
    return (size_t)snprintf(buf, size, "%.*s/%s",
                            (int)(slash - object), object, SP_EXPORTER_NAME);
}

void
sp_exporter_restarts_started(sp_exporter_restarts *r, uint64_t now_ms)
{
    r->started_ms = now_ms;
}

uint64_t
sp_exporter_restarts_delay(sp_exporter_restarts *r, uint64_t now_ms)
{
    uint32_t doublings;

    if (now_ms < r->started_ms
        || now_ms - r->started_ms >= SP_EXPORTER_STEADY_MS)
    {
        r->quick_exits = 0;
        return 0;
    }
    if (r->quick_exits < UINT32_MAX) {
        r->quick_exits++;
    }
    if (r->quick_exits <= SP_EXPORTER_QUICK_RETRIES) {
        return 0;
    }
    doublings = r->quick_exits - SP_EXPORTER_QUICK_RETRIES;
    if (doublings > 6) {
        return SP_EXPORTER_RETRY_MAX_MS;
    }
    return (1000ull << doublings) < SP_EXPORTER_RETRY_MAX_MS
           ? 1000ull << doublings : SP_EXPORTER_RETRY_MAX_MS;
}
