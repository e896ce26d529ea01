/*
 * An index of the scopes of one libdwfl module's DWARF units, for the
 * symbolizer (sp_symbolizer.c). Private to core/exporter/.
 *
 * To name an address with its inlined calls, the symbolizer needs the
 * innermost scope (function, inlined call, lexical block) at it and that
 * scope's parents. libdw finds them by walking the unit's DIEs twice per
 * address: dwarf_getscopes for the innermost scope, dwarf_getscopes_die
 * for its parents (libc with libc6-dbg: 0.9 M instructions of the 1.05 M
 * an address cost). The index walks a unit once, at its first address,
 * and keeps its scopes' address ranges in tree order; an address is then
 * a binary search among the unit's functions and a walk down the few
 * scopes nested in the one found.
 *
 * It answers as the two calls do, by the same rules: the scopes a walk
 * from the unit looks at (its children and theirs through lexical
 * blocks, functions, inlined calls, namespaces, classes, structures;
 * imported units in place), a scope entered only when it contains the
 * address, the first innermost one found, and none when its nearest
 * inlined call has an abstract origin that cannot be read or that the
 * walk would not find. A unit the index cannot answer for exactly (an
 * error reading it, a scope with addresses inside an imported unit, more
 * than the bound given) is left to libdw's walks.
 */
#ifndef SP_SCOPEINDEX_H
#define SP_SCOPEINDEX_H

#include "sp_common.h"

#include <elfutils/libdw.h>

typedef struct sp_scopeindex sp_scopeindex;

/*
 * An empty index (units are indexed as addresses come), or NULL when out
 * of memory. unit_max_bytes: a unit whose index, or its reading, would
 * take more is left to libdw.
 */
sp_scopeindex *sp_scopeindex_new(size_t unit_max_bytes);

void sp_scopeindex_free(sp_scopeindex *x);

/* The heap the index holds. */
size_t sp_scopeindex_bytes(const sp_scopeindex *x);

/* The units met so far: indexed, and left to libdw. */
void sp_scopeindex_units(const sp_scopeindex *x, size_t *indexed,
    size_t *libdw);

/*
 * What dwarf_getscopes_die returns for the first scope dwarf_getscopes
 * returns at pc in cu (a unit's DIE, as dwfl_module_addrdie gives it):
 * the count of scopes from the innermost to the unit's DIE, and *scopes
 * (to free) set; or dwarf_getscopes' answer when it is not positive (0:
 * no scope; -1: an error), *scopes NULL. x NULL: libdw's walks.
 */
int sp_scopeindex_get(sp_scopeindex *x, Dwarf_Die *cu, Dwarf_Addr pc,
    Dwarf_Die **scopes);

/* The same answer from libdw's own walks. */
int sp_scopeindex_libdw(Dwarf_Die *cu, Dwarf_Addr pc, Dwarf_Die **scopes);

#endif
