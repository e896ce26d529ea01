#include "sp_json.h"
#include "sp_encode.h"
#include "sp_percent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Inputs past this are refused: node indices are 32-bit. */
#define SP_JSON_MAX_INPUT ((size_t)1 << 30)
#define SP_JSON_NONE      UINT32_MAX

struct sp_json_value {
    uint8_t              type;
    uint32_t             count;
    /* While parsing, links are indices (the node array still moves);
       sp_json_link turns them into pointers once it is final. */
    uint32_t             first_i, next_i;
    size_t               key_off, str_off, str_len;
    const sp_json_value *first, *next;
    const char          *key, *str;
};

struct sp_json {
    sp_json_value *nodes;
    size_t         n, cap;
    sp_buf         chars;   /* decoded strings and number texts, each
                               NUL-terminated */
};

typedef struct sp_json_parser {
    const char *p, *end;
    sp_json    *doc;
    unsigned    depth;
} sp_json_parser;

static sp_status sp_json_value_parse(sp_json_parser *ps, uint32_t *out);

static void
sp_json_ws(sp_json_parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'
                               || *ps->p == '\n' || *ps->p == '\r'))
    {
        ps->p++;
    }
}

static sp_status
sp_json_node(sp_json_parser *ps, sp_json_type type, uint32_t *out)
{
    sp_json       *d = ps->doc;
    sp_json_value *grown, *v;
    size_t         cap;

    if (d->n == d->cap) {
        cap = d->cap ? d->cap * 2 : 64;
        grown = realloc(d->nodes, cap * sizeof(*grown));
        if (grown == NULL) {
            return SP_ERR_NOMEM;
        }
        d->nodes = grown;
        d->cap = cap;
    }
    v = &d->nodes[d->n];
    memset(v, 0, sizeof(*v));
    v->type = (uint8_t)type;
    v->first_i = v->next_i = SP_JSON_NONE;
    v->key_off = SIZE_MAX;
    *out = (uint32_t)d->n++;
    return SP_OK;
}

/* Four hex digits at p (the caller checked there are four). */
static long
sp_json_u4(const char *p)
{
    long v = 0;
    int  i, h;

    for (i = 0; i < 4; i++) {
        h = sp_hex_value(p[i]);
        if (h < 0) {
            return -1;
        }
        v = v << 4 | h;
    }
    return v;
}

static void
sp_json_put_utf8(sp_buf *b, unsigned long cp)
{
    uint8_t u[4];
    size_t  n;

    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6);
        u[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12);
        u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18);
        u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    sp_buf_append(b, u, n);
}

/*
 * A string at ps->p (on its opening quote), decoded into chars; *off and
 * *len say where.
 */
static sp_status
sp_json_string_parse(sp_json_parser *ps, size_t *off, size_t *len)
{
    sp_buf       *b = &ps->doc->chars;
    const char   *s = ps->p + 1, *q;
    unsigned long cp;
    long          hi, lo;

    /* Find the end first: escapes are ASCII, so the raw bytes between
       the quotes are valid UTF-8 exactly when the string is. */
    for (q = s; q < ps->end && *q != '"'; q++) {
        if ((unsigned char)*q < 0x20) {
            return SP_ERR_INVALID;
        }
        if (*q == '\\' && ++q == ps->end) {
            return SP_ERR_INVALID;
        }
    }
    if (q == ps->end || !sp_utf8_valid(s, (size_t)(q - s))) {
        return SP_ERR_INVALID;
    }

    *off = b->len;
    while (s < q) {
        const char *run = s;

        while (s < q && *s != '\\') {
            s++;
        }
        sp_buf_append(b, run, (size_t)(s - run));
        if (s == q) {
            break;
        }
        s++;    /* the backslash; q's scan made sure a character follows */
        switch (*s++) {
        case '"':  sp_buf_append(b, "\"", 1); break;
        case '\\': sp_buf_append(b, "\\", 1); break;
        case '/':  sp_buf_append(b, "/", 1); break;
        case 'b':  sp_buf_append(b, "\b", 1); break;
        case 'f':  sp_buf_append(b, "\f", 1); break;
        case 'n':  sp_buf_append(b, "\n", 1); break;
        case 'r':  sp_buf_append(b, "\r", 1); break;
        case 't':  sp_buf_append(b, "\t", 1); break;
        case 'u':
            if (q - s < 4 || (hi = sp_json_u4(s)) < 0) {
                return SP_ERR_INVALID;
            }
            s += 4;
            cp = (unsigned long)hi;
            if (hi >= 0xdc00 && hi <= 0xdfff) {
                return SP_ERR_INVALID;          /* a lone low surrogate */
            }
            if (hi >= 0xd800 && hi <= 0xdbff) {
                if (q - s < 6 || s[0] != '\\' || s[1] != 'u'
                    || (lo = sp_json_u4(s + 2)) < 0xdc00 || lo > 0xdfff)
                {
                    return SP_ERR_INVALID;      /* a lone high surrogate */
                }
                s += 6;
                cp = 0x10000 + (((unsigned long)hi - 0xd800) << 10)
                     + ((unsigned long)lo - 0xdc00);
            }
            sp_json_put_utf8(b, cp);
            break;
        default:
            return SP_ERR_INVALID;
        }
    }
    *len = b->len - *off;
    sp_buf_append(b, "", 1);
    ps->p = q + 1;
    return sp_buf_status(b) == SP_OK ? SP_OK : SP_ERR_NOMEM;
}

static bool
sp_json_digit(const sp_json_parser *ps)
{
    return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static sp_status
sp_json_number_parse(sp_json_parser *ps, size_t *off, size_t *len)
{
    const char *start = ps->p;
    sp_buf     *b = &ps->doc->chars;

    if (ps->p < ps->end && *ps->p == '-') {
        ps->p++;
    }
    if (!sp_json_digit(ps)) {
        return SP_ERR_INVALID;
    }
    if (*ps->p++ != '0') {
        while (sp_json_digit(ps)) {
            ps->p++;
        }
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!sp_json_digit(ps)) {
            return SP_ERR_INVALID;
        }
        while (sp_json_digit(ps)) {
            ps->p++;
        }
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) {
            ps->p++;
        }
        if (!sp_json_digit(ps)) {
            return SP_ERR_INVALID;
        }
        while (sp_json_digit(ps)) {
            ps->p++;
        }
    }
    *off = b->len;
    *len = (size_t)(ps->p - start);
    sp_buf_append(b, start, *len);
    sp_buf_append(b, "", 1);
    return sp_buf_status(b) == SP_OK ? SP_OK : SP_ERR_NOMEM;
}

static sp_status
sp_json_literal(sp_json_parser *ps, const char *word, sp_json_type type,
                uint32_t *out)
{
    size_t n = strlen(word);

    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        return SP_ERR_INVALID;
    }
    ps->p += n;
    return sp_json_node(ps, type, out);
}

/* The elements of an array or the members of an object, ps->p after the
   opening bracket. */
static sp_status
sp_json_container_parse(sp_json_parser *ps, uint32_t self, bool object)
{
    char      close = object ? '}' : ']';
    uint32_t  child, last = SP_JSON_NONE;
    size_t    key_off = SIZE_MAX, key_len;
    sp_status rc;

    if (++ps->depth > SP_JSON_MAX_DEPTH) {
        return SP_ERR_INVALID;
    }
    sp_json_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return SP_OK;
    }
    for (;;) {
        sp_json_ws(ps);
        if (object) {
            if (ps->p == ps->end || *ps->p != '"') {
                return SP_ERR_INVALID;
            }
            rc = sp_json_string_parse(ps, &key_off, &key_len);
            if (rc != SP_OK) {
                return rc;
            }
            sp_json_ws(ps);
            if (ps->p == ps->end || *ps->p++ != ':') {
                return SP_ERR_INVALID;
            }
        }
        rc = sp_json_value_parse(ps, &child);
        if (rc != SP_OK) {
            return rc;
        }
        ps->doc->nodes[child].key_off = key_off;
        if (last == SP_JSON_NONE) {
            ps->doc->nodes[self].first_i = child;
        } else {
            ps->doc->nodes[last].next_i = child;
        }
        last = child;
        ps->doc->nodes[self].count++;
        sp_json_ws(ps);
        if (ps->p == ps->end) {
            return SP_ERR_INVALID;
        }
        if (*ps->p == close) {
            ps->p++;
            ps->depth--;
            return SP_OK;
        }
        if (*ps->p++ != ',') {
            return SP_ERR_INVALID;
        }
    }
}

static sp_status
sp_json_value_parse(sp_json_parser *ps, uint32_t *out)
{
    size_t       off, len;
    sp_json_type type = SP_JSON_NUMBER;
    sp_status    rc;

    sp_json_ws(ps);
    if (ps->p == ps->end) {
        return SP_ERR_INVALID;
    }
    switch (*ps->p) {
    case '{':
    case '[':
        rc = sp_json_node(ps, *ps->p == '{' ? SP_JSON_OBJECT : SP_JSON_ARRAY,
                          out);
        if (rc != SP_OK) {
            return rc;
        }
        return sp_json_container_parse(ps, *out, *ps->p++ == '{');
    case '"':
        type = SP_JSON_STRING;
        rc = sp_json_string_parse(ps, &off, &len);
        break;
    case 't':
        return sp_json_literal(ps, "true", SP_JSON_TRUE, out);
    case 'f':
        return sp_json_literal(ps, "false", SP_JSON_FALSE, out);
    case 'n':
        return sp_json_literal(ps, "null", SP_JSON_NULL, out);
    default:
        rc = sp_json_number_parse(ps, &off, &len);
        break;
    }
    if (rc != SP_OK) {
        return rc;
    }
    rc = sp_json_node(ps, type, out);
    if (rc == SP_OK) {
        ps->doc->nodes[*out].str_off = off;
        ps->doc->nodes[*out].str_len = len;
    }
    return rc;
}

/* Indices and offsets into pointers, now that nothing moves. */
static void
sp_json_link(sp_json *d)
{
    sp_json_value *v;
    size_t         i;

    for (i = 0; i < d->n; i++) {
        v = &d->nodes[i];
        v->first = v->first_i == SP_JSON_NONE ? NULL : &d->nodes[v->first_i];
        v->next = v->next_i == SP_JSON_NONE ? NULL : &d->nodes[v->next_i];
        v->key = v->key_off == SIZE_MAX
                 ? NULL : (const char *)d->chars.data + v->key_off;
        if (v->type == SP_JSON_STRING || v->type == SP_JSON_NUMBER) {
            v->str = (const char *)d->chars.data + v->str_off;
        }
    }
}

sp_status
sp_json_parse(const char *text, size_t len, sp_json **out)
{
    sp_json_parser ps;
    sp_json       *d;
    uint32_t       root;
    sp_status      rc;

    *out = NULL;
    if (text == NULL || len > SP_JSON_MAX_INPUT) {
        return SP_ERR_INVALID;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return SP_ERR_NOMEM;
    }
    sp_buf_init(&d->chars, 0);
    ps.p = text;
    ps.end = text + len;
    ps.doc = d;
    ps.depth = 0;
    rc = sp_json_value_parse(&ps, &root);
    if (rc == SP_OK) {
        sp_json_ws(&ps);
        if (ps.p != ps.end) {
            rc = SP_ERR_INVALID;
        }
    }
    if (rc == SP_OK && sp_buf_reserve(&d->chars, 1) != SP_OK) {
        rc = SP_ERR_NOMEM;   /* strings point into it: never NULL */
    }
    if (rc != SP_OK) {
        sp_json_destroy(d);
        return rc;
    }
    sp_json_link(d);
    *out = d;
    return SP_OK;
}

void
sp_json_destroy(sp_json *doc)
{
    if (doc == NULL) {
        return;
    }
    free(doc->nodes);
    sp_buf_free(&doc->chars);
    free(doc);
}

const sp_json_value *
sp_json_root(const sp_json *doc)
{
    return doc != NULL && doc->n > 0 ? &doc->nodes[0] : NULL;
}

sp_json_type
sp_json_type_of(const sp_json_value *v)
{
    return v == NULL ? SP_JSON_NULL : (sp_json_type)v->type;
}

const sp_json_value *
sp_json_get(const sp_json_value *v, const char *key)
{
    const sp_json_value *m, *found = NULL;

    if (sp_json_type_of(v) != SP_JSON_OBJECT || key == NULL) {
        return NULL;
    }
    for (m = v->first; m != NULL; m = m->next) {
        if (strcmp(m->key, key) == 0) {
            found = m;
        }
    }
    return found;
}

const sp_json_value *
sp_json_first(const sp_json_value *v)
{
    sp_json_type t = sp_json_type_of(v);

    return t == SP_JSON_ARRAY || t == SP_JSON_OBJECT ? v->first : NULL;
}

const sp_json_value *
sp_json_next(const sp_json_value *v)
{
    return v == NULL ? NULL : v->next;
}

const char *
sp_json_key(const sp_json_value *member)
{
    return member == NULL ? NULL : member->key;
}

size_t
sp_json_count(const sp_json_value *v)
{
    sp_json_type t = sp_json_type_of(v);

    return t == SP_JSON_ARRAY || t == SP_JSON_OBJECT ? v->count : 0;
}

const char *
sp_json_string(const sp_json_value *v, size_t *len)
{
    if (sp_json_type_of(v) != SP_JSON_STRING) {
        return NULL;
    }
    if (len != NULL) {
        *len = v->str_len;
    }
    return v->str;
}

sp_status
sp_json_int64(const sp_json_value *v, int64_t *out)
{
    const char *s;
    char       *end;
    long long   n;
    size_t      i = 0;

    if (sp_json_type_of(v) != SP_JSON_NUMBER
        && sp_json_type_of(v) != SP_JSON_STRING)
    {
        return SP_ERR_INVALID;
    }
    s = v->str;
    if (s[i] == '-') {
        i++;
    }
    if (s[i] == '\0') {
        return SP_ERR_INVALID;
    }
    for (; i < v->str_len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return SP_ERR_INVALID;
        }
    }
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return SP_ERR_INVALID;
    }
    *out = (int64_t)n;
    return SP_OK;
}
