#include "sp_dump.h"
#include "sp_gunzip.h"
#include "sp_json.h"

#include "perftools/profiles/profile.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- small helpers */

static uint64_t
sp_dump_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    size_t         i;

    for (i = 0; i < n; i++) {
        h = (h ^ b[i]) * 0x100000001b3ULL;
    }
    return h;
}

#define SP_DUMP_FNV_INIT 0xcbf29ce484222325ULL

static sp_status
sp_dump_charge(sp_dump *d, size_t bytes)
{
    if (bytes > d->opt.max_memory - d->mem) {
        return SP_ERR_TOO_LONG;
    }
    d->mem += bytes;
    return SP_OK;
}

/* Grows *arr (of *cap elements of size) to hold n + 1, charging d. */
static sp_status
sp_dump_grow(sp_dump *d, void **arr, size_t *cap, size_t n, size_t size)
{
    size_t ncap;
    void  *p;

    if (n < *cap) {
        return SP_OK;
    }
    ncap = *cap ? *cap * 2 : 64;
    if (ncap > SIZE_MAX / size / 2
        || sp_dump_charge(d, (ncap - *cap) * size) != SP_OK)
    {
        return SP_ERR_TOO_LONG;
    }
    p = realloc(*arr, ncap * size);
    if (p == NULL) {
        d->mem -= (ncap - *cap) * size;
        return SP_ERR_NOMEM;
    }
    *arr = p;
    *cap = ncap;
    return SP_OK;
}

static int
sp_dump_hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* n bytes from exactly 2n hex digits. */
static bool
sp_dump_unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    size_t i;
    int    hi, lo;

    if (s == NULL || len != 2 * n) {
        return false;
    }
    for (i = 0; i < n; i++) {
        hi = sp_dump_hexval(s[2 * i]);
        lo = sp_dump_hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static void
sp_dump_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t            i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool
sp_dump_zero(const uint8_t *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (b[i] != 0) {
            return false;
        }
    }
    return true;
}

/*
 * An id of OTLP/JSON: hex as OTLP says, or base64 as protobuf's own JSON
 * mapping writes bytes. Absent or empty: all zero (no id).
 */
static bool
sp_dump_json_id(const sp_json_value *v, uint8_t *out, size_t n)
{
    const char *s;
    size_t      len;
    sp_buf      b = SP_BUF_INIT(16);
    bool        ok;

    memset(out, 0, n);
    s = sp_json_string(v, &len);
    if (s == NULL || len == 0) {
        return v == NULL || s != NULL;
    }
    if (sp_dump_unhex(s, len, out, n)) {
        return true;
    }
    ok = sp_base64_decode(&b, s, len) == SP_OK && b.len == n;
    if (ok) {
        memcpy(out, b.data, n);
    }
    sp_buf_free(&b);
    return ok;
}

/* ---- the index: a set of indices into an array, found by hash */

typedef bool (*sp_dump_eq)(const sp_dump *d, size_t i, const void *key);

static sp_status
sp_dump_index_insert(sp_dump *d, sp_dump_index *ix, uint64_t hash,
                     uint32_t id, size_t count);

static size_t
sp_dump_index_find(const sp_dump *d, const sp_dump_index *ix, uint64_t hash,
                   sp_dump_eq eq, const void *key)
{
    size_t mask, i;

    if (ix->cap == 0) {
        return SIZE_MAX;
    }
    mask = ix->cap - 1;
    for (i = hash & mask; ix->slots[i] != 0; i = (i + 1) & mask) {
        if (eq(d, ix->slots[i] - 1, key)) {
            return ix->slots[i] - 1;
        }
    }
    return SIZE_MAX;
}

static uint64_t sp_dump_hash_of(const sp_dump *d, const sp_dump_index *ix,
                                size_t i);

/* Keeps the load at most one half; count: entries after the insert. */
static sp_status
sp_dump_index_insert(sp_dump *d, sp_dump_index *ix, uint64_t hash,
                     uint32_t id, size_t count)
{
    size_t    mask, i, j, ncap;
    uint32_t *slots, *old;

    if (count * 2 > ix->cap) {
        ncap = ix->cap ? ix->cap * 2 : 256;
        if (sp_dump_charge(d, (ncap - ix->cap) * sizeof(*slots)) != SP_OK) {
            return SP_ERR_TOO_LONG;
        }
        slots = calloc(ncap, sizeof(*slots));
        if (slots == NULL) {
            d->mem -= (ncap - ix->cap) * sizeof(*slots);
            return SP_ERR_NOMEM;
        }
        old = ix->slots;
        for (j = 0; j < ix->cap; j++) {
            if (old[j] != 0) {
                mask = ncap - 1;
                i = sp_dump_hash_of(d, ix, old[j] - 1) & mask;
                while (slots[i] != 0) {
                    i = (i + 1) & mask;
                }
                slots[i] = old[j];
            }
        }
        free(old);
        ix->slots = slots;
        ix->cap = ncap;
    }
    mask = ix->cap - 1;
    for (i = hash & mask; ix->slots[i] != 0; i = (i + 1) & mask) {
    }
    ix->slots[i] = id + 1;
    return SP_OK;
}

static uint64_t
sp_dump_hash_of(const sp_dump *d, const sp_dump_index *ix, size_t i)
{
    return ix == &d->str_index ? d->strs[i].hash : d->stacks[i].hash;
}

/* ---- strings */

typedef struct sp_dump_strkey {
    const char *s;
    size_t      len;
} sp_dump_strkey;

static bool
sp_dump_str_eq(const sp_dump *d, size_t i, const void *key)
{
    const sp_dump_strkey *k = key;

    return d->strs[i].len == k->len && memcmp(d->strs[i].s, k->s, k->len) == 0;
}

/*
 * The index of s[0..len) made valid UTF-8, added when new. Names come
 * from protobuf strings, which nothing validated.
 */
static sp_status
sp_dump_intern(sp_dump *d, const char *s, size_t len, uint32_t *out)
{
    sp_buf         clean = SP_BUF_INIT(0);
    sp_dump_strkey key;
    sp_dump_str   *e;
    size_t         found;
    uint64_t       hash;
    sp_status      rc;

    if (!sp_utf8_valid(s, len)) {
        if (sp_utf8_sanitize(&clean, s, len) != SP_OK) {
            sp_buf_free(&clean);
            return SP_ERR_NOMEM;
        }
        s = (const char *)clean.data;
        len = clean.len;
    }
    key.s = s;
    key.len = len;
    hash = sp_dump_fnv(SP_DUMP_FNV_INIT, s, len);
    found = sp_dump_index_find(d, &d->str_index, hash, sp_dump_str_eq, &key);
    if (found != SIZE_MAX) {
        *out = (uint32_t)found;
        sp_buf_free(&clean);
        return SP_OK;
    }
    rc = d->nstrs >= UINT32_MAX - 1 ? SP_ERR_TOO_LONG
         : sp_dump_grow(d, (void **)&d->strs, &d->capstrs, d->nstrs,
                        sizeof(*d->strs));
    if (rc == SP_OK) {
        rc = sp_dump_charge(d, len + 1);
    }
    if (rc != SP_OK) {
        sp_buf_free(&clean);
        return rc;
    }
    e = &d->strs[d->nstrs];
    e->s = malloc(len + 1);
    if (e->s == NULL) {
        sp_buf_free(&clean);
        return SP_ERR_NOMEM;
    }
    memcpy(e->s, s, len);
    e->s[len] = '\0';
    e->len = len;
    e->hash = hash;
    sp_buf_free(&clean);
    rc = sp_dump_index_insert(d, &d->str_index, hash, (uint32_t)d->nstrs,
                              d->nstrs + 1);
    if (rc != SP_OK) {
        free(e->s);
        return rc;
    }
    *out = (uint32_t)d->nstrs++;
    return SP_OK;
}

static sp_status
sp_dump_intern_cstr(sp_dump *d, const char *s, uint32_t *out)
{
    return sp_dump_intern(d, s != NULL ? s : "", s != NULL ? strlen(s) : 0,
                          out);
}

/* ---- stacks */

static uint64_t
sp_dump_stack_hash(const sp_dump_stack *k)
{
    uint64_t h = SP_DUMP_FNV_INIT;

    h = sp_dump_fnv(h, k->trace, sizeof(k->trace));
    h = sp_dump_fnv(h, k->span, sizeof(k->span));
    h = sp_dump_fnv(h, &k->service, sizeof(k->service));
    h = sp_dump_fnv(h, &k->source, sizeof(k->source));
    return sp_dump_fnv(h, k->frames, k->nframes * sizeof(*k->frames));
}

static bool
sp_dump_stack_eq(const sp_dump *d, size_t i, const void *key)
{
    const sp_dump_stack *a = &d->stacks[i], *b = key;

    return a->nframes == b->nframes && a->service == b->service
           && a->source == b->source
           && memcmp(a->trace, b->trace, sizeof(a->trace)) == 0
           && memcmp(a->span, b->span, sizeof(a->span)) == 0
           && (a->nframes == 0
               || memcmp(a->frames, b->frames,
                         a->nframes * sizeof(*a->frames)) == 0);
}

/* Adds key's values to its stack, creating it (frames copied). */
static sp_status
sp_dump_stack_add(sp_dump *d, sp_dump_stack *key)
{
    sp_dump_stack *s;
    size_t         found, bytes;
    sp_status      rc;

    key->hash = sp_dump_stack_hash(key);
    found = sp_dump_index_find(d, &d->stack_index, key->hash,
                               sp_dump_stack_eq, key);
    if (found != SIZE_MAX) {
        s = &d->stacks[found];
        s->samples += key->samples;
        s->cpu_ns += key->cpu_ns;
        return SP_OK;
    }
    bytes = key->nframes * sizeof(*key->frames);
    rc = d->nstacks >= UINT32_MAX - 1 ? SP_ERR_TOO_LONG
         : sp_dump_grow(d, (void **)&d->stacks, &d->capstacks, d->nstacks,
                        sizeof(*d->stacks));
    if (rc == SP_OK) {
        rc = sp_dump_charge(d, bytes);
    }
    if (rc != SP_OK) {
        return rc;
    }
    s = &d->stacks[d->nstacks];
    *s = *key;
    s->frames = malloc(bytes ? bytes : 1);
    if (s->frames == NULL) {
        return SP_ERR_NOMEM;
    }
    if (bytes > 0) {
        memcpy(s->frames, key->frames, bytes);  /* NULL when empty */
    }
    rc = sp_dump_index_insert(d, &d->stack_index, s->hash,
                              (uint32_t)d->nstacks, d->nstacks + 1);
    if (rc != SP_OK) {
        free(s->frames);
        return rc;
    }
    d->nstacks++;
    return SP_OK;
}

/* ---- lifecycle */

sp_status
sp_dump_create(const sp_dump_options *options, sp_dump **out)
{
    sp_dump *d;

    *out = NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return SP_ERR_NOMEM;
    }
    if (options != NULL) {
        d->opt = *options;
    }
    if (d->opt.max_profile_bytes == 0) {
        d->opt.max_profile_bytes = SP_DUMP_DEFAULT_MAX_PROFILE;
    }
    if (d->opt.max_memory == 0) {
        d->opt.max_memory = SP_DUMP_DEFAULT_MAX_MEMORY;
    }
    *out = d;
    return SP_OK;
}

void
sp_dump_destroy(sp_dump *d)
{
    size_t i;

    if (d == NULL) {
        return;
    }
    for (i = 0; i < d->nstrs; i++) {
        free(d->strs[i].s);
    }
    for (i = 0; i < d->nstacks; i++) {
        free(d->stacks[i].frames);
    }
    free(d->strs);
    free(d->stacks);
    free(d->spans);
    free(d->str_index.slots);
    free(d->stack_index.slots);
    free(d);
}

void
sp_dump_get_stats(const sp_dump *d, sp_dump_stats *out)
{
    *out = d->stats;
}

/* ---- pprof */

typedef Perftools__Profiles__Profile  sp_pb_profile;
typedef Perftools__Profiles__Location sp_pb_location;
typedef Perftools__Profiles__Function sp_pb_function;

/* Locations and functions by id: pprof ids are arbitrary, usually
   1..n in order, which is tried first. */
typedef struct sp_dump_byid {
    uint64_t    id;
    const void *item;
} sp_dump_byid;

static int
sp_dump_byid_cmp(const void *a, const void *b)
{
    uint64_t x = ((const sp_dump_byid *)a)->id;
    uint64_t y = ((const sp_dump_byid *)b)->id;

    return x < y ? -1 : x > y;
}

typedef struct sp_dump_table {
    sp_dump_byid *sorted;       /* NULL when item i has id i + 1 */
    void * const *items;
    size_t        n;
} sp_dump_table;

static sp_status
sp_dump_table_init(sp_dump_table *t, void * const *items, size_t n,
                   size_t id_offset)
{
    size_t i;

    t->items = items;
    t->n = n;
    t->sorted = NULL;
    for (i = 0; i < n; i++) {
        if (*(const uint64_t *)((const char *)items[i] + id_offset) != i + 1) {
            break;
        }
    }
    if (i == n) {
        return SP_OK;
    }
    t->sorted = malloc((n ? n : 1) * sizeof(*t->sorted));
    if (t->sorted == NULL) {
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < n; i++) {
        t->sorted[i].id = *(const uint64_t *)((const char *)items[i]
                                              + id_offset);
        t->sorted[i].item = items[i];
    }
    qsort(t->sorted, n, sizeof(*t->sorted), sp_dump_byid_cmp);
    return SP_OK;
}

static const void *
sp_dump_table_get(const sp_dump_table *t, uint64_t id)
{
    sp_dump_byid  key, *hit;

    if (t->sorted == NULL) {
        return id >= 1 && id <= t->n ? t->items[id - 1] : NULL;
    }
    key.id = id;
    hit = bsearch(&key, t->sorted, t->n, sizeof(*t->sorted),
                  sp_dump_byid_cmp);
    return hit != NULL ? hit->item : NULL;
}

/* The string at index i of the profile's table, or NULL. */
static const char *
sp_dump_pstr(const sp_pb_profile *p, int64_t i)
{
    return i >= 0 && (uint64_t)i < p->n_string_table ? p->string_table[i]
                                                     : NULL;
}

/* Which value of a sample is type/unit; -1 when none is. */
static long
sp_dump_value_index(const sp_pb_profile *p, const char *type,
                    const char *unit)
{
    const char *t, *u;
    size_t      i;

    for (i = 0; i < p->n_sample_type; i++) {
        t = sp_dump_pstr(p, p->sample_type[i]->type);
        u = sp_dump_pstr(p, p->sample_type[i]->unit);
        if (t != NULL && u != NULL && strcmp(t, type) == 0
            && strcmp(u, unit) == 0)
        {
            return (long)i;
        }
    }
    return -1;
}

typedef struct sp_dump_ctx {
    const sp_pb_profile *p;
    bool                 dry;     /* check only: intern and add nothing */
    sp_dump_table        locations, functions;
    uint32_t             service;
    uint8_t              source;
    uint32_t            *frames;
    size_t               cap;
} sp_dump_ctx;

/* The frames of location id appended to c->frames at *n. */
static sp_status
sp_dump_location_frames(sp_dump *d, sp_dump_ctx *c, uint64_t id, size_t *n)
{
    const sp_pb_location *loc = sp_dump_table_get(&c->locations, id);
    const sp_pb_function *fn;
    const char           *name;
    uint32_t             *grown;
    size_t                i, lines;
    sp_status             rc;

    if (loc == NULL) {
        return SP_ERR_INVALID;
    }
    lines = loc->n_line ? loc->n_line : 1;
    if (lines > c->cap - *n) {
        if (lines > SIZE_MAX / sizeof(*grown) / 2 - c->cap) {
            return SP_ERR_TOO_LONG;
        }
        grown = realloc(c->frames, (c->cap + lines) * 2 * sizeof(*grown));
        if (grown == NULL) {
            return SP_ERR_NOMEM;
        }
        c->frames = grown;
        c->cap = (c->cap + lines) * 2;
    }
    if (loc->n_line == 0) {
        /* pprof shows an address without a line; it has no name here. */
        return c->dry ? SP_OK
                      : sp_dump_intern_cstr(d, "unknown", &c->frames[(*n)++]);
    }
    for (i = 0; i < loc->n_line; i++) {
        fn = sp_dump_table_get(&c->functions, loc->line[i]->function_id);
        name = fn != NULL ? sp_dump_pstr(c->p, fn->name) : NULL;
        if (name == NULL) {
            return SP_ERR_INVALID;
        }
        if (c->dry) {
            continue;
        }
        rc = sp_dump_intern_cstr(d, name, &c->frames[(*n)++]);
        if (rc != SP_OK) {
            return rc;
        }
    }
    return SP_OK;
}

static sp_status
sp_dump_sample(sp_dump *d, sp_dump_ctx *c, const Perftools__Profiles__Sample *s,
               long count_i, long cpu_i)
{
    const sp_pb_profile *p = c->p;
    const char          *key, *str;
    sp_dump_stack        k;
    size_t               i, n = 0;
    sp_status            rc;

    memset(&k, 0, sizeof(k));
    for (i = 0; i < s->n_label; i++) {
        key = sp_dump_pstr(p, s->label[i]->key);
        str = sp_dump_pstr(p, s->label[i]->str);
        if (key == NULL || str == NULL) {
            return SP_ERR_INVALID;
        }
        /* An id that is not hex is no id: such a sample has no span. */
        if (strcmp(key, "trace_id") == 0
            && !sp_dump_unhex(str, strlen(str), k.trace, sizeof(k.trace)))
        {
            memset(k.trace, 0, sizeof(k.trace));
        } else if (strcmp(key, "span_id") == 0
                   && !sp_dump_unhex(str, strlen(str), k.span,
                                     sizeof(k.span)))
        {
            memset(k.span, 0, sizeof(k.span));
        }
    }
    for (i = 0; i < s->n_location_id; i++) {
        rc = sp_dump_location_frames(d, c, s->location_id[i], &n);
        if (rc != SP_OK) {
            return rc;
        }
    }
    if (n > UINT32_MAX) {
        return SP_ERR_TOO_LONG;
    }
    k.service = c->service;
    k.source = c->source;
    k.frames = c->frames;
    k.nframes = (uint32_t)n;
    k.samples = count_i >= 0 && (size_t)count_i < s->n_value
                ? s->value[count_i] : 1;
    k.cpu_ns = cpu_i >= 0 && (size_t)cpu_i < s->n_value ? s->value[cpu_i] : 0;
    /* Values are summed: negative or huge ones from a hostile profile
       must not overflow that. */
    if (k.samples < 0 || k.cpu_ns < 0 || k.samples > INT64_MAX / 4096
        || k.cpu_ns > INT64_MAX / 4096)
    {
        return SP_ERR_INVALID;
    }
    if (c->dry) {
        return SP_OK;
    }
    rc = sp_dump_stack_add(d, &k);
    if (rc == SP_OK) {
        d->stats.samples++;
    }
    return rc;
}

static sp_status
sp_dump_profile(sp_dump *d, const sp_pb_profile *p, uint32_t service,
                uint8_t source)
{
    sp_dump_ctx c;
    long        count_i, cpu_i;
    size_t      i;
    sp_status   rc;

    memset(&c, 0, sizeof(c));
    c.p = p;
    c.service = service;
    c.source = source;
    for (i = 0; i < p->n_location; i++) {
        if (p->location[i] == NULL) {
            return SP_ERR_INVALID;
        }
    }
    rc = sp_dump_table_init(&c.locations, (void * const *)p->location,
                            p->n_location, offsetof(sp_pb_location, id));
    if (rc == SP_OK) {
        rc = sp_dump_table_init(&c.functions, (void * const *)p->function,
                                p->n_function, offsetof(sp_pb_function, id));
    }
    count_i = sp_dump_value_index(p, "samples", "count");
    cpu_i = sp_dump_value_index(p, "cpu", "nanoseconds");
    /* All of a profile or none of it: check every sample first. */
    c.dry = true;
    for (i = 0; rc == SP_OK && i < p->n_sample; i++) {
        rc = sp_dump_sample(d, &c, p->sample[i], count_i, cpu_i);
    }
    c.dry = false;
    for (i = 0; rc == SP_OK && i < p->n_sample; i++) {
        rc = sp_dump_sample(d, &c, p->sample[i], count_i, cpu_i);
    }
    free(c.locations.sorted);
    free(c.functions.sorted);
    free(c.frames);
    return rc;
}

/* SP_ERR_INVALID for any profile that cannot be read, whatever the
   reason; other errors are the dump's own (memory). */
static sp_status
sp_dump_profile_bytes(sp_dump *d, const void *bytes, size_t len,
                      uint32_t service, uint8_t source)
{
    sp_pb_profile *p;
    sp_status      rc;

    if (len > d->opt.max_profile_bytes) {
        return SP_ERR_INVALID;
    }
    p = perftools__profiles__profile__unpack(NULL, len, bytes);
    if (p == NULL) {
        return SP_ERR_INVALID;
    }
    rc = sp_dump_profile(d, p, service, source);
    perftools__profiles__profile__free_unpacked(p, NULL);
    return rc;
}

sp_status
sp_dump_add_profile(sp_dump *d, const void *profile, size_t len,
                    const char *service, sp_dump_source source)
{
    uint32_t  svc;
    sp_status rc;

    rc = sp_dump_intern_cstr(d, service, &svc);
    if (rc != SP_OK) {
        return rc;
    }
    d->stats.profiles++;
    rc = sp_dump_profile_bytes(d, profile, len, svc, (uint8_t)source);
    if (rc == SP_ERR_INVALID) {
        d->stats.profiles_bad++;
    }
    return rc;
}

/* ---- OTLP/JSON */

/* The string value of attribute key in an OTLP attribute list. */
static const char *
sp_dump_attr(const sp_json_value *attrs, const char *key, size_t *len)
{
    const sp_json_value *a;
    const char          *k;

    for (a = sp_json_first(attrs); a != NULL; a = sp_json_next(a)) {
        k = sp_json_string(sp_json_get(a, "key"), NULL);
        if (k != NULL && strcmp(k, key) == 0) {
            return sp_json_string(sp_json_get(sp_json_get(a, "value"),
                                              "stringValue"), len);
        }
    }
    return NULL;
}

static uint32_t
sp_dump_service_of(sp_dump *d, const sp_json_value *resource, sp_status *rc)
{
    const char *s;
    size_t      len;
    uint32_t    id = 0;

    s = sp_dump_attr(sp_json_get(resource, "attributes"), "service.name",
                     &len);
    *rc = sp_dump_intern(d, s != NULL ? s : "", s != NULL ? len : 0, &id);
    return id;
}

/* A profiling LogRecord; bad profiles are counted, not fatal. */
static sp_status
sp_dump_record(sp_dump *d, const sp_json_value *rec, uint32_t service)
{
    const sp_json_value *attrs = sp_json_get(rec, "attributes");
    const char          *fmt, *src, *body;
    size_t               len;
    uint8_t              source = SP_DUMP_SOURCE_ANY;
    sp_buf               gz = SP_BUF_INIT(0);
    sp_buf               raw = SP_BUF_INIT(d->opt.max_profile_bytes);
    sp_status            rc;

    d->stats.records++;
    fmt = sp_dump_attr(attrs, "profiling.data.format", NULL);
    body = sp_json_string(sp_json_get(sp_json_get(rec, "body"),
                                      "stringValue"), &len);
    if (fmt == NULL || strcmp(fmt, "pprof-gzip-base64") != 0 || body == NULL) {
        d->stats.records_skipped++;
        return SP_OK;
    }
    src = sp_dump_attr(attrs, "profiling.instrumentation.source", NULL);
    if (src != NULL && strcmp(src, "snapshot") == 0) {
        source = SP_DUMP_SOURCE_SNAPSHOT;
    } else if (src != NULL && strcmp(src, "continuous") == 0) {
        source = SP_DUMP_SOURCE_CONTINUOUS;
    }
    d->stats.profiles++;
    rc = sp_base64_decode(&gz, body, len);
    if (rc == SP_OK) {
        rc = sp_gunzip(&raw, gz.data, gz.len);
        if (rc == SP_ERR_TOO_LONG) {
            rc = SP_ERR_INVALID;    /* over max_profile_bytes */
        }
    }
    if (rc == SP_OK) {
        rc = sp_dump_profile_bytes(d, raw.data, raw.len, service, source);
    }
    sp_buf_free(&gz);
    sp_buf_free(&raw);
    if (rc == SP_ERR_INVALID) {
        d->stats.profiles_bad++;    /* this profile only */
        return SP_OK;
    }
    return rc;
}

static sp_status
sp_dump_logs(sp_dump *d, const sp_json_value *rls)
{
    const sp_json_value *rl, *sl, *rec;
    uint32_t             service;
    sp_status            rc = SP_OK;

    for (rl = sp_json_first(rls); rl != NULL; rl = sp_json_next(rl)) {
        service = sp_dump_service_of(d, sp_json_get(rl, "resource"), &rc);
        for (sl = sp_json_first(sp_json_get(rl, "scopeLogs"));
             rc == SP_OK && sl != NULL; sl = sp_json_next(sl))
        {
            for (rec = sp_json_first(sp_json_get(sl, "logRecords"));
                 rc == SP_OK && rec != NULL; rec = sp_json_next(rec))
            {
                rc = sp_dump_record(d, rec, service);
            }
        }
        if (rc != SP_OK) {
            return rc;
        }
    }
    return SP_OK;
}

static uint64_t
sp_dump_json_u64(const sp_json_value *v)
{
    int64_t n;

    return sp_json_int64(v, &n) == SP_OK && n > 0 ? (uint64_t)n : 0;
}

static sp_status
sp_dump_span_json(sp_dump *d, const sp_json_value *sp, uint32_t service)
{
    sp_dump_spanrec r;
    const char     *name;
    size_t          len;
    sp_status       rc;

    memset(&r, 0, sizeof(r));
    if (!sp_dump_json_id(sp_json_get(sp, "traceId"), r.trace, sizeof(r.trace))
        || !sp_dump_json_id(sp_json_get(sp, "spanId"), r.span, sizeof(r.span))
        || !sp_dump_json_id(sp_json_get(sp, "parentSpanId"), r.parent,
                            sizeof(r.parent))
        || sp_dump_zero(r.trace, sizeof(r.trace)))
    {
        return SP_OK;   /* not a span anyone could look up */
    }
    name = sp_json_string(sp_json_get(sp, "name"), &len);
    rc = sp_dump_intern(d, name != NULL ? name : "", name != NULL ? len : 0,
                        &r.name);
    if (rc != SP_OK) {
        return rc;
    }
    r.service = service;
    r.start_ns = sp_dump_json_u64(sp_json_get(sp, "startTimeUnixNano"));
    r.end_ns = sp_dump_json_u64(sp_json_get(sp, "endTimeUnixNano"));
    rc = sp_dump_grow(d, (void **)&d->spans, &d->capspans, d->nspans,
                      sizeof(*d->spans));
    if (rc != SP_OK) {
        return rc;
    }
    d->spans[d->nspans++] = r;
    d->stats.spans++;
    return SP_OK;
}

static sp_status
sp_dump_traces_json(sp_dump *d, const sp_json_value *rss)
{
    const sp_json_value *rs, *ss, *sp;
    uint32_t             service;
    sp_status            rc = SP_OK;

    for (rs = sp_json_first(rss); rs != NULL; rs = sp_json_next(rs)) {
        service = sp_dump_service_of(d, sp_json_get(rs, "resource"), &rc);
        for (ss = sp_json_first(sp_json_get(rs, "scopeSpans"));
             rc == SP_OK && ss != NULL; ss = sp_json_next(ss))
        {
            for (sp = sp_json_first(sp_json_get(ss, "spans"));
                 rc == SP_OK && sp != NULL; sp = sp_json_next(sp))
            {
                rc = sp_dump_span_json(d, sp, service);
            }
        }
        if (rc != SP_OK) {
            return rc;
        }
    }
    return SP_OK;
}

sp_status
sp_dump_add_line(sp_dump *d, const char *line, size_t len)
{
    const sp_json_value *root, *logs, *traces;
    sp_json             *doc;
    size_t               i;
    sp_status            rc;

    for (i = 0; i < len; i++) {
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r'
            && line[i] != '\n')
        {
            break;
        }
    }
    if (i == len) {
        return SP_OK;
    }
    rc = sp_json_parse(line, len, &doc);
    if (rc != SP_OK) {
        return rc;
    }
    root = sp_json_root(doc);
    logs = sp_json_get(root, "resourceLogs");
    traces = sp_json_get(root, "resourceSpans");
    if (sp_json_type_of(logs) != SP_JSON_ARRAY
        && sp_json_type_of(traces) != SP_JSON_ARRAY)
    {
        sp_json_destroy(doc);
        return SP_ERR_INVALID;
    }
    rc = sp_dump_logs(d, logs);
    if (rc == SP_OK) {
        rc = sp_dump_traces_json(d, traces);
    }
    sp_json_destroy(doc);
    if (rc == SP_OK) {
        d->stats.lines++;
    }
    return rc;
}

/* ---- questions */

typedef struct sp_dump_match {
    uint8_t  trace[16], span[8];
    bool     by_trace, by_span, by_service;
    uint32_t service;
} sp_dump_match;

/* SP_ERR_INVALID for a malformed id; a service never seen matches none. */
static sp_status
sp_dump_match_init(const sp_dump *d, const sp_dump_filter *f,
                   sp_dump_match *m)
{
    sp_dump_strkey key;
    size_t         found;

    memset(m, 0, sizeof(*m));
    if (f->trace_id != NULL) {
        if (!sp_dump_unhex(f->trace_id, strlen(f->trace_id), m->trace,
                           sizeof(m->trace)))
        {
            return SP_ERR_INVALID;
        }
        m->by_trace = true;
    }
    if (f->span_id != NULL) {
        if (!sp_dump_unhex(f->span_id, strlen(f->span_id), m->span,
                           sizeof(m->span)))
        {
            return SP_ERR_INVALID;
        }
        m->by_span = true;
    }
    if (f->service != NULL) {
        key.s = f->service;
        key.len = strlen(f->service);
        found = sp_dump_index_find(d, &d->str_index,
                                   sp_dump_fnv(SP_DUMP_FNV_INIT, key.s,
                                               key.len),
                                   sp_dump_str_eq, &key);
        m->by_service = true;
        m->service = found == SIZE_MAX ? SP_DUMP_NO_STRING : (uint32_t)found;
    }
    return SP_OK;
}

static bool
sp_dump_matches(const sp_dump_filter *f, const sp_dump_match *m,
                const sp_dump_stack *s)
{
    return (!m->by_trace || memcmp(s->trace, m->trace, sizeof(m->trace)) == 0)
           && (!m->by_span || memcmp(s->span, m->span, sizeof(m->span)) == 0)
           && (!m->by_service || s->service == m->service)
           && (f->source == SP_DUMP_SOURCE_ANY || s->source == f->source);
}

static int64_t
sp_dump_value_of(const sp_dump_filter *f, const sp_dump_stack *s)
{
    return f->value == SP_DUMP_VALUE_CPU_NS ? s->cpu_ns : s->samples;
}

/* A name as one frame of a folded line. */
static void
sp_dump_fold_name(sp_buf *out, const sp_dump_str *name)
{
    size_t i, run = 0;

    for (i = 0; i < name->len; i++) {
        if (name->s[i] == ';' || (unsigned char)name->s[i] < 0x20
            || name->s[i] == 0x7f)
        {
            sp_buf_append(out, name->s + run, i - run);
            sp_buf_append(out, "_", 1);
            run = i + 1;
        }
    }
    sp_buf_append(out, name->s + run, name->len - run);
}

typedef struct sp_dump_line {
    size_t  off, len;
    int64_t value;
} sp_dump_line;

static int
sp_dump_line_cmp(const void *a, const void *b, void *text)
{
    const sp_dump_line *x = a, *y = b;
    const uint8_t      *t = text;
    size_t              n = x->len < y->len ? x->len : y->len;
    int                 c = memcmp(t + x->off, t + y->off, n);

    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

sp_status
sp_dump_folded(const sp_dump *d, const sp_dump_filter *f, sp_buf *out)
{
    sp_dump_match  m;
    sp_buf         text = SP_BUF_INIT(0);
    sp_dump_line  *lines;
    size_t         i, j, n = 0, start;
    int64_t        v;
    char           num[32];
    sp_status      rc;

    rc = sp_dump_match_init(d, f, &m);
    if (rc != SP_OK) {
        return rc;
    }
    lines = malloc((d->nstacks ? d->nstacks : 1) * sizeof(*lines));
    /* text.data is never NULL below, even when every stack is empty. */
    if (lines == NULL || sp_buf_reserve(&text, 64) != SP_OK) {
        free(lines);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < d->nstacks; i++) {
        const sp_dump_stack *s = &d->stacks[i];

        v = sp_dump_value_of(f, s);
        if (!sp_dump_matches(f, &m, s) || v <= 0) {
            continue;
        }
        start = text.len;
        if (f->service_root) {
            sp_dump_fold_name(&text, &d->strs[s->service]);
            if (s->nframes > 0) {
                sp_buf_append(&text, ";", 1);
            }
        }
        for (j = s->nframes; j > 0; j--) {
            sp_dump_fold_name(&text, &d->strs[s->frames[j - 1]]);
            if (j > 1) {
                sp_buf_append(&text, ";", 1);
            }
        }
        lines[n].off = start;
        lines[n].len = text.len - start;
        lines[n].value = v;
        n++;
    }
    if (sp_buf_status(&text) != SP_OK) {
        free(lines);
        sp_buf_free(&text);
        return SP_ERR_NOMEM;
    }
    /* Stacks that differ in trace, span or source fold to one line. */
    qsort_r(lines, n, sizeof(*lines), sp_dump_line_cmp, text.data);
    for (i = 0; i < n; i = j) {
        v = lines[i].value;
        for (j = i + 1;
             j < n && sp_dump_line_cmp(&lines[i], &lines[j], text.data) == 0;
             j++)
        {
            v += lines[j].value;
        }
        sp_buf_append(out, text.data + lines[i].off, lines[i].len);
        snprintf(num, sizeof(num), " %lld\n", (long long)v);
        sp_buf_append(out, num, strlen(num));
    }
    free(lines);
    sp_buf_free(&text);
    return sp_buf_status(out);
}

static int
sp_dump_row_cmp(const void *a, const void *b)
{
    const sp_dump_row *x = a, *y = b;

    if (x->self != y->self) {
        return x->self > y->self ? -1 : 1;
    }
    if (x->total != y->total) {
        return x->total > y->total ? -1 : 1;
    }
    return strcmp(x->name, y->name);
}

sp_status
sp_dump_top(const sp_dump *d, const sp_dump_filter *f, sp_dump_row **rows,
            size_t *n, int64_t *sum)
{
    sp_dump_match  m;
    int64_t       *self, *total;
    uint64_t      *seen;    /* the last stack each name was counted in */
    sp_dump_row   *r;
    size_t         i, j, k;
    int64_t        v;
    sp_status      rc;

    *rows = NULL;
    *n = 0;
    *sum = 0;
    rc = sp_dump_match_init(d, f, &m);
    if (rc != SP_OK) {
        return rc;
    }
    k = d->nstrs ? d->nstrs : 1;
    self = calloc(k, sizeof(*self));
    total = calloc(k, sizeof(*total));
    seen = calloc(k, sizeof(*seen));
    if (self == NULL || total == NULL || seen == NULL) {
        free(self);
        free(total);
        free(seen);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < d->nstacks; i++) {
        const sp_dump_stack *s = &d->stacks[i];

        v = sp_dump_value_of(f, s);
        if (!sp_dump_matches(f, &m, s) || v <= 0) {
            continue;
        }
        *sum += v;
        if (s->nframes > 0) {
            self[s->frames[0]] += v;
        }
        for (j = 0; j < s->nframes; j++) {
            if (seen[s->frames[j]] != i + 1) {
                seen[s->frames[j]] = i + 1;
                total[s->frames[j]] += v;
            }
        }
    }
    for (i = 0, k = 0; i < d->nstrs; i++) {
        k += total[i] > 0;
    }
    r = malloc((k ? k : 1) * sizeof(*r));
    if (r == NULL) {
        rc = SP_ERR_NOMEM;
    } else {
        for (i = 0, j = 0; i < d->nstrs; i++) {
            if (total[i] > 0) {
                r[j].name = d->strs[i].s;
                r[j].self = self[i];
                r[j].total = total[i];
                j++;
            }
        }
        qsort(r, k, sizeof(*r), sp_dump_row_cmp);
        *rows = r;
        *n = k;
    }
    free(self);
    free(total);
    free(seen);
    return rc;
}

static int
sp_dump_trace_cmp(const void *a, const void *b)
{
    const sp_dump_trace *x = a, *y = b;

    if (x->samples != y->samples) {
        return x->samples > y->samples ? -1 : 1;
    }
    return strcmp(x->trace_id, y->trace_id);
}

sp_status
sp_dump_traces(const sp_dump *d, const sp_dump_filter *f, sp_dump_trace **out,
               size_t *n)
{
    sp_dump_filter any = *f;
    sp_dump_match  m;
    sp_dump_trace *t;
    size_t         i, j, k = 0;
    char           hex[33];
    sp_status      rc;

    *out = NULL;
    *n = 0;
    any.trace_id = NULL;
    any.span_id = NULL;
    rc = sp_dump_match_init(d, &any, &m);
    if (rc != SP_OK) {
        return rc;
    }
    t = malloc((d->nstacks ? d->nstacks : 1) * sizeof(*t));
    if (t == NULL) {
        return SP_ERR_NOMEM;
    }
    /* Few traces in practice; a linear search per stack keeps it plain. */
    for (i = 0; i < d->nstacks; i++) {
        const sp_dump_stack *s = &d->stacks[i];

        if (!sp_dump_matches(&any, &m, s)
            || sp_dump_zero(s->trace, sizeof(s->trace)))
        {
            continue;
        }
        sp_dump_hex(s->trace, sizeof(s->trace), hex);
        for (j = 0; j < k && strcmp(t[j].trace_id, hex) != 0; j++) {
        }
        if (j == k) {
            memset(&t[k], 0, sizeof(t[k]));
            memcpy(t[k].trace_id, hex, sizeof(hex));
            k++;
        }
        t[j].samples += s->samples;
        t[j].cpu_ns += s->cpu_ns;
    }
    for (j = 0; j < k; j++) {
        uint8_t id[16];

        sp_dump_unhex(t[j].trace_id, 32, id, sizeof(id));
        for (i = 0; i < d->nspans; i++) {
            t[j].spans += memcmp(d->spans[i].trace, id, sizeof(id)) == 0;
        }
    }
    qsort(t, k, sizeof(*t), sp_dump_trace_cmp);
    *out = t;
    *n = k;
    return SP_OK;
}

static int
sp_dump_span_cmp(const void *a, const void *b)
{
    const sp_dump_span *x = a, *y = b;

    if (x->start_ns != y->start_ns) {
        return x->start_ns < y->start_ns ? -1 : 1;
    }
    return strcmp(x->span_id, y->span_id);
}

sp_status
sp_dump_spans(const sp_dump *d, const char *trace_id, sp_dump_span **out,
              size_t *n)
{
    uint8_t       id[16];
    sp_dump_span *s;
    size_t        i, j, k = 0;

    *out = NULL;
    *n = 0;
    if (trace_id == NULL
        || !sp_dump_unhex(trace_id, strlen(trace_id), id, sizeof(id)))
    {
        return SP_ERR_INVALID;
    }
    s = malloc((d->nspans ? d->nspans : 1) * sizeof(*s));
    if (s == NULL) {
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < d->nspans; i++) {
        const sp_dump_spanrec *r = &d->spans[i];

        if (memcmp(r->trace, id, sizeof(id)) != 0) {
            continue;
        }
        memset(&s[k], 0, sizeof(s[k]));
        sp_dump_hex(r->span, sizeof(r->span), s[k].span_id);
        if (!sp_dump_zero(r->parent, sizeof(r->parent))) {
            sp_dump_hex(r->parent, sizeof(r->parent), s[k].parent_span_id);
        }
        s[k].name = d->strs[r->name].s;
        s[k].service = d->strs[r->service].s;
        s[k].start_ns = r->start_ns;
        s[k].end_ns = r->end_ns;
        for (j = 0; j < d->nstacks; j++) {
            if (memcmp(d->stacks[j].trace, id, sizeof(id)) == 0
                && memcmp(d->stacks[j].span, r->span, sizeof(r->span)) == 0)
            {
                s[k].samples += d->stacks[j].samples;
            }
        }
        k++;
    }
    qsort(s, k, sizeof(*s), sp_dump_span_cmp);
    *out = s;
    *n = k;
    return SP_OK;
}
