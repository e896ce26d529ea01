#include "sp_otlp.h"
#include "sp_otlp_request.h"
#include "sp_span_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/*
 * Field numbers of proto/opentelemetry/... The request, resource and
 * scope levels are the same for logs and traces: request field 1 holds a
 * ResourceLogs/ResourceSpans, whose field 1 is the Resource and field 2
 * the ScopeLogs/ScopeSpans, whose field 1 is the scope and field 2 a
 * LogRecord/Span. All of them below 16, so every tag is one byte.
 */
#define OF_REQUEST_RESOURCE 1
#define OF_RESOURCE         1
#define OF_SCOPES           2
#define OF_SCOPE            1
#define OF_SCOPE_ITEM       2

#define OF_RESOURCE_ATTR    1
#define OF_SCOPE_NAME       1
#define OF_SCOPE_VERSION    2
#define OF_KV_KEY           1
#define OF_KV_VALUE         2
#define OF_ANY_STRING       1
#define OF_ANY_BOOL         2
#define OF_ANY_INT          3

#define OF_LOG_TIME         1
#define OF_LOG_BODY         5
#define OF_LOG_ATTR         6
#define OF_LOG_TRACE_ID     9
#define OF_LOG_SPAN_ID      10
#define OF_LOG_OBSERVED     11

/* ---- requests grouped by worker */

typedef struct sp_ob_group {
    uint32_t pid;
    sp_buf   resource;  /* the Resource message's fields */
    /* What resource holds, kept past the request it went with: the
     * encoding of the resource of this version for this pid (version 0:
     * none). Encoding it for every request cost 16 instructions a span
     * (callgrind, nginx, a request of 512 spans). */
    uint64_t res_version;
    uint32_t res_pid;
    sp_buf   items;     /* the scope message's LogRecord/Span fields */
    size_t   hint;      /* room to give items when it has no memory */
    /* Its size in the request when items held `sized` bytes, and the
     * items length below which the size grows by just what items grow
     * (no nested length needs another byte): a span adds to it without
     * measuring the group again. */
    size_t   size;
    size_t   grow_below;
    size_t   sized;     /* apart from size: see below */
    /* sp_traces_room's one bound, while items hold `sized` bytes: what
     * a span's field may end below with every other bound kept
     * (sp_traces_fast_end); 0 when none. Only the general paths change
     * the items otherwise than sp_traces_count, which keeps sized, and
     * they make it again for the last group when they end: so a group
     * whose bound is not 0 has items of `sized` bytes, if it is last. */
    size_t   fast_end;
} sp_ob_group;

/* size and count, like a group's size and sized, are not side by side:
 * sp_otlp_traces_add_span grows both, and next to each other the
 * compiler packs the two additions into vector registers (twelve
 * instructions for four stores; callgrind). */
typedef struct sp_ob_batch {
    size_t       max_bytes;
    size_t       size;      /* of the serialized request */
    sp_buf       scope;     /* the InstrumentationScope message's fields */
    size_t       count;     /* records */
    sp_buf       head;      /* a group's header, for sp_ob_take */
    sp_ob_group *groups;
    size_t       groups_len;
    size_t       groups_cap;    /* initialized slots, reused after reset */
    sp_ob_group *last;          /* the group used last, NULL when none:
                                 * pids come in runs */
} sp_ob_batch;

static size_t
sp_ob_field(size_t body)
{
    return 1 + sp_pb_varint_size(body) + body;
}

/* The bodies of the group's scope message and its own, with items of
 * `items` bytes. */
static size_t
sp_ob_scope_body_at(const sp_ob_batch *b, size_t items)
{
    return sp_ob_field(b->scope.len) + items;
}

static size_t
sp_ob_group_body_at(const sp_ob_batch *b, const sp_ob_group *g,
                    size_t items)
{
    return sp_ob_field(g->resource.len)
           + sp_ob_field(sp_ob_scope_body_at(b, items));
}

static size_t
sp_ob_scope_body(const sp_ob_batch *b, const sp_ob_group *g)
{
    return sp_ob_scope_body_at(b, g->items.len);
}

static size_t
sp_ob_group_body(const sp_ob_batch *b, const sp_ob_group *g)
{
    return sp_ob_group_body_at(b, g, g->items.len);
}

/* Bytes the group adds to the request. */
static size_t
sp_ob_group_size(const sp_ob_batch *b, const sp_ob_group *g)
{
    return sp_ob_field(sp_ob_group_body(b, g));
}

/* How much v can grow before its varint takes another byte. */
static size_t
sp_ob_varint_room(size_t v)
{
    size_t bits = 7 * sp_pb_varint_size(v);

    return bits >= 8 * sizeof(size_t) ? SIZE_MAX - v
                                      : ((size_t)1 << bits) - v;
}

/* g's size and how far its items can grow at that rate, measured. */
static void
sp_ob_group_measure(const sp_ob_batch *b, sp_ob_group *g)
{
    size_t scope = sp_ob_scope_body(b, g), body = sp_ob_group_body(b, g);
    size_t room = sp_ob_varint_room(scope);

    if (sp_ob_varint_room(body) < room) {
        room = sp_ob_varint_room(body);
    }
    g->size = sp_ob_field(body);
    g->sized = g->items.len;
    g->grow_below = room > SIZE_MAX - g->items.len ? SIZE_MAX
                                                   : g->items.len + room;
}

static sp_status
sp_ob_init(sp_ob_batch *b, const sp_otlp_builder_options *o,
           const char *scope, const char *version)
{
    memset(b, 0, sizeof(*b));
    b->max_bytes = o != NULL && o->max_bytes != 0 ? o->max_bytes
                                                  : SP_OTLP_DEFAULT_MAX_BYTES;
    if (b->max_bytes < SP_OTLP_MIN_MAX_BYTES) {
        return SP_ERR_INVALID;
    }
    sp_buf_init(&b->scope, 0);
    sp_pb_cstring(&b->scope, OF_SCOPE_NAME, scope);
    sp_pb_cstring(&b->scope, OF_SCOPE_VERSION, version);
    /* Two tags and two varints, each written with room for the longest. */
    sp_buf_init(&b->head, 0);
    sp_buf_reserve(&b->head, 4 * 10);
    if (sp_buf_status(&b->head) != SP_OK) {
        return sp_buf_status(&b->head);
    }
    return sp_buf_status(&b->scope);
}

static void
sp_ob_free(sp_ob_batch *b)
{
    size_t i;

    for (i = 0; i < b->groups_cap; i++) {
        sp_buf_free(&b->groups[i].resource);
        sp_buf_free(&b->groups[i].items);
    }
    free(b->groups);
    sp_buf_free(&b->scope);
    sp_buf_free(&b->head);
}

/*
 * Memory is kept for the next request unless the slots hold more than
 * twice max_bytes between them: each slot's buffers stay within their
 * bound, but over many requests the big ones could be different slots.
 */
static void
sp_ob_reset(sp_ob_batch *b)
{
    size_t i, held = 0;

    for (i = 0; i < b->groups_cap; i++) {
        held += b->groups[i].resource.cap + b->groups[i].items.cap;
    }
    for (i = 0; i < b->groups_cap; i++) {
        if (held > 2 * b->max_bytes) {
            sp_buf_free(&b->groups[i].resource);
            sp_buf_free(&b->groups[i].items);
            b->groups[i].res_version = 0;
        }
        sp_buf_clear(&b->groups[i].items);
    }
    b->groups_len = 0;
    b->size = 0;
    b->count = 0;
    b->last = NULL;
}

static void
sp_ob_kv_begin(sp_buf *out, uint32_t field, const char *key, size_t key_len,
               size_t *kv, size_t *any)
{
    *kv = sp_pb_begin(out, field);
    sp_pb_string(out, OF_KV_KEY, key, key_len);
    *any = sp_pb_begin(out, OF_KV_VALUE);
}

static void
sp_ob_kv_end(sp_buf *out, size_t kv, size_t any)
{
    sp_pb_end(out, any);
    sp_pb_end(out, kv);
}

static void
sp_ob_kv_string(sp_buf *out, uint32_t field, const char *key,
                size_t key_len, const char *value, size_t len)
{
    size_t kv, any;

    sp_ob_kv_begin(out, field, key, key_len, &kv, &any);
    sp_pb_string(out, OF_ANY_STRING, value, len);
    sp_ob_kv_end(out, kv, any);
}

static void
sp_ob_kv_int(sp_buf *out, uint32_t field, const char *key, size_t key_len,
             int64_t value)
{
    size_t kv, any;

    sp_ob_kv_begin(out, field, key, key_len, &kv, &any);
    sp_pb_uint(out, OF_ANY_INT, (uint64_t)value);
    sp_ob_kv_end(out, kv, any);
}

static void
sp_ob_kv_bool(sp_buf *out, uint32_t field, const char *key, size_t key_len,
              bool value)
{
    size_t kv, any;

    sp_ob_kv_begin(out, field, key, key_len, &kv, &any);
    sp_pb_uint(out, OF_ANY_BOOL, value ? 1 : 0);
    sp_ob_kv_end(out, kv, any);
}

#define SP_KEY(s) (s), (sizeof(s) - 1)

static void
sp_ob_kv_cstr(sp_buf *out, uint32_t field, const char *key, size_t key_len,
              const char *value)
{
    sp_ob_kv_string(out, field, key, key_len, value, strlen(value));
}

static void
sp_ob_encode_resource(sp_buf *out, const sp_resource *res, uint32_t pid)
{
    const char *key;
    const char *value;
    size_t      i, n;
    bool        pid_done = false;

    n = res != NULL ? sp_resource_count(res) : 0;
    for (i = 0; i < n; i++) {
        key = sp_resource_key(res, i);
        if (strcmp(key, "process.pid") == 0) {
            sp_ob_kv_int(out, OF_RESOURCE_ATTR, SP_KEY("process.pid"), pid);
            pid_done = true;
        } else if (sp_resource_type(res, i) == SP_ATTR_STRING) {
            value = sp_resource_string(res, i);
            sp_ob_kv_cstr(out, OF_RESOURCE_ATTR, key, strlen(key),
                          value != NULL ? value : "");
        } else {
            sp_ob_kv_int(out, OF_RESOURCE_ATTR, key, strlen(key),
                         sp_resource_int(res, i));
        }
    }
    if (!pid_done) {
        sp_ob_kv_int(out, OF_RESOURCE_ATTR, SP_KEY("process.pid"), pid);
    }
}

/*
 * Puts first among the unused slots (at groups_len, which exists) the one
 * whose resource is already encoded for pid and version, if one is.
 */
static void
sp_ob_slot_find(sp_ob_batch *b, uint32_t pid, uint64_t version)
{
    sp_ob_group t, *first = &b->groups[b->groups_len];
    size_t      i;

    if (version == 0
        || (first->res_version == version && first->res_pid == pid))
    {
        return;
    }
    for (i = b->groups_len + 1; i < b->groups_cap; i++) {
        if (b->groups[i].res_version == version
            && b->groups[i].res_pid == pid)
        {
            t = *first;
            *first = b->groups[i];
            b->groups[i] = t;
            return;
        }
    }
}

/*
 * The group of pid, made with res if new (*created). Its size is counted
 * in b->size; a new group that then gets no record must be dropped with
 * sp_ob_drop_new.
 */
static sp_status
sp_ob_group_get(sp_ob_batch *b, const sp_resource *res, uint32_t pid,
                sp_ob_group **out, bool *created)
{
    sp_ob_group *g;
    size_t       i, cap;
    uint64_t     version;
    sp_status    rc;

    *created = false;
    if (b->last != NULL && b->last->pid == pid) {
        *out = b->last;
        return SP_OK;
    }
    for (i = 0; i < b->groups_len; i++) {
        if (b->groups[i].pid == pid) {
            b->last = &b->groups[i];
            *out = &b->groups[i];
            return SP_OK;
        }
    }
    if (b->groups_len == SP_OTLP_MAX_RESOURCES) {
        return SP_ERR_TOO_LONG;
    }
    if (b->groups_len == b->groups_cap) {
        cap = b->groups_cap != 0 ? b->groups_cap * 2 : 8;
        g = realloc(b->groups, cap * sizeof(*g));
        if (g == NULL) {
            return SP_ERR_NOMEM;
        }
        b->groups = g;
        b->last = NULL;     /* it pointed into the old array */
        for (i = b->groups_cap; i < cap; i++) {
            sp_buf_init(&g[i].resource, 0);
            sp_buf_init(&g[i].items, 0);
            g[i].hint = 0;
            g[i].res_version = 0;
        }
        b->groups_cap = cap;
    }
    g = &b->groups[b->groups_len];
    version = res != NULL ? sp_resource_version(res) : 0;
    sp_ob_slot_find(b, pid, version);
    g->pid = pid;
    g->fast_end = 0;
    sp_buf_clear(&g->items);
    g->resource.limit = b->max_bytes;
    g->items.limit = b->max_bytes;
    /* Its last items went with a request (sp_ob_take): start at about
     * their size rather than grow to it again, a copy at every doubling.
     * Without that room it grows as usual. */
    if (g->items.cap == 0 && g->hint != 0
        && sp_buf_reserve(&g->items, g->hint) != SP_OK)
    {
        sp_buf_clear(&g->items);
    }
    if (version == 0 || g->res_version != version || g->res_pid != pid) {
        g->res_version = 0;
        sp_buf_clear(&g->resource);
        sp_ob_encode_resource(&g->resource, res, pid);
        if ((rc = sp_buf_status(&g->resource)) != SP_OK) {
            return rc;
        }
        g->res_version = version;
        g->res_pid = pid;
    }
    sp_ob_group_measure(b, g);
    if (b->size + g->size > b->max_bytes) {
        return SP_ERR_TOO_LONG;
    }
    b->size += g->size;
    b->groups_len++;
    b->last = g;
    *created = true;
    *out = g;
    return SP_OK;
}

static void
sp_ob_drop_new(sp_ob_batch *b, sp_ob_group *g)
{
    b->size -= sp_ob_group_size(b, g);
    b->groups_len--;
    b->last = NULL;
}

/* One record being written into a group. */
typedef struct sp_ob_item {
    sp_ob_group *g;
    bool         created;   /* the group is new for this record */
    size_t       start;     /* items.len before it */
    size_t       before;    /* the group's size before it */
    size_t       mark;
} sp_ob_item;

/* Where a record of worker pid goes, and what to take back if it fails. */
static sp_status
sp_ob_item_open(sp_ob_batch *b, const sp_resource *res, uint32_t pid,
                sp_ob_item *it)
{
    sp_status rc;

    rc = sp_ob_group_get(b, res, pid, &it->g, &it->created);
    if (rc != SP_OK) {
        return rc;
    }
    it->start = it->g->items.len;
    it->before = sp_ob_group_size(b, it->g);
    return SP_OK;
}

/* A record encoded field by field: its length is filled in at the end. */
static sp_status
sp_ob_item_begin(sp_ob_batch *b, const sp_resource *res, uint32_t pid,
                 sp_ob_item *it)
{
    sp_status rc = sp_ob_item_open(b, res, pid, it);

    if (rc == SP_OK) {
        it->mark = sp_pb_begin(&it->g->items, OF_SCOPE_ITEM);
    }
    return rc;
}

/* Counts the record written (rc SP_OK), or takes it back out (and its
 * group if new) when it failed or would pass the bound. */
static sp_status
sp_ob_item_close(sp_ob_batch *b, sp_ob_item *it, sp_status rc)
{
    size_t after;

    if (rc == SP_OK) {
        after = sp_ob_group_size(b, it->g);
        if (b->size - it->before + after <= b->max_bytes) {
            b->size = b->size - it->before + after;
            b->count++;
            return SP_OK;
        }
        rc = SP_ERR_TOO_LONG;
    }
    sp_buf_truncate(&it->g->items, it->start);
    if (it->created) {
        sp_ob_drop_new(b, it->g);
    }
    return rc;
}

/* Closes the record begun with sp_ob_item_begin and counts it. */
static sp_status
sp_ob_item_end(sp_ob_batch *b, sp_ob_item *it)
{
    return sp_ob_item_close(b, it, sp_pb_end(&it->g->items, it->mark));
}

static sp_status
sp_ob_serialize(const sp_ob_batch *b, sp_buf *out)
{
    const sp_ob_group *g;
    size_t             i, start = out->len;
    sp_status          rc;

    if (out->err != SP_OK) {
        return out->err;
    }
    if (sp_buf_reserve(out, b->size) != SP_OK) {
        return out->err;
    }
    /* Lengths are known: no nested message is moved. */
    for (i = 0; i < b->groups_len; i++) {
        g = &b->groups[i];
        sp_pb_put_varint(out, (OF_REQUEST_RESOURCE << 3) | 2);
        sp_pb_put_varint(out, sp_ob_group_body(b, g));
        sp_pb_bytes(out, OF_RESOURCE, g->resource.data, g->resource.len);
        sp_pb_put_varint(out, (OF_SCOPES << 3) | 2);
        sp_pb_put_varint(out, sp_ob_scope_body(b, g));
        sp_pb_bytes(out, OF_SCOPE, b->scope.data, b->scope.len);
        sp_buf_append(out, g->items.data, g->items.len);
    }
    if ((rc = out->err) != SP_OK) {
        sp_buf_truncate(out, start);
        out->err = rc;
    }
    return rc;
}

/*
 * Into h (emptied first): the tag and length of a message field whose body
 * starts with the tag and length of its first field. h has the room
 * (sp_ob_init), so this cannot fail.
 */
static void
sp_ob_field_head(sp_buf *h, uint32_t field, size_t body, uint32_t first,
                 size_t first_body)
{
    sp_buf_clear(h);
    sp_pb_put_varint(h, (field << 3) | 2);
    sp_pb_put_varint(h, body);
    sp_pb_put_varint(h, (first << 3) | 2);
    sp_pb_put_varint(h, first_body);
}

/*
 * The request as pieces: per group its header (ResourceSpans/Logs tag
 * and length, the Resource, the ScopeSpans/Logs tag and length, the
 * scope), copied, and its items buffer, taken: the records are not
 * copied. Then the batch is empty (sp_ob_reset). All or nothing: room is
 * reserved before any buffer moves, so on failure the batch is unchanged.
 */
static sp_status
sp_ob_take(sp_ob_batch *b, sp_otlp_request **out)
{
    sp_otlp_request *r;
    sp_ob_group     *g;
    sp_buf          *h = &b->head;
    size_t           i, n, items = 0;
    sp_status        rc;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    for (i = 0; i < b->groups_len; i++) {
        items += b->groups[i].items.len;
    }
    if ((rc = sp_otlp_request_create(&r)) != SP_OK) {
        return rc;
    }
    rc = sp_otlp_request_reserve(r, 2 * b->groups_len, b->size - items);
    if (rc != SP_OK) {
        sp_otlp_request_unref(r);
        return rc;
    }
    for (i = 0; i < b->groups_len; i++) {
        g = &b->groups[i];
        sp_ob_field_head(h, OF_REQUEST_RESOURCE, sp_ob_group_body(b, g),
                         OF_RESOURCE, g->resource.len);
        sp_otlp_request_copy(r, h->data, h->len);
        sp_otlp_request_copy(r, g->resource.data, g->resource.len);
        sp_ob_field_head(h, OF_SCOPES, sp_ob_scope_body(b, g), OF_SCOPE,
                         b->scope.len);
        sp_otlp_request_copy(r, h->data, h->len);
        sp_otlp_request_copy(r, b->scope.data, b->scope.len);
        /* a quarter more than last time: a slightly larger request does
         * not grow the buffer by copying it whole */
        n = g->items.len;
        g->hint = n + n / 4 < b->max_bytes ? n + n / 4 : b->max_bytes;
        sp_otlp_request_take(r, &g->items);
    }
    sp_ob_reset(b);
    *out = r;
    return SP_OK;
}

/* ---- logs */

struct sp_otlp_logs {
    sp_ob_batch batch;
    int         gzip_level;
    sp_buf      gz;         /* the gzip of the profile being added */
    sp_buf      text;       /* the body of the text record being added */
};

const char *
sp_otlp_source_name(uint8_t source)
{
    switch (source) {
    case SP_SOURCE_SNAPSHOT:
        return "snapshot";
    case SP_SOURCE_CONTINUOUS:
        return "continuous";
    default:
        return NULL;
    }
}

sp_status
sp_otlp_logs_create(const sp_otlp_builder_options *options,
                    sp_otlp_logs **out)
{
    sp_otlp_logs *l;
    sp_status     rc;
    int           level;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    level = options != NULL ? options->gzip_level : 0;
    if (level < 0 || level > 9) {
        return SP_ERR_INVALID;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return SP_ERR_NOMEM;
    }
    rc = sp_ob_init(&l->batch, options, SP_OTLP_PROFILING_SCOPE,
                    SP_OTLP_PROFILING_SCOPE_VERSION);
    if (rc != SP_OK) {
        sp_otlp_logs_destroy(l);
        return rc;
    }
    l->gzip_level = level != 0 ? level : SP_OTLP_DEFAULT_GZIP_LEVEL;
    /* The gzip is bounded by the profile given; the text by the request. */
    sp_buf_init(&l->gz, 0);
    sp_buf_init(&l->text, l->batch.max_bytes);
    *out = l;
    return SP_OK;
}

void
sp_otlp_logs_destroy(sp_otlp_logs *l)
{
    if (l == NULL) {
        return;
    }
    sp_ob_free(&l->batch);
    sp_buf_free(&l->gz);
    sp_buf_free(&l->text);
    free(l);
}

void
sp_otlp_logs_reset(sp_otlp_logs *l)
{
    sp_ob_reset(&l->batch);
    /* A profile's gzip can be large: do not keep it between requests. */
    sp_buf_free(&l->gz);
    sp_buf_clear(&l->text);
}

size_t
sp_otlp_logs_count(const sp_otlp_logs *l)
{
    return l->batch.count;
}

size_t
sp_otlp_logs_size(const sp_otlp_logs *l)
{
    return l->batch.size;
}

/* The attributes every profiling LogRecord has. */
static void
sp_otlp_log_common(sp_buf *b, const char *format, const char *source)
{
    sp_ob_kv_cstr(b, OF_LOG_ATTR, SP_KEY("com.splunk.sourcetype"),
                  "otel.profiling");
    sp_ob_kv_cstr(b, OF_LOG_ATTR, SP_KEY("profiling.data.type"), "cpu");
    sp_ob_kv_cstr(b, OF_LOG_ATTR, SP_KEY("profiling.data.format"), format);
    sp_ob_kv_cstr(b, OF_LOG_ATTR,
                  SP_KEY("profiling.instrumentation.source"), source);
}

sp_status
sp_otlp_logs_add_pprof(sp_otlp_logs *l, const sp_resource *res,
                       uint32_t pid, uint8_t source, uint64_t time_ns,
                       uint64_t observed_ns, const void *profile, size_t len,
                       uint64_t total_frames)
{
    const char *src = sp_otlp_source_name(source);
    sp_ob_item  it;
    sp_buf     *b;
    size_t      body;
    sp_status   rc;

    if (l == NULL || src == NULL || (profile == NULL && len > 0)
        || total_frames > INT64_MAX)
    {
        return SP_ERR_INVALID;
    }
    sp_buf_clear(&l->gz);
    rc = sp_gzip(&l->gz, profile, len, l->gzip_level);
    if (rc != SP_OK) {
        return rc;
    }
    if (sp_base64_size(l->gz.len) > l->batch.max_bytes) {
        return SP_ERR_TOO_LONG;
    }
    if ((rc = sp_ob_item_begin(&l->batch, res, pid, &it)) != SP_OK) {
        return rc;
    }
    b = &it.g->items;
    sp_pb_fixed64(b, OF_LOG_TIME, time_ns);
    body = sp_pb_begin(b, OF_LOG_BODY);
    sp_pb_put_varint(b, (OF_ANY_STRING << 3) | 2);
    sp_pb_put_varint(b, sp_base64_size(l->gz.len));
    sp_base64_encode(b, l->gz.data, l->gz.len);
    sp_pb_end(b, body);
    sp_otlp_log_common(b, "pprof-gzip-base64", src);
    sp_ob_kv_int(b, OF_LOG_ATTR, SP_KEY("profiling.data.total.frame.count"),
                 (int64_t)total_frames);
    sp_pb_fixed64(b, OF_LOG_OBSERVED, observed_ns != 0 ? observed_ns
                                                       : time_ns);
    return sp_ob_item_end(&l->batch, &it);
}

/* s[0..len) on one line of the text body: control characters (a line
 * break would start a new line) and, in a quoted name, quotes become '?'. */
static void
sp_otlp_text_put(sp_buf *b, const char *s, size_t len, bool quoted)
{
    size_t i, start = 0;
    char   c;

    for (i = 0; i < len; i++) {
        c = s[i];
        if ((unsigned char)c < 0x20 || c == 0x7f || (quoted && c == '"')) {
            sp_buf_append(b, s + start, i - start);
            sp_buf_append(b, "?", 1);
            start = i + 1;
        }
    }
    sp_buf_append(b, s + start, len - start);
}

static void
sp_otlp_text_frame(sp_buf *b, const sp_pprof_line *l)
{
    const char *function = l->function != NULL && l->function[0] != '\0'
                           ? l->function : SP_PPROF_UNKNOWN;
    const char *file = l->file != NULL && l->file[0] != '\0'
                       ? l->file : SP_PPROF_UNKNOWN;
    char        num[16];
    int         n;

    sp_buf_append(b, "\tat ", 4);
    sp_otlp_text_put(b, function, strlen(function), false);
    sp_buf_append(b, "(", 1);
    sp_otlp_text_put(b, file, strlen(file), false);
    n = snprintf(num, sizeof(num), ":%u)\n", l->line);
    sp_buf_append(b, num, (size_t)n);
}

/* The call stack format of seed 002 (see sp_otlp.h). */
static sp_status
sp_otlp_text_body(sp_buf *b, const sp_sample *s,
                  const sp_pprof_frame *frames, size_t n)
{
    const char *state = sp_pprof_thread_state(s->state);
    char        meta[160];
    size_t      i, j;
    int         len;

    sp_buf_append(b, "\"", 1);
    sp_otlp_text_put(b, s->thread_name,
                     strnlen(s->thread_name, sizeof(s->thread_name)), true);
    len = snprintf(meta, sizeof(meta),
                   "\" #%u prio=0 os_prio=0 cpu=0 elapsed=0 tid=0x%x "
                   "nid=0x%x%s%s\n\n", s->tid, s->tid, s->tid,
                   state != NULL ? " " : "", state != NULL ? state : "");
    sp_buf_append(b, meta, (size_t)len);
    for (i = 0; i < n; i++) {
        for (j = 0; j < frames[i].inline_count; j++) {
            sp_otlp_text_frame(b, &frames[i].inlined[j]);
        }
        sp_otlp_text_frame(b, &frames[i].frame);
    }
    return sp_buf_status(b);
}

sp_status
sp_otlp_logs_add_text(sp_otlp_logs *l, const sp_resource *res,
                      const sp_sample *s, const sp_pprof_frame *frames,
                      size_t n, uint64_t interval_ns, uint64_t observed_ns)
{
    const char *src;
    sp_ob_item  it;
    sp_buf     *b;
    size_t      i, body;
    uint64_t    period;
    sp_status   rc;

    if (l == NULL || s == NULL || (frames == NULL && n > 0)
        || n > SP_PPROF_MAX_FRAMES)
    {
        return SP_ERR_INVALID;
    }
    src = sp_otlp_source_name(s->source);
    if (src == NULL) {
        return SP_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        if (frames[i].inline_count > 0 && frames[i].inlined == NULL) {
            return SP_ERR_INVALID;
        }
    }
    sp_buf_clear(&l->text);
    if ((rc = sp_otlp_text_body(&l->text, s, frames, n)) != SP_OK) {
        return rc;
    }
    if ((rc = sp_ob_item_begin(&l->batch, res, s->pid, &it)) != SP_OK) {
        return rc;
    }
    b = &it.g->items;
    sp_pb_fixed64(b, OF_LOG_TIME, s->time_ns);
    body = sp_pb_begin(b, OF_LOG_BODY);
    sp_pb_string(b, OF_ANY_STRING, (const char *)l->text.data, l->text.len);
    sp_pb_end(b, body);
    sp_otlp_log_common(b, "text", src);
    period = s->period_ns != 0 ? s->period_ns : interval_ns;
    sp_ob_kv_int(b, OF_LOG_ATTR, SP_KEY("source.event.period"),
                 (int64_t)((period + 500000) / 1000000));
    if (s->truncated) {
        sp_ob_kv_bool(b, OF_LOG_ATTR, SP_KEY("thread.stack.truncated"),
                      true);
    }
    if (s->has_span) {
        sp_pb_bytes(b, OF_LOG_TRACE_ID, s->trace_id, sizeof(s->trace_id));
        sp_pb_bytes(b, OF_LOG_SPAN_ID, s->span_id, sizeof(s->span_id));
    }
    sp_pb_fixed64(b, OF_LOG_OBSERVED, observed_ns != 0 ? observed_ns
                                                       : s->time_ns);
    return sp_ob_item_end(&l->batch, &it);
}

sp_status
sp_otlp_logs_serialize(const sp_otlp_logs *l, sp_buf *out)
{
    return sp_ob_serialize(&l->batch, out);
}

sp_status
sp_otlp_logs_take(sp_otlp_logs *l, sp_otlp_request **out)
{
    sp_status rc = sp_ob_take(&l->batch, out);

    if (rc == SP_OK) {
        sp_otlp_logs_reset(l);
    }
    return rc;
}

/* ---- traces */

struct sp_otlp_traces {
    sp_ob_batch batch;
};

sp_status
sp_otlp_traces_create(const sp_otlp_builder_options *options,
                      sp_otlp_traces **out)
{
    sp_otlp_traces *t;
    sp_status       rc;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return SP_ERR_NOMEM;
    }
    rc = sp_ob_init(&t->batch, options, SP_OTLP_TRACES_SCOPE, SP_VERSION);
    if (rc != SP_OK) {
        sp_otlp_traces_destroy(t);
        return rc;
    }
    *out = t;
    return SP_OK;
}

void
sp_otlp_traces_destroy(sp_otlp_traces *t)
{
    if (t == NULL) {
        return;
    }
    sp_ob_free(&t->batch);
    free(t);
}

void
sp_otlp_traces_reset(sp_otlp_traces *t)
{
    sp_ob_reset(&t->batch);
}

size_t
sp_otlp_traces_count(const sp_otlp_traces *t)
{
    return t->batch.count;
}

size_t
sp_otlp_traces_size(const sp_otlp_traces *t)
{
    return t->batch.size;
}

static bool
sp_otlp_all_zero(const uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (p[i] != 0) {
            return false;
        }
    }
    return true;
}

/* What sp_span_encode would write nonsense for, before it writes. */
static sp_status
sp_otlp_span_check(const sp_otlp_traces *t, const sp_span_record *s,
                   const sp_span_attr *attrs, size_t n)
{
    size_t i;

    if (t == NULL || s == NULL || n > UINT16_MAX) {
        return SP_ERR_INVALID;
    }
    if (sp_otlp_all_zero(s->trace_id, sizeof(s->trace_id))
        || sp_otlp_all_zero(s->span_id, sizeof(s->span_id))
        || s->kind > SP_SPAN_KIND_MAX || s->status_code > SP_STATUS_ERROR
        || (s->name == NULL && s->name_len > 0)
        || (s->tracestate == NULL && s->tracestate_len > 0)
        || (attrs == NULL && n > 0))
    {
        return SP_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        if (attrs[i].key == NULL || attrs[i].key_len == 0) {
            return SP_ERR_INVALID;
        }
        switch (attrs[i].type) {
        case SP_VALUE_STRING:
            if (attrs[i].str == NULL && attrs[i].str_len > 0) {
                return SP_ERR_INVALID;
            }
            break;
        case SP_VALUE_INT:
        case SP_VALUE_BOOL:
            break;
        default:
            return SP_ERR_INVALID;
        }
    }
    return SP_OK;
}

/*
 * The bound of sp_traces_room for the last group, made at the end of the
 * general paths (sp_traces_add_span_any, sp_traces_add_record_any), the
 * only ones that change which group is last or move a bound: a span's
 * field ending below it keeps the group's size growing by just the
 * field (grow_below), leaves room for the padding in the buffer, keeps
 * the request within max_bytes, and finds no error. Spans added in the
 * usual cases keep it right: they grow the items and the request's size
 * alike. One comparison instead of four a span (13 instructions,
 * callgrind).
 */
static void
sp_traces_fast_end(sp_ob_batch *b)
{
    sp_ob_group *g = b->last;
    sp_buf      *items;
    size_t       end = 0;

    if (g == NULL) {
        return;
    }
    items = &g->items;
    if (g->sized == items->len && items->err == SP_OK
        && items->cap >= items->len + SP_SPAN_COPY_PAD
        && b->size <= b->max_bytes)
    {
        end = g->grow_below;
        if (items->cap - SP_SPAN_COPY_PAD + 1 < end) {
            end = items->cap - SP_SPAN_COPY_PAD + 1;
        }
        if (items->len + (b->max_bytes - b->size) + 1 < end) {
            end = items->len + (b->max_bytes - b->size) + 1;
        }
    }
    g->fast_end = end;
}

/*
 * Every span the exporter sends passes here, so its field goes in with
 * one bound check and one copy: the group's size after it is known
 * before anything is written (sp_ob_group_measure), and a span that would
 * pass the bound is not written at all. The same outcome as an item
 * opened and closed (sp_ob_item_open, sp_ob_item_close), the same bytes
 * as sp_pb_bytes. sp_otlp_traces_add_span takes the usual case and comes
 * here for every other.
 */
static sp_status
sp_traces_add_span_in(sp_ob_batch *b, const sp_resource *res,
                      const sp_span_view *v)
{
    sp_ob_group *g;
    sp_buf      *items;
    uint8_t     *p;
    size_t       n, field, len, after;
    bool         created = false;
    sp_status    rc;

    if (b->last != NULL && b->last->pid == v->pid) {
        g = b->last;
    } else if ((rc = sp_ob_group_get(b, res, v->pid, &g, &created))
               != SP_OK)
    {
        return rc;
    }
    items = &g->items;
    if (g->sized != items->len) {
        sp_ob_group_measure(b, g);
    }
    n = v->otlp_len;
    field = sp_ob_field(n);
    len = items->len + field;
    after = len < g->grow_below ? g->size + field
                                : sp_ob_field(sp_ob_group_body_at(b, g, len));
    rc = field > items->cap - items->len || items->err != SP_OK
         ? sp_buf_reserve(items, field) : SP_OK;
    if (rc == SP_OK && b->size - g->size + after > b->max_bytes) {
        rc = SP_ERR_TOO_LONG;
    }
    if (rc != SP_OK) {
        sp_buf_truncate(items, items->len);    /* its error cleared */
        if (created) {
            sp_ob_drop_new(b, g);
        }
        return rc;
    }
    p = items->data + items->len;
    *p++ = (OF_SCOPE_ITEM << 3) | 2;
    p += sp_pb_varint_write(p, n);
    memcpy(p, v->otlp, v->otlp_len);
    items->len = len;
    b->size = b->size - g->size + after;
    b->count++;
    if (len < g->grow_below) {
        g->size = after;
        g->sized = len;
    } else {
        sp_ob_group_measure(b, g);
    }
    return SP_OK;
}

/* sp_traces_add_span_in, then sp_traces_room's bound for the group that
 * is last now. */
static __attribute__((noinline)) sp_status
sp_traces_add_span_any(sp_ob_batch *b, const sp_resource *res,
                       const sp_span_view *v)
{
    sp_status rc = sp_traces_add_span_in(b, res, v);

    sp_traces_fast_end(b);
    return rc;
}

/* ---- the copy of a span's bytes */

#if defined(__x86_64__)

/* Set at load time, before any thread adds a span. */
static bool sp_avx2_cpu;
static bool sp_avx2;

__attribute__((constructor)) static void
sp_otlp_cpu_init(void)
{
    unsigned eax, ebx, ecx, edx, xcr0_lo, xcr0_hi;

    /* AVX2, and the system saving the ymm registers (XCR0 bits 1, 2) */
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)
        || (ecx & (bit_OSXSAVE | bit_AVX)) != (bit_OSXSAVE | bit_AVX)
        || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)
        || (ebx & bit_AVX2) == 0)
    {
        return;
    }
    __asm__ ("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    sp_avx2_cpu = (xcr0_lo & 6) == 6;
    sp_avx2 = sp_avx2_cpu;
}

/*
 * 128 to 512 bytes, as 32-byte moves, then SP_SPAN_COPY_PAD zero bytes
 * (sp_span_check_copy): the last 32 first, then the rest up to them
 * through a jump into a run of moves, as sp_crc32c_sse42 does. The moves
 * are at fixed offsets from the start (no pointers moved to the last
 * one) and the jump has no range check (below): for an nginx span of 390
 * bytes 13 moves, 26 instructions, and 7 to choose the jump's target,
 * where memcpy's general path took 67, for every span the exporter sends.
 */
#define SP_MOVE32(at) \
    _mm256_storeu_si256((__m256i *)(void *)(d + (at)), \
        _mm256_loadu_si256((const __m256i *)(const void *)(s + (at))))
#define SP_MOVE(k) SP_MOVE32(32 * (k))
#define SP_ZERO32(k) \
    _mm256_storeu_si256((__m256i *)(void *)(end + 32 * (k)), zero)
static inline __attribute__((always_inline, target("avx2"))) void
sp_span_move_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
    size_t   k = (n - 1) / 32;  /* the moves before the last one */
    uint8_t *end = d + n;
    __m256i  zero;

    _Static_assert(SP_SPAN_COPY_PAD == 8 * 32, "the zero stores below");
    SP_MOVE32(n - 32);
    /* k's range hidden, so that the jump's table covers all 16 values
     * and the jump needs no range check (2 instructions) */
    __asm__("" : "+r"(k));
    switch (k & 15) {
    case 15: SP_MOVE(14); /* fallthrough */
    case 14: SP_MOVE(13); /* fallthrough */
    case 13: SP_MOVE(12); /* fallthrough */
    case 12: SP_MOVE(11); /* fallthrough */
    case 11: SP_MOVE(10); /* fallthrough */
    case 10: SP_MOVE(9);  /* fallthrough */
    case 9: SP_MOVE(8);   /* fallthrough */
    case 8: SP_MOVE(7);   /* fallthrough */
    case 7: SP_MOVE(6);   /* fallthrough */
    case 6: SP_MOVE(5);   /* fallthrough */
    case 5: SP_MOVE(4);   /* fallthrough */
    case 4: SP_MOVE(3);   /* fallthrough */
    case 3: SP_MOVE(2);   /* fallthrough */
    case 2: SP_MOVE(1);   /* fallthrough */
    case 1: SP_MOVE(0);   /* fallthrough */
    default: break;
    }
    zero = _mm256_setzero_si256();
    SP_ZERO32(0); SP_ZERO32(1); SP_ZERO32(2); SP_ZERO32(3);
    SP_ZERO32(4); SP_ZERO32(5); SP_ZERO32(6); SP_ZERO32(7);
}
#undef SP_MOVE32
#undef SP_MOVE
#undef SP_ZERO32

bool
sp_otlp_avx2_available(void)
{
    return sp_avx2_cpu;
}

void
sp_otlp_use_avx2(bool on)
{
    sp_avx2 = on && sp_avx2_cpu;
}

#else

bool
sp_otlp_avx2_available(void)
{
    return false;
}

void
sp_otlp_use_avx2(bool on)
{
    (void)on;
}

#endif

/*
 * A span from its view: sp_otlp_traces_add_record's general path, and
 * sp_otlp_traces_add's. The exporter's usual case, every span of a
 * worker's run, is the record's (sp_traces_room, sp_traces_count), which
 * checks and copies in one pass: a second fast path here, for the spans
 * that missed that one, was its twin.
 */
sp_status
sp_otlp_traces_add_span(sp_otlp_traces *t, const sp_resource *res,
                        const sp_span_view *v)
{
    if (t == NULL || v == NULL || v->otlp == NULL) {
        return SP_ERR_INVALID;
    }
    return sp_traces_add_span_any(&t->batch, res, v);
}

/*
 * sp_otlp_traces_add_record's every case. A span added, its group's items
 * get room for another of its size and the padding (sp_traces_room), as
 * far as the bound lets them: else the span that found too little room
 * left would find it again, each time the buffer is nearly full.
 */
static __attribute__((noinline)) sp_status
sp_traces_add_record_any(sp_otlp_traces *t, const sp_resource *res,
                         const void *body, size_t len)
{
    sp_span_view v;
    sp_buf      *items;
    size_t       need;
    sp_status    rc;

    if (sp_span_decode(body, len, &v) != SP_OK) {
        return SP_ERR_INVALID;
    }
    rc = sp_otlp_traces_add_span(t, res, &v);
    if (rc == SP_OK && t->batch.last != NULL) {
        items = &t->batch.last->items;
        need = 3 + v.otlp_len + SP_SPAN_COPY_PAD;
        if ((items->limit == 0 || items->len + need <= items->limit)
            && sp_buf_reserve(items, need) != SP_OK)
        {
            sp_buf_truncate(items, items->len);     /* no memory: later */
        }
    }
    sp_traces_fast_end(&t->batch);
    return rc;
}

/*
 * sp_otlp_traces_add_span's usual case from the record, with the span's
 * check done on the copy in the request rather than on the record: the
 * copy is followed by SP_SPAN_COPY_PAD zero bytes, so that the walk over
 * its attributes needs no bound check at each one (sp_span_entry), and
 * it is committed once it passed. Room, copy, check and commit are in
 * line, with no call but where it leaves, so that nothing is saved
 * across one; built twice, with the AVX2 copy and with memcpy. Anything
 * else, passed or failed, goes through sp_span_decode and
 * sp_otlp_traces_add_span, the copy left past the items (the next one
 * writes over it). For an nginx span, 21 instructions fewer than
 * sp_span_decode then sp_otlp_traces_add_span (callgrind, the exporter's
 * step included).
 *
 * sp_traces_room: whether the span takes the usual case (as
 * sp_otlp_traces_add_span's) with room for the padding, and where its
 * field goes.
 */
static inline __attribute__((always_inline)) bool
sp_traces_room(sp_otlp_traces *t, const uint8_t *r, size_t len,
               size_t longest, uint8_t **p)
{
    sp_ob_batch *b = &t->batch;
    sp_ob_group *g = b->last;
    sp_buf      *items;
    uint64_t     head, want;
    size_t       n = len - SP_SPAN_RECORD_HEAD, field = 3 + n;

    if (g == NULL || r == NULL || n - 128 > longest - 128) {
        return false;
    }
    /* the pid and the reserved word, zero, as one number, as
     * sp_put_span_ids_of writes them */
    memcpy(&head, r, sizeof(head));
    want = g->pid;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    want <<= 32;
#endif
    items = &g->items;
    if (head != want || items->len + field >= g->fast_end) {
        return false;
    }
    *p = items->data + items->len;
    return true;
}

/* The span of n bytes copied to p + 3, checked: counted in. */
static inline __attribute__((always_inline)) void
sp_traces_count(sp_otlp_traces *t, uint8_t *p, size_t n)
{
    sp_ob_batch *b = &t->batch;
    sp_ob_group *g = b->last;
    size_t       field = 3 + n, end = g->items.len + field;

    p[0] = (OF_SCOPE_ITEM << 3) | 2;
    p[1] = (uint8_t)(n | 0x80);
    p[2] = (uint8_t)(n >> 7);
    g->items.len = end;
    b->size += field;
    b->count++;
    g->size += field;
    g->sized = end;
}

static __attribute__((noinline)) sp_status
sp_traces_put_record_plain(sp_otlp_traces *t, const sp_resource *res,
                           const void *body, size_t len)
{
    const uint8_t *r = body;
    uint8_t       *p;
    size_t         n = len - SP_SPAN_RECORD_HEAD;

    if (sp_traces_room(t, r, len, 16383, &p)) {
        memcpy(p + 3, r + SP_SPAN_RECORD_HEAD, n);
        memset(p + 3 + n, 0, SP_SPAN_COPY_PAD);
        if (sp_span_check_padded(p + 3, n)) {
            sp_traces_count(t, p, n);
            return SP_OK;
        }
    }
    return sp_traces_add_record_any(t, res, body, len);
}

#if defined(__x86_64__)
static __attribute__((noinline, target("avx2"))) sp_status
sp_traces_put_record_avx2(sp_otlp_traces *t, const sp_resource *res,
                          const void *body, size_t len)
{
    const uint8_t *r = body;
    uint8_t       *p;
    size_t         n = len - SP_SPAN_RECORD_HEAD;

    if (sp_traces_room(t, r, len, 512, &p)) {
        sp_span_move_avx2(p + 3, r + SP_SPAN_RECORD_HEAD, n);
        if (sp_span_check_padded(p + 3, n)) {
            /* What the count needs is taken again from t and len rather
             * than kept across the check: with the call's four arguments
             * kept for the general path, the check then has the
             * registers it needs without saving any (9 instructions). */
            __asm__("" : "+r"(t), "+r"(len));
            sp_traces_count(t, p, len - SP_SPAN_RECORD_HEAD);
            return SP_OK;
        }
    }
    return sp_traces_add_record_any(t, res, body, len);
}
#endif

sp_status
sp_otlp_traces_add_record(sp_otlp_traces *t, const sp_resource *res,
                          const void *body, size_t len)
{
    if (t == NULL) {
        return SP_ERR_INVALID;
    }
#if defined(__x86_64__)
    if (sp_avx2) {
        return sp_traces_put_record_avx2(t, res, body, len);
    }
#endif
    return sp_traces_put_record_plain(t, res, body, len);
}

sp_status
sp_otlp_traces_add(sp_otlp_traces *t, const sp_resource *res,
                   const sp_span_record *s, const sp_span_attr *attrs,
                   size_t n)
{
    sp_span_view v;
    sp_status    rc;
    uint8_t     *body;
    size_t       size;

    if ((rc = sp_otlp_span_check(t, s, attrs, n)) != SP_OK) {
        return rc;
    }
    size = sp_span_size(s, attrs, (uint16_t)n);
    body = malloc(size);
    if (body == NULL) {
        return SP_ERR_NOMEM;
    }
    if (sp_span_encode(body, s, attrs, (uint16_t)n) != size) {
        abort();    /* the size computed is the size written */
    }
    rc = sp_span_decode(body, size, &v);
    if (rc == SP_OK) {
        rc = sp_otlp_traces_add_span(t, res, &v);
    }
    free(body);
    return rc;
}

sp_status
sp_otlp_traces_serialize(const sp_otlp_traces *t, sp_buf *out)
{
    return sp_ob_serialize(&t->batch, out);
}

sp_status
sp_otlp_traces_take(sp_otlp_traces *t, sp_otlp_request **out)
{
    return sp_ob_take(&t->batch, out);
}
