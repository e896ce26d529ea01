#include "sp_symindex.h"

#include <gelf.h>
#include <stdlib.h>
#include <string.h>

/*
 * Past these, an address is left to libdwfl: more symbols containing it
 * than SP_STAB_MAX, or more than SP_WALK_MAX entries looked at below it
 * (a symbol spanning much of the file makes every search below its end
 * walk back to it). Real files stay far under both.
 */
#define SP_STAB_MAX 16
#define SP_WALK_MAX 64

/* A symbol of nonzero size. */
typedef struct sp_symrange {
    uint64_t start;     /* the value libdwfl compares (st_value, placed) */
    uint64_t size;
    uint64_t reach;     /* the highest start + size of it and all before */
    uint32_t ndx;       /* libdwfl's number */
    uint8_t  bind;      /* libdwfl's preference: global, weak, local */
    uint8_t  first;     /* among the global symbols, searched first */
} sp_symrange;

struct sp_symindex {
    sp_symrange *ranges;        /* by start */
    size_t       count;
    uint64_t    *labels;        /* the symbols of size 0, sorted */
    size_t       label_count;
    bool         ask;           /* libdwfl for every address */
};

size_t
sp_symindex_max_bytes(int symbols)
{
    size_t n = symbols > 0 ? (size_t)symbols : 0;

    return sizeof(sp_symindex) + n * (sizeof(sp_symrange) + sizeof(uint64_t));
}

/* libdwfl's order of preference between bindings, higher first. */
static uint8_t
sp_bind_rank(const GElf_Sym *sym)
{
    switch (GELF_ST_BIND(sym->st_info)) {
    case STB_GLOBAL:
        return 3;
    case STB_WEAK:
        return 2;
    case STB_LOCAL:
        return 1;
    default:
        return 0;
    }
}

static int
sp_range_cmp(const void *a, const void *b)
{
    const sp_symrange *x = a, *y = b;

    if (x->start != y->start) {
        return x->start < y->start ? -1 : 1;
    }
    return x->ndx < y->ndx ? -1 : x->ndx > y->ndx;
}

static int
sp_label_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;

    return *x < *y ? -1 : *x > *y;
}

void
sp_symindex_free(sp_symindex *x)
{
    if (x != NULL) {
        free(x->ranges);
        free(x->labels);
        free(x);
    }
}

size_t
sp_symindex_bytes(const sp_symindex *x)
{
    return x == NULL ? 0 : sizeof(*x)
                           + x->count * sizeof(*x->ranges)
                           + x->label_count * sizeof(*x->labels);
}

/*
 * Whether libdwfl looks at symbol ndx at all: named, defined, not a
 * section, file or TLS symbol. False also when a symbol's value is not
 * its st_value placed (a function descriptor's target on ppc64, a value
 * libdwfl does not place): libdwfl tries such a symbol at two values,
 * which the index does not keep, so x->ask is set.
 */
static bool
sp_symbol_seen(sp_symindex *x, Dwfl_Module *mod, int ndx, GElf_Sym *sym,
    GElf_Addr *value)
{
    GElf_Word   shndx;
    Elf        *elf;
    Dwarf_Addr  bias;
    const char *name;
    int         type;

    name = dwfl_module_getsym_info(mod, ndx, sym, value, &shndx, &elf,
                                   &bias);
    if (name == NULL || name[0] == '\0' || sym->st_shndx == SHN_UNDEF) {
        return false;
    }
    type = GELF_ST_TYPE(sym->st_info);
    if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) {
        return false;
    }
    if ((type == STT_FUNC || type == STT_GNU_IFUNC)
        && *value != sym->st_value + bias)
    {
        x->ask = true;
        return false;
    }
    return true;
}

sp_status
sp_symindex_build(Dwfl_Module *mod, sp_symindex **out)
{
    sp_symindex *x;
    sp_symrange *r;
    GElf_Sym     sym;
    GElf_Addr    value;
    uint64_t     reach = 0;
    int          n, first, i;
    size_t       j;

    *out = NULL;
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        return SP_ERR_NOMEM;
    }
    n = dwfl_module_getsymtab(mod);
    first = n < 0 ? -1 : dwfl_module_getsymtab_first_global(mod);
    /* No table: libdwfl names nothing, and the empty index neither. */
    if (n <= 1 || first < 0) {
        *out = x;
        return SP_OK;
    }
    /* libdwfl searches the global symbols first, the local ones (numbered
       before them) only if no global one answered. */
    if (first == 0) {
        first = 1;
    }
    x->ranges = malloc((size_t)(n - 1) * sizeof(*x->ranges));
    x->labels = malloc((size_t)(n - 1) * sizeof(*x->labels));
    if (x->ranges == NULL || x->labels == NULL) {
        sp_symindex_free(x);
        return SP_ERR_NOMEM;
    }
    for (i = 1; i < n && !x->ask; i++) {
        if (!sp_symbol_seen(x, mod, i, &sym, &value)) {
            continue;
        }
        if (sym.st_size == 0) {
            x->labels[x->label_count++] = value;
            continue;
        }
        r = &x->ranges[x->count++];
        r->start = value;
        r->size = sym.st_size;
        r->ndx = (uint32_t)i;
        r->bind = sp_bind_rank(&sym);
        r->first = i >= first;
    }
    if (x->ask) {
        free(x->ranges);
        free(x->labels);
        x->ranges = NULL;
        x->labels = NULL;
        x->count = 0;
        x->label_count = 0;
        *out = x;
        return SP_OK;
    }
    qsort(x->ranges, x->count, sizeof(*x->ranges), sp_range_cmp);
    qsort(x->labels, x->label_count, sizeof(*x->labels), sp_label_cmp);
    for (j = 0; j < x->count; j++) {
        r = &x->ranges[j];
        if (r->start + r->size < r->start) {
            reach = UINT64_MAX;
        } else if (r->start + r->size > reach) {
            reach = r->start + r->size;
        }
        r->reach = reach;
    }
    *out = x;
    return SP_OK;
}

/*
 * libdwfl's choice among the symbols that contain the address in one
 * pass, taken in its order (their numbers): a later one wins if it starts
 * nearer, or binds more strongly, or starts at the same place and is
 * smaller without binding less strongly.
 */
static const sp_symrange *
sp_pick(const sp_symrange *const *c, size_t n, uint8_t first)
{
    const sp_symrange *best = NULL, *r;
    size_t             i;

    for (i = 0; i < n; i++) {
        r = c[i];
        if (r->first != first) {
            continue;
        }
        if (best == NULL || best->start < r->start || best->bind < r->bind
            || (best->start == r->start && best->size > r->size
                && best->bind <= r->bind))
        {
            best = r;
        }
    }
    return best;
}

static bool
sp_label_at(const sp_symindex *x, uint64_t a)
{
    return x->label_count > 0
           && bsearch(&a, x->labels, x->label_count, sizeof(*x->labels),
                      sp_label_cmp) != NULL;
}

int
sp_symindex_find(const sp_symindex *x, uint64_t a)
{
    const sp_symrange *c[SP_STAB_MAX];
    const sp_symrange *r, *best;
    size_t             lo = 0, hi, mid, n = 0, i, k;

    if (x->ask) {
        return SP_SYMINDEX_ASK;
    }
    /* Past the last symbol that starts at or below a. */
    hi = x->count;
    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (x->ranges[mid].start <= a) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    /* Back while a symbol at or below might still reach past a. */
    for (i = lo; i > 0 && x->ranges[i - 1].reach > a; i--) {
        r = &x->ranges[i - 1];
        if (lo - i == SP_WALK_MAX) {
            return SP_SYMINDEX_ASK;
        }
        if (a - r->start < r->size) {
            if (n == SP_STAB_MAX) {
                return SP_SYMINDEX_ASK;
            }
            /* Kept in libdwfl's order, by number. */
            for (k = n; k > 0 && c[k - 1]->ndx > r->ndx; k--) {
                c[k] = c[k - 1];
            }
            c[k] = r;
            n++;
        }
    }
    best = sp_pick(c, n, 1);
    if (best != NULL) {
        return (int)best->ndx;
    }
    /* Whether a symbol of size 0 at a is the answer depends on the order
       of the symbols below it (libdwfl's same-section and label rules):
       rare, as a return address is never a symbol's first byte. */
    if (sp_label_at(x, a)) {
        return SP_SYMINDEX_ASK;
    }
    best = sp_pick(c, n, 0);
    return best != NULL ? (int)best->ndx : SP_SYMINDEX_NONE;
}
