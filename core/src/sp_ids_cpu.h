/*
 * Which way a generator draws its ids, so that the tests check both on a
 * machine that has AES-NI, and AES's own test vectors. Private to the
 * core.
 */
#ifndef SP_IDS_CPU_H
#define SP_IDS_CPU_H

#include "sp_ids.h"

/* Whether the CPU has AES-NI (and SSSE3 and SSE4.1), as found at load
 * time. */
bool sp_idgen_aes_available(void);

/* Tests only, before any other thread makes a generator: those made from
 * now on draw with AES (on, where available) or with xoshiro256**. */
void sp_idgen_use_aes(bool on);

/* Tests only: a generator drawing with AES-128 under key from the counter
 * ctr (its first eight bytes a little-endian count); NULL without
 * AES-NI. */
sp_idgen *sp_idgen_create_aes(const uint8_t key[16], const uint8_t ctr[16]);

#endif
