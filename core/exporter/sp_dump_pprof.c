/* sp_dump: reading pprof Profiles (perftools.profiles, protobuf-c). */
#include "sp_dump_impl.h"

#include "perftools/profiles/profile.pb-c.h"

#include <stdlib.h>
#include <string.h>

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
sp_status
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
