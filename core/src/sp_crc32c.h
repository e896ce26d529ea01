/*
 * CRC32C (Castagnoli, the iSCSI and ext4 CRC): the ring's record checksum.
 *
 * Chosen over a multiplicative hash because x86-64 computes it eight bytes
 * an instruction (SSE4.2 crc32), and because it is a CRC: every error of
 * up to 32 adjacent bits, and every error of up to five bits in a record
 * of up to 655 bytes, changes it, where a hash only makes a miss unlikely.
 *
 * The hardware is looked for once, when the program or module is loaded,
 * so the signal handler only reads a flag. Both paths give the same value:
 * a writer and a reader on different paths still agree.
 */
#ifndef SP_CRC32C_H
#define SP_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The path sp_crc32c takes (software or SSE4.2), set once at load time,
 * before any caller runs; only sp_crc32c reads it. Hidden, as the build
 * makes every definition: said here too, so that position-independent
 * code reads it directly rather than through the GOT.
 */
extern __attribute__((visibility("hidden"))) uint32_t
(*sp_crc32c_path)(uint32_t crc, const void *p, size_t len);

/*
 * The CRC32C of len bytes at p, continued from crc: pass 0 to start, or an
 * earlier result to go on, so that sp_crc32c(sp_crc32c(0, a, n), b, m) is
 * the CRC of a and b one after the other. Async-signal-safe. Inline, a
 * call through the path: a function of its own was one jump more a
 * record on each side of the ring (callgrind).
 */
static inline uint32_t
sp_crc32c(uint32_t crc, const void *p, size_t len)
{
    return sp_crc32c_path(crc, p, len);
}

/* The table-driven software path, the same value on every machine. */
uint32_t sp_crc32c_soft(uint32_t crc, const void *p, size_t len);

/* Whether sp_crc32c uses the crc32 instruction (for tests and reports). */
bool sp_crc32c_hardware(void);

#if defined(__x86_64__)
/* The SSE4.2 path; only where sp_crc32c_hardware() says it may run. */
uint32_t sp_crc32c_sse42(uint32_t crc, const void *p, size_t len);
#endif

#endif
