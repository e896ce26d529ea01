/*
 * An index of one libdwfl module's symbol table, for the symbolizer
 * (sp_symbolizer.c). Private to core/exporter/.
 *
 * dwfl_module_addrinfo reads the whole symbol table at every call (libc's
 * .symtab: 10,000 symbols, about 0.2 ms). The index is built once per
 * module: its symbols sorted by address, so the ones that contain an
 * address are found by binary search. It answers the symbolizer's
 * question, the symbol dwfl_module_addrinfo names for an address when
 * that symbol contains it, with the symbol dwfl_module_addrinfo would
 * pick (the same preferences between aliases and overlapping symbols,
 * the same passes over global then local symbols). When an answer would
 * depend on what the index does not keep (a symbol of size 0 at the
 * address, a value libdwfl resolved through a function descriptor, more
 * overlapping symbols than it looks at), it says to ask libdwfl.
 */
#ifndef SP_SYMINDEX_H
#define SP_SYMINDEX_H

#include "sp_common.h"

#include <elfutils/libdwfl.h>

typedef struct sp_symindex sp_symindex;

/* sp_symindex_find: no symbol contains the address (dwfl_module_addrinfo
   names none, or one that does not contain it). */
#define SP_SYMINDEX_NONE 0
/* sp_symindex_find: call dwfl_module_addrinfo for this address. */
#define SP_SYMINDEX_ASK  (-1)

/* The heap an index of a table of `symbols` entries can take at most. */
size_t sp_symindex_max_bytes(int symbols);

/*
 * Indexes mod's symbol table (the one dwfl_module_getsymtab chooses).
 * SP_OK, or SP_ERR_NOMEM (*out NULL).
 */
sp_status sp_symindex_build(Dwfl_Module *mod, sp_symindex **out);

/* The heap the index holds. */
size_t sp_symindex_bytes(const sp_symindex *x);

void sp_symindex_free(sp_symindex *x);

/*
 * For an address of the module (its own addresses, as for
 * dwfl_module_addrinfo): the symbol's number for dwfl_module_getsym_info
 * (> 0) when dwfl_module_addrinfo's answer contains the address (st_size
 * 0: is at it; else st_value <= address < st_value + st_size), whatever
 * its type; SP_SYMINDEX_NONE; or SP_SYMINDEX_ASK.
 */
int sp_symindex_find(const sp_symindex *x, uint64_t address);

#endif
