/*
 * fork + exec of the exporter; see sp_exporter_launch.h for what the child
 * gets. Between fork and exec only async-signal-safe calls run: argv and
 * envp are built before fork.
 */
#include "sp_exporter_launch.h"
#include "sp_shm.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The parent's variables the exporter may need: trust store locations for
 * TLS, and where the console exporter writes. */
static const char *const sp_exporter_passed_env[] = {
    SP_EXPORTER_CONSOLE_ENV,
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "TZ",
};

#define SP_PASSED_COUNT \
    (sizeof(sp_exporter_passed_env) / sizeof(sp_exporter_passed_env[0]))
#define SP_ENV_MAX  (SP_SETTING_COUNT + SP_PASSED_COUNT + 6)
#define SP_ARGS_MAX 16

typedef struct sp_launch_plan {
    char *env[SP_ENV_MAX + 1];
    size_t env_count;
    char *argv[SP_ARGS_MAX + 2];
} sp_launch_plan;

static void
sp_plan_free(sp_launch_plan *p)
{
    size_t i;

    for (i = 0; i < p->env_count; i++) {
        free(p->env[i]);
    }
}

static sp_status
sp_plan_add(sp_launch_plan *p, const char *name, const char *value)
{
    size_t n = strlen(name), v = strlen(value);
    char  *s;

    if (p->env_count >= SP_ENV_MAX) {
        return SP_ERR_TOO_LONG;
    }
    s = malloc(n + v + 2);
    if (s == NULL) {
        return SP_ERR_NOMEM;
    }
    memcpy(s, name, n);
    s[n] = '=';
    memcpy(s + n + 1, value, v + 1);
    p->env[p->env_count++] = s;
    p->env[p->env_count] = NULL;
    return SP_OK;
}

static sp_status
sp_plan_build(sp_launch_plan *p, const sp_exporter_launch *l)
{
    char        value[8192], fd[16];
    const char *v;
    size_t      i, n;
    sp_status   st = SP_OK;

    for (i = 0; i < SP_SETTING_COUNT && st == SP_OK; i++) {
        n = sp_config_value_text(l->config, (sp_setting)i, value,
                                 sizeof(value));
        if (n >= sizeof(value)) {
            st = SP_ERR_TOO_LONG;
        } else if (n > 0) {
            st = sp_plan_add(p, sp_setting_env_name((sp_setting)i), value);
        }
    }
    snprintf(fd, sizeof(fd), "%d", SP_EXPORTER_REGION_FD);
    if (st == SP_OK) {
        st = sp_plan_add(p, SP_SHM_FD_ENV, fd);
    }
    if (st == SP_OK && l->server != NULL) {
        st = sp_plan_add(p, SP_EXPORTER_SERVER_ENV, l->server);
    }
    if (st == SP_OK && l->server_version != NULL) {
        st = sp_plan_add(p, SP_EXPORTER_VERSION_ENV, l->server_version);
    }
    if (st == SP_OK && l->server_exe != NULL) {
        st = sp_plan_add(p, SP_EXPORTER_EXE_ENV, l->server_exe);
    }
    if (st == SP_OK) {
        v = getenv("PATH");
        st = sp_plan_add(p, "PATH", v != NULL && v[0] != '\0'
                         ? v : "/usr/local/bin:/usr/bin:/bin");
    }
    for (i = 0; i < SP_PASSED_COUNT && st == SP_OK; i++) {
        v = getenv(sp_exporter_passed_env[i]);
        if (v != NULL && v[0] != '\0') {
            st = sp_plan_add(p, sp_exporter_passed_env[i], v);
        }
    }

    p->argv[0] = (char *)(l->title != NULL ? l->title : SP_EXPORTER_NAME);
    for (i = 0; l->args != NULL && l->args[i] != NULL; i++) {
        if (i >= SP_ARGS_MAX) {
            return SP_ERR_TOO_LONG;
        }
        p->argv[i + 1] = (char *)l->args[i];
    }
    p->argv[i + 1] = NULL;
    return st;
}

static void
sp_child_close_from(int first)
{
    long max, fd;

    if (close_range((unsigned)first, ~0u, 0) == 0) {
        return;
    }
    max = sysconf(_SC_OPEN_MAX);
    for (fd = first; fd < (max > 0 ? max : 65536); fd++) {
        close((int)fd);
    }
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void
sp_child_exec(const sp_exporter_launch *l, const sp_launch_plan *p,
              pid_t parent)
{
    struct sigaction sa;
    sigset_t         none;
    int              sig, null_fd, region = l->region_fd;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++) {
        (void)sigaction(sig, &sa, NULL);    /* fails for KILL, STOP: fine */
    }
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) {
        _exit(126);     /* the supervisor is already gone */
    }

    /* Move the region out of the way of 0..3 before those are set. */
    if (region <= SP_EXPORTER_REGION_FD) {
        region = fcntl(region, F_DUPFD, SP_EXPORTER_REGION_FD + 1);
    }
    if (l->log_fd >= 0) {
        if (dup2(l->log_fd, STDERR_FILENO) < 0
            || dup2(l->log_fd, STDOUT_FILENO) < 0)
        {
            _exit(126);
        }
    }
    null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != STDIN_FILENO) {
        dup2(null_fd, STDIN_FILENO);
        close(null_fd);
    }
    if (region < 0 || dup2(region, SP_EXPORTER_REGION_FD) < 0) {
        _exit(126);
    }
    sp_child_close_from(SP_EXPORTER_REGION_FD + 1);

    if (l->set_ids) {
        gid_t gid = (gid_t)l->gid;

        if (setgroups(1, &gid) != 0 || setgid(gid) != 0
            || setuid((uid_t)l->uid) != 0)
        {
            _exit(126);
        }
    }
    execve(l->path, p->argv, p->env);
    _exit(127);
}

sp_status
sp_exporter_spawn(const sp_exporter_launch *l, int *pid_out)
{
    sp_launch_plan plan;
    sp_status      st;
    pid_t          parent, pid;
    int            saved;

    if (l == NULL || l->path == NULL || l->path[0] == '\0'
        || l->config == NULL || l->region_fd < 0)
    {
        return SP_ERR_INVALID;
    }
    memset(&plan, 0, sizeof(plan));
    st = sp_plan_build(&plan, l);
    if (st != SP_OK) {
        sp_plan_free(&plan);
        return st;
    }

    parent = getpid();
    pid = fork();
    if (pid == 0) {
        sp_child_exec(l, &plan, parent);
    }
    saved = errno;
    sp_plan_free(&plan);
    if (pid < 0) {
        errno = saved;
        return SP_ERR_IO;
    }
    *pid_out = (int)pid;
    return SP_OK;
}

size_t
sp_exporter_default_path(char *buf, size_t size)
{
    const char *env = getenv(SP_EXPORTER_PATH_ENV), *slash;
    Dl_info     info;

    if (env != NULL && env[0] != '\0') {
        return (size_t)snprintf(buf, size, "%s", env);
    }
    if (dladdr((void *)sp_exporter_default_path, &info) == 0
        || info.dli_fname == NULL
        || (slash = strrchr(info.dli_fname, '/')) == NULL)
    {
        if (size > 0) {
            buf[0] = '\0';
        }
        return 0;
    }
    return (size_t)snprintf(buf, size, "%.*s/%s",
                            (int)(slash - info.dli_fname), info.dli_fname,
                            SP_EXPORTER_NAME);
}
