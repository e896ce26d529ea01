/*
 * Samples per second through the exporter's drain thread on one core:
 * ring read, decode, symbolize (cache warm), pprof, gzip, base64 and the
 * OTLP logs encoding, with the exporter set to "none" so the request is
 * built and then discarded (no network). Stacks are 30 frames deep, drawn
 * from 1000 distinct stacks built of 5000 distinct code addresses (libc's
 * and this program's), so the symbolizer names them from .dynsym/.symtab
 * and its address cache (16384 entries) holds them all.
 *
 * Rings are filled before each timed drain, so the figure is the
 * exporter's alone.
 *
 *   bench_exporter [ROUNDS]    prints samples/s per round and the median
 */
#include "sp_config.h"
#include "sp_exporter.h"
#include "bench_loop.h"
#include "sp_record.h"
#include "sp_ring.h"
#include "self_objects.h"

#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEPTH        30
#define STACKS       1000
#define ADDRESSES    5000
#define SLOTS        4
#define RING_BYTES   (64u << 20)
static uint64_t  stacks[STACKS][DEPTH];
static uint64_t  pool[ADDRESSES];

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *
env(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    int                 rounds = argc > 1 ? atoi(argv[1]) : 5;
    static uint64_t     objbuf[(64u << 10) / 8];
    uint64_t            sbuf[(DEPTH * 8 + 256) / 8];
    double              rates[64];
    sp_exporter_loop   *e;
    sp_config          *c;
    sp_region          *region;
    sp_ring            *ring;
    void               *mem;
    size_t              size = sp_region_size(SLOTS, RING_BYTES);
    uint64_t            total_samples = 0;

    if (rounds < 1 || rounds > 64) {
        rounds = 5;
    }
    setenv("OTEL_LOGS_EXPORTER", "none", 1);
    setenv("OTEL_TRACES_EXPORTER", "none", 1);
    c = sp_config_create(SP_SERVER_NGINX);
    sp_config_complete(c, env, NULL, NULL, NULL);
    if (posix_memalign(&mem, 4096, size) != 0
        || sp_region_init(mem, size, SLOTS, RING_BYTES) != SP_OK
        || sp_region_attach(mem, size, &region) != SP_OK)
    {
        fprintf(stderr, "no region\n");
        return 1;
    }
    ring = sp_region_claim(region, (uint32_t)getpid());
    self_objects();

    /* ADDRESSES code addresses spread over the executable mappings, and
     * 1000 stacks of 30 drawn from them: real stacks share their callers,
     * so distinct addresses are far fewer than stacks times depth. */
    srand(42);
    for (int a = 0; a < ADDRESSES; a++) {
        /* From the first 16 objects: a server has a few dozen, this
         * program (gRPC, abseil) more than the symbolizer keeps open. */
        const sp_object *ob = &objects[(unsigned)rand()
                                       % (object_count < 16 ? object_count
                                                            : 16)];
        uint64_t span = ob->end - ob->start;

        pool[a] = ob->start + ((uint64_t)rand() * 2654435761u) % span;
    }
    for (int s = 0; s < STACKS; s++) {
        for (int d = 0; d < DEPTH; d++) {
            stacks[s][d] = pool[(unsigned)rand() % ADDRESSES];
        }
    }

    e = bench_exporter_new(c, region);
    sp_ring_write(ring, SP_RECORD_OBJECTS, objbuf,
                  sp_objects_encode(objbuf, (uint32_t)getpid(), 1, objects,
                                    object_count));

    for (int r = -1; r < rounds; r++) {    /* round -1 warms the caches */
        uint64_t n = 0;
        double   t0, t1;

        for (;;) {
            sp_sample smp;

            memset(&smp, 0, sizeof(smp));
            smp.time_ns = 1700000000000000000ull + n * 1000000;
            smp.period_ns = 10000000;
            smp.pid = (uint32_t)getpid();
            smp.tid = 100 + (uint32_t)(n % 4);
            smp.state = SP_THREAD_RUNNING;
            smp.source = SP_SOURCE_CONTINUOUS;
            smp.frame_count = DEPTH;
            smp.frames = stacks[n % STACKS];
            sp_sample_encode(sbuf, &smp);
            if (sp_ring_write(ring, SP_RECORD_SAMPLE, sbuf,
                              sp_sample_size(DEPTH)) != SP_OK)
            {
                break;
            }
            n++;
        }
        t0 = now_s();
        while (sp_exporter_step(e) > 0) {
            bench_ms += 1;   /* an export interval every 1000 steps */
        }
        sp_exporter_flush(e);
        t1 = now_s();
        if (r >= 0) {
            rates[r] = (double)n / (t1 - t0);
            total_samples += n;
            printf("round %d: %llu samples in %.3f s: %.0f samples/s\n", r,
                   (unsigned long long)n, t1 - t0, rates[r]);
        }
    }
    qsort(rates, (size_t)rounds, sizeof(rates[0]), cmp_double);
    printf("median %.0f samples/s (%d rounds, %d-frame stacks from %d "
           "distinct)\n", rates[rounds / 2], rounds, DEPTH, STACKS);
    bench_print_counters(e);
    sp_exporter_destroy(e);
    sp_region_detach(region);
    sp_config_destroy(c);
    free(mem);
    return 0;
}
