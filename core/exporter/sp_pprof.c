#include "sp_pprof.h"

#include <stdlib.h>
#include <string.h>

/* Field numbers of proto/perftools/profiles/profile.proto. */
#define PF_SAMPLE_TYPE      1
#define PF_SAMPLE           2
#define PF_MAPPING          3
#define PF_LOCATION         4
#define PF_FUNCTION         5
#define PF_STRING_TABLE     6
#define PF_TIME_NANOS       9
#define PF_DURATION_NANOS   10
#define PF_PERIOD_TYPE      11
#define PF_PERIOD           12

#define PF_VT_TYPE          1
#define PF_VT_UNIT          2

#define PF_SAMPLE_LOCATION  1
#define PF_SAMPLE_VALUE     2
#define PF_SAMPLE_LABEL     3

#define PF_LABEL_KEY        1
#define PF_LABEL_STR        2
#define PF_LABEL_NUM        3

#define PF_MAP_ID           1
#define PF_MAP_START        2
#define PF_MAP_LIMIT        3
#define PF_MAP_OFFSET       4
#define PF_MAP_FILENAME     5
#define PF_MAP_BUILD_ID     6
#define PF_MAP_HAS_FUNCS    7
#define PF_MAP_HAS_FILES    8
#define PF_MAP_HAS_LINES    9
#define PF_MAP_HAS_INLINE   10

#define PF_LOC_ID           1
#define PF_LOC_MAPPING      2
#define PF_LOC_ADDRESS      3
#define PF_LOC_LINE         4

#define PF_LINE_FUNCTION    1
#define PF_LINE_LINE        2

#define PF_FUNC_ID          1
#define PF_FUNC_NAME        2
#define PF_FUNC_SYSTEM_NAME 3
#define PF_FUNC_FILENAME    4

#define SP_PP_BUILD_ID_MAX  SP_PPROF_BUILD_ID_MAX
#define SP_PP_MAP_CACHE     64

/*
 * Encoded samples are kept in chunks: a growing profile is never copied
 * by a reallocation, and only the last chunk is partly empty. A sample is
 * at most about 5.3 KiB (1024 location ids of 5 bytes, values, 9 labels).
 */
#define SP_PP_CHUNK         (32u << 10)
#define SP_PP_SAMPLE_MAX    (8u << 10)

typedef struct sp_pp_chunk {
    struct sp_pp_chunk *next;
    size_t              len;
    uint8_t             data[SP_PP_CHUNK];
} sp_pp_chunk;

/*
 * Open addressing with linear probing. A slot holds the entry's 32-bit
 * hash in the high half and its index + 1 in the low half (0: empty), so
 * probing compares hashes before keys and growing needs no rehashing of
 * keys. At most half full.
 */
typedef struct sp_pp_table {
    uint64_t *slots;
    uint32_t  cap;      /* a power of two, or 0 */
    uint32_t  count;
} sp_pp_table;

typedef struct sp_pp_str {
    uint32_t off;
    uint32_t len;
} sp_pp_str;

typedef struct sp_pp_func {
    uint32_t name;      /* string indices */
    uint32_t file;
} sp_pp_func;

typedef struct sp_pp_line {
    uint32_t function;  /* id: index + 1 */
    uint32_t line;
} sp_pp_line;

typedef struct sp_pp_loc {
    uint64_t address;
    uint32_t mapping;   /* id, 0: none */
    uint32_t first;     /* into lines */
    uint32_t count;
} sp_pp_loc;

typedef struct sp_pp_map {
    uint64_t start;
    uint64_t limit;
    uint64_t offset;
    uint32_t path;      /* string indices */
    uint32_t build_id;
    uint8_t  raw_id[SP_PP_BUILD_ID_MAX];   /* for sp_pp_map_cached */
    uint8_t  raw_id_len;
    bool     all_functions;
    bool     all_files;
    bool     all_lines;
    bool     any_inline;
} sp_pp_map;

/* Strings every profile has, interned first. */
enum {
    SP_PP_S_EMPTY,
    SP_PP_S_SAMPLES,
    SP_PP_S_COUNT,
    SP_PP_S_CPU,
    SP_PP_S_NANOSECONDS,
    SP_PP_S_EVENT_TIME,
    SP_PP_S_EVENT_PERIOD,
    SP_PP_S_TRACE_ID,
    SP_PP_S_SPAN_ID,
    SP_PP_S_THREAD_ID,
    SP_PP_S_THREAD_OS_ID,
    SP_PP_S_THREAD_NAME,
    SP_PP_S_THREAD_STATE,
    SP_PP_S_TRUNCATED,
    SP_PP_S_TRUE,
    SP_PP_S_UNKNOWN,
    SP_PP_S_COUNT_FIXED
};

static const char *const sp_pp_fixed[SP_PP_S_COUNT_FIXED] = {
    "", "samples", "count", "cpu", "nanoseconds",
    "source.event.time", "source.event.period", "trace_id", "span_id",
    "thread.id", "thread.os.id", "thread.name", "thread.state",
    "thread.stack.truncated", "true", SP_PPROF_UNKNOWN
};

struct sp_pprof {
    uint64_t     period_ns;
    size_t       max_bytes;
    size_t       mem;           /* capacity of everything below, bytes */

    sp_buf       chars;         /* string bytes, back to back */
    sp_pp_str   *strs;
    uint32_t     strs_len, strs_cap;
    sp_pp_func  *funcs;
    uint32_t     funcs_len, funcs_cap;
    sp_pp_loc   *locs;
    uint32_t     locs_len, locs_cap;
    sp_pp_line  *lines;
    uint32_t     lines_len, lines_cap;
    sp_pp_map   *maps;
    uint32_t     maps_len, maps_cap;
    sp_pp_table  str_tab, func_tab, loc_tab, map_tab;

    /* The mapping id of recent sp_pprof_mapping values, by start: most
     * frames are in a few objects, and interning their path and build id
     * for every frame would cost more than the rest of the frame. */
    uint32_t     map_cache[SP_PP_MAP_CACHE];

    /* Serialized bytes of what cannot change once added. */
    size_t       fixed_size;

    sp_pp_chunk *chunks;        /* encoded Profile.sample fields */
    sp_pp_chunk *chunk;         /* the one being filled */
    size_t       samples_len;
    sp_buf       scratch;       /* the sample being encoded */
    size_t       sample_count;
    uint64_t     frame_count;
    uint64_t     time_min, time_max;
};

/* ---- serialized sizes (every field number here is below 16: one-byte
 * tags) */

static size_t
sp_pp_vsize(uint64_t v)
{
    return 1 + sp_pb_varint_size(v);
}

static size_t
sp_pp_nz(uint64_t v)
{
    return v != 0 ? sp_pp_vsize(v) : 0;
}

static size_t
sp_pp_msg(size_t len)
{
    return 1 + sp_pb_varint_size(len) + len;
}

/* ---- memory against the budget */

static size_t
sp_pp_room(const sp_pprof *p)
{
    return p->mem < p->max_bytes ? p->max_bytes - p->mem : 0;
}

/* Room for need elements of elem bytes in *arr of *cap. */
static sp_status
sp_pp_grow(sp_pprof *p, void **arr, uint32_t *cap, size_t elem,
           uint64_t need)
{
    uint64_t newcap;
    size_t   add;
    void    *q;

    if (need <= *cap) {
        return SP_OK;
    }
    if (need > UINT32_MAX / 2) {
        return SP_ERR_TOO_LONG;
    }
    newcap = *cap != 0 ? (uint64_t)*cap * 2 : 64;
    while (newcap < need) {
        newcap *= 2;
    }
    if ((newcap - *cap) * elem > sp_pp_room(p)) {
        /* Near the bound, take only what is needed. */
        newcap = need;
        if ((newcap - *cap) * elem > sp_pp_room(p)) {
            return SP_ERR_TOO_LONG;
        }
    }
    add = (size_t)(newcap - *cap) * elem;
    q = realloc(*arr, (size_t)newcap * elem);
    if (q == NULL) {
        return SP_ERR_NOMEM;
    }
    *arr = q;
    *cap = (uint32_t)newcap;
    p->mem += add;
    return SP_OK;
}

/*
 * Lets buf grow within the budget; sp_pp_buf_done charges what it took.
 * A buffer's limit is its capacity plus the room left.
 */
static void
sp_pp_buf_open(sp_pprof *p, sp_buf *buf)
{
    /* A limit of 0 would mean none: an empty buffer with no room left
     * gets one byte, which it cannot use for anything. */
    buf->limit = buf->cap + sp_pp_room(p);
    if (buf->limit == 0) {
        buf->limit = 1;
    }
}

static void
sp_pp_buf_done(sp_pprof *p, sp_buf *buf, size_t cap_before)
{
    p->mem += buf->cap - cap_before;
}

/* ---- hashing */

static uint32_t
sp_pp_mix(uint64_t x)
{
    /* splitmix64's finalizer. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (uint32_t)x;
}

/* Eight bytes at a time: function names and hex ids are hashed for every
 * new location and every sample's labels. */
static uint32_t
sp_pp_hash_bytes(const void *s, size_t len)
{
    const uint8_t *b = s;
    uint64_t       h = 0x9e3779b97f4a7c15ULL ^ len, w;
    size_t         i = 0;

    for (; i + 8 <= len; i += 8) {
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (i < len) {
        w = 0;
        memcpy(&w, b + i, len - i);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    }
    return sp_pp_mix(h);
}

/* Lowercase hex of b[0..n) into out[0..2n). */
static void
sp_pp_hex(char *out, const uint8_t *b, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t            i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
}

/* ---- tables */

static sp_status
sp_pp_table_make_room(sp_pprof *p, sp_pp_table *t)
{
    uint32_t  newcap, i, j;
    uint64_t *slots;
    size_t    add;

    if (t->cap != 0 && (t->count + 1) * 2 <= t->cap) {
        return SP_OK;
    }
    newcap = t->cap != 0 ? t->cap * 2 : 256;
    if (newcap == 0 || newcap > (UINT32_MAX >> 2)) {
        return SP_ERR_TOO_LONG;
    }
    add = ((size_t)newcap - t->cap) * sizeof(uint64_t);
    if (add > sp_pp_room(p)) {
        return SP_ERR_TOO_LONG;
    }
    slots = calloc(newcap, sizeof(uint64_t));
    if (slots == NULL) {
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < t->cap; i++) {
        if (t->slots[i] == 0) {
            continue;
        }
        j = (uint32_t)(t->slots[i] >> 32) & (newcap - 1);
        while (slots[j] != 0) {
            j = (j + 1) & (newcap - 1);
        }
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = newcap;
    p->mem += add;
    return SP_OK;
}

typedef bool (*sp_pp_eq_fn)(const sp_pprof *p, uint32_t index,
                            const void *key);

/*
 * The index of the entry equal to key, or UINT32_MAX with *slot the empty
 * slot where it goes. The table must have room (sp_pp_table_make_room).
 */
static uint32_t
sp_pp_table_find(const sp_pprof *p, const sp_pp_table *t, uint32_t hash,
                 sp_pp_eq_fn eq, const void *key, uint32_t *slot)
{
    uint32_t i = hash & (t->cap - 1);
    uint64_t s;

    *slot = 0;
    for (;;) {
        s = t->slots[i];
        if (s == 0) {
            *slot = i;
            return UINT32_MAX;
        }
        if ((uint32_t)(s >> 32) == hash
            && eq(p, (uint32_t)s - 1, key))
        {
            return (uint32_t)s - 1;
        }
        i = (i + 1) & (t->cap - 1);
    }
}

static void
sp_pp_table_put(sp_pp_table *t, uint32_t slot, uint32_t hash,
                uint32_t index)
{
    t->slots[slot] = (uint64_t)hash << 32 | ((uint64_t)index + 1);
    t->count++;
}

static void
sp_pp_table_clear(sp_pp_table *t)
{
    if (t->slots != NULL) {
        memset(t->slots, 0, (size_t)t->cap * sizeof(uint64_t));
    }
    t->count = 0;
}

/* ---- strings */

typedef struct sp_pp_str_key {
    const char *s;
    size_t      len;
} sp_pp_str_key;

static bool
sp_pp_str_eq(const sp_pprof *p, uint32_t index, const void *key)
{
    const sp_pp_str_key *k = key;
    const sp_pp_str     *e = &p->strs[index];

    return e->len == k->len
           && memcmp(p->chars.data + e->off, k->s, k->len) == 0;
}

/*
 * The index of s[0..len) in the string table, added if new. Invalid
 * UTF-8 is stored as sp_utf8_sanitize makes it, so every reader decodes
 * the table the same way.
 */
static sp_status
sp_pp_intern(sp_pprof *p, const char *s, size_t len, uint32_t *out)
{
    sp_pp_str_key key;
    uint32_t      hash, slot, found;
    size_t        off, cap;
    sp_status     rc;

    if ((rc = sp_pp_table_make_room(p, &p->str_tab)) != SP_OK
        || (rc = sp_pp_grow(p, (void **)&p->strs, &p->strs_cap,
                            sizeof(sp_pp_str),
                            (uint64_t)p->strs_len + 1)) != SP_OK)
    {
        return rc;
    }
    off = p->chars.len;
    if (!sp_utf8_valid(s, len)) {
        /* Sanitize at the end of the bytes, then look that up. */
        cap = p->chars.cap;
        sp_pp_buf_open(p, &p->chars);
        rc = sp_utf8_sanitize(&p->chars, s, len);
        sp_pp_buf_done(p, &p->chars, cap);
        if (rc != SP_OK) {
            sp_buf_truncate(&p->chars, off);
            return rc;
        }
        s = (const char *)p->chars.data + off;
        len = p->chars.len - off;
    }
    key.s = s;
    key.len = len;
    hash = sp_pp_hash_bytes(s, len);
    found = sp_pp_table_find(p, &p->str_tab, hash, sp_pp_str_eq, &key,
                             &slot);
    if (found != UINT32_MAX) {
        sp_buf_truncate(&p->chars, off);
        *out = found;
        return SP_OK;
    }
    if (p->chars.len == off) {
        cap = p->chars.cap;
        sp_pp_buf_open(p, &p->chars);
        rc = sp_buf_append(&p->chars, s, len);
        sp_pp_buf_done(p, &p->chars, cap);
        if (rc != SP_OK) {
            sp_buf_truncate(&p->chars, off);
            return rc;
        }
    }
    if (p->chars.len > UINT32_MAX) {
        sp_buf_truncate(&p->chars, off);
        return SP_ERR_TOO_LONG;
    }
    p->strs[p->strs_len].off = (uint32_t)off;
    p->strs[p->strs_len].len = (uint32_t)len;
    p->fixed_size += sp_pp_msg(len);
    sp_pp_table_put(&p->str_tab, slot, hash, p->strs_len);
    *out = p->strs_len++;
    return SP_OK;
}

static sp_status
sp_pp_intern_c(sp_pprof *p, const char *s, uint32_t *out)
{
    return sp_pp_intern(p, s, strlen(s), out);
}

/* ---- functions */

static bool
sp_pp_func_eq(const sp_pprof *p, uint32_t index, const void *key)
{
    const sp_pp_func *k = key;

    return p->funcs[index].name == k->name && p->funcs[index].file == k->file;
}

/* The id (index + 1) of the function of l; *named etc. say what is known. */
static sp_status
sp_pp_function(sp_pprof *p, const sp_pprof_line *l, uint32_t *id)
{
    sp_pp_func key;
    uint32_t   hash, slot, found;
    sp_status  rc;

    if (l->function != NULL && l->function[0] != '\0') {
        rc = sp_pp_intern_c(p, l->function, &key.name);
    } else {
        key.name = SP_PP_S_UNKNOWN;
        rc = SP_OK;
    }
    if (rc != SP_OK) {
        return rc;
    }
    if (l->file != NULL && l->file[0] != '\0') {
        rc = sp_pp_intern_c(p, l->file, &key.file);
    } else {
        key.file = SP_PP_S_UNKNOWN;
    }
    if (rc != SP_OK) {
        return rc;
    }
    if ((rc = sp_pp_table_make_room(p, &p->func_tab)) != SP_OK
        || (rc = sp_pp_grow(p, (void **)&p->funcs, &p->funcs_cap,
                            sizeof(sp_pp_func),
                            (uint64_t)p->funcs_len + 1)) != SP_OK)
    {
        return rc;
    }
    hash = sp_pp_mix((uint64_t)key.name << 32 | key.file);
    found = sp_pp_table_find(p, &p->func_tab, hash, sp_pp_func_eq, &key,
                             &slot);
    if (found == UINT32_MAX) {
        p->funcs[p->funcs_len] = key;
        sp_pp_table_put(&p->func_tab, slot, hash, p->funcs_len);
        found = p->funcs_len++;
        p->fixed_size += sp_pp_msg(sp_pp_vsize(found + 1)
                                   + 2 * sp_pp_nz(key.name)
                                   + sp_pp_nz(key.file));
    }
    *id = found + 1;
    return SP_OK;
}

/* ---- mappings */

static bool
sp_pp_map_eq(const sp_pprof *p, uint32_t index, const void *key)
{
    const sp_pp_map *k = key, *m = &p->maps[index];

    return m->start == k->start && m->limit == k->limit
           && m->offset == k->offset && m->path == k->path
           && m->build_id == k->build_id;
}

/* Whether mapping id (0: none) is pm. */
static bool
sp_pp_map_cached(const sp_pprof *p, const sp_pprof_mapping *pm, uint32_t id)
{
    const sp_pp_map *m;
    const sp_pp_str *path;
    const char      *want = pm->path != NULL ? pm->path : "";
    size_t           len = pm->build_id != NULL ? pm->build_id_len : 0;

    if (id == 0 || id > p->maps_len) {
        return false;
    }
    m = &p->maps[id - 1];
    path = &p->strs[m->path];
    return m->start == pm->start && m->limit == pm->limit
           && m->offset == pm->file_offset && m->raw_id_len == len
           && (len == 0 || memcmp(m->raw_id, pm->build_id, len) == 0)
           && strncmp(want, (const char *)p->chars.data + path->off,
                      path->len) == 0
           && want[path->len] == '\0';
}

static sp_status
sp_pp_mapping(sp_pprof *p, const sp_pprof_mapping *pm, uint32_t *id)
{
    char       bid[2 * SP_PP_BUILD_ID_MAX];
    sp_pp_map  key;
    uint32_t   hash, slot, found, cache;
    size_t     len;
    sp_status  rc;

    cache = sp_pp_mix(pm->start) & (SP_PP_MAP_CACHE - 1);
    if (sp_pp_map_cached(p, pm, p->map_cache[cache])) {
        *id = p->map_cache[cache];
        return SP_OK;
    }
    memset(&key, 0, sizeof(key));
    key.start = pm->start;
    key.limit = pm->limit;
    key.offset = pm->file_offset;
    rc = sp_pp_intern_c(p, pm->path != NULL ? pm->path : "", &key.path);
    if (rc != SP_OK) {
        return rc;
    }
    key.build_id = SP_PP_S_EMPTY;
    len = pm->build_id != NULL ? pm->build_id_len : 0;
    if (len > 0) {
        sp_pp_hex(bid, pm->build_id, len);
        if ((rc = sp_pp_intern(p, bid, 2 * len, &key.build_id)) != SP_OK) {
            return rc;
        }
        memcpy(key.raw_id, pm->build_id, len);
        key.raw_id_len = (uint8_t)len;
    }
    if ((rc = sp_pp_table_make_room(p, &p->map_tab)) != SP_OK
        || (rc = sp_pp_grow(p, (void **)&p->maps, &p->maps_cap,
                            sizeof(sp_pp_map),
                            (uint64_t)p->maps_len + 1)) != SP_OK)
    {
        return rc;
    }
    hash = sp_pp_mix(key.start ^ sp_pp_mix(key.limit)
                     ^ (uint64_t)sp_pp_mix(key.offset) << 32
                     ^ ((uint64_t)key.path << 20) ^ key.build_id);
    found = sp_pp_table_find(p, &p->map_tab, hash, sp_pp_map_eq, &key,
                             &slot);
    if (found == UINT32_MAX) {
        key.all_functions = true;
        key.all_files = true;
        key.all_lines = true;
        p->maps[p->maps_len] = key;
        sp_pp_table_put(&p->map_tab, slot, hash, p->maps_len);
        found = p->maps_len++;
    }
    *id = found + 1;
    p->map_cache[cache] = *id;
    return SP_OK;
}

/* ---- locations */

typedef struct sp_pp_loc_key {
    uint64_t address;
    uint32_t mapping;
} sp_pp_loc_key;

static bool
sp_pp_loc_eq(const sp_pprof *p, uint32_t index, const void *key)
{
    const sp_pp_loc_key *k = key;

    return p->locs[index].address == k->address
           && p->locs[index].mapping == k->mapping;
}

static bool
sp_pp_known(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Notes in the mapping what one line of one of its locations lacks. */
static void
sp_pp_map_note(sp_pp_map *m, const sp_pprof_line *l)
{
    m->all_functions = m->all_functions && sp_pp_known(l->function);
    m->all_files = m->all_files && sp_pp_known(l->file);
    m->all_lines = m->all_lines && l->line != 0;
}

static sp_status
sp_pp_location(sp_pprof *p, const sp_pprof_frame *f, uint32_t *id)
{
    sp_pp_loc_key key;
    sp_pp_loc    *loc;
    sp_pp_map    *m;
    uint32_t      hash, slot, found, i, fid, count;
    size_t        size;
    sp_pp_line    lines[256];
    sp_status     rc;

    key.address = f->address;
    key.mapping = 0;
    if (f->mapping != NULL) {
        rc = sp_pp_mapping(p, f->mapping, &key.mapping);
        if (rc != SP_OK) {
            return rc;
        }
    }
    if ((rc = sp_pp_table_make_room(p, &p->loc_tab)) != SP_OK) {
        return rc;
    }
    hash = sp_pp_mix(key.address ^ ((uint64_t)key.mapping << 48)
                     ^ key.mapping);
    found = sp_pp_table_find(p, &p->loc_tab, hash, sp_pp_loc_eq, &key,
                             &slot);
    if (found != UINT32_MAX) {
        *id = found + 1;
        return SP_OK;
    }
    /* pprof's order: inlined calls innermost first, then the caller. */
    count = (uint32_t)f->inline_count + 1;
    for (i = 0; i < f->inline_count; i++) {
        if ((rc = sp_pp_function(p, &f->inlined[i], &fid)) != SP_OK) {
            return rc;
        }
        lines[i].function = fid;
        lines[i].line = f->inlined[i].line;
    }
    if ((rc = sp_pp_function(p, &f->frame, &fid)) != SP_OK) {
        return rc;
    }
    lines[count - 1].function = fid;
    lines[count - 1].line = f->frame.line;
    if ((rc = sp_pp_grow(p, (void **)&p->lines, &p->lines_cap,
                         sizeof(sp_pp_line),
                         (uint64_t)p->lines_len + count)) != SP_OK
        || (rc = sp_pp_grow(p, (void **)&p->locs, &p->locs_cap,
                            sizeof(sp_pp_loc),
                            (uint64_t)p->locs_len + 1)) != SP_OK)
    {
        return rc;
    }
    memcpy(&p->lines[p->lines_len], lines, count * sizeof(sp_pp_line));
    size = sp_pp_vsize((uint64_t)p->locs_len + 1) + sp_pp_nz(key.mapping)
           + sp_pp_nz(key.address);
    for (i = 0; i < count; i++) {
        size += sp_pp_msg(sp_pp_vsize(lines[i].function)
                          + sp_pp_nz(lines[i].line));
    }
    p->fixed_size += sp_pp_msg(size);
    loc = &p->locs[p->locs_len];
    loc->address = key.address;
    loc->mapping = key.mapping;
    loc->first = p->lines_len;
    loc->count = count;
    p->lines_len += count;
    if (key.mapping != 0) {
        m = &p->maps[key.mapping - 1];
        for (i = 0; i < f->inline_count; i++) {
            sp_pp_map_note(m, &f->inlined[i]);
        }
        sp_pp_map_note(m, &f->frame);
        m->any_inline = m->any_inline || f->inline_count > 0;
    }
    sp_pp_table_put(&p->loc_tab, slot, hash, p->locs_len);
    *id = ++p->locs_len;
    return SP_OK;
}

/* ---- the builder */

static sp_status
sp_pp_intern_fixed(sp_pprof *p)
{
    uint32_t  i, index;
    sp_status rc;

    for (i = 0; i < SP_PP_S_COUNT_FIXED; i++) {
        rc = sp_pp_intern_c(p, sp_pp_fixed[i], &index);
        if (rc != SP_OK) {
            return rc;
        }
    }
    return SP_OK;
}

sp_status
sp_pprof_create(const sp_pprof_options *options, sp_pprof **out)
{
    sp_pprof  *p;
    sp_status  rc;
    size_t     max;

    if (options == NULL || out == NULL || options->period_ns == 0
        || options->period_ns > INT64_MAX)
    {
        return SP_ERR_INVALID;
    }
    max = options->max_bytes != 0 ? options->max_bytes
                                  : SP_PPROF_DEFAULT_MAX_BYTES;
    if (max < SP_PPROF_MIN_MAX_BYTES || max > UINT32_MAX) {
        return SP_ERR_INVALID;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return SP_ERR_NOMEM;
    }
    p->period_ns = options->period_ns;
    p->max_bytes = max;
    sp_buf_init(&p->chars, 1);
    sp_buf_init(&p->scratch, SP_PP_SAMPLE_MAX);
    if (sp_buf_reserve(&p->scratch, SP_PP_SAMPLE_MAX) != SP_OK) {
        sp_pprof_destroy(p);
        return SP_ERR_NOMEM;
    }
    p->mem += p->scratch.cap;
    rc = sp_pp_intern_fixed(p);
    if (rc != SP_OK) {
        sp_pprof_destroy(p);
        return rc == SP_ERR_TOO_LONG ? SP_ERR_INVALID : rc;
    }
    *out = p;
    return SP_OK;
}

void
sp_pprof_destroy(sp_pprof *p)
{
    if (p == NULL) {
        return;
    }
    sp_buf_free(&p->chars);
    sp_buf_free(&p->scratch);
    while (p->chunks != NULL) {
        sp_pp_chunk *next = p->chunks->next;

        free(p->chunks);
        p->chunks = next;
    }
    free(p->strs);
    free(p->funcs);
    free(p->locs);
    free(p->lines);
    free(p->maps);
    free(p->str_tab.slots);
    free(p->func_tab.slots);
    free(p->loc_tab.slots);
    free(p->map_tab.slots);
    free(p);
}

void
sp_pprof_reset(sp_pprof *p)
{
    uint32_t index, i;

    sp_buf_clear(&p->chars);
    for (p->chunk = p->chunks; p->chunk != NULL; p->chunk = p->chunk->next) {
        p->chunk->len = 0;
    }
    p->chunk = p->chunks;
    p->samples_len = 0;
    p->strs_len = 0;
    p->funcs_len = 0;
    p->locs_len = 0;
    p->lines_len = 0;
    p->maps_len = 0;
    sp_pp_table_clear(&p->str_tab);
    sp_pp_table_clear(&p->func_tab);
    sp_pp_table_clear(&p->loc_tab);
    sp_pp_table_clear(&p->map_tab);
    p->sample_count = 0;
    p->frame_count = 0;
    p->time_min = 0;
    p->time_max = 0;
    p->fixed_size = 0;
    memset(p->map_cache, 0, sizeof(p->map_cache));
    /* The memory for these is held already: this cannot fail. */
    for (i = 0; i < SP_PP_S_COUNT_FIXED; i++) {
        (void)sp_pp_intern_c(p, sp_pp_fixed[i], &index);
    }
}

const char *
sp_pprof_thread_state(uint8_t state)
{
    switch (state) {
    case SP_THREAD_RUNNING:
        return "running";
    case SP_THREAD_BLOCKED:
        return "blocked";
    default:
        return NULL;
    }
}

static void
sp_pp_label_num(sp_buf *b, uint32_t key, int64_t num)
{
    size_t mark = sp_pb_begin(b, PF_SAMPLE_LABEL);

    sp_pb_uint(b, PF_LABEL_KEY, key);
    if (num != 0) {
        sp_pb_uint(b, PF_LABEL_NUM, (uint64_t)num);
    }
    sp_pb_end(b, mark);
}

static void
sp_pp_label_str(sp_buf *b, uint32_t key, uint32_t str)
{
    size_t mark = sp_pb_begin(b, PF_SAMPLE_LABEL);

    sp_pb_uint(b, PF_LABEL_KEY, key);
    sp_pb_uint(b, PF_LABEL_STR, str);
    sp_pb_end(b, mark);
}

/* The string indices of a sample's string labels, interned first so the
 * encoding below cannot fail half-way for want of a string. */
typedef struct sp_pp_labels {
    uint32_t trace_id;
    uint32_t span_id;
    uint32_t thread_name;   /* 0: none */
    uint32_t state;         /* 0: none */
} sp_pp_labels;

static sp_status
sp_pp_sample_strings(sp_pprof *p, const sp_sample *s, sp_pp_labels *l)
{
    char        hex[32];
    const char *state;
    size_t      name_len;
    sp_status   rc;

    memset(l, 0, sizeof(*l));
    if (s->has_span) {
        sp_pp_hex(hex, s->trace_id, 16);
        if ((rc = sp_pp_intern(p, hex, 32, &l->trace_id)) != SP_OK) {
            return rc;
        }
        sp_pp_hex(hex, s->span_id, 8);
        if ((rc = sp_pp_intern(p, hex, 16, &l->span_id)) != SP_OK) {
            return rc;
        }
    }
    name_len = strnlen(s->thread_name, sizeof(s->thread_name));
    if (name_len > 0) {
        rc = sp_pp_intern(p, s->thread_name, name_len, &l->thread_name);
        if (rc != SP_OK) {
            return rc;
        }
    }
    state = sp_pprof_thread_state(s->state);
    if (state != NULL) {
        if ((rc = sp_pp_intern_c(p, state, &l->state)) != SP_OK) {
            return rc;
        }
    }
    return SP_OK;
}

/* Appends one encoded sample to the chunks, whole or not at all. */
static sp_status
sp_pp_store(sp_pprof *p, const uint8_t *data, size_t len)
{
    sp_pp_chunk *c = p->chunk, *next;

    if (c == NULL || SP_PP_CHUNK - c->len < len) {
        /* Chunks emptied by a reset are used again first. */
        next = c != NULL ? c->next : p->chunks;
        if (next == NULL) {
            if (sizeof(*next) > sp_pp_room(p)) {
                return SP_ERR_TOO_LONG;
            }
            next = malloc(sizeof(*next));
            if (next == NULL) {
                return SP_ERR_NOMEM;
            }
            next->next = NULL;
            next->len = 0;
            if (c != NULL) {
                c->next = next;
            } else {
                p->chunks = next;
            }
            p->mem += sizeof(*next);
        }
        c = next;
        p->chunk = c;
    }
    memcpy(c->data + c->len, data, len);
    c->len += len;
    p->samples_len += len;
    return SP_OK;
}

static int64_t
sp_pp_ms(uint64_t ns, bool round)
{
    return (int64_t)((ns + (round ? 500000 : 0)) / 1000000);
}

sp_status
sp_pprof_add(sp_pprof *p, const sp_sample *s, const sp_pprof_frame *frames,
             size_t n)
{
    uint32_t      ids[SP_PPROF_MAX_FRAMES];
    sp_pp_labels  lab;
    size_t        i, packed, mark;
    uint64_t      period, weight, cpu_ns;
    sp_buf       *b;
    sp_status     rc;

    if (p == NULL || s == NULL || (frames == NULL && n > 0)
        || n > SP_PPROF_MAX_FRAMES || s->weight > SP_SAMPLE_WEIGHT_MAX)
    {
        return SP_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        if ((frames[i].inline_count > 0 && frames[i].inlined == NULL)
            || (frames[i].mapping != NULL
                && frames[i].mapping->build_id != NULL
                && frames[i].mapping->build_id_len > SP_PP_BUILD_ID_MAX))
        {
            return SP_ERR_INVALID;
        }
    }
    for (i = 0; i < n; i++) {
        if ((rc = sp_pp_location(p, &frames[i], &ids[i])) != SP_OK) {
            return rc;
        }
    }
    if ((rc = sp_pp_sample_strings(p, s, &lab)) != SP_OK) {
        return rc;
    }

    b = &p->scratch;
    sp_buf_clear(b);
    mark = sp_pb_begin(b, PF_SAMPLE);
    if (n > 0) {
        packed = 0;
        for (i = 0; i < n; i++) {
            packed += sp_pb_varint_size(ids[i]);
        }
        sp_pb_put_varint(b, (PF_SAMPLE_LOCATION << 3) | 2);
        sp_pb_put_varint(b, packed);
        for (i = 0; i < n; i++) {
            sp_pb_put_varint(b, ids[i]);
        }
    }
    /* One sample taken, standing for weight intervals of CPU time (pprof
     * values are int64: saturate, though a real period never gets
     * there). */
    weight = s->weight == 0 ? 1 : s->weight;
    cpu_ns = p->period_ns > (uint64_t)INT64_MAX / weight
             ? (uint64_t)INT64_MAX : weight * p->period_ns;
    sp_pb_put_varint(b, (PF_SAMPLE_VALUE << 3) | 2);
    sp_pb_put_varint(b, 1 + sp_pb_varint_size(cpu_ns));
    sp_pb_put_varint(b, 1);
    sp_pb_put_varint(b, cpu_ns);

    period = s->period_ns != 0 ? s->period_ns : p->period_ns;
    sp_pp_label_num(b, SP_PP_S_EVENT_TIME, sp_pp_ms(s->time_ns, false));
    sp_pp_label_num(b, SP_PP_S_EVENT_PERIOD, sp_pp_ms(period, true));
    if (s->has_span) {
        sp_pp_label_str(b, SP_PP_S_TRACE_ID, lab.trace_id);
        sp_pp_label_str(b, SP_PP_S_SPAN_ID, lab.span_id);
    }
    sp_pp_label_num(b, SP_PP_S_THREAD_ID, s->tid);
    sp_pp_label_num(b, SP_PP_S_THREAD_OS_ID, s->tid);
    if (lab.thread_name != 0) {
        sp_pp_label_str(b, SP_PP_S_THREAD_NAME, lab.thread_name);
    }
    if (lab.state != 0) {
        sp_pp_label_str(b, SP_PP_S_THREAD_STATE, lab.state);
    }
    if (s->truncated) {
        sp_pp_label_str(b, SP_PP_S_TRUNCATED, SP_PP_S_TRUE);
    }
    if ((rc = sp_pb_end(b, mark)) != SP_OK
        || (rc = sp_pp_store(p, b->data, b->len)) != SP_OK)
    {
        return rc;
    }

    if (p->sample_count == 0 || s->time_ns < p->time_min) {
        p->time_min = s->time_ns;
    }
    if (p->sample_count == 0 || s->time_ns > p->time_max) {
        p->time_max = s->time_ns;
    }
    p->sample_count++;
    p->frame_count += n;
    return SP_OK;
}

size_t
sp_pprof_sample_count(const sp_pprof *p)
{
    return p->sample_count;
}

uint64_t
sp_pprof_frame_count(const sp_pprof *p)
{
    return p->frame_count;
}

size_t
sp_pprof_memory(const sp_pprof *p)
{
    return p->mem;
}

static size_t
sp_pp_value_type_size(uint32_t type, uint32_t unit)
{
    return sp_pp_msg(sp_pp_vsize(type) + sp_pp_vsize(unit));
}

static size_t
sp_pp_mapping_size(const sp_pp_map *m, uint32_t id)
{
    return sp_pp_msg(sp_pp_vsize(id) + sp_pp_nz(m->start)
                     + sp_pp_nz(m->limit) + sp_pp_nz(m->offset)
                     + sp_pp_nz(m->path) + sp_pp_nz(m->build_id)
                     + 2 * (m->all_functions + m->all_files + m->all_lines
                            + m->any_inline));
}

size_t
sp_pprof_size(const sp_pprof *p)
{
    size_t   size;
    uint32_t i;

    size = p->fixed_size + p->samples_len
           + sp_pp_value_type_size(SP_PP_S_SAMPLES, SP_PP_S_COUNT)
           + 2 * sp_pp_value_type_size(SP_PP_S_CPU, SP_PP_S_NANOSECONDS)
           + sp_pp_nz(p->time_min) + sp_pp_nz(p->time_max - p->time_min)
           + sp_pp_vsize(p->period_ns);
    for (i = 0; i < p->maps_len; i++) {
        size += sp_pp_mapping_size(&p->maps[i], i + 1);
    }
    return size;
}

/* ---- serialization */

static void
sp_pp_value_type(sp_buf *out, uint32_t field, uint32_t type, uint32_t unit)
{
    size_t mark = sp_pb_begin(out, field);

    sp_pb_uint(out, PF_VT_TYPE, type);
    sp_pb_uint(out, PF_VT_UNIT, unit);
    sp_pb_end(out, mark);
}

/* proto3 leaves zero values out. */
static void
sp_pp_uint_nz(sp_buf *out, uint32_t field, uint64_t v)
{
    if (v != 0) {
        sp_pb_uint(out, field, v);
    }
}

static void
sp_pp_write_mappings(const sp_pprof *p, sp_buf *out)
{
    const sp_pp_map *m;
    uint32_t         i;
    size_t           mark;

    for (i = 0; i < p->maps_len; i++) {
        m = &p->maps[i];
        mark = sp_pb_begin(out, PF_MAPPING);
        sp_pb_uint(out, PF_MAP_ID, (uint64_t)i + 1);
        sp_pp_uint_nz(out, PF_MAP_START, m->start);
        sp_pp_uint_nz(out, PF_MAP_LIMIT, m->limit);
        sp_pp_uint_nz(out, PF_MAP_OFFSET, m->offset);
        sp_pp_uint_nz(out, PF_MAP_FILENAME, m->path);
        sp_pp_uint_nz(out, PF_MAP_BUILD_ID, m->build_id);
        sp_pp_uint_nz(out, PF_MAP_HAS_FUNCS, m->all_functions);
        sp_pp_uint_nz(out, PF_MAP_HAS_FILES, m->all_files);
        sp_pp_uint_nz(out, PF_MAP_HAS_LINES, m->all_lines);
        sp_pp_uint_nz(out, PF_MAP_HAS_INLINE, m->any_inline);
        sp_pb_end(out, mark);
    }
}

static void
sp_pp_write_locations(const sp_pprof *p, sp_buf *out)
{
    const sp_pp_loc  *loc;
    const sp_pp_line *l;
    uint32_t          i, j;
    size_t            mark, lmark;

    for (i = 0; i < p->locs_len; i++) {
        loc = &p->locs[i];
        mark = sp_pb_begin(out, PF_LOCATION);
        sp_pb_uint(out, PF_LOC_ID, (uint64_t)i + 1);
        sp_pp_uint_nz(out, PF_LOC_MAPPING, loc->mapping);
        sp_pp_uint_nz(out, PF_LOC_ADDRESS, loc->address);
        for (j = 0; j < loc->count; j++) {
            l = &p->lines[loc->first + j];
            lmark = sp_pb_begin(out, PF_LOC_LINE);
            sp_pb_uint(out, PF_LINE_FUNCTION, l->function);
            sp_pp_uint_nz(out, PF_LINE_LINE, l->line);
            sp_pb_end(out, lmark);
        }
        sp_pb_end(out, mark);
    }
}

static void
sp_pp_write_functions(const sp_pprof *p, sp_buf *out)
{
    const sp_pp_func *f;
    uint32_t          i;
    size_t            mark;

    for (i = 0; i < p->funcs_len; i++) {
        f = &p->funcs[i];
        mark = sp_pb_begin(out, PF_FUNCTION);
        sp_pb_uint(out, PF_FUNC_ID, (uint64_t)i + 1);
        sp_pp_uint_nz(out, PF_FUNC_NAME, f->name);
        sp_pp_uint_nz(out, PF_FUNC_SYSTEM_NAME, f->name);
        sp_pp_uint_nz(out, PF_FUNC_FILENAME, f->file);
        sp_pb_end(out, mark);
    }
}

sp_status
sp_pprof_serialize(const sp_pprof *p, sp_buf *out)
{
    size_t             start = out->len;
    uint32_t           i;
    const sp_pp_chunk *c;

    /* The exact size: one allocation at most. */
    if (sp_buf_reserve(out, sp_pprof_size(p)) != SP_OK) {
        return out->err;
    }
    sp_pp_value_type(out, PF_SAMPLE_TYPE, SP_PP_S_SAMPLES, SP_PP_S_COUNT);
    sp_pp_value_type(out, PF_SAMPLE_TYPE, SP_PP_S_CPU,
                     SP_PP_S_NANOSECONDS);
    for (c = p->chunks; c != NULL; c = c->next) {
        sp_buf_append(out, c->data, c->len);
    }
    sp_pp_write_mappings(p, out);
    sp_pp_write_locations(p, out);
    sp_pp_write_functions(p, out);
    /* Strings are stored valid UTF-8 already: write them as bytes. */
    for (i = 0; i < p->strs_len; i++) {
        sp_pb_bytes(out, PF_STRING_TABLE, p->chars.data + p->strs[i].off,
                    p->strs[i].len);
    }
    sp_pp_uint_nz(out, PF_TIME_NANOS, p->time_min);
    sp_pp_uint_nz(out, PF_DURATION_NANOS, p->time_max - p->time_min);
    sp_pp_value_type(out, PF_PERIOD_TYPE, SP_PP_S_CPU, SP_PP_S_NANOSECONDS);
    sp_pb_uint(out, PF_PERIOD, p->period_ns);
    if (out->err != SP_OK) {
        sp_status rc = out->err;

        sp_buf_truncate(out, start);
        out->err = rc;
        return rc;
    }
    return SP_OK;
}
