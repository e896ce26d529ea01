/*
 * make_profile: writes a pprof profile made with spanprof's builder, for
 * t/pprof_tool.t to read with Google's pprof (`go tool pprof`).
 *
 *   make_profile OUT.pb OUT.pb.gz
 *
 * OUT.pb is the serialized Profile, OUT.pb.gz its gzip (sp_gzip) as it
 * travels in a LogRecord body before base64. The content is fixed; the
 * test knows it:
 *
 *   period 10 ms; two mappings, /opt/spanprof-test/sbin/nginx (build id
 *   00112233445566778899aabbccddeeff01234567) and
 *   /opt/spanprof-test/lib/libc.so.6 (build id cafef00d)
 *
 *   sample 1  ngx_inner (inlined) < ngx_process_events
 *             < ngx_worker_process_cycle < main
 *             labels: source.event.time 1700000000123, source.event.period
 *             10, trace_id 0102...10, span_id a1a2...a8, thread.id 4242,
 *             thread.os.id 4242, thread.name nginx, thread.state running
 *   sample 2  unknown (libc, not named) < ngx_process_events
 *             < ngx_worker_process_cycle < main
 *             truncated, blocked, no span, thread 4243
 *   sample 3, 4  ngx_http_handler < ngx_http_core_run_phases < main
 *             (same stack twice), thread 4244, state unknown
 *
 * Prints "frames N" (the total frame count) and exits 0, or prints what
 * failed and exits 1.
 */
#include "sp_common.h"
#include "sp_encode.h"
#include "sp_pprof.h"

#include <stdio.h>
#include <string.h>

static const uint8_t nginx_id[20] = {
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99,
    0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01, 0x23, 0x45, 0x67
};
static const uint8_t libc_id[4] = { 0xca, 0xfe, 0xf0, 0x0d };

static const sp_pprof_mapping nginx_map = {
    0x555555554000ULL, 0x555555654000ULL, 0, "/opt/spanprof-test/sbin/nginx",
    nginx_id, sizeof(nginx_id)
};
static const sp_pprof_mapping libc_map = {
    0x7ffff7c00000ULL, 0x7ffff7d80000ULL, 0x28000,
    "/opt/spanprof-test/lib/libc.so.6", libc_id, sizeof(libc_id)
};

static const sp_pprof_line inner = {
    "ngx_inner", "src/core/ngx_inner.h", 7
};

static sp_pprof_frame
frame(uint64_t address, const sp_pprof_mapping *m, const char *function,
      const char *file, uint32_t line)
{
    sp_pprof_frame f;

    memset(&f, 0, sizeof(f));
    f.address = address;
    f.mapping = m;
    f.frame.function = function;
    f.frame.file = file;
    f.frame.line = line;
    return f;
}

static sp_sample
sample(uint64_t time_ns, uint32_t tid, const char *name, uint8_t state)
{
    sp_sample s;

    memset(&s, 0, sizeof(s));
    s.time_ns = time_ns;
    s.period_ns = 10000000;
    s.pid = 100;
    s.tid = tid;
    snprintf(s.thread_name, sizeof(s.thread_name), "%s", name);
    s.state = state;
    s.source = SP_SOURCE_SNAPSHOT;
    return s;
}

static int
write_file(const char *path, const sp_buf *b)
{
    FILE *f = fopen(path, "wb");

    if (f == NULL || fwrite(b->data, 1, b->len, f) != b->len) {
        if (f != NULL) {
            fclose(f);
        }
        return -1;
    }
    return fclose(f);
}

static int
check(sp_status rc, const char *what)
{
    if (rc != SP_OK) {
        printf("%s failed: %d\n", what, (int)rc);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    sp_pprof_options o = { 10000000, 0 };
    sp_pprof        *p = NULL;
    sp_pprof_frame   a[3], b[4], c[3];
    sp_sample        s;
    sp_buf           raw = SP_BUF_INIT(0), gz = SP_BUF_INIT(0);
    int              i, rc = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: make_profile OUT.pb OUT.pb.gz\n");
        return 2;
    }
    a[0] = frame(0x555555570010ULL, &nginx_map, "ngx_process_events",
                 "src/event/ngx_event.c", 120);
    a[0].inlined = &inner;
    a[0].inline_count = 1;
    a[1] = frame(0x555555580020ULL, &nginx_map, "ngx_worker_process_cycle",
                 "src/os/unix/ngx_process_cycle.c", 790);
    a[2] = frame(0x555555560030ULL, &nginx_map, "main", "src/core/nginx.c",
                 383);
    b[0] = frame(0x7ffff7d1e456ULL, &libc_map, NULL, NULL, 0);
    b[1] = a[0];
    b[2] = a[1];
    b[3] = a[2];
    c[0] = frame(0x555555590040ULL, &nginx_map, "ngx_http_handler",
                 "src/http/ngx_http_core_module.c", 850);
    c[1] = frame(0x5555555a0050ULL, &nginx_map, "ngx_http_core_run_phases",
                 "src/http/ngx_http_core_module.c", 878);
    c[2] = a[2];

    if (check(sp_pprof_create(&o, &p), "create") != 0) {
        return 1;
    }
    s = sample(1700000000123456789ULL, 4242, "nginx", SP_THREAD_RUNNING);
    s.has_span = true;
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(i + 1);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(0xa1 + i);
    }
    if (check(sp_pprof_add(p, &s, a, 3), "add 1") != 0) {
        goto done;
    }
    s = sample(1700000000133456789ULL, 4243, "nginx", SP_THREAD_BLOCKED);
    s.truncated = true;
    /* stands for 4 intervals: its timer missed 3 expirations */
    s.weight = 4;
    if (check(sp_pprof_add(p, &s, b, 4), "add 2") != 0) {
        goto done;
    }
    for (i = 0; i < 2; i++) {
        s = sample(1700000000143456789ULL + (uint64_t)i * 10000000, 4244,
                   "nginx", SP_THREAD_UNKNOWN);
        if (check(sp_pprof_add(p, &s, c, 3), "add 3") != 0) {
            goto done;
        }
    }
    if (check(sp_pprof_serialize(p, &raw), "serialize") != 0
        || check(sp_gzip(&gz, raw.data, raw.len, SP_GZIP_DEFAULT_LEVEL),
                 "gzip") != 0)
    {
        goto done;
    }
    if (write_file(argv[1], &raw) != 0 || write_file(argv[2], &gz) != 0) {
        printf("cannot write the profiles\n");
        goto done;
    }
    printf("frames %llu\n", (unsigned long long)sp_pprof_frame_count(p));
    rc = 0;
done:
    sp_pprof_destroy(p);
    sp_buf_free(&raw);
    sp_buf_free(&gz);
    return rc;
}
