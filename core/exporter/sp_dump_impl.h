/*
 * What the files of sp_dump (sp_dump.c: the store and OTLP/JSON;
 * sp_dump_pprof.c: profiles; sp_dump_query.c: the questions) share.
 * Private to core/exporter/.
 */
#ifndef SP_DUMP_IMPL_H
#define SP_DUMP_IMPL_H

#include "sp_dump.h"

#define SP_DUMP_NO_STRING UINT32_MAX

/* An interned string: every name is kept once and named by its index. */
typedef struct sp_dump_str {
    char    *s;
    size_t   len;
    uint64_t hash;
} sp_dump_str;

/* One aggregated stack: its identity, then its values. */
typedef struct sp_dump_stack {
    uint8_t   trace[16];
    uint8_t   span[8];
    uint32_t  service;
    uint8_t   source;
    uint32_t  nframes;
    uint32_t *frames;           /* string indices, leaf first */
    uint64_t  hash;
    int64_t   samples;
    int64_t   cpu_ns;
} sp_dump_stack;

typedef struct sp_dump_spanrec {
    uint8_t  trace[16];
    uint8_t  span[8];
    uint8_t  parent[8];
    uint32_t name;
    uint32_t service;
    uint64_t start_ns, end_ns;
} sp_dump_spanrec;

/* Open addressing over indices + 1 (0: empty). */
typedef struct sp_dump_index {
    uint32_t *slots;
    size_t    cap;              /* a power of two, or 0 */
} sp_dump_index;

struct sp_dump {
    sp_dump_options  opt;
    size_t           mem;
    sp_dump_stats    stats;

    sp_dump_str     *strs;
    size_t           nstrs, capstrs;
    sp_dump_index    str_index;

    sp_dump_stack   *stacks;
    size_t           nstacks, capstacks;
    sp_dump_index    stack_index;

    sp_dump_spanrec *spans;
    size_t           nspans, capspans;
};

/* Adds bytes to what d holds: SP_ERR_TOO_LONG past max_memory. */
sp_status sp_dump_charge(sp_dump *d, size_t bytes);

/* n bytes from exactly 2n hex digits of either case. */
bool sp_dump_unhex(const char *s, size_t len, uint8_t *out, size_t n);

/* The index of s[0..len) (made valid UTF-8), added when new. */
sp_status sp_dump_intern(sp_dump *d, const char *s, size_t len,
                         uint32_t *out);
sp_status sp_dump_intern_cstr(sp_dump *d, const char *s, uint32_t *out);

/* The index of a string already interned, or SIZE_MAX. */
size_t sp_dump_find_string(const sp_dump *d, const char *s, size_t len);

/* Adds key's values to its stack, creating it (frames copied). */
sp_status sp_dump_stack_add(sp_dump *d, sp_dump_stack *key);

/* One serialized Profile: SP_ERR_INVALID for any profile that cannot be
   read, whatever the reason; other errors are the dump's own. */
sp_status sp_dump_profile_bytes(sp_dump *d, const void *bytes, size_t len,
                                uint32_t service, uint8_t source);

#endif
