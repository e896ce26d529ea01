#include "sp_scopeindex.h"

#include <dwarf.h>
#include <stdlib.h>
#include <string.h>

#define SP_UNITS_MIN 64     /* first size of the table of units */
#define SP_PATH_KEPT 16     /* scopes deep an answer needs no heap for */

/* An inlined call's abstract origin, as dwarf_getscopes finds it. */
enum {
    SP_ORIGIN_FOUND = 0,
    SP_ORIGIN_UNREAD,       /* no DW_AT_abstract_origin, or a bad one */
    SP_ORIGIN_UNSEEN        /* not among the DIEs a walk visits */
};

typedef struct sp_pcrange {
    uint64_t low;
    uint64_t high;          /* past the end; low < high */
} sp_pcrange;

/* A scope with addresses, in the order a walk from the unit meets it. */
typedef struct sp_scope {
    uint32_t die;           /* its offset from the unit's DIE */
    uint32_t end;           /* the index after the scopes nested in it */
    uint32_t range;         /* its first range in ranges */
    uint32_t ranges;
    uint8_t  inlined;       /* a DW_TAG_inlined_subroutine */
    uint8_t  origin;        /* inlined: SP_ORIGIN_* */
} sp_scope;

/* One range of a scope the unit's DIE holds. */
typedef struct sp_top {
    uint64_t low;
    uint32_t range;
    uint32_t scope;
} sp_top;

/* One unit's index: a single block, its arrays after the header. */
typedef struct sp_unit {
    Dwarf_Off   offset;     /* the unit's DIE's */
    size_t      bytes;
    sp_pcrange *ranges;
    sp_scope   *scopes;
    sp_top     *top;        /* by address; NULL: they overlap */
    uint32_t    count;
    uint32_t    top_count;
} sp_unit;

typedef struct sp_slot {
    const void *key;        /* the unit's DIE's address; NULL: free */
    sp_unit    *unit;
} sp_slot;

struct sp_scopeindex {
    sp_slot *slots;
    uint32_t mask;
    uint32_t used;
    size_t   bytes;
    size_t   unit_max;
};

/* A unit left to libdw's walks. */
static sp_unit sp_unit_libdw;

/* ---- building a unit's index */

typedef struct sp_pending {
    const void *origin;     /* the DIE's address */
    uint32_t    scope;
} sp_pending;

typedef struct sp_import {
    const void             *unit;   /* the DW_TAG_imported_unit's DIE */
    const struct sp_import *up;
} sp_import;

typedef struct sp_build {
    Dwarf_CU    *cu;
    Dwarf_Off    offset;
    size_t       bytes;     /* of the arrays below */
    size_t       max;
    sp_scope    *scopes;
    size_t       count, scopes_cap;
    sp_pcrange  *ranges;
    size_t       range_count, ranges_cap;
    const void **seen;      /* every DIE the walk visits */
    size_t       seen_count, seen_cap;
    sp_pending  *pending;   /* inlined calls' origins to find in seen */
    size_t       pending_count, pending_cap;
} sp_build;

/* Room for one more element; false past the bound or out of memory. */
static bool
sp_room(sp_build *b, void **array, size_t count, size_t *cap, size_t size)
{
    size_t n = *cap == 0 ? 64 : *cap * 2;
    void  *p;

    if (count < *cap) {
        return true;
    }
    if (b->bytes + (n - *cap) * size > b->max) {
        return false;
    }
    p = realloc(*array, n * size);
    if (p == NULL) {
        return false;
    }
    b->bytes += (n - *cap) * size;
    *array = p;
    *cap = n;
    return true;
}

/* The tags libdw's walk descends into (libdw_visit_scopes.c). */
static bool
sp_may_have_scopes(int tag)
{
    switch (tag) {
    case DW_TAG_compile_unit:
    case DW_TAG_module:
    case DW_TAG_lexical_block:
    case DW_TAG_with_stmt:
    case DW_TAG_catch_block:
    case DW_TAG_try_block:
    case DW_TAG_entry_point:
    case DW_TAG_inlined_subroutine:
    case DW_TAG_subprogram:
    case DW_TAG_namespace:
    case DW_TAG_class_type:
    case DW_TAG_structure_type:
        return true;
    default:
        return false;
    }
}

/*
 * One DIE of the walk. reach: dwarf_getscopes would ask whether it
 * contains the address (its parents are the unit or scopes); then, if it
 * has addresses, it is a scope (*scope). Any error reading it is -1: the
 * unit goes to libdw, whose walk meets the same error.
 */
static int
sp_visit(sp_build *b, Dwarf_Die *die, int tag, bool reach, bool *scope)
{
    Dwarf_Attribute attr;
    Dwarf_Die       origin;
    Dwarf_Addr      base, low, high;
    Dwarf_Off       off;
    sp_scope       *s;
    ptrdiff_t       at = 0;
    size_t          first = b->range_count;

    *scope = false;
    if (!sp_room(b, (void **)&b->seen, b->seen_count, &b->seen_cap,
                 sizeof(*b->seen)))
    {
        return -1;
    }
    b->seen[b->seen_count++] = die->addr;
    if (!reach) {
        return 0;
    }
    /* dwarf_haspc's question, every range kept. Without either of
       these (known from the abbreviation, not the DIE's data) dwarf_ranges
       has none for a DIE that is not a unit's. */
    if (!dwarf_hasattr(die, DW_AT_high_pc)
        && !dwarf_hasattr(die, DW_AT_ranges))
    {
        return 0;
    }
    while ((at = dwarf_ranges(die, at, &base, &low, &high)) > 0) {
        if (low >= high) {
            continue;
        }
        if (!sp_room(b, (void **)&b->ranges, b->range_count, &b->ranges_cap,
                     sizeof(*b->ranges)))
        {
            return -1;
        }
        b->ranges[b->range_count].low = low;
        b->ranges[b->range_count].high = high;
        b->range_count++;
    }
    if (at < 0) {
        return -1;
    }
    if (b->range_count == first) {
        return 0;
    }
    /* A scope of another unit (imported) would be named by its own
       offsets: not kept. */
    off = dwarf_dieoffset(die);
    if (die->cu != b->cu || off < b->offset || off - b->offset > UINT32_MAX
        || b->range_count > UINT32_MAX
        || !sp_room(b, (void **)&b->scopes, b->count, &b->scopes_cap,
                    sizeof(*b->scopes)))
    {
        return -1;
    }
    s = &b->scopes[b->count];
    memset(s, 0, sizeof(*s));
    s->die = (uint32_t)(off - b->offset);
    s->range = (uint32_t)first;
    s->ranges = (uint32_t)(b->range_count - first);
    if (tag == DW_TAG_inlined_subroutine) {
        s->inlined = 1;
        if (dwarf_formref_die(dwarf_attr(die, DW_AT_abstract_origin, &attr),
                              &origin) == NULL)
        {
            s->origin = SP_ORIGIN_UNREAD;
        } else {
            s->origin = SP_ORIGIN_UNSEEN;
            if (!sp_room(b, (void **)&b->pending, b->pending_count,
                         &b->pending_cap, sizeof(*b->pending)))
            {
                return -1;
            }
            b->pending[b->pending_count].origin = origin.addr;
            b->pending[b->pending_count].scope = (uint32_t)b->count;
            b->pending_count++;
        }
    }
    b->count++;
    *scope = true;
    return 0;
}

/*
 * The walk of libdw's __libdw_visit_scopes from child on, its siblings
 * after it: every DIE visited, descending into the tags it descends
 * into, an imported unit's children walked in its place.
 */
static int
sp_walk(sp_build *b, Dwarf_Die *child, bool reach, const sp_import *up)
{
    Dwarf_Attribute  attr;
    Dwarf_Die        import, unit, inner;
    const sp_import *i;
    sp_import        in;
    size_t           at;
    bool             scope;
    int              tag, rc;

    do {
        while ((tag = dwarf_tag(child)) == DW_TAG_imported_unit) {
            import = *child;
            if (dwarf_formref_die(dwarf_attr(&import, DW_AT_import, &attr),
                                  &unit) != NULL
                && dwarf_tag(&unit) != DW_TAG_compile_unit
                && dwarf_child(&unit, child) == 0)
            {
                for (i = up; i != NULL; i = i->up) {
                    if (i->unit == import.addr) {
                        return -1;
                    }
                }
                in.unit = import.addr;
                in.up = up;
                if (sp_walk(b, child, reach, &in) != 0) {
                    return -1;
                }
            }
            rc = dwarf_siblingof(&import, child);
            if (rc != 0) {
                return rc < 0 ? -1 : 0;
            }
        }
        at = b->count;
        if (sp_visit(b, child, tag, reach, &scope) != 0) {
            return -1;
        }
        if (sp_may_have_scopes(tag) && dwarf_haschildren(child)) {
            rc = dwarf_child(child, &inner);
            if (rc < 0 || (rc == 0 && sp_walk(b, &inner, scope, up) != 0)) {
                return -1;
            }
        }
        if (scope) {
            b->scopes[at].end = (uint32_t)b->count;
        }
    } while ((rc = dwarf_siblingof(child, child)) == 0);
    return rc < 0 ? -1 : 0;
}

static int
sp_addr_cmp(const void *a, const void *b)
{
    const void *x = *(const void *const *)a, *y = *(const void *const *)b;

    return x < y ? -1 : x > y;
}

/* Which inlined calls' origins the walk visited. */
static void
sp_find_origins(sp_build *b)
{
    size_t i;

    for (i = 1; i < b->seen_count; i++) {
        if (b->seen[i - 1] > b->seen[i]) {
            qsort(b->seen, b->seen_count, sizeof(*b->seen), sp_addr_cmp);
            break;
        }
    }
    for (i = 0; i < b->pending_count; i++) {
        if (bsearch(&b->pending[i].origin, b->seen, b->seen_count,
                    sizeof(*b->seen), sp_addr_cmp) != NULL)
        {
            b->scopes[b->pending[i].scope].origin = SP_ORIGIN_FOUND;
        }
    }
}

static int
sp_top_cmp(const void *a, const void *b)
{
    const sp_top *x = a, *y = b;

    return x->low < y->low ? -1 : x->low > y->low;
}

/*
 * The ranges of the unit's own scopes, by address, so that the one
 * containing an address is found by binary search. Only when no two
 * overlap: then at most one contains it, the one a walk in order would
 * enter. Else u->top stays NULL and the walk is done in order.
 */
static void
sp_sort_top(sp_unit *u)
{
    uint64_t reach = 0;
    uint32_t i, k, n = 0;

    for (i = 0; i < u->count; i = u->scopes[i].end) {
        for (k = 0; k < u->scopes[i].ranges; k++) {
            u->top[n].low = u->ranges[u->scopes[i].range + k].low;
            u->top[n].range = u->scopes[i].range + k;
            u->top[n].scope = i;
            n++;
        }
    }
    qsort(u->top, n, sizeof(*u->top), sp_top_cmp);
    for (k = 0; k < n; k++) {
        if (u->top[k].low < reach) {
            u->top = NULL;
            return;
        }
        reach = u->ranges[u->top[k].range].high;
    }
    u->top_count = n;
}

static sp_unit *
sp_unit_copy(sp_build *b)
{
    sp_unit *u;
    size_t   tops = 0, bytes, i;

    for (i = 0; i < b->count; i = b->scopes[i].end) {
        tops += b->scopes[i].ranges;
    }
    bytes = sizeof(*u) + b->range_count * sizeof(*u->ranges)
            + b->count * sizeof(*u->scopes) + tops * sizeof(*u->top);
    if (bytes > b->max) {
        return &sp_unit_libdw;
    }
    u = malloc(bytes);
    if (u == NULL) {
        return NULL;
    }
    memset(u, 0, sizeof(*u));
    u->offset = b->offset;
    u->bytes = bytes;
    u->count = (uint32_t)b->count;
    /* The arrays by alignment, the widest first. */
    u->ranges = (sp_pcrange *)(u + 1);
    u->top = (sp_top *)(u->ranges + b->range_count);
    u->scopes = (sp_scope *)(u->top + tops);
    if (b->range_count > 0) {
        memcpy(u->ranges, b->ranges, b->range_count * sizeof(*u->ranges));
    }
    if (b->count > 0) {
        memcpy(u->scopes, b->scopes, b->count * sizeof(*u->scopes));
    }
    sp_sort_top(u);
    return u;
}

/* The unit's index; &sp_unit_libdw when libdw must answer for it; NULL
   when out of memory. */
static sp_unit *
sp_unit_build(Dwarf_Die *cu, size_t max)
{
    sp_build  b;
    sp_unit  *u = &sp_unit_libdw;
    Dwarf_Die again, first;
    int       rc;

    memset(&b, 0, sizeof(b));
    b.cu = cu->cu;
    b.offset = dwarf_dieoffset(cu);
    b.max = max;
    /* The answers' DIEs are found again from their offsets, and their
       parents end with the unit's DIE as dwarf_getscopes_die's do. */
    if (dwarf_offdie(dwarf_cu_getdwarf(cu->cu), b.offset, &again) == NULL
        || again.addr != cu->addr
        || dwarf_cu_die(cu->cu, &again, NULL, NULL, NULL, NULL, NULL, NULL)
           == NULL
        || again.addr != cu->addr)
    {
        return u;
    }
    rc = dwarf_child(cu, &first);
    if (rc > 0 || (rc == 0 && sp_walk(&b, &first, true, NULL) == 0)) {
        sp_find_origins(&b);
        u = sp_unit_copy(&b);
    }
    free(b.scopes);
    free(b.ranges);
    free(b.seen);
    free(b.pending);
    return u;
}

/* ---- answering from it */

static bool
sp_contains(const sp_unit *u, const sp_scope *s, uint64_t pc)
{
    const sp_pcrange *r = &u->ranges[s->range];
    uint32_t          k;

    for (k = 0; k < s->ranges; k++) {
        if (pc >= r[k].low && pc < r[k].high) {
            return true;
        }
    }
    return false;
}

/* The unit's scope containing pc, or UINT32_MAX. */
static uint32_t
sp_top_find(const sp_unit *u, uint64_t pc)
{
    const sp_pcrange *r;
    uint32_t          lo = 0, hi = u->top_count, mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (u->top[mid].low <= pc) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == 0) {
        return UINT32_MAX;
    }
    r = &u->ranges[u->top[lo - 1].range];
    return pc < r->high ? u->top[lo - 1].scope : UINT32_MAX;
}

/*
 * The scopes dwarf_getscopes enters for pc, outermost first, the last
 * the innermost: their count, the first `room` of them in path.
 */
static uint32_t
sp_descend(const sp_unit *u, uint64_t pc, uint32_t *path, uint32_t room)
{
    uint32_t i = 0, end = u->count, depth = 0, t;

    if (u->top != NULL) {
        t = sp_top_find(u, pc);
        if (t == UINT32_MAX) {
            return 0;
        }
        if (room > 0) {
            path[0] = t;
        }
        depth = 1;
        i = t + 1;
        end = u->scopes[t].end;
    }
    while (i < end) {
        if (sp_contains(u, &u->scopes[i], pc)) {
            if (depth < room) {
                path[depth] = i;
            }
            depth++;
            end = u->scopes[i].end;
            i++;
        } else {
            i = u->scopes[i].end;
        }
    }
    return depth;
}

/* As sp_scopeindex_get, from u; -2 when it cannot (out of memory). */
static int
sp_unit_get(const sp_unit *u, Dwarf_Die *cu, uint64_t pc, Dwarf_Die **out)
{
    uint32_t         kept[SP_PATH_KEPT], *path = kept;
    uint32_t         depth, d;
    const sp_scope  *s = NULL;
    Dwarf_Die       *scopes;
    Dwarf           *dbg;
    int              n = -2;

    depth = sp_descend(u, pc, kept, SP_PATH_KEPT);
    if (depth == 0) {
        return 0;
    }
    if (depth > SP_PATH_KEPT) {
        path = malloc(depth * sizeof(*path));
        if (path == NULL) {
            return -2;
        }
        sp_descend(u, pc, path, depth);
    }
    /* dwarf_getscopes goes on from the innermost inlined call to its
       abstract origin, and fails where it cannot. */
    for (d = depth; d > 0; d--) {
        s = &u->scopes[path[d - 1]];
        if (s->inlined) {
            break;
        }
    }
    if (d > 0 && s->origin != SP_ORIGIN_FOUND) {
        n = s->origin == SP_ORIGIN_UNREAD ? -1 : 0;
        goto done;
    }
    if (depth >= INT32_MAX) {
        goto done;
    }
    scopes = malloc((depth + 1) * sizeof(*scopes));
    if (scopes == NULL) {
        goto done;
    }
    dbg = dwarf_cu_getdwarf(cu->cu);
    for (d = 0; d < depth; d++) {
        if (dwarf_offdie(dbg, u->offset + u->scopes[path[depth - 1 - d]].die,
                         &scopes[d]) == NULL)
        {
            free(scopes);
            goto done;
        }
    }
    scopes[depth] = *cu;
    *out = scopes;
    n = (int)depth + 1;
done:
    if (path != kept) {
        free(path);
    }
    return n;
}

/* ---- the units */

sp_scopeindex *
sp_scopeindex_new(size_t unit_max_bytes)
{
    sp_scopeindex *x = calloc(1, sizeof(*x));

    if (x == NULL) {
        return NULL;
    }
    x->slots = calloc(SP_UNITS_MIN, sizeof(*x->slots));
    if (x->slots == NULL) {
        free(x);
        return NULL;
    }
    x->mask = SP_UNITS_MIN - 1;
    x->unit_max = unit_max_bytes;
    x->bytes = sizeof(*x) + SP_UNITS_MIN * sizeof(*x->slots);
    return x;
}

void
sp_scopeindex_free(sp_scopeindex *x)
{
    uint32_t i;

    if (x == NULL) {
        return;
    }
    for (i = 0; i <= x->mask; i++) {
        if (x->slots[i].unit != &sp_unit_libdw) {
            free(x->slots[i].unit);
        }
    }
    free(x->slots);
    free(x);
}

size_t
sp_scopeindex_bytes(const sp_scopeindex *x)
{
    return x == NULL ? 0 : x->bytes;
}

void
sp_scopeindex_units(const sp_scopeindex *x, size_t *indexed, size_t *libdw)
{
    uint32_t i;

    *indexed = 0;
    *libdw = 0;
    for (i = 0; x != NULL && i <= x->mask; i++) {
        if (x->slots[i].unit == &sp_unit_libdw) {
            (*libdw)++;
        } else if (x->slots[i].unit != NULL) {
            (*indexed)++;
        }
    }
}

static uint32_t
sp_slot_of(const sp_scopeindex *x, const void *key)
{
    uint64_t h = (uint64_t)(uintptr_t)key * UINT64_C(0x9e3779b97f4a7c15);
    uint32_t i = (uint32_t)(h >> 32) & x->mask;

    while (x->slots[i].key != NULL && x->slots[i].key != key) {
        i = (i + 1) & x->mask;
    }
    return i;
}

/* Twice the slots; false (the table as it was) when out of memory. */
static bool
sp_grow(sp_scopeindex *x)
{
    sp_scopeindex bigger = *x;
    uint32_t      i;

    bigger.mask = x->mask * 2 + 1;
    bigger.slots = calloc((size_t)bigger.mask + 1, sizeof(*bigger.slots));
    if (bigger.slots == NULL) {
        return false;
    }
    for (i = 0; i <= x->mask; i++) {
        if (x->slots[i].key != NULL) {
            bigger.slots[sp_slot_of(&bigger, x->slots[i].key)] = x->slots[i];
        }
    }
    free(x->slots);
    bigger.bytes += ((size_t)x->mask + 1) * sizeof(*x->slots);
    *x = bigger;
    return true;
}

/* cu's index, built at its first address; NULL when out of memory. */
static sp_unit *
sp_unit_of(sp_scopeindex *x, Dwarf_Die *cu)
{
    sp_unit *u;
    uint32_t i = sp_slot_of(x, cu->addr);

    if (x->slots[i].key != NULL) {
        return x->slots[i].unit;
    }
    if ((x->used + 1) * 2 > x->mask + 1) {
        if (!sp_grow(x)) {
            return NULL;
        }
        i = sp_slot_of(x, cu->addr);
    }
    u = sp_unit_build(cu, x->unit_max);
    if (u == NULL) {
        return NULL;
    }
    x->slots[i].key = cu->addr;
    x->slots[i].unit = u;
    x->used++;
    if (u != &sp_unit_libdw) {
        x->bytes += u->bytes;
    }
    return u;
}

int
sp_scopeindex_libdw(Dwarf_Die *cu, Dwarf_Addr pc, Dwarf_Die **scopes)
{
    Dwarf_Die *found = NULL;
    Dwarf_Die  inner;
    int        n;

    *scopes = NULL;
    n = dwarf_getscopes(cu, pc, &found);
    if (n <= 0) {
        return n;
    }
    /* The innermost scope, then its parents in the tree: dwarf_getscopes
       itself goes on from an inlined call to the parents of its abstract
       origin, not to the function it was inlined into. */
    inner = found[0];
    free(found);
    n = dwarf_getscopes_die(&inner, scopes);
    if (n <= 0) {
        *scopes = NULL;
    }
    return n;
}

int
sp_scopeindex_get(sp_scopeindex *x, Dwarf_Die *cu, Dwarf_Addr pc,
    Dwarf_Die **scopes)
{
    sp_unit *u;
    int      n;

    *scopes = NULL;
    if (x == NULL || cu == NULL || cu->addr == NULL) {
        return sp_scopeindex_libdw(cu, pc, scopes);
    }
    u = sp_unit_of(x, cu);
    if (u == NULL || u == &sp_unit_libdw) {
        return sp_scopeindex_libdw(cu, pc, scopes);
    }
    n = sp_unit_get(u, cu, pc, scopes);
    return n == -2 ? sp_scopeindex_libdw(cu, pc, scopes) : n;
}
