/*
 * The clocks the exporter side reads: monotonic milliseconds for
 * intervals and deadlines, real-time nanoseconds for timestamps.
 */
#ifndef SP_CLOCK_H
#define SP_CLOCK_H

#include "sp_common.h"

SP_API uint64_t sp_monotonic_ms(void);
SP_API uint64_t sp_realtime_ns(void);

/* Nanoseconds of any clock_gettime clock (a clockid_t); async-signal-safe. */
SP_API uint64_t sp_clock_ns(int clock);

#endif
