/*
 * The clocks the exporter side reads: monotonic milliseconds for
 * intervals and deadlines, real-time nanoseconds for timestamps.
 */
#ifndef SP_CLOCK_H
#define SP_CLOCK_H

#include "sp_common.h"

SP_API uint64_t sp_monotonic_ms(void);
SP_API uint64_t sp_realtime_ns(void);

#endif
