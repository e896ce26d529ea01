/*
 * The ring's cost per record, writer and reader, counted in instructions:
 * a 400-byte span-sized record written, read and consumed, many times.
 * Meant to run under callgrind, which counts each side apart:
 *
 *   valgrind --tool=callgrind --toggle-collect=sp_ring_write \
 *       build/bench/ring_bench 100000
 *   (then --toggle-collect=sp_ring_read; divide by the records)
 *
 * Without valgrind it prints the wall time per record, for what that is
 * worth on a shared machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sp_ring.h"

#define BENCH_RING   (1u << 16)
#define BENCH_RECORD 400

int
main(int argc, char **argv)
{
    long             n = argc > 1 ? atol(argv[1]) : 100000, i;
    size_t           size = sp_region_size(1, BENCH_RING);
    unsigned char    body[BENCH_RECORD];
    void            *mem;
    sp_region       *region;
    sp_ring         *r;
    sp_record_view   v;
    struct timespec  t0, t1;

    for (i = 0; i < BENCH_RECORD; i++) {
        body[i] = (unsigned char)(i * 7 + 3);
    }
    if (posix_memalign(&mem, 64, size) != 0
        || sp_region_init(mem, size, 1, BENCH_RING) != SP_OK
        || sp_region_attach(mem, size, &region) != SP_OK)
    {
        fprintf(stderr, "ring_bench: no region\n");
        return 1;
    }
    r = sp_region_ring(region, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < n; i++) {
        if (sp_ring_write(r, SP_RECORD_SPAN, body, sizeof(body)) != SP_OK
            || sp_ring_read(r, &v) != SP_OK || v.len != sizeof(body)
            || sp_ring_consume(r, &v) != SP_OK)
        {
            fprintf(stderr, "ring_bench: record %ld lost\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%ld records of %d bytes: %.1f ns each, written and read\n", n,
           BENCH_RECORD,
           ((double)(t1.tv_sec - t0.tv_sec) * 1e9
            + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)(n > 0 ? n : 1));
    sp_region_detach(region);
    free(mem);
    return 0;
}
