#include "sp_flame.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_FLAME_ROW        16      /* pixels per frame */
#define SP_FLAME_TOP        36      /* room for the title */
#define SP_FLAME_PAD        10
#define SP_FLAME_CHAR       7.0     /* width of a character at 12px */
#define SP_FLAME_MIN_WIDTH  0.1     /* narrower boxes are left out */
#define SP_FLAME_NONE       SIZE_MAX

typedef struct sp_flame_node {
    const char *name;           /* into the input; not NUL-terminated */
    size_t      len;
    size_t      parent, first, last, next;
    int64_t     value;
    unsigned    depth;
} sp_flame_node;

typedef struct sp_flame {
    sp_flame_node *nodes;
    size_t         n, cap;
    size_t        *slots;       /* index + 1 by (parent, name); 0: empty */
    size_t         nslots;
    unsigned       max_depth;
} sp_flame;

static uint64_t
sp_flame_hash(size_t parent, const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)parent;
    size_t   i;

    for (i = 0; i < len; i++) {
        h = (h ^ (uint8_t)name[i]) * 0x100000001b3ULL;
    }
    return h;
}

static sp_status
sp_flame_rehash(sp_flame *f)
{
    size_t  n = f->nslots ? f->nslots * 2 : 1024, i, j;
    size_t *slots = calloc(n, sizeof(*slots));

    if (slots == NULL) {
        return SP_ERR_NOMEM;
    }
    for (i = 1; i < f->n; i++) {    /* node 0, the root, has no parent */
        const sp_flame_node *x = &f->nodes[i];

        j = sp_flame_hash(x->parent, x->name, x->len) & (n - 1);
        while (slots[j] != 0) {
            j = (j + 1) & (n - 1);
        }
        slots[j] = i + 1;
    }
    free(f->slots);
    f->slots = slots;
    f->nslots = n;
    return SP_OK;
}

/* The child name of parent, made when new. */
static sp_status
sp_flame_child(sp_flame *f, size_t parent, const char *name, size_t len,
               size_t *out)
{
    sp_flame_node *x, *grown;
    size_t         j, cap;

    if (f->nslots == 0 || (f->n + 1) * 2 > f->nslots) {
        if (sp_flame_rehash(f) != SP_OK) {
            return SP_ERR_NOMEM;
        }
    }
    j = sp_flame_hash(parent, name, len) & (f->nslots - 1);
    for (; f->slots[j] != 0; j = (j + 1) & (f->nslots - 1)) {
        x = &f->nodes[f->slots[j] - 1];
        if (x->parent == parent && x->len == len
            && memcmp(x->name, name, len) == 0)
        {
            *out = f->slots[j] - 1;
            return SP_OK;
        }
    }
    if (f->n == f->cap) {
        cap = f->cap * 2;
        grown = realloc(f->nodes, cap * sizeof(*grown));
        if (grown == NULL) {
            return SP_ERR_NOMEM;
        }
        f->nodes = grown;
        f->cap = cap;
    }
    x = &f->nodes[f->n];
    memset(x, 0, sizeof(*x));
    x->name = name;
    x->len = len;
    x->parent = parent;
    x->first = x->last = x->next = SP_FLAME_NONE;
    x->depth = f->nodes[parent].depth + 1;
    if (f->nodes[parent].last == SP_FLAME_NONE) {
        f->nodes[parent].first = f->n;
    } else {
        f->nodes[f->nodes[parent].last].next = f->n;
    }
    f->nodes[parent].last = f->n;
    if (x->depth > f->max_depth) {
        f->max_depth = x->depth;
    }
    f->slots[j] = f->n + 1;
    *out = f->n++;
    return SP_OK;
}

/* "FRAMES VALUE": the value, or 0 when the line is not one. */
static int64_t
sp_flame_value(const char *line, size_t len, size_t *frames_len)
{
    size_t  sp = len, i;
    int64_t v = 0;

    while (sp > 0 && line[sp - 1] != ' ') {
        sp--;
    }
    if (sp == 0 || sp == len) {
        return 0;
    }
    for (i = sp; i < len; i++) {
        if (line[i] < '0' || line[i] > '9'
            || v > (INT64_MAX - (line[i] - '0')) / 10)
        {
            return 0;
        }
        v = v * 10 + (line[i] - '0');
    }
    *frames_len = sp - 1;
    return v;
}

static sp_status
sp_flame_line(sp_flame *f, const char *line, size_t len)
{
    size_t    frames_len, at = 0, node = 0, end;
    int64_t   v = sp_flame_value(line, len, &frames_len);
    unsigned  depth = 0;
    sp_status rc;

    /* A total past INT64_MAX / 2 could not be summed: the rest is left
       out, as a line that is not one. */
    if (v <= 0 || v > INT64_MAX / 2 - f->nodes[0].value) {
        return SP_OK;
    }
    f->nodes[0].value += v;
    while (at < frames_len && depth < SP_FLAME_MAX_DEPTH) {
        for (end = at; end < frames_len && line[end] != ';'; end++) {
        }
        if (end > at) {
            rc = sp_flame_child(f, node, line + at, end - at, &node);
            if (rc != SP_OK) {
                return rc;
            }
            f->nodes[node].value += v;
            depth++;
        }
        at = end + 1;
    }
    return SP_OK;
}

/* Text for XML: valid UTF-8, control characters as '?', escaped. */
static void
sp_flame_text(sp_buf *out, const char *s, size_t len)
{
    sp_buf tmp = SP_BUF_INIT(0);
    size_t i;
    char   c;

    if (!sp_utf8_valid(s, len)) {
        sp_utf8_sanitize(&tmp, s, len);
        s = (const char *)tmp.data;
        len = tmp.len;
    }
    for (i = 0; i < len && s != NULL; i++) {
        c = s[i];
        switch (c) {
        case '&':  sp_buf_append(out, "&amp;", 5); break;
        case '<':  sp_buf_append(out, "&lt;", 4); break;
        case '>':  sp_buf_append(out, "&gt;", 4); break;
        case '"':  sp_buf_append(out, "&quot;", 6); break;
        case '\'': sp_buf_append(out, "&apos;", 6); break;
        default:
            if ((unsigned char)c < 0x20 || c == 0x7f) {
                c = '?';
            }
            sp_buf_append(out, &c, 1);
        }
    }
    if (sp_buf_status(&tmp) != SP_OK && out->err == SP_OK) {
        out->err = SP_ERR_NOMEM;
    }
    sp_buf_free(&tmp);
}

static void
sp_flame_printf(sp_buf *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sp_flame_printf(sp_buf *out, const char *fmt, ...)
{
    char    tmp[256];
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) {
        sp_buf_append(out, tmp, (size_t)n < sizeof(tmp) ? (size_t)n
                                                        : sizeof(tmp) - 1);
    }
}

/* Warm colours, fixed per name. */
static void
sp_flame_colour(const char *name, size_t len, unsigned *r, unsigned *g,
                unsigned *b)
{
    uint64_t h = sp_flame_hash(0, name, len);

    *r = 205 + (unsigned)(h % 50);
    *g = (unsigned)((h >> 16) % 230);
    *b = (unsigned)((h >> 32) % 55);
}

/* How much of a name fits in w pixels: whole, cut (with ".."), or none. */
static size_t
sp_flame_fit(const char *name, size_t len, double w, bool *cut)
{
    size_t chars = w > 6 ? (size_t)((w - 6) / SP_FLAME_CHAR) : 0;

    *cut = false;
    if (len <= chars) {
        return len;
    }
    if (chars < 3) {
        return 0;
    }
    *cut = true;
    len = chars - 2;
    while (len > 0 && ((unsigned char)name[len] & 0xc0) == 0x80) {
        len--;      /* not inside a UTF-8 sequence */
    }
    return len;
}

static void
sp_flame_box(sp_buf *out, const sp_flame *f, size_t i, double x, double w,
             double height, const char *unit)
{
    const sp_flame_node *n = &f->nodes[i];
    double               y = height - SP_FLAME_PAD
                             - (double)(n->depth + 1) * SP_FLAME_ROW;
    double               pct = 100.0 * (double)n->value
                               / (double)f->nodes[0].value;
    unsigned             r, g, b;
    size_t               fit;
    bool                 cut;

    sp_flame_colour(n->name, n->len, &r, &g, &b);
    sp_buf_append(out, "<g><title>", 10);
    sp_flame_text(out, n->name, n->len);
    sp_flame_printf(out, " (%lld %s, %.2f%%)</title>", (long long)n->value,
                    unit, pct);
    sp_flame_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                    "height=\"%d\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>",
                    x, y, w, SP_FLAME_ROW - 1, r, g, b);
    fit = sp_flame_fit(n->name, n->len, w, &cut);
    if (fit > 0) {
        sp_flame_printf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 3,
                        y + SP_FLAME_ROW - 4.5);
        sp_flame_text(out, n->name, fit);
        if (cut) {
            sp_buf_append(out, "..", 2);
        }
        sp_buf_append(out, "</text>", 7);
    }
    sp_buf_append(out, "</g>\n", 5);
}

/* Draws node i at x and its children after it: depth-first with an
   explicit stack, as deep as SP_FLAME_MAX_DEPTH. */
static sp_status
sp_flame_draw(sp_buf *out, const sp_flame *f, double width, double height,
              const char *unit)
{
    typedef struct { size_t node; double x; } item;
    item   *stack;
    size_t  top = 0, c;
    double  scale = (width - 2 * SP_FLAME_PAD) / (double)f->nodes[0].value;
    double  x, w;

    stack = malloc(f->n * sizeof(*stack));
    if (stack == NULL) {
        return SP_ERR_NOMEM;
    }
    stack[top].node = 0;
    stack[top++].x = SP_FLAME_PAD;
    while (top > 0) {
        item it = stack[--top];

        w = (double)f->nodes[it.node].value * scale;
        if (w < SP_FLAME_MIN_WIDTH) {
            continue;
        }
        sp_flame_box(out, f, it.node, it.x, w, height, unit);
        /* Children go on the stack in order; which is drawn first does
           not matter, where each goes does. */
        x = it.x;
        for (c = f->nodes[it.node].first; c != SP_FLAME_NONE;
             c = f->nodes[c].next)
        {
            stack[top].node = c;
            stack[top++].x = x;
            x += (double)f->nodes[c].value * scale;
        }
    }
    free(stack);
    return SP_OK;
}

sp_status
sp_flame_svg(sp_buf *out, const char *folded, size_t len,
             const sp_flame_options *options)
{
    sp_flame    f;
    const char *title = "Flame graph", *unit = "samples";
    double      width = 1200, height;
    size_t      at = 0, end, start = out->len;
    sp_status   rc = SP_OK;

    if (options != NULL) {
        title = options->title != NULL ? options->title : title;
        unit = options->unit != NULL ? options->unit : unit;
        width = options->width >= 200 ? options->width : width;
    }
    memset(&f, 0, sizeof(f));
    f.cap = 256;
    f.nodes = malloc(f.cap * sizeof(*f.nodes));
    if (f.nodes == NULL) {
        return SP_ERR_NOMEM;
    }
    memset(&f.nodes[0], 0, sizeof(f.nodes[0]));
    f.nodes[0].name = "all";
    f.nodes[0].len = 3;
    f.nodes[0].parent = f.nodes[0].first = f.nodes[0].last = SP_FLAME_NONE;
    f.nodes[0].next = SP_FLAME_NONE;
    f.n = 1;
    while (rc == SP_OK && at < len) {
        for (end = at; end < len && folded[end] != '\n'; end++) {
        }
        rc = sp_flame_line(&f, folded + at, end - at
                           - (end > at && folded[end - 1] == '\r'));
        at = end + 1;
    }
    if (rc == SP_OK) {
        height = SP_FLAME_TOP + SP_FLAME_PAD
                 + (double)(f.max_depth + 1) * SP_FLAME_ROW;
        sp_flame_printf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                        "version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\">\n", width, height,
                        width, height);
        sp_flame_printf(out, "<style>text{font-family:monospace;"
                        "font-size:12px;fill:#000}"
                        "g:hover rect{stroke:#000;stroke-width:0.5}"
                        "</style>\n");
        sp_flame_printf(out, "<rect width=\"100%%\" height=\"100%%\" "
                        "fill=\"#f8f8f8\"/>\n<text x=\"%.1f\" y=\"24\" "
                        "text-anchor=\"middle\" style=\"font-size:17px\">",
                        width / 2);
        sp_flame_text(out, title, strlen(title));
        sp_buf_append(out, "</text>\n", 8);
        if (f.nodes[0].value == 0) {
            sp_flame_printf(out, "<text x=\"%.1f\" y=\"%d\">no samples"
                            "</text>\n", (double)SP_FLAME_PAD,
                            SP_FLAME_TOP + SP_FLAME_ROW);
        } else {
            rc = sp_flame_draw(out, &f, width, height, unit);
        }
        sp_buf_append(out, "</svg>\n", 7);
    }
    free(f.nodes);
    free(f.slots);
    if (rc != SP_OK) {
        sp_buf_truncate(out, start);
        return rc;
    }
    return sp_buf_status(out);
}
