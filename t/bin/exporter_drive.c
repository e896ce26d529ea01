/*
 * Drives the real exporter the way a server will: creates the region with
 * sp_shm_create, starts build/spanprof-exporter with sp_exporter_spawn and
 * the configuration of its own environment, claims a ring as a worker
 * does, writes its table of objects (from dl_iterate_phdr), then samples
 * whose stacks are real return addresses in its own functions (so names,
 * files and lines can be checked), and finished spans with attributes.
 *
 *   exporter_drive --exporter PATH [--samples N] [--spans N]
 *       [--source snapshot|continuous] [--for-ms MS] [--every-ms MS]
 *       [--flood-ms MS] [--hold-ms MS] [--slots N] [--ring-bytes N]
 *       [--second live|frozen] [--layout N] [--no-stop]
 *
 * --samples/--spans are written at once, or spread over --for-ms in
 * batches every --every-ms; --flood-ms writes as fast as it can for that
 * long (records that find the ring full are dropped and counted, as a
 * worker's would be). Then it waits --hold-ms, prints the exporter's peak
 * RSS, stops it with SIGTERM and prints how it ended; with --no-stop it
 * exits instead, and the exporter must notice its parent's death.
 * --second starts another exporter on the region once the first reads it,
 * and stops it at once (SIGTERM), as a reload then a stop do; "frozen"
 * stops the first (SIGSTOP) meanwhile and writes a span it cannot read,
 * and lets it go (SIGCONT) when the second has exited.
 * --layout writes N as the region's layout version before the exporter
 * starts (the driver attached before), as a module of another version.
 * SIGUSR1 ends the spread writes, the flood and the hold at once: a test
 * that polls for what it needs stops the exporter as soon as it has it,
 * however slow the machine.
 *
 * Prints: "exporter PID", "driver PID", "written samples=N spans=N
 * ring_full=N", "exporter_hwm_kb N", "exporter_stop_ms N" (from its
 * SIGTERM to its exit), "exporter_exit N|signal N", and with --second
 * "second PID", "second_exit N".
 */
#include "sp_clock.h"
#include "sp_config.h"
#include "sp_exporter_launch.h"
#include "sp_record.h"
#include "sp_ring.h"
#include "sp_shm.h"
#include "self_objects.h"

#include <elf.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STACK_FRAMES 4

static uint64_t  frames[STACK_FRAMES];
static volatile uint64_t mid_return, root_return;
static volatile int sink;

static const char *
env(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* As the module does: a bad variable is said, and its default used. */
static void
warn(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "exporter_drive: warning: %s\n", message);
}

static void
sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };

    nanosleep(&ts, NULL);
}

static volatile sig_atomic_t hold_ended;

static void
end_hold(int signo)
{
    (void)signo;
    hold_ended = 1;
}

/* --hold-ms, cut short by SIGUSR1: a test that polls for what it needs
 * stops the exporter as soon as it has it, however slow the machine. */
static void
hold(uint64_t ms)
{
    uint64_t end = sp_monotonic_ms() + ms;

    while (!hold_ended && sp_monotonic_ms() < end) {
        sleep_ms(10);
    }
}

/* The stack: drive_leaf <- drive_mid <- drive_root <- main. */
__attribute__((noinline)) static void
drive_leaf(void)
{
    uint64_t here;

    __asm__ volatile("lea (%%rip), %0" : "=r"(here));
    frames[0] = here;
    frames[1] = (uint64_t)(uintptr_t)__builtin_return_address(0);
    frames[2] = mid_return;
    frames[3] = root_return;
    sink++;
}

__attribute__((noinline)) static void
drive_mid(void)
{
    mid_return = (uint64_t)(uintptr_t)__builtin_return_address(0);
    drive_leaf();
    sink++;
}

__attribute__((noinline)) static void
drive_root(void)
{
    root_return = (uint64_t)(uintptr_t)__builtin_return_address(0);
    drive_mid();
    sink++;
}

static uint64_t written_samples, written_spans, ring_full;

static int
write_record(sp_ring *ring, uint16_t type, const void *body, size_t len,
             int wait)
{
    for (;;) {
        if (sp_ring_write(ring, type, body, len) == SP_OK) {
            return 1;
        }
        if (!wait) {
            ring_full++;
            return 0;
        }
        ring_full++;
        sleep_ms(2);
    }
}

static void
write_sample(sp_ring *ring, uint8_t source, uint32_t i, int wait)
{
    static uint64_t buf[(sizeof(uint64_t) * STACK_FRAMES + 256) / 8];
    sp_sample s;
    size_t    len;

    memset(&s, 0, sizeof(s));
    s.time_ns = sp_realtime_ns();
    s.period_ns = 10000000;
    s.pid = (uint32_t)getpid();
    s.tid = (uint32_t)syscall(SYS_gettid);
    snprintf(s.thread_name, sizeof(s.thread_name), "drive-worker");
    s.state = SP_THREAD_RUNNING;
    s.source = source;
    s.truncated = (i % 10) == 9;
    s.has_span = source == SP_SOURCE_SNAPSHOT;
    if (s.has_span) {
        memset(s.trace_id, 0, 16);
        s.trace_id[0] = 0x4b;
        s.trace_id[15] = 0x36;
        s.span_id[0] = 0x00;
        s.span_id[1] = 0xf0;
        s.span_id[7] = 0xb7;
    }
    s.frame_count = STACK_FRAMES;
    s.frames = frames;
    len = sp_sample_size(STACK_FRAMES);
    sp_sample_encode(buf, &s);
    if (write_record(ring, SP_RECORD_SAMPLE, buf, len, wait)) {
        written_samples++;
    }
}

static void
write_span(sp_ring *ring, uint32_t i, int wait)
{
    static uint64_t buf[4096 / 8];
    sp_span_record sp;
    sp_span_attr   a[4];
    size_t         len;

    memset(&sp, 0, sizeof(sp));
    memset(a, 0, sizeof(a));
    sp.trace_id[0] = 0x4b;
    sp.trace_id[15] = 0x36;
    sp.span_id[0] = 0x01;
    sp.span_id[6] = (uint8_t)(i >> 8);
    sp.span_id[7] = (uint8_t)(i + 1);
    sp.parent_span_id[7] = 0x42;
    sp.trace_flags = 1;
    sp.kind = SP_SPAN_KIND_SERVER;
    sp.status_code = SP_STATUS_ERROR;
    sp.pid = (uint32_t)getpid();
    sp.end_ns = sp_realtime_ns();
    sp.start_ns = sp.end_ns - 2500000;
    sp.name = "GET /drive";
    sp.name_len = strlen(sp.name);
    sp.tracestate = "vendor=value";
    sp.tracestate_len = strlen(sp.tracestate);
    a[0].key = "http.request.method";
    a[0].type = SP_VALUE_STRING;
    a[0].str = "GET";
    a[1].key = "http.response.status_code";
    a[1].type = SP_VALUE_INT;
    a[1].integer = 503;
    a[2].key = "splunk.snapshot.profiling";
    a[2].type = SP_VALUE_BOOL;
    a[2].integer = 1;
    a[3].key = "url.path";
    a[3].type = SP_VALUE_STRING;
    a[3].str = "/drive";
    for (int k = 0; k < 4; k++) {
        a[k].key_len = strlen(a[k].key);
        a[k].str_len = a[k].str != NULL ? strlen(a[k].str) : 0;
    }
    len = sp_span_size(&sp, a, 4);
    sp_span_encode(buf, &sp, a, 4);
    if (write_record(ring, SP_RECORD_SPAN, buf, len, wait)) {
        written_spans++;
    }
}

static long
hwm_kb(int pid)
{
    char  path[64], line[256];
    FILE *f;
    long  kb = -1;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

/*
 * A second exporter while the first (pid) holds the region, stopped
 * right after its start; the first frozen meanwhile when asked, with a
 * span written that it cannot read.
 */
static void
run_second(const sp_exporter_launch *l, sp_ring *ring, int pid, int frozen)
{
    sp_ring_counters c;
    int              second, status;

    do {
        sleep_ms(10);
        sp_ring_stats(ring, &c);
    } while (c.read == 0);
    if (frozen) {
        kill(pid, SIGSTOP);
        write_span(ring, 1000000, 1);
    }
    if (sp_exporter_spawn(l, &second) != SP_OK) {
        fprintf(stderr, "exporter_drive: spawn failed\n");
        exit(1);
    }
    printf("second %d\n", second);
    fflush(stdout);
    kill(second, SIGTERM);
    waitpid(second, &status, 0);
    printf("second_exit %d\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    fflush(stdout);
    if (frozen) {
        kill(pid, SIGCONT);
    }
}

int
main(int argc, char **argv)
{
    const char *exporter = NULL;
    uint32_t    samples = 0, spans = 0, slots = 4, layout = 0;
    uint64_t    ring_bytes = 1 << 20, for_ms = 0, every_ms = 100;
    uint64_t    flood_ms = 0, hold_ms = 0, stop_ms;
    uint8_t     source = SP_SOURCE_SNAPSHOT;
    int         stop = 1, pid, status, i;
    const char *second = NULL;
    sp_exporter_launch l;
    struct sigaction   sa;
    sp_config  *c;
    sp_shm      shm;
    sp_region  *region;
    sp_ring    *ring;
    static uint64_t objbuf[65536 / 8];

    /* First: a SIGUSR1 is never taken for the default (termination). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = end_hold;
    sigaction(SIGUSR1, &sa, NULL);

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";

        if (strcmp(a, "--no-stop") == 0) {
            stop = 0;
            continue;
        }
        i++;
        if (strcmp(a, "--exporter") == 0) exporter = v;
        else if (strcmp(a, "--samples") == 0) samples = (uint32_t)atol(v);
        else if (strcmp(a, "--spans") == 0) spans = (uint32_t)atol(v);
        else if (strcmp(a, "--for-ms") == 0) for_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--every-ms") == 0) every_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--flood-ms") == 0) flood_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--hold-ms") == 0) hold_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--slots") == 0) slots = (uint32_t)atol(v);
        else if (strcmp(a, "--ring-bytes") == 0)
            ring_bytes = strtoull(v, NULL, 10);
        else if (strcmp(a, "--second") == 0) second = v;
        else if (strcmp(a, "--layout") == 0) layout = (uint32_t)atol(v);
        else if (strcmp(a, "--source") == 0)
            source = strcmp(v, "continuous") == 0 ? SP_SOURCE_CONTINUOUS
                                                  : SP_SOURCE_SNAPSHOT;
        else {
            fprintf(stderr, "exporter_drive: unknown option %s\n", a);
            return 2;
        }
    }
    if (exporter == NULL) {
        fprintf(stderr, "exporter_drive: --exporter PATH is required\n");
        return 2;
    }

    c = sp_config_create(SP_SERVER_NGINX);
    sp_config_complete(c, env, NULL, warn, NULL);
    if (sp_shm_create(slots, ring_bytes, &shm) != SP_OK
        || sp_region_attach(shm.base, shm.size, &region) != SP_OK)
    {
        fprintf(stderr, "exporter_drive: no region\n");
        return 1;
    }

    /* A module of another spanprof version laid the region out: the
     * version field only, as such a module's header would differ. */
    if (layout != 0) {
        memcpy((unsigned char *)shm.base + 8, &layout, sizeof(layout));
    }

    memset(&l, 0, sizeof(l));
    l.path = exporter;
    l.config = c;
    l.server = "nginx";
    l.server_version = "1.22.1";
    l.server_exe = "/usr/sbin/nginx";
    l.region_fd = shm.fd;
    l.log_fd = -1;
    l.title = "spanprof-exporter: drive";
    if (sp_exporter_spawn(&l, &pid) != SP_OK) {
        fprintf(stderr, "exporter_drive: spawn failed\n");
        return 1;
    }
    printf("exporter %d\ndriver %d\n", pid, (int)getpid());
    fflush(stdout);

    ring = sp_region_claim(region, (uint32_t)getpid());
    if (ring == NULL) {
        fprintf(stderr, "exporter_drive: no ring\n");
        return 1;
    }
    self_objects();
    write_record(ring, SP_RECORD_OBJECTS, objbuf,
                 sp_objects_encode(objbuf, (uint32_t)getpid(), 1, objects,
                                   object_count), 1);
    drive_root();
    if (second != NULL) {
        run_second(&l, ring, pid, strcmp(second, "frozen") == 0);
    }

    if (for_ms == 0) {
        for (uint32_t k = 0; k < samples; k++) {
            write_sample(ring, source, k, 1);
        }
        for (uint32_t k = 0; k < spans; k++) {
            write_span(ring, k, 1);
        }
    } else {
        uint64_t start = sp_monotonic_ms(), batches = for_ms / every_ms, b;
        uint32_t s_done = 0, p_done = 0;

        for (b = 1; b <= batches && !hold_ended; b++) {
            uint32_t s_to = (uint32_t)(samples * b / batches);
            uint32_t p_to = (uint32_t)(spans * b / batches);

            for (; s_done < s_to; s_done++) {
                write_sample(ring, source, s_done, 1);
            }
            for (; p_done < p_to; p_done++) {
                write_span(ring, p_done, 1);
            }
            while (sp_monotonic_ms() < start + b * every_ms) {
                sleep_ms(1);
            }
        }
    }
    if (flood_ms > 0) {
        uint64_t end = sp_monotonic_ms() + flood_ms;
        uint32_t k = 0;

        while (!hold_ended && sp_monotonic_ms() < end) {
            for (int j = 0; j < 64; j++, k++) {
                write_sample(ring, source, k, 0);
                if ((k & 15) == 0) {
                    write_span(ring, k, 0);
                }
            }
        }
    }
    printf("written samples=%llu spans=%llu ring_full=%llu\n",
           (unsigned long long)written_samples,
           (unsigned long long)written_spans,
           (unsigned long long)ring_full);
    fflush(stdout);
    hold(hold_ms);
    printf("exporter_hwm_kb %ld\n", hwm_kb(pid));
    fflush(stdout);
    if (!stop) {
        return 0;
    }
    stop_ms = sp_monotonic_ms();
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    printf("exporter_stop_ms %llu\n",
           (unsigned long long)(sp_monotonic_ms() - stop_ms));
    if (WIFEXITED(status)) {
        printf("exporter_exit %d\n", WEXITSTATUS(status));
    } else {
        printf("exporter_signal %d\n", WTERMSIG(status));
    }
    sp_region_release(ring);
    sp_region_detach(region);
    sp_shm_close(&shm);
    sp_config_destroy(c);
    return 0;
}
