/*
 * Entry spans; see sp_entry.h.
 */
#include "sp_entry.h"
#include "sp_baggage.h"
#include "sp_clock.h"
#include "sp_copy.h"
#include "sp_http_authority.h"
#include "sp_record.h"
#include "sp_span_put.h"
#include "sp_text.h"

#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void
sp_entry_policy_from_config(const sp_config *c, sp_entry_policy *out)
{
    const char *text;

    memset(out, 0, sizeof(*out));
    out->sampler = (uint32_t)sp_config_integer(c, SP_SETTING_TRACES_SAMPLER);
    out->sampler_ratio = sp_config_number(c, SP_SETTING_TRACES_SAMPLER_ARG);
    out->propagators = (uint32_t)sp_config_integer(c,
                                                   SP_SETTING_PROPAGATORS);
    out->snapshot_enabled = sp_config_flag(c,
        SP_SETTING_SNAPSHOT_PROFILER_ENABLED);
    out->selection_threshold = sp_selection_threshold(
        sp_config_number(c, SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY));
    text = sp_config_text(c, SP_SETTING_HTTP_KNOWN_METHODS);
    if (text == NULL
        || sp_http_methods_parse(text, strlen(text), &out->known_methods)
           != SP_OK)
    {
        sp_http_methods_standard(&out->known_methods);
    }
}

/* OpenTelemetry's TraceIdRatioBased: the trace id's low 63 bits against
 * ratio * 2^63. */
static bool
sp_ratio_samples(const uint8_t trace_id[16], double ratio)
{
    uint64_t v = 0;
    int      i;

    if (ratio >= 1.0) {
        return true;
    }
    if (!(ratio > 0.0)) {
        return false;
    }
    for (i = 8; i < 16; i++) {
        v = v << 8 | trace_id[i];
    }
    v &= 0x7fffffffffffffffull;
    return (double)v < ratio * 9223372036854775808.0;
}

static bool
sp_recorded(const sp_entry_policy *p, const sp_entry *e)
{
    bool parent = e->remote_parent;
    bool parent_sampled = (e->ctx.trace_flags & SP_TRACE_FLAG_SAMPLED) != 0;

    switch (p->sampler) {
    case SP_SAMPLER_ALWAYS_ON:
        return true;
    case SP_SAMPLER_ALWAYS_OFF:
        return false;
    case SP_SAMPLER_TRACEIDRATIO:
        return sp_ratio_samples(e->ctx.trace_id, p->sampler_ratio);
    case SP_SAMPLER_PARENTBASED_ALWAYS_OFF:
        return parent && parent_sampled;
    case SP_SAMPLER_PARENTBASED_TRACEIDRATIO:
        return parent ? parent_sampled
                      : sp_ratio_samples(e->ctx.trace_id, p->sampler_ratio);
    case SP_SAMPLER_PARENTBASED_ALWAYS_ON:
    default:
        return parent ? parent_sampled : true;
    }
}

/* The baggage a request without any sends on, selected or not. */
static const char sp_selection_member_highest[] =
    SP_SNAPSHOT_VOLUME_KEY "=" SP_SNAPSHOT_VOLUME_HIGHEST;
static const char sp_selection_member_off[] =
    SP_SNAPSHOT_VOLUME_KEY "=" SP_SNAPSHOT_VOLUME_OFF;

void
sp_entry_begin(const sp_entry_policy *p, sp_idgen *ids,
               const sp_entry_headers *in, char *scratch, size_t scratch_size,
               sp_entry *out)
{
    sp_span_context   parent;
    sp_tracestate     ts;
    sp_baggage        bag;
    sp_baggage_counts counts;
    size_t            used = 0, n;
    bool              tracecontext, baggage_on;

    /*
     * Each field is set below, or here where only some requests set it:
     * a memset of the whole entry (its traceparent text included) cost
     * ~25 instructions a request (callgrind).
     */
    memset(out->parent_span_id, 0, SP_SPAN_ID_SIZE);
    memset(&out->selection, 0, sizeof(out->selection));
    out->tracestate = NULL;
    out->tracestate_len = 0;
    out->baggage = NULL;
    out->baggage_len = 0;
    out->start_ns = sp_realtime_ns();
    tracecontext = (p->propagators & SP_PROPAGATOR_TRACECONTEXT) != 0;
    baggage_on = (p->propagators & SP_PROPAGATOR_BAGGAGE) != 0;

    if (tracecontext && in->traceparent != NULL && in->traceparent_len > 0
        && sp_traceparent_parse(in->traceparent, in->traceparent_len,
                                &parent) == SP_TRACEPARENT_OK)
    {
        out->remote_parent = true;
        memcpy(out->ctx.trace_id, parent.trace_id, SP_TRACE_ID_SIZE);
        memcpy(out->parent_span_id, parent.span_id, SP_SPAN_ID_SIZE);
        out->ctx.trace_flags = parent.trace_flags;
        sp_idgen_span_id(ids, out->ctx.span_id);
    } else {
        out->remote_parent = false;
        sp_idgen_new_trace(ids, &out->ctx, out->traceparent);
    }
    out->recorded = sp_recorded(p, out);
    out->ctx.trace_flags = out->recorded ? SP_TRACE_FLAG_SAMPLED : 0;
    /* A new trace's traceparent is written with its ids, flags 00: the
     * sampled flag is its last digit. */
    if (out->remote_parent) {
        sp_traceparent_format(&out->ctx, out->traceparent);
    } else if (out->recorded) {
        out->traceparent[SP_TRACEPARENT_LEN - 1] = '1';
    }

    /* tracestate travels only with the traceparent it came with. */
    if (out->remote_parent && in->tracestate != NULL
        && in->tracestate_len > 0
        && sp_tracestate_parse(in->tracestate, in->tracestate_len, &ts)
           == SP_TRACESTATE_OK
        && ts.count > 0)
    {
        n = sp_tracestate_format(&ts, in->tracestate, scratch, scratch_size);
        if (n > 0 && n < scratch_size) {
            out->tracestate = scratch;
            out->tracestate_len = n;
            used = n + 1;
        }
    }

    /*
     * Most requests bring no baggage: then what goes on is at most the
     * one member selection sets, the same bytes the general path below
     * gives (test_entry), without a baggage list to fill and serialize
     * for each request.
     */
    if (!baggage_on || in->baggage == NULL || in->baggage_len == 0) {
        if (p->snapshot_enabled) {
            sp_selection_decide(NULL, out->ctx.trace_id,
                                p->selection_threshold, out->recorded,
                                &out->selection);
            if (baggage_on) {
                out->baggage = out->selection.selected
                               ? sp_selection_member_highest
                               : sp_selection_member_off;
                out->baggage_len = strlen(out->baggage);
            }
        }
        return;
    }

    sp_baggage_init(&bag);
    sp_baggage_parse(&bag, in->baggage, in->baggage_len, &counts);
    if (p->snapshot_enabled) {
        sp_selection_decide(&bag, out->ctx.trace_id, p->selection_threshold,
                            out->recorded, &out->selection);
    }
    if (sp_baggage_count(&bag) > 0 && used < scratch_size
        && sp_baggage_serialize(&bag, scratch + used, scratch_size - used,
                                &n) == SP_OK
        && n > 0)
    {
        out->baggage = scratch + used;
        out->baggage_len = n;
    }
}

/* Appends what fits of s to out (of cap bytes, len used); the new length. */
static size_t
sp_append(char *out, size_t cap, size_t len, const char *s, size_t n)
{
    if (n > cap - len) {
        n = cap - len;
    }
    memcpy(out + len, s, n);
    return len + n;
}

/* An attribute key: a constant, so its length is one too. */
#define SP_KEY(k) k, sizeof(k) - 1

/*
 * The conventions' methods (sp_http_method.h), each with the start of a
 * span's name and its http.request.method attribute as sp_put_value()
 * writes it: with the standard list, a request with one of them (nearly
 * every request) copies the attribute and the name's method as constants
 * and asks no list (-60 instructions a request, callgrind). Found by a hash
 * of the first letter and the length that tells the nine apart, then
 * compared whole. Filled once, by the constructor below, with the
 * writer the other methods take (test_entry compares their spans).
 */
typedef struct sp_entry_known {
    uint64_t      name;             /* the method, zeros after */
    size_t        len;              /* the method's; 0: an empty slot */
    size_t        attr_len;
    unsigned char attr[40];         /* copied whole: 34 at most */
} sp_entry_known;

#define SP_ENTRY_KNOWN_SLOTS    16
#define SP_ENTRY_KNOWN_SLOT(c, len) \
    ((((unsigned char)(c) >> 1) + 5 * (len)) & (SP_ENTRY_KNOWN_SLOTS - 1))

static sp_entry_known sp_entry_known_methods[SP_ENTRY_KNOWN_SLOTS];

/* What http.response.status_code of a code of two bytes of varint starts
 * with: every byte but the code's, made by the constructor below. */
#define SP_ENTRY_STATUS_HEAD    32
static unsigned char sp_entry_status_head[SP_ENTRY_STATUS_HEAD + 2];

/*
 * The read-only segments of the object this code is linked into (the
 * server's module, or a program) and of the main program: the adapters'
 * string literals are in the first, the server's own (httpd's scheme) in
 * the second, and nothing there changes while a worker serves requests
 * (a module is unloaded only by the master, at a reload, never under a
 * connection's span cache). So a cache that kept a value's address there
 * knows a value at that address for the same bytes without reading them
 * (sp_entry_cache_hit); another library's could be unloaded and its
 * addresses reused. Found by the constructor below, before any span.
 */
#define SP_ENTRY_RO_MAX 8

static struct {
    uintptr_t start, end;
} sp_entry_ro[SP_ENTRY_RO_MAX];
static unsigned sp_entry_ro_count;

/* In this object's read-only data, as the literals are. */
static const char sp_entry_ro_probe[] = "spanprof";

static int
sp_entry_ro_find(struct dl_phdr_info *info, size_t size, void *data)
{
    const ElfW(Phdr) *ph;
    unsigned         *seen = data;
    uintptr_t         start;
    bool              keep;
    ElfW(Half)        i;

    (void)size;
    /* the main program: the first object, and the one without a name;
     * then this one, which holds the probe */
    keep = (*seen)++ == 0 && info->dlpi_name != NULL
           && info->dlpi_name[0] == '\0';
    for (i = 0; i < info->dlpi_phnum && !keep; i++) {
        ph = &info->dlpi_phdr[i];
        start = (uintptr_t)info->dlpi_addr + (uintptr_t)ph->p_vaddr;
        keep = ph->p_type == PT_LOAD
               && (uintptr_t)sp_entry_ro_probe - start < ph->p_memsz;
    }
    for (i = 0; i < info->dlpi_phnum && keep; i++) {
        ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W) != 0
            || sp_entry_ro_count == SP_ENTRY_RO_MAX)
        {
            continue;
        }
        start = (uintptr_t)info->dlpi_addr + (uintptr_t)ph->p_vaddr;
        sp_entry_ro[sp_entry_ro_count].start = start;
        sp_entry_ro[sp_entry_ro_count].end = start + ph->p_memsz;
        sp_entry_ro_count++;
    }
    return 0;
}

/* Whether s[0..len) lies in one of those segments; len 0 never does. */
static bool
sp_entry_read_only(const char *s, size_t len)
{
    uintptr_t p = (uintptr_t)s;
    unsigned  i;

    for (i = 0; i < sp_entry_ro_count && len > 0; i++) {
        if (p >= sp_entry_ro[i].start && p < sp_entry_ro[i].end
            && len <= sp_entry_ro[i].end - p)
        {
            return true;
        }
    }
    return false;
}

__attribute__((constructor)) static void
sp_entry_constants_init(void)
{
    sp_http_methods list;
    sp_entry_known *k;
    const char     *m;
    unsigned        i;
    size_t          len;
    char            name[8];

    (void)dl_iterate_phdr(sp_entry_ro_find, &(unsigned){ 0 });
    (void)sp_put_attr_number(sp_entry_status_head,
                             SP_KEY("http.response.status_code"),
                             SP_VALUE_INT, 0x80);
    sp_http_methods_standard(&list);
    for (i = 0; i < list.count; i++) {
        m = list.text + list.off[i];
        len = list.len[i];
        k = &sp_entry_known_methods[SP_ENTRY_KNOWN_SLOT(m[0], len)];
        /* a method the compare below cannot take, or whose slot is
         * taken: the general path */
        if (len < 3 || len >= sizeof(name) || k->len != 0) {
            continue;
        }
        memset(name, 0, sizeof(name));
        memcpy(name, m, len);
        memcpy(&k->name, name, sizeof(name));
        k->attr_len = (size_t)(sp_put_attr_string(k->attr,
                           SP_KEY("http.request.method"), m, len) - k->attr);
        k->len = len;
    }
}

/* The standard method h's is, if it is one: else NULL. */
static inline __attribute__((always_inline)) const sp_entry_known *
sp_entry_known_of(const sp_entry_http *h)
{
    const sp_entry_known *k;
    uint32_t              a, b, c, d;
    uint16_t              x, y, z, w;

    /* the lengths the table holds, 3 to 7: one test, none for NULL (a
     * string is NULL only with a length of 0, sp_entry.h) */
    if (h->method_len - 3 > 4) {
        return NULL;
    }
    k = &sp_entry_known_methods[SP_ENTRY_KNOWN_SLOT(h->method[0],
                                                    h->method_len)];
    if (k->len != h->method_len) {
        return NULL;
    }
    /* 3 to 7 bytes: two words that overlap, of four bytes or of two */
    if (k->len >= 4) {
        memcpy(&a, h->method, 4);
        memcpy(&b, h->method + k->len - 4, 4);
        memcpy(&c, (const char *)&k->name, 4);
        memcpy(&d, (const char *)&k->name + k->len - 4, 4);
        return ((a ^ c) | (b ^ d)) == 0 ? k : NULL;
    }
    memcpy(&x, h->method, 2);
    memcpy(&y, h->method + 1, 2);
    memcpy(&z, (const char *)&k->name, 2);
    memcpy(&w, (const char *)&k->name + 1, 2);
    return ((x ^ z) | (y ^ w)) == 0 ? k : NULL;
}

/*
 * How the request's method shows: as sent when it is a known one, else
 * http.request.method "_OTHER" with the method as sent in
 * http.request.method_original, and "HTTP" in the name. known: the
 * standard method it is, with the standard list.
 */
typedef struct sp_entry_method {
    const char *value;      size_t value_len;
    const char *name;       size_t name_len;
    const char *original;   size_t original_len;
    const sp_entry_known *known;
} sp_entry_method;

static inline __attribute__((always_inline)) void
sp_entry_method_of(const sp_entry_policy *p, const sp_entry_http *h,
    sp_entry_method *m)
{
    m->original = NULL;
    m->original_len = 0;
    m->known = p->known_methods.standard ? sp_entry_known_of(h) : NULL;
    if (m->known != NULL
        || (h->method != NULL && h->method_len > 0
            && sp_http_method_known(&p->known_methods, h->method,
                                    h->method_len)))
    {
        m->value = m->name = h->method;
        m->value_len = m->name_len = h->method_len;
        return;
    }
    m->value = SP_HTTP_METHOD_OTHER;
    m->value_len = sizeof(SP_HTTP_METHOD_OTHER) - 1;
    m->name = SP_HTTP_METHOD_OTHER_NAME;
    m->name_len = sizeof(SP_HTTP_METHOD_OTHER_NAME) - 1;
    /* none: a request refused before its method could be read */
    if (h->method != NULL && h->method_len > 0) {
        m->original = h->method;
        m->original_len = h->method_len;
    }
}

/* "{method} {route}" or "{method}", cut to what a name can hold. */
static size_t
sp_name_len(const sp_entry_method *m, const sp_entry_http *h)
{
    size_t len = m->name_len;

    if (h->route != NULL && h->route_len > 0) {
        len += 1 + h->route_len;
    }
    return len < SP_SPAN_STRING_MAX - 1 ? len : SP_SPAN_STRING_MAX - 1;
}

/* The name put together first, then written as any string: for names
 * long or not ASCII. */
static __attribute__((noinline)) unsigned char *
sp_put_name_joined(unsigned char *p, const sp_entry_method *m,
    const sp_entry_http *h)
{
    char   name[SP_SPAN_STRING_MAX];
    size_t cap = sizeof(name) - 1, len = 0;

    if (m->name != NULL) {
        len = sp_append(name, cap, len, m->name, m->name_len);
    }
    if (h->route != NULL && h->route_len > 0) {
        len = sp_append(name, cap, len, " ", 1);
        len = sp_append(name, cap, len, h->route, h->route_len);
    }
    return sp_put_text(p, SP_TAG_SPAN_NAME, name, len, SP_SPAN_STRING_MAX);
}

/*
 * The name field, its two parts copied straight into the record (by hand,
 * since snprintf costs more than the rest of the record: bench/servers).
 */
static inline __attribute__((always_inline)) unsigned char *
sp_put_name(unsigned char *p, const sp_entry_method *m,
    const sp_entry_http *h, size_t len)
{
    size_t   n = m->name_len;
    uint64_t high;

    if (len >= 0x80) {
        return sp_put_name_joined(p, m, h);
    }
    p[0] = SP_TAG_SPAN_NAME;
    p[1] = (unsigned char)len;
    /* a known method's 8 bytes: what is past the name is written
         * over */
    if (m->known != NULL) {
        memcpy(p + 2, &m->known->name, 8);
        high = 0;
    } else {
        high = sp_copy_ascii(p + 2, m->name, n);
    }
    if (len > n) {
        p[2 + n] = ' ';
        high |= sp_copy_ascii(p + 3 + n, h->route, h->route_len);
    }
    return high == 0 ? p + 2 + len : sp_put_name_joined(p, m, h);
}

/* The longest key below, and how many attributes an entry span has. Keys
 * are ASCII: one never grows, and takes its tag and one byte of length. */
#define SP_ENTRY_KEY_MAX    32
#define SP_ENTRY_ATTRS      15
/* error.type: a status code in decimal, at most INT64_MAX's 19 digits. */
#define SP_ENTRY_STATUS_DIGITS 20

/*
 * The most a value of len bytes takes once cut, for the reservation: a
 * bound, not the cut itself (the cut can end a few bytes earlier, at a
 * UTF-8 boundary), so the values are cut once, as they are written.
 */
static inline size_t
sp_value_max(size_t len)
{
    return len < SP_SPAN_STRING_MAX ? len : SP_SPAN_STRING_MAX;
}

/* Where the client sent the request: url.scheme, server.address and
 * server.port (sp_entry.h says from which sources). */
typedef struct sp_entry_origin {
    const char  *scheme;
    size_t       scheme_len;
    sp_authority server;
} sp_entry_origin;

/* The most an entry's values take once cut: a bound (sp_value_max). Out
 * of line: only a request with a value of SP_SPAN_STRING_MAX bytes or
 * more comes here. o: the origin, NULL for a span whose run a cache
 * kept, of kept bytes of values (each kept value is under 256 bytes,
 * never cut). */
static __attribute__((noinline)) size_t
sp_entry_values_max(const sp_entry_method *m, const sp_entry_http *h,
    const sp_entry_origin *o, size_t kept)
{
    size_t values = sp_value_max(m->value_len)
                    + sp_value_max(m->original_len)
                    + sp_value_max(h->path_len) + sp_value_max(h->query_len)
                    + sp_value_max(h->route_len);

    if (o == NULL) {
        return values + kept;
    }
    return values + sp_value_max(o->scheme_len)
           + sp_value_max(o->server.host_len)
           + sp_value_max(h->client_address_len)
           + sp_value_max(h->peer_address_len)
           + sp_value_max(h->protocol_version_len)
           + sp_value_max(h->user_agent_len);
}

/* The lengths of the values of the run sp_entry_cache keeps: url.scheme,
 * server.address, client.address, network.peer.address,
 * network.protocol.version, user_agent.original. */
static inline size_t
sp_entry_kept_len(const sp_entry_http *h, const sp_entry_origin *o)
{
    return o->scheme_len + o->server.host_len + h->client_address_len
           + h->peer_address_len + h->protocol_version_len
           + h->user_agent_len;
}

/* The most an entry's span can take, its name of name_len bytes; kept:
 * sp_entry_kept_len(h, o), o NULL for a hit (sp_entry_values_max). */
static inline size_t
sp_entry_max(const sp_entry_method *m, const sp_entry_http *h,
    const sp_entry_origin *o, size_t kept, size_t name_len, size_t ts_len)
{
    size_t values;

    /*
     * The values are shorter than the cut, almost always (when their sum
     * is, each is: lengths of strings in memory, the sum cannot wrap):
     * then their lengths' sum is the sum of sp_value_max()s, without a
     * comparison for each (~20 instructions a request, callgrind) nor an
     * or of them (-11).
     */
    values = m->value_len + m->original_len + h->path_len + h->query_len
             + h->route_len + kept;
    if (values >= SP_SPAN_STRING_MAX) {
        values = sp_entry_values_max(m, h, o, kept);
    }
    return SP_SPAN_FIXED_MAX
           + SP_SPAN_TEXT_MAX(name_len)
           + SP_SPAN_TEXT_MAX(ts_len)
           + SP_ENTRY_ATTRS * (SP_SPAN_ATTR_EXTRA + 2 + SP_ENTRY_KEY_MAX
                               + SP_SPAN_TEXT_MAX(0))
           + 3 * SP_ENTRY_STATUS_DIGITS
           + 3 * values;
}

/*
 * A string attribute, when the entry has a value for it (a string is
 * NULL only with a length of 0, sp_entry.h), cut. Nearly every value is
 * shorter than its attribute's one byte of length leaves it: one test
 * says so, and that there is no cut to look for, where testing the
 * pointer, the length, then the cut took 8 instructions.
 */
static inline __attribute__((always_inline)) unsigned char *
sp_put_value(unsigned char *p, const char *key, size_t key_len,
    const char *v, size_t len)
{
    if (len == 0) {
        return p;
    }
    if (len < 0x80 - 6 - key_len) {
        return sp_put_attr_string(p, key, key_len, v, len);
    }
    return sp_put_attr_string(p, key, key_len, v,
                              sp_cut(v, len, SP_SPAN_STRING_MAX));
}

/*
 * The span record, into dst of sp_entry_max() bytes; its length. The
 * attributes are written here with their keys as constants, in the order
 * of SPEC 2 (sp_span_put.h says why). Inlined into its one caller: out
 * of line (gcc's choice once error.type came) ~30 instructions more a
 * request (callgrind). The Span's own fields straight from e and h, not
 * through an sp_span_record filled first (-18 instructions a request,
 * callgrind).
 */
static inline __attribute__((always_inline)) size_t
sp_entry_span_write(unsigned char *dst, const sp_entry *e,
    const sp_entry_method *m, const sp_entry_http *h,
    const sp_entry_origin *origin, size_t name_len, size_t ts_len,
    uint64_t end_ns, const sp_entry_cache *hit, unsigned char **run)
{
    unsigned char *p;

    p = sp_put_span_ids_of(dst, h->pid, e->ctx.trace_id, e->ctx.span_id,
                           e->tracestate, ts_len, e->parent_span_id);
    p = sp_put_name(p, m, h, name_len);
    p = sp_put_span_times_of(p, SP_SPAN_KIND_SERVER, e->start_ns, end_ns);
    /* copied whole: what is past the attribute is written over
     * or not kept */
    if (m->known != NULL) {
        memcpy(p, m->known->attr, sizeof(m->known->attr));
        p += m->known->attr_len;
    } else {
        p = sp_put_value(p, SP_KEY("http.request.method"), m->value,
                         m->value_len);
    }
    p = sp_put_value(p, SP_KEY("http.request.method_original"), m->original,
                     m->original_len);
    p = sp_put_value(p, SP_KEY("url.path"), h->path, h->path_len);
    p = sp_put_value(p, SP_KEY("url.query"), h->query, h->query_len);
    /* A code of two bytes of varint (every HTTP status from 128): the
     * attribute's constant head, then the code (-18 instructions a
     * request, callgrind). */
    if ((uint64_t)h->status - 0x80 < 0x4000 - 0x80) {
        memcpy(p, sp_entry_status_head, SP_ENTRY_STATUS_HEAD);
        p[SP_ENTRY_STATUS_HEAD] = (unsigned char)(h->status | 0x80);
        p[SP_ENTRY_STATUS_HEAD + 1] = (unsigned char)(h->status >> 7);
        p += SP_ENTRY_STATUS_HEAD + 2;
    } else if (h->status > 0) {
        p = sp_put_attr_number(p, SP_KEY("http.response.status_code"),
                               SP_VALUE_INT, h->status);
    }
    /* The HTTP conventions' error.type of a request that ended in an
     * error status (5xx on a server, as the span's status Error): the
     * code as a string. */
    if (h->status >= 500) {
        char   code[SP_ENTRY_STATUS_DIGITS];
        size_t n = 0;

        sp_put_decimal(code, sizeof(code), &n, (uint64_t)h->status);

        p = sp_put_value(p, SP_KEY("error.type"), code, n);
    }
    p = sp_put_value(p, SP_KEY("http.route"), h->route, h->route_len);
    /*
     * The run sp_entry_cache keeps: these seven attributes, in this order,
     * and nothing else. url.scheme is made of what the cache compares: in
     * the run, a hit does not write it (-38 instructions a request,
     * callgrind); the attributes' order is no part of a span.
     */
    run[0] = p;
    if (hit != NULL) {
        memcpy(p, hit->data + hit->run_off, hit->run_len);
        p += hit->run_len;
    } else {
        p = sp_put_value(p, SP_KEY("url.scheme"), origin->scheme,
                         origin->scheme_len);
        p = sp_put_value(p, SP_KEY("server.address"), origin->server.host,
                         origin->server.host_len);
        if (origin->server.port > 0) {
            p = sp_put_attr_number(p, SP_KEY("server.port"), SP_VALUE_INT,
                                   origin->server.port);
        }
        p = sp_put_value(p, SP_KEY("client.address"), h->client_address,
                         h->client_address_len);
        p = sp_put_value(p, SP_KEY("network.peer.address"),
                         h->peer_address, h->peer_address_len);
        p = sp_put_value(p, SP_KEY("network.protocol.version"),
                         h->protocol_version, h->protocol_version_len);
        p = sp_put_value(p, SP_KEY("user_agent.original"), h->user_agent,
                         h->user_agent_len);
    }
    run[1] = p;
    if (e->selection.profiled) {
        p = sp_put_attr_number(p, SP_KEY("splunk.snapshot.profiling"),
                               SP_VALUE_BOOL, 1);
    }
    p = sp_put_span_tail_of(p, h->status >= 500 ? SP_STATUS_ERROR
                                                : SP_STATUS_UNSET,
                            e->ctx.trace_flags,
                            sp_span_id_set(e->parent_span_id));
    return (size_t)(p - dst);
}

/* The scheme's port, for an authority that names none. */
static int64_t
sp_default_port(const char *scheme, size_t len)
{
    if (len == 4 && memcmp(scheme, "http", 4) == 0) {
        return 80;
    }
    if (len == 5 && memcmp(scheme, "https", 5) == 0) {
        return 443;
    }
    return 0;
}

/* url.scheme: Forwarded's proto=, else X-Forwarded-Proto's first, else
 * the connection's (sp_entry.h); whether it came from a proxy. */
static bool
sp_entry_scheme(const sp_entry_http *h, sp_entry_origin *o)
{
    const char *v;
    size_t      len;

    if (h->forwarded != NULL
        && sp_forwarded_param(h->forwarded, h->forwarded_len,
                              "proto", 5, &v, &len) == SP_OK
        && sp_is_scheme(v, len))
    {
        o->scheme = v;
        o->scheme_len = len;
        return true;
    }
    if (h->forwarded_proto != NULL) {
        sp_list_first(h->forwarded_proto, h->forwarded_proto_len, &v, &len);
        if (sp_is_scheme(v, len)) {
            o->scheme = v;
            o->scheme_len = len;
            return true;
        }
    }
    o->scheme = h->scheme;
    o->scheme_len = h->scheme != NULL ? h->scheme_len : 0;
    return false;
}

/* The host a proxy says the client sent the request to: Forwarded's
 * host=, else X-Forwarded-Host's first. */
static bool
sp_entry_proxied_host(const sp_entry_http *h, sp_authority *a)
{
    const char *v;
    size_t      len;

    if (h->forwarded != NULL
        && sp_forwarded_param(h->forwarded, h->forwarded_len, "host", 4,
                              &v, &len) == SP_OK
        && sp_authority_parse(v, len, a) == SP_OK)
    {
        return true;
    }
    if (h->forwarded_host != NULL) {
        sp_list_first(h->forwarded_host, h->forwarded_host_len, &v, &len);
        if (sp_authority_parse(v, len, a) == SP_OK) {
            return true;
        }
    }
    return false;
}

/* url.scheme, server.address and server.port: the first of h's sources
 * that holds each (sp_entry.h); whether the server came from the
 * request's own authority. Inlined: called once a request, and out of
 * line (gcc's choice once sp_entry_finish grew) it cost ~20 instructions
 * more (callgrind). */
static inline __attribute__((always_inline)) bool
sp_entry_origin_of(const sp_entry_http *h, sp_entry_origin *o)
{
    bool          proxied_scheme;
    sp_authority *a = &o->server;

    proxied_scheme = sp_entry_scheme(h, o);

    /* A proxy's host without a port: the client's port is known only
     * when the proxy said which scheme the client used. */
    if (sp_entry_proxied_host(h, a)) {
        if (a->port == 0 && proxied_scheme) {
            a->port = sp_default_port(o->scheme, o->scheme_len);
        }
        return false;
    }
    if (h->authority != NULL
        && sp_authority_parse(h->authority, h->authority_len, a) == SP_OK)
    {
        if (a->port == 0 && o->scheme != NULL) {
            a->port = sp_default_port(o->scheme, o->scheme_len);
        }
        return true;
    }

    /* A name of an IPv6 literal: the address without its brackets, as
     * the conventions write addresses. */
    a->host = h->server_address;
    a->host_len = h->server_address_len;
    if (a->host_len == SP_ENTRY_TO_NUL) {
        a->host_len = a->host != NULL ? strlen(a->host) : 0;
    }
    a->port = h->server_port;
    if (a->host != NULL && a->host_len > 2 && a->host[0] == '['
        && a->host[a->host_len - 1] == ']')
    {
        a->host++;
        a->host_len -= 2;
    }
    return false;
}

/* lens[0] of a cache that keeps nothing: no authority is this long. */
#define SP_ENTRY_CACHE_EMPTY    SIZE_MAX

void
sp_entry_cache_init(sp_entry_cache *c)
{
    memset(c, 0, offsetof(sp_entry_cache, data));
    c->lens[0] = SP_ENTRY_CACHE_EMPTY;
}

static inline uint64_t
sp_load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, 8);
    return v;
}

/* sp_bytes_diff of 8 to 16 bytes, of 4 to 7, of 1 to 3: two words that
 * overlap, each read from both sides. */
static inline __attribute__((always_inline)) uint64_t
sp_bytes_diff8(const unsigned char *x, const unsigned char *y, size_t n)
{
    uint64_t u, v, w, z;

    memcpy(&u, x, 8);
    memcpy(&v, y, 8);
    memcpy(&w, x + n - 8, 8);
    memcpy(&z, y + n - 8, 8);
    return (u ^ v) | (w ^ z);
}

static inline __attribute__((always_inline)) uint64_t
sp_bytes_diff4(const unsigned char *x, const unsigned char *y, size_t n)
{
    uint32_t s, t, q, r;

    memcpy(&s, x, 4);
    memcpy(&t, y, 4);
    memcpy(&q, x + n - 4, 4);
    memcpy(&r, y + n - 4, 4);
    return (s ^ t) | (q ^ r);
}

static inline __attribute__((always_inline)) uint64_t
sp_bytes_diff1(const unsigned char *x, const unsigned char *y, size_t n)
{
    uint16_t s, t, q, r;

    if (n == 1) {
        return (uint64_t)(x[0] ^ y[0]);
    }
    memcpy(&s, x, 2);
    memcpy(&t, y, 2);
    memcpy(&q, x + n - 2, 2);
    memcpy(&r, y + n - 2, 2);
    return (uint64_t)((s ^ t) | (q ^ r));
}

/*
 * Zero when a[0..n) and b[0..n) are the same bytes, else not: words that
 * overlap, as sp_copy_ascii copies, rather than a call to memcmp, for the
 * short values compared for every request of a connection. The
 * differences are or-ed, not branched on, so that the compares of a hit
 * take one branch (sp_entry_cache_hit), and the sizes are tested from
 * the one that holds typical, the length the value mostly has (a scheme,
 * a protocol version, an address): a test passed over costs three
 * instructions. -42 instructions a hit against testing 16, 8, 4 then 1
 * to 3 bytes and a branch after each value (callgrind, entry_bench).
 */
static inline __attribute__((always_inline)) uint64_t
sp_bytes_diff(const void *a, const void *b, size_t n, size_t typical)
{
    const unsigned char *x = a, *y = b;
    uint64_t             diff = 0;
    size_t               i;

    if (typical < 4 && n - 1 < 3) {
        return sp_bytes_diff1(x, y, n);
    }
    if (typical - 4 < 4 && n - 4 < 4) {
        return sp_bytes_diff4(x, y, n);
    }
    if (n - 8 <= 8) {
        return sp_bytes_diff8(x, y, n);
    }
    if (n > 16) {
        for (i = 0; i + 16 < n; i += 16) {
            diff |= sp_bytes_diff8(x + i, y + i, 16);
        }
        return diff | sp_bytes_diff8(x + n - 16, y + n - 16, 16);
    }
    if (n - 4 < 4) {
        return sp_bytes_diff4(x, y, n);
    }
    if (n > 0) {
        return sp_bytes_diff1(x, y, n);
    }
    return 0;
}

/* The cached values of h, in the order of value_off and of lens. */
typedef struct sp_entry_value {
    const char *v;
    size_t      len;
} sp_entry_value;

static inline __attribute__((always_inline)) void
sp_entry_cached_values(const sp_entry_http *h, sp_entry_value *v)
{
    v[0].v = h->client_address;
    v[0].len = h->client_address_len;
    v[1].v = h->peer_address;
    v[1].len = h->peer_address_len;
    v[2].v = h->protocol_version;
    v[2].len = h->protocol_version_len;
    v[3].v = h->user_agent;
    v[3].len = h->user_agent_len;
}

/* Keys of the cached values, in the same order. */
static const size_t sp_entry_cached_key_len[4] = {
    sizeof("client.address") - 1, sizeof("network.peer.address") - 1,
    sizeof("network.protocol.version") - 1,
    sizeof("user_agent.original") - 1
};

/*
 * Whether h's values are those c keeps, their lengths known to be the
 * same: each compared with its copy in data, but a scheme or a protocol
 * version at the read-only address the cache kept (an adapter's literal:
 * sp_entry_ro), which is the bytes it kept, as are its length's. Out of
 * line: the usual case is sp_entry_cache_hit's.
 */
static __attribute__((noinline)) bool
sp_entry_cache_hit_any(const sp_entry_cache *c, const sp_entry_http *h)
{
    const unsigned char *d = c->data;
    size_t               a = h->authority_len, s = h->scheme_len;
    uint64_t             diff;

    diff = sp_bytes_diff(d + c->run_off - s - a, h->authority, a, 16)
           | sp_bytes_diff(d + c->value_off[0], h->client_address,
                           h->client_address_len, 16)
           | sp_bytes_diff(d + c->value_off[3], h->user_agent,
                           h->user_agent_len, 16);
    if (h->scheme != c->scheme_ro) {
        diff |= sp_bytes_diff(d + c->run_off - s, h->scheme, s, 4);
    }
    if (h->protocol_version != c->version_ro) {
        diff |= sp_bytes_diff(d + c->value_off[2], h->protocol_version,
                              h->protocol_version_len, 3);
    }
    /* The peer is nearly always the client, the same string: then its
     * bytes are the client's just compared, and so are the kept ones
     * when the kept client's were the same. */
    if (h->peer_address != h->client_address || !c->peer_is_client) {
        diff |= sp_bytes_diff(d + c->value_off[1], h->peer_address,
                              h->peer_address_len, 16);
    }
    return diff == 0;
}

/*
 * Whether the run c keeps is what h's span would write: no proxy's
 * headers, the same authority and scheme (which make url.scheme,
 * server.address and server.port), the same four values. The six lengths
 * are compared at once, each with its own (no length kept is over 255,
 * so equal ones need no range test: against packing them in a word, -13
 * instructions a request, callgrind), no kept one 0 (so an absent
 * authority, of length 0, is not a hit). Then in the usual case (slow
 * 0) the scheme and the version at the kept addresses and the peer the
 * client are one test, and the three other values two words each
 * against the words kept (first and last 8 bytes: their lengths are the
 * kept ones, 8 to 16): -30 instructions a hit against a test of each and
 * compares with the copies in data (callgrind, entry_bench). By hand,
 * field by field: in a loop over an array of them it cost ~80
 * instructions more a request (callgrind).
 */
static inline __attribute__((always_inline)) bool
sp_entry_cache_hit(const sp_entry_cache *c, const sp_entry_http *h)
{
    const unsigned char *au, *cl, *ua, *w;
    size_t               a, s, cn, pe, ve, un;

    if (((uintptr_t)h->forwarded | (uintptr_t)h->forwarded_proto
         | (uintptr_t)h->forwarded_host) != 0)
    {
        return false;
    }
    a = h->authority_len;
    s = h->scheme_len;
    cn = h->client_address_len;
    pe = h->peer_address_len;
    ve = h->protocol_version_len;
    un = h->user_agent_len;
    if (((a ^ c->lens[0]) | (s ^ c->lens[1]) | (cn ^ c->lens[2])
         | (pe ^ c->lens[3]) | (ve ^ c->lens[4]) | (un ^ c->lens[5])) != 0)
    {
        return false;
    }
    if ((((uintptr_t)h->scheme ^ (uintptr_t)c->scheme_ro)
         | ((uintptr_t)h->protocol_version ^ (uintptr_t)c->version_ro)
         | ((uintptr_t)h->peer_address ^ (uintptr_t)h->client_address)
         | c->slow) != 0)
    {
        return sp_entry_cache_hit_any(c, h);
    }
    /* each word loaded alone: a copy of the six went through the stack */
    au = (const unsigned char *)h->authority;
    cl = (const unsigned char *)h->client_address;
    ua = (const unsigned char *)h->user_agent;
    w = c->data;
    return ((sp_load64(au) ^ sp_load64(w))
            | (sp_load64(au + a - 8) ^ sp_load64(w + 8))
            | (sp_load64(cl) ^ sp_load64(w + 16))
            | (sp_load64(cl + cn - 8) ^ sp_load64(w + 24))
            | (sp_load64(ua) ^ sp_load64(w + 32))
            | (sp_load64(ua + un - 8) ^ sp_load64(w + 40))) == 0;
}

/* The bytes data starts with for sp_entry_cache_hit's usual case: the
 * first and the last 8 of each of three values of 8 to 16 bytes. */
#define SP_ENTRY_CACHE_WORDS    48

static void
sp_entry_cache_words(unsigned char *d, const char *v, size_t len)
{
    memcpy(d, v, 8);
    memcpy(d + 8, v + len - 8, 8);
}

/* The bytes of a string attribute of a key and a value of these lengths,
 * as written when the value is kept as it is. */
static size_t
sp_entry_attr_size(size_t key_len, size_t len)
{
    size_t any = sp_field_size(len);

    return sp_field_size(sp_field_size(key_len) + sp_field_size(any));
}

/*
 * Keeps the run of len bytes a span of h just wrote, when it is made of
 * h's own authority (from_authority), no proxy's header, and each value
 * is found as it is at the run's end of its attribute: so a value that
 * was cut or repaired is not kept, and what a later request is compared
 * with is a copy of what made the run. Otherwise c is left empty.
 */
static __attribute__((noinline)) void
sp_entry_cache_fill(sp_entry_cache *c, const sp_entry_http *h,
    const sp_entry_origin *origin, bool from_authority,
    const unsigned char *run, size_t len)
{
    sp_entry_value vals[4];
    size_t         scheme_len, head, end, i;
    bool           quick;

    c->lens[0] = SP_ENTRY_CACHE_EMPTY;
    sp_entry_cached_values(h, vals);
    scheme_len = h->scheme_len;
    if (!from_authority || h->authority_len == 0 || h->forwarded != NULL
        || h->forwarded_proto != NULL || h->forwarded_host != NULL
        || h->authority_len > UINT8_MAX || scheme_len > UINT8_MAX)
    {
        return;
    }
    quick = h->authority_len - 8 <= 8 && vals[0].len - 8 <= 8
            && vals[3].len - 8 <= 8;
    /* Each at most 255 bytes, but both can take more than data: the
     * subtraction below must not wrap. */
    head = (quick ? SP_ENTRY_CACHE_WORDS : 0) + h->authority_len
           + scheme_len;
    if (len == 0 || head >= sizeof(c->data)
        || len > sizeof(c->data) - head)
    {
        return;
    }
    /* From the run's end: each value ends its attribute. */
    end = len;
    for (i = 4; i-- > 0;) {
        c->value_off[i] = 0;
        if (vals[i].len == 0) {
            continue;
        }
        if (vals[i].len > UINT8_MAX
            || sp_entry_attr_size(sp_entry_cached_key_len[i], vals[i].len)
               > end
            || sp_bytes_diff(run + end - vals[i].len, vals[i].v, vals[i].len,
                             16) != 0)
        {
            return;
        }
        c->value_off[i] = (uint16_t)(head + end - vals[i].len);
        end -= sp_entry_attr_size(sp_entry_cached_key_len[i], vals[i].len);
    }
    if (quick) {
        sp_entry_cache_words(c->data, h->authority, h->authority_len);
        sp_entry_cache_words(c->data + 16, vals[0].v, vals[0].len);
        sp_entry_cache_words(c->data + 32, vals[3].v, vals[3].len);
    }
    sp_copy(c->data + head - scheme_len - h->authority_len, h->authority,
            h->authority_len);
    sp_copy(c->data + head - scheme_len, h->scheme, scheme_len);
    memcpy(c->data + head, run, len);
    c->run_off = (uint16_t)head;
    c->run_len = (uint16_t)len;
    c->kept_len = (uint16_t)sp_entry_kept_len(h, origin);
    c->scheme_ro = sp_entry_read_only(h->scheme, scheme_len) ? h->scheme
                                                             : NULL;
    c->version_ro = sp_entry_read_only(vals[2].v, vals[2].len) ? vals[2].v
                                                               : NULL;
    c->peer_is_client = vals[0].len == vals[1].len
                        && (vals[0].len == 0
                            || sp_bytes_diff(vals[0].v, vals[1].v,
                                             vals[0].len, 16) == 0);
    c->slow = !quick || c->scheme_ro == NULL || c->version_ro == NULL
              || !c->peer_is_client;
    for (i = 0; i < 4; i++) {
        c->lens[2 + i] = vals[i].len;
    }
    c->lens[1] = scheme_len;
    c->lens[0] = h->authority_len;
}

/*
 * The span of a recorded entry. hit: the cache that keeps its run (its
 * url.scheme is h's, its server.address host_len bytes), else NULL: the
 * origin is found here, and h's cache, if any, filled.
 */
static inline __attribute__((always_inline)) sp_status
sp_entry_finish_with(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_ring *ring, const sp_entry_cache *hit)
{
    sp_entry_method m;
    sp_ring_token   tok;
    unsigned char  *dst;
    sp_entry_origin origin;
    size_t          name_len, ts_len, kept;
    uint64_t        end_ns;
    unsigned char  *run[2];
    size_t          n;
    bool            from_authority = false;

    /* What the reservation needs of the run's values, where it is
     * copied: their lengths' sum, the cache's. origin is read only where
     * the run is written. */
    if (hit != NULL) {
        kept = hit->kept_len;
    } else {
        from_authority = sp_entry_origin_of(h, &origin);
        kept = sp_entry_kept_len(h, &origin);
    }

    end_ns = h->end_ns != 0 ? h->end_ns : sp_realtime_ns();
    /* Both ends are wall-clock readings, as the servers' own logs: a
     * clock stepped back while the request ran would end the span before
     * it began, which backends show as a negative or 584-year duration.
     * Such a span lasts 0 instead, as nginx's $request_time does. */
    if (end_ns < e->start_ns) {
        end_ns = e->start_ns;
    }
    /* A cut tracestate would not be valid: too long means none at all
     * (sp_tracestate_len). */
    ts_len = e->tracestate != NULL && e->tracestate_len
                                      <= SP_TRACESTATE_MAX_LEN
             ? e->tracestate_len : 0;

    /* Written in place, into room for the worst its strings can take: the
     * ring takes back what was not used (sp_ring_commit). */
    sp_entry_method_of(p, h, &m);
    name_len = sp_name_len(&m, h);
    dst = sp_ring_reserve(ring, SP_RECORD_SPAN,
                          sp_entry_max(&m, h, hit != NULL ? NULL : &origin,
                                       kept, name_len, ts_len),
                          &tok);
    if (dst == NULL) {
        return SP_ERR_NOMEM;
    }
    n = sp_entry_span_write(dst, e, &m, h, &origin, name_len, ts_len,
                            end_ns, hit, run);
    /* Before the commit: the exporter may take the record at once. */
    if (hit == NULL && h->cache != NULL) {
        sp_entry_cache_fill(h->cache, h, &origin, from_authority, run[0],
                            (size_t)(run[1] - run[0]));
    }
    sp_ring_commit(ring, &tok, n);
    return SP_OK;
}

/* A span whose run no cache keeps: out of sp_entry_finish, where the
 * values it keeps took registers from a hit's and went to the stack and
 * back (callgrind). */
static __attribute__((noinline)) sp_status
sp_entry_finish_miss(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_ring *ring)
{
    return sp_entry_finish_with(p, e, h, ring, NULL);
}

/* A span of a connection with a cache: a hit's, written here, else a
 * miss's. */
static __attribute__((noinline)) sp_status
sp_entry_finish_cached(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_ring *ring, const sp_entry_cache *cache)
{
    if (sp_entry_cache_hit(cache, h)) {
        return sp_entry_finish_with(p, e, h, ring, cache);
    }
    return sp_entry_finish_miss(p, e, h, ring);
}

/* Only tests and calls, so that a request with no cache pays nothing
 * for the hit's function: gcc saves the registers a function uses
 * before its first test. */
sp_status
sp_entry_finish(const sp_entry_policy *p, const sp_entry *e,
    const sp_entry_http *h, sp_ring *ring)
{
    if (!e->recorded) {
        return SP_ERR_NOT_FOUND;
    }
    if (h->cache != NULL) {
        return sp_entry_finish_cached(p, e, h, ring, h->cache);
    }
    return sp_entry_finish_miss(p, e, h, ring);
}

_Static_assert(sizeof(sp_entry_cache) == SP_ENTRY_CACHE_SIZE,
               "sp_entry_cache is the size adapters allocate");
