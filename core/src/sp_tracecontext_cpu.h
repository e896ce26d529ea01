/*
 * Which way sp_traceparent_format writes its hex digits, so that the tests
 * check both on a machine that has SSSE3. Private to the core.
 */
#ifndef SP_TRACECONTEXT_CPU_H
#define SP_TRACECONTEXT_CPU_H

#include <stdbool.h>

/* Whether the CPU has SSSE3 (pshufb), as found at load time. */
bool sp_traceparent_ssse3_available(void);

/* Tests only, before any other thread formats: the pshufb way (on, where
 * available) or the SSE2 one. */
void sp_traceparent_use_ssse3(bool on);

#endif
