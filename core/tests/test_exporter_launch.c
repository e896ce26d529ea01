/*
 * The exporter's launch: /bin/sh stands in for the exporter and reports
 * what it was given (environment, descriptors, signal state), so the test
 * sees the child exactly as the exporter would.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_test_child.h"
#include "sp_config.h"
#include "sp_exporter_launch.h"
#include "sp_shm.h"

static const char *
no_env(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return NULL;
}

/* The launch's syslog for run_as_exporter (NULL: none). */
static const char *run_syslog;

/* Runs script as the exporter; returns what it wrote to the log fd. */
static char *
run_as_exporter(const sp_config *c, const char *script, int *status)
{
    static char out[65536];
    const char *args[] = { "-c", script, NULL };
    sp_exporter_launch l;
    sp_shm      shm;
    int         p[2], pid, leaked;
    size_t      n = 0;
    ssize_t     r;

    assert_int_equal(sp_shm_create(1, 4096, &shm), SP_OK);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    /* A descriptor without close-on-exec, as servers leave some. */
    leaked = open("/dev/null", O_RDONLY);
    assert_true(leaked > 3);

    memset(&l, 0, sizeof(l));
    l.path = "/bin/sh";
    l.config = c;
    l.server = "nginx";
    l.server_version = "1.22.1";
    l.server_exe = "/usr/sbin/nginx";
    l.region_fd = shm.fd;
    l.log_fd = p[1];
    l.syslog = run_syslog;
    l.title = "spanprof-exporter-test";
    l.args = args;
    assert_int_equal(sp_exporter_spawn(&l, &pid), SP_OK);
    close(p[1]);
    while ((r = read(p[0], out + n, sizeof(out) - 1 - n)) > 0) {
        n += (size_t)r;
    }
    out[n] = '\0';
    close(p[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
    close(leaked);
    sp_shm_close(&shm);
    return out;
}

static void
child_gets_the_effective_configuration_and_nothing_else(void **state)
{
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    char       msg[SP_CONFIG_MESSAGE_SIZE], *out;
    int        status;

    (void)state;
    assert_int_equal(sp_config_set_directive(c, SP_SETTING_SERVICE_NAME,
        "spanprof_service_name", "edge", 4, msg, sizeof(msg)), SP_OK);
    assert_int_equal(sp_config_set_directive(c, SP_SETTING_OTLP_HEADERS,
        "spanprof_otlp_headers", "x-token=s3cret", 14, msg, sizeof(msg)),
        SP_OK);
    sp_config_complete(c, no_env, NULL, NULL, NULL);
    setenv("SPANPROF_TEST_NOT_PASSED", "1", 1);
    setenv("SPANPROF_GRPC_LOG", "1", 1);

    out = run_as_exporter(c, "env; echo ARGV0=$0", &status);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(out, "OTEL_SERVICE_NAME=edge\n"));
    assert_non_null(strstr(out, "OTEL_EXPORTER_OTLP_HEADERS=x-token=s3cret\n"));
    assert_non_null(strstr(out, "OTEL_EXPORTER_OTLP_ENDPOINT="
                                "http://localhost:4317\n"));
    assert_non_null(strstr(out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL="
                                "1000ms\n"));
    assert_non_null(strstr(out, "SPANPROF_REGION_FD=3\n"));
    assert_non_null(strstr(out, "SPANPROF_SERVER=nginx\n"));
    assert_non_null(strstr(out, "SPANPROF_SERVER_VERSION=1.22.1\n"));
    assert_non_null(strstr(out, "SPANPROF_SERVER_EXE=/usr/sbin/nginx\n"));
    assert_non_null(strstr(out, "ARGV0=spanprof-exporter-test\n"));
    assert_null(strstr(out, "SPANPROF_TEST_NOT_PASSED"));
    assert_non_null(strstr(out, "SPANPROF_GRPC_LOG=1\n"));
    assert_null(strstr(out, "OTEL_EXPORTER_OTLP_CERTIFICATE"));
    /* No syslog: no variable, rather than an empty one */
    assert_null(strstr(out, "SPANPROF_LOG_SYSLOG"));
    run_syslog = "warn,23,web1,127.0.0.1:514,nginx";
    out = run_as_exporter(c, "env", &status);
    run_syslog = NULL;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(out, "SPANPROF_LOG_SYSLOG="
                                "warn,23,web1,127.0.0.1:514,nginx\n"));
    unsetenv("SPANPROF_TEST_NOT_PASSED");
    unsetenv("SPANPROF_GRPC_LOG");
    sp_config_destroy(c);
}

/* The signals the exporter's handler takes: blocked until it has it. */
#define STOP_SIGNALS ((1ull << (SIGTERM - 1)) | (1ull << (SIGINT - 1)))

/* Default dispositions but SIGHUP, ignored. */
static void
child_has_only_its_descriptors_and_its_stops_blocked(void **state)
{
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    sigset_t   block, old;
    char      *out, *line;
    int        status;

    (void)state;
    sp_config_complete(c, no_env, NULL, NULL, NULL);
    /* A server blocks and ignores signals; the exporter must not inherit
     * that. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    signal(SIGHUP, SIG_IGN);

    out = run_as_exporter(c,
        "for f in /proc/self/fd/*; do echo FD=${f##*/}; done; "
        "while read -r k v; do case $k in SigBlk:|SigIgn:) "
        "echo \"$k $v\";; esac; done < /proc/$$/status; "
        "test \"$(stat -L -c %s /proc/self/fd/3)\" -gt 0 && echo REGION=ok",
        &status);
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGHUP, SIG_DFL);

    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(out, "REGION=ok"));
    /* The exporter's own state (the shell's), not a later child's. glibc
     * reserves signals 32 and 33 and no process can change their
     * disposition, so whatever the test runner inherited there stays. */
    {
        const char *blk = strstr(out, "SigBlk: "), *ign = strstr(out, "SigIgn: ");
        unsigned long long reserved = (1ull << 31) | (1ull << 32);

        assert_non_null(blk);
        assert_non_null(ign);
        /* SIGTERM and SIGINT alone are blocked: a stop that comes before
         * the exporter's handler is handled once it is in place, not
         * fatal (sp_exporter_launch.h). The server's SIGUSR1 is not. */
        assert_int_equal(strtoull(blk + 8, NULL, 16) & ~reserved,
                         STOP_SIGNALS);
        /* SIGHUP alone is ignored (sp_exporter_launch.h). */
        assert_int_equal(strtoull(ign + 8, NULL, 16) & ~reserved,
                         1ull << (SIGHUP - 1));
    }
    /* 0, 1, 2, the region, and the one the glob itself may hold open. */
    for (line = strstr(out, "FD="); line != NULL;
         line = strstr(line + 1, "FD="))
    {
        int fd = atoi(line + 3);

        assert_true(fd <= 4);
    }
    sp_config_destroy(c);
}

/* Spawns l with its log on a pipe; what the child wrote there. */
static char *
spawn_failing(sp_exporter_launch *l, int *status)
{
    char   *out = calloc(1, 4096);
    size_t  n = 0;
    ssize_t r;
    int     p[2], pid;

    assert_non_null(out);
    assert_int_equal(pipe(p), 0);
    l->log_fd = p[1];
    assert_int_equal(sp_exporter_spawn(l, &pid), SP_OK);
    close(p[1]);
    while (n < 4095 && (r = read(p[0], out + n, 4095 - n)) > 0) {
        n += (size_t)r;
    }
    close(p[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
    return out;
}

/*
 * Whether line is "YYYY/MM/DD HH:MM:SS [level] PID#PID: spanprof-exporter:
 * text", PID the same number twice (a child has one thread).
 */
static bool
nginx_line(const char *line, const char *level, const char *text)
{
    char  head[64];
    int   y, mo, d, h, mi, s, off = 0;
    unsigned long pid, tid;
    char *end;

    if (sscanf(line, "%4d/%2d/%2d %2d:%2d:%2d %n", &y, &mo, &d, &h, &mi, &s,
               &off) != 6 || off != 20)
    {
        return false;
    }
    snprintf(head, sizeof(head), "[%s] ", level);
    if (strncmp(line + off, head, strlen(head)) != 0) {
        return false;
    }
    line += off + strlen(head);
    pid = strtoul(line, &end, 10);
    if (end == line || *end != '#') {
        return false;
    }
    tid = strtoul(end + 1, &end, 10);
    return pid == tid && strncmp(end, ": spanprof-exporter: ", 21) == 0
           && strcmp(end + 21, text) == 0;
}

/*
 * Whether line is "[Www Mmm DD HH:MM:SS.uuuuuu YYYY] [spanprof:level]
 * [pid PID:tid PID] spanprof-exporter: text".
 */
static bool
httpd_line(const char *line, const char *level, const char *text)
{
    char          head[64], day[4], mon[4];
    int           d, h, mi, s, us, y, off = 0;
    unsigned long pid, tid;
    char         *end;

    if (sscanf(line, "[%3s %3s %2d %2d:%2d:%2d.%6d %4d] %n", day, mon, &d,
               &h, &mi, &s, &us, &y, &off) != 8 || off != 34)
    {
        return false;
    }
    snprintf(head, sizeof(head), "[spanprof:%s] [pid ", level);
    if (strncmp(line + off, head, strlen(head)) != 0) {
        return false;
    }
    line += off + strlen(head);
    pid = strtoul(line, &end, 10);
    if (end == line || strncmp(end, ":tid ", 5) != 0) {
        return false;
    }
    tid = strtoul(end + 5, &end, 10);
    return pid == tid && strncmp(end, "] spanprof-exporter: ", 21) == 0
           && strcmp(end + 21, text) == 0;
}

static void
missing_executable_exits_127_and_says_why(void **state)
{
    sp_config *c = sp_config_create(SP_SERVER_HTTPD);
    sp_exporter_launch l;
    sp_shm      shm;
    int         pid, status, fd;
    char        plain[] = "/tmp/spanprof-launch-XXXXXX", *out;

    (void)state;
    sp_config_complete(c, no_env, NULL, NULL, NULL);
    assert_int_equal(sp_shm_create(1, 4096, &shm), SP_OK);
    memset(&l, 0, sizeof(l));
    l.config = c;
    l.region_fd = shm.fd;
    l.log_fd = -1;
    assert_int_equal(sp_exporter_spawn(&l, &pid), SP_ERR_INVALID);
    l.path = "/nonexistent/spanprof-exporter";
    out = spawn_failing(&l, &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 127);
    assert_non_null(strstr(out, "]: error: cannot run "
                                "/nonexistent/spanprof-exporter: no such "
                                "file\n"));
    free(out);

    /* Not executable: refused even to root. */
    fd = mkstemp(plain);
    assert_true(fd >= 0);
    close(fd);
    l.path = plain;
    out = spawn_failing(&l, &status);
    assert_int_equal(WEXITSTATUS(status), 127);
    assert_non_null(strstr(out, "permission denied"));
    assert_true(strncmp(out, "spanprof-exporter[", 18) == 0);
    free(out);
    unlink(plain);

    /* Started by a server, the line has the server's error log format. */
    l.path = "/nonexistent/spanprof-exporter";
    l.server = "nginx";
    out = spawn_failing(&l, &status);
    assert_int_equal(WEXITSTATUS(status), 127);
    assert_true(nginx_line(out, "error",
                           "cannot run /nonexistent/spanprof-exporter: "
                           "no such file\n"));
    free(out);
    l.server = "httpd";
    out = spawn_failing(&l, &status);
    assert_int_equal(WEXITSTATUS(status), 127);
    assert_true(httpd_line(out, "error",
                           "cannot run /nonexistent/spanprof-exporter: "
                           "no such file\n"));
    free(out);

    l.log_fd = -1;
    l.region_fd = -1;
    assert_int_equal(sp_exporter_spawn(&l, &pid), SP_ERR_INVALID);
    sp_shm_close(&shm);
    sp_config_destroy(c);
}

/* The signals pid holds: pending (its own or its process's) and blocked,
 * so that it takes them only when it unblocks them. */
static unsigned long long
held_signals(pid_t pid)
{
    char               path[64], line[256];
    unsigned long long pending = 0, blocked = 0;
    FILE              *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "SigPnd:", 7) == 0
            || strncmp(line, "ShdPnd:", 7) == 0)
        {
            pending |= strtoull(line + 7, NULL, 16);
        } else if (strncmp(line, "SigBlk:", 7) == 0) {
            blocked = strtoull(line + 7, NULL, 16);
        }
    }
    fclose(f);
    return pending & blocked;
}

/*
 * The exporter goes when its supervisor dies: an intermediate process
 * spawns it and exits; the exporter, reparented to this test (a
 * subreaper), gets SIGTERM. A plain program in its place, which never
 * unblocks it, keeps it pending: the exporter takes it as soon as its
 * handler is in place, however early it comes.
 */
static void
child_gets_sigterm_when_the_supervisor_dies(void **state)
{
    sp_config *c = sp_config_create(SP_SERVER_NGINX);
    int        p[2], status, exporter = 0, i;
    pid_t      mid, reaped = 0;
    unsigned long long held = 0;

    (void)state;
    sp_config_complete(c, no_env, NULL, NULL, NULL);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    assert_int_equal(pipe(p), 0);
    mid = fork();
    assert_true(mid >= 0);
    if (mid == 0) {
        const char *args[] = { "-c", "echo ready; exec sleep 60", NULL };
        char        ready[8];
        int         up[2];
        sp_exporter_launch l;
        sp_shm      shm;
        int         pid = 0;

        if (sp_shm_create(1, 4096, &shm) != SP_OK) {
            _exit(1);
        }
        memset(&l, 0, sizeof(l));
        l.path = "/bin/sh";
        l.config = c;
        l.region_fd = shm.fd;
        /* The supervisor dies only once the exporter runs: a launch whose
         * supervisor is already gone exits at once, by design. */
        if (pipe(up) != 0) {
            _exit(1);
        }
        l.log_fd = up[1];
        l.args = args;
        if (sp_exporter_spawn(&l, &pid) != SP_OK) {
            _exit(1);
        }
        close(up[1]);
        if (read(up[0], ready, sizeof(ready)) <= 0) {
            _exit(1);
        }
        if (write(p[1], &pid, sizeof(pid)) != (ssize_t)sizeof(pid)) {
            _exit(1);
        }
        _exit(0);
    }
    close(p[1]);
    assert_int_equal(read(p[0], &exporter, sizeof(exporter)),
                     sizeof(exporter));
    close(p[0]);
    assert_int_equal(waitpid(mid, &status, 0), mid);
    /* Held (pending and blocked), not fatal: it outlives it. */
    for (i = 0; i < 1000; i++) {
        struct timespec ts = { 0, 10 * 1000000 };

        held = held_signals(exporter);
        reaped = waitpid(exporter, &status, WNOHANG);
        if ((held & (1ull << (SIGTERM - 1))) || reaped != 0) {
            break;
        }
        nanosleep(&ts, NULL);
    }
    /* The stand-in never takes it: gone before an assertion can fail. */
    if (reaped == 0) {
        kill(exporter, SIGKILL);
        waitpid(exporter, NULL, 0);
    }
    assert_int_equal(reaped, 0);
    assert_true(held & (1ull << (SIGTERM - 1)));
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    sp_config_destroy(c);
}

static void
default_path_follows_the_environment(void **state)
{
    char buf[4096];

    (void)state;
    setenv(SP_EXPORTER_PATH_ENV, "/opt/sp/bin/spanprof-exporter", 1);
    assert_int_equal(sp_exporter_default_path(buf, sizeof(buf)),
                     strlen("/opt/sp/bin/spanprof-exporter"));
    assert_string_equal(buf, "/opt/sp/bin/spanprof-exporter");
    unsetenv(SP_EXPORTER_PATH_ENV);
    /* Linked statically into this test: next to the test binary. */
    assert_true(sp_exporter_default_path(buf, sizeof(buf)) > 0);
    assert_non_null(strstr(buf, "/" SP_EXPORTER_NAME));
}

static void
restarts_are_prompt_after_a_long_run_and_back_off_after_short_ones(
    void **state)
{
    sp_exporter_restarts r = { 0, 0 };
    uint64_t             now = 1000000, want[] = { 0, 0, 2000, 4000, 8000,
                                                   16000, 32000, 60000,
                                                   60000 };
    size_t               i;

    (void)state;
    /* A kill -9 after a steady run: at once, as often as it happens. */
    for (i = 0; i < 5; i++) {
        sp_exporter_restarts_started(&r, now);
        now += SP_EXPORTER_STEADY_MS;
        assert_int_equal(sp_exporter_restarts_delay(&r, now), 0);
    }
    /* One that exits at once, again and again. */
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        sp_exporter_restarts_started(&r, now);
        now += 5;
        assert_int_equal(sp_exporter_restarts_delay(&r, now), want[i]);
        now += want[i];
    }
    /* Until one runs long enough: then at once again. */
    sp_exporter_restarts_started(&r, now);
    now += SP_EXPORTER_STEADY_MS - 1;
    assert_int_equal(sp_exporter_restarts_delay(&r, now), 60000);
    sp_exporter_restarts_started(&r, now);
    now += SP_EXPORTER_STEADY_MS;
    assert_int_equal(sp_exporter_restarts_delay(&r, now), 0);
    sp_exporter_restarts_started(&r, now);
    assert_int_equal(sp_exporter_restarts_delay(&r, now + 1), 0);
}

/*
 * process.executable.name is the server's: "/proc/self/exe" (what both
 * adapters pass) is resolved by the server before it starts the exporter,
 * where it would name spanprof-exporter itself.
 */
static void
server_exe_is_resolved_in_the_server(void **state)
{
    sp_config  *c = sp_config_create(SP_SERVER_NGINX);
    const char *args[] = { "-c", "echo EXE=$SPANPROF_SERVER_EXE", NULL };
    char        self[4096], want[4200], out[8192];
    sp_exporter_launch l;
    sp_shm      shm;
    int         p[2], pid, status;
    ssize_t     n, r;
    size_t      got = 0;

    (void)state;
    sp_config_complete(c, no_env, NULL, NULL, NULL);
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(want, sizeof(want), "EXE=%s\n", self);

    assert_int_equal(sp_shm_create(1, 4096, &shm), SP_OK);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    memset(&l, 0, sizeof(l));
    l.path = "/bin/sh";
    l.config = c;
    l.server = "nginx";
    l.server_version = "1.22.1";
    l.server_exe = "/proc/self/exe";
    l.region_fd = shm.fd;
    l.log_fd = p[1];
    l.args = args;
    assert_int_equal(sp_exporter_spawn(&l, &pid), SP_OK);
    close(p[1]);
    while ((r = read(p[0], out + got, sizeof(out) - 1 - got)) > 0) {
        got += (size_t)r;
    }
    out[got] = '\0';
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    sp_shm_close(&shm);
    sp_config_destroy(c);
    assert_string_equal(out, want);
}

/* A child that sleeps ms milliseconds and exits by itself (for one that
 * runs until ended: spawn_sleeper). */
static pid_t
sleeper(long ms)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

        nanosleep(&ts, NULL);
        _exit(0);
    }
    return pid;
}

/* The server's exit waits for its exporter: until it is gone and reaped,
 * or the time is up. */
static void
wait_exit_waits_for_the_child_within_its_time(void **state)
{
    pid_t pid;
    int   status;

    (void)state;
    pid = sleeper(100);
    assert_true(sp_exporter_wait_exit(pid, 5000));
    /* reaped: it is not this process's child any more */
    assert_int_equal(waitpid(pid, &status, WNOHANG), -1);

    pid = spawn_sleeper();
    assert_false(sp_exporter_wait_exit(pid, 100));
    kill(pid, SIGKILL);
    assert_true(sp_exporter_wait_exit(pid, 5000));

    /* none started, or reaped by someone else */
    assert_true(sp_exporter_wait_exit(0, 100));
    pid = spawn_sleeper();
    end_child(pid);
    assert_true(sp_exporter_wait_exit(pid, 100));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            child_gets_the_effective_configuration_and_nothing_else),
        cmocka_unit_test(
            child_has_only_its_descriptors_and_its_stops_blocked),
        cmocka_unit_test(server_exe_is_resolved_in_the_server),
        cmocka_unit_test(
            missing_executable_exits_127_and_says_why),
        cmocka_unit_test(child_gets_sigterm_when_the_supervisor_dies),
        cmocka_unit_test(default_path_follows_the_environment),
        cmocka_unit_test(
            restarts_are_prompt_after_a_long_run_and_back_off_after_short_ones),
        cmocka_unit_test(wait_exit_waits_for_the_child_within_its_time),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
