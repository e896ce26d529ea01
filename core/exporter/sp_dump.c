/* sp_dump: what it holds (strings, stacks, spans) and reading OTLP/JSON. */
#include "sp_dump_impl.h"
#include "sp_gunzip.h"
#include "sp_json.h"
#include "sp_percent.h"
#include "sp_tracecontext.h"

#include <stdlib.h>
#include <string.h>

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

sp_status
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

/* n bytes from exactly 2n hex digits. */
bool
sp_dump_unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    size_t i;
    int    hi, lo;

    if (s == NULL || len != 2 * n) {
        return false;
    }
    for (i = 0; i < n; i++) {
        hi = sp_hex_value(s[2 * i]);
        lo = sp_hex_value(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
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
sp_status
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

sp_status
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
sp_status
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

size_t
sp_dump_find_string(const sp_dump *d, const char *s, size_t len)
{
    sp_dump_strkey key;

    key.s = s;
    key.len = len;
    return sp_dump_index_find(d, &d->str_index,
                              sp_dump_fnv(SP_DUMP_FNV_INIT, s, len),
                              sp_dump_str_eq, &key);
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

/* What to do with one LogRecord or Span of a resource's service. */
typedef sp_status (*sp_dump_item_fn)(sp_dump *d, const sp_json_value *item,
                                     uint32_t service);

/*
 * The walk both requests share: resources[] -> scopes[] -> items[], with
 * the resource's service.name. Logs: resourceLogs, scopeLogs,
 * logRecords; traces: resourceSpans, scopeSpans, spans.
 */
static sp_status
sp_dump_walk(sp_dump *d, const sp_json_value *resources, const char *scopes,
             const char *items, sp_dump_item_fn fn)
{
    const sp_json_value *r, *sc, *it;
    uint32_t             service;
    sp_status            rc = SP_OK;

    for (r = sp_json_first(resources); r != NULL; r = sp_json_next(r)) {
        service = sp_dump_service_of(d, sp_json_get(r, "resource"), &rc);
        for (sc = sp_json_first(sp_json_get(r, scopes));
             rc == SP_OK && sc != NULL; sc = sp_json_next(sc))
        {
            for (it = sp_json_first(sp_json_get(sc, items));
                 rc == SP_OK && it != NULL; it = sp_json_next(it))
            {
                rc = fn(d, it, service);
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
        || !sp_trace_id_is_valid(r.trace))
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
    rc = sp_dump_walk(d, logs, "scopeLogs", "logRecords", sp_dump_record);
    if (rc == SP_OK) {
        rc = sp_dump_walk(d, traces, "scopeSpans", "spans",
                          sp_dump_span_json);
    }
    sp_json_destroy(doc);
    if (rc == SP_OK) {
        d->stats.lines++;
    }
    return rc;
}
