/* sp_dump: the questions (folded stacks, top, traces, spans). */
#include "sp_dump_impl.h"
#include "sp_tracecontext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    size_t found;

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
        found = sp_dump_find_string(d, f->service, strlen(f->service));
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

/* A stack a question takes, with its value. */
typedef struct sp_dump_pick {
    const sp_dump_stack *stack;
    int64_t              value;
} sp_dump_pick;

/*
 * The stacks f takes whose value is above 0: *picks, the caller's to
 * free(), of *n. SP_ERR_INVALID for a bad id in f; SP_ERR_NOMEM.
 */
static sp_status
sp_dump_pick_stacks(const sp_dump *d, const sp_dump_filter *f,
                    sp_dump_pick **picks, size_t *n)
{
    sp_dump_match m;
    sp_dump_pick *p;
    size_t        i, k = 0;
    int64_t       v;
    sp_status     rc;

    *picks = NULL;
    *n = 0;
    rc = sp_dump_match_init(d, f, &m);
    if (rc != SP_OK) {
        return rc;
    }
    p = malloc((d->nstacks ? d->nstacks : 1) * sizeof(*p));
    if (p == NULL) {
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < d->nstacks; i++) {
        v = sp_dump_value_of(f, &d->stacks[i]);
        if (v > 0 && sp_dump_matches(f, &m, &d->stacks[i])) {
            p[k].stack = &d->stacks[i];
            p[k++].value = v;
        }
    }
    *picks = p;
    *n = k;
    return SP_OK;
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
    sp_buf         text = SP_BUF_INIT(0);
    sp_dump_pick  *picks;
    sp_dump_line  *lines;
    size_t         i, j, n, start;
    int64_t        v;
    char           num[32];
    sp_status      rc;

    rc = sp_dump_pick_stacks(d, f, &picks, &n);
    if (rc != SP_OK) {
        return rc;
    }
    lines = malloc((n ? n : 1) * sizeof(*lines));
    /* text.data is never NULL below, even when every stack is empty. */
    if (lines == NULL || sp_buf_reserve(&text, 64) != SP_OK) {
        free(lines);
        free(picks);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < n; i++) {
        const sp_dump_stack *s = picks[i].stack;

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
        lines[i].off = start;
        lines[i].len = text.len - start;
        lines[i].value = picks[i].value;
    }
    free(picks);
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
    sp_dump_pick  *picks;
    int64_t       *self, *total;
    size_t        *seen;    /* the last pick (+ 1) each name counted in */
    sp_dump_row   *r;
    size_t         i, j, k, np;
    sp_status      rc;

    *rows = NULL;
    *n = 0;
    *sum = 0;
    rc = sp_dump_pick_stacks(d, f, &picks, &np);
    if (rc != SP_OK) {
        return rc;
    }
    k = d->nstrs ? d->nstrs : 1;
    self = calloc(k, sizeof(*self));
    total = calloc(k, sizeof(*total));
    seen = calloc(k, sizeof(*seen));
    if (self == NULL || total == NULL || seen == NULL) {
        rc = SP_ERR_NOMEM;
        goto done;
    }
    for (i = 0; i < np; i++) {
        const sp_dump_stack *s = picks[i].stack;
        int64_t              v = picks[i].value;

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
        goto done;
    }
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
done:
    free(picks);
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
            || !sp_trace_id_is_valid(s->trace))
        {
            continue;
        }
        sp_hex_format(s->trace, sizeof(s->trace), hex);
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
        sp_hex_format(r->span, sizeof(r->span), s[k].span_id);
        if (sp_span_id_is_valid(r->parent)) {
            sp_hex_format(r->parent, sizeof(r->parent), s[k].parent_span_id);
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
