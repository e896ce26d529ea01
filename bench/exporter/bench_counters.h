/*
 * The exporter's counters on stdout, as its log line gives them: what a
 * bench run did, to read next to its figures.
 */
#ifndef BENCH_COUNTERS_H
#define BENCH_COUNTERS_H

#include <stdio.h>

#include "sp_exporter.h"

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
