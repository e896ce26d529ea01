/*
 * What the exporter benches share: an exporter loop reading a region as
 * nginx's would, on a clock the bench moves (bench_ms), and its counters
 * on stdout, as its log line gives them, to read next to the figures.
 */
#ifndef BENCH_LOOP_H
#define BENCH_LOOP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sp_exporter.h"

static uint64_t bench_ms;

static uint64_t
bench_clock_ms(void *ctx)
{
    (void)ctx;
    return bench_ms;
}

/* The loop, or the program ends saying why. */
static sp_exporter_loop *
bench_exporter_new(const sp_config *c, sp_region *region)
{
    sp_exporter_options o;
    sp_exporter_loop   *e;
    char                err[256];

    memset(&o, 0, sizeof(o));
    o.config = c;
    o.region = region;
    o.server = "nginx";
    o.pid = (uint32_t)getpid() + 1;
    o.now_ms = bench_clock_ms;
    if (sp_exporter_create(&o, &e, err, sizeof(err)) != SP_OK) {
        fprintf(stderr, "exporter: %s\n", err);
        exit(1);
    }
    return e;
}

static void
bench_print_counters(sp_exporter_loop *e)
{
    sp_exporter_counters k;
    char                 line[1024];

    sp_exporter_counters_get(e, &k);
    sp_exporter_counters_format(&k, line, sizeof(line));
    printf("%s\n", line);
}

#endif
