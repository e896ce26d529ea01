/*
 * Random trace and span ids.
 *
 * A generator is AES-128 in counter mode where the CPU has AES-NI, else a
 * xoshiro256** PRNG, seeded from the kernel, so drawing an id costs no
 * syscall. It is not thread-safe by design: each thread (and,
 * after fork, each process) owns its own generator, or reseeds the one it
 * inherited (see sp_idgen_reseed).
 */
#ifndef SP_IDS_H
#define SP_IDS_H

#include "sp_common.h"
#include "sp_tracecontext.h"

typedef struct sp_idgen sp_idgen;

/*
 * A generator seeded from getrandom(2), or /dev/urandom where that is
 * unavailable. NULL when memory or the kernel's randomness is unavailable.
 */
SP_API sp_idgen *sp_idgen_create(void);

/*
 * A generator whose 64-bit words all come from next(ctx) instead of the
 * PRNG: for tests, which need to choose the words (zeros included). A
 * trace id takes two words, a span id one, most significant byte first.
 * next must eventually return non-zero, or drawing an id never ends.
 * NULL when out of memory.
 */
SP_API sp_idgen *sp_idgen_create_from(uint64_t (*next)(void *ctx),
                                      void *ctx);

/* Accepts NULL. */
SP_API void sp_idgen_destroy(sp_idgen *gen);

/*
 * Gives gen a fresh seed from the kernel. A forked child inherits its
 * parent's state and would repeat the parent's (and its siblings') ids, so
 * every server worker calls this once after fork. If the kernel cannot be
 * read, the state is still mixed with the pid and the clock, so siblings
 * diverge, and SP_ERR_IO says the ids are weaker than usual. Does nothing
 * to a generator made by sp_idgen_create_from.
 */
SP_API sp_status sp_idgen_reseed(sp_idgen *gen);

/* Fill out with a random id that is never all zeros. */
SP_API void sp_idgen_trace_id(sp_idgen *gen, uint8_t out[SP_TRACE_ID_SIZE]);
SP_API void sp_idgen_span_id(sp_idgen *gen, uint8_t out[SP_SPAN_ID_SIZE]);

/* A trace id and then a span id, as the two calls above draw them: a new
 * trace's entry span takes both for every request. */
SP_API void sp_idgen_ids(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE]);

/*
 * A new trace's span context: its ids drawn as sp_idgen_ids() draws them,
 * its flags 0, and its traceparent as sp_traceparent_format() writes it.
 * With AES the digits are written from the registers the ids are drawn
 * into (~45 instructions fewer a request than the two calls, callgrind).
 */
SP_API void sp_idgen_new_trace(sp_idgen *gen, sp_span_context *ctx,
    char traceparent[SP_TRACEPARENT_SIZE]);

#endif
