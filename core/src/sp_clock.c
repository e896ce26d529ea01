/* See sp_clock.h. */
#include "sp_clock.h"

#include <time.h>

uint64_t
sp_monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
sp_realtime_ns(void)
{
    return sp_clock_ns(CLOCK_REALTIME);
}

uint64_t
sp_clock_ns(int clock)
{
    struct timespec ts;

    clock_gettime((clockid_t)clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
