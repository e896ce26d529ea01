#include "sp_otlp_request.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/*
 * A piece is memory taken from an sp_buf (owned), or a range of copies:
 * an offset, not a pointer, because copies may move while it grows.
 */
typedef struct sp_piece {
    uint8_t *owned;
    size_t   off;
    size_t   len;
} sp_piece;

struct sp_otlp_request {
    atomic_size_t refs;
    size_t        len;
    sp_buf        copies;
    sp_piece     *pieces;
    size_t        count;
    size_t        cap;
};

sp_status
sp_otlp_request_create(sp_otlp_request **out)
{
    sp_otlp_request *r;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SP_ERR_NOMEM;
    }
    atomic_init(&r->refs, 1);
    sp_buf_init(&r->copies, 0);
    *out = r;
    return SP_OK;
}

sp_otlp_request *
sp_otlp_request_ref(sp_otlp_request *r)
{
    /* A new reference comes from one already held: nothing to order. */
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void
sp_otlp_request_unref(sp_otlp_request *r)
{
    size_t i;

    if (r == NULL
        || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
    {
        return;
    }
    for (i = 0; i < r->count; i++) {
        free(r->pieces[i].owned);
    }
    free(r->pieces);
    sp_buf_free(&r->copies);
    free(r);
}

sp_status
sp_otlp_request_reserve(sp_otlp_request *r, size_t pieces, size_t copied)
{
    sp_piece *p;
    size_t    cap;

    if (pieces > r->cap - r->count) {
        if (pieces > SIZE_MAX / sizeof(*p) - r->count) {
            return SP_ERR_NOMEM;
        }
        cap = r->cap != 0 ? r->cap : 4;
        while (cap < r->count + pieces) {
            cap = cap > SIZE_MAX / sizeof(*p) / 2 ? r->count + pieces
                                                    : cap * 2;
        }
        p = realloc(r->pieces, cap * sizeof(*p));
        if (p == NULL) {
            return SP_ERR_NOMEM;
        }
        r->pieces = p;
        r->cap = cap;
    }
    if (sp_buf_reserve(&r->copies, copied) != SP_OK) {
        sp_buf_truncate(&r->copies, r->copies.len);  /* not sticky here */
        return SP_ERR_NOMEM;
    }
    return SP_OK;
}

sp_status
sp_otlp_request_copy(sp_otlp_request *r, const void *p, size_t n)
{
    sp_piece *last;

    if (n == 0) {
        return SP_OK;
    }
    if (sp_otlp_request_reserve(r, 1, n) != SP_OK) {
        return SP_ERR_NOMEM;
    }
    last = r->count > 0 ? &r->pieces[r->count - 1] : NULL;
    if (last != NULL && last->owned == NULL
        && last->off + last->len == r->copies.len)
    {
        last->len += n;
    } else {
        r->pieces[r->count++] = (sp_piece){ NULL, r->copies.len, n };
    }
    sp_buf_append(&r->copies, p, n);
    r->len += n;
    return SP_OK;
}

/* Room a taken buffer may keep: what shrinking it would save is less. */
#define SP_TAKE_SLACK  1024

sp_status
sp_otlp_request_take(sp_otlp_request *r, sp_buf *b)
{
    uint8_t *p;

    if (b->err != SP_OK) {
        return b->err;
    }
    if (b->len == 0) {
        return SP_OK;
    }
    if (sp_otlp_request_reserve(r, 1, 0) != SP_OK) {
        return SP_ERR_NOMEM;
    }
    /*
     * The queue's bound (SPANPROF_EXPORTER_MAX_BYTES) counts lengths, and
     * a builder's buffer holds up to twice its length (doubled as it
     * grew, or reserved at a quarter over the last request's): in the
     * soak with the collector down, the queued requests' heap was 2.1
     * times their length (malloc_usable_size), 1.04 with this. glibc
     * shrinks a chunk in place (splits it, or mremap()s a mapped one):
     * no copy.
     */
    if (b->cap - b->len > SP_TAKE_SLACK) {
        p = realloc(b->data, b->len);
        if (p != NULL) {
            b->data = p;
        }
    }
    r->pieces[r->count++] = (sp_piece){ b->data, 0, b->len };
    r->len += b->len;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return SP_OK;
}

size_t
sp_otlp_request_len(const sp_otlp_request *r)
{
    return r->len;
}

size_t
sp_otlp_request_count(const sp_otlp_request *r)
{
    return r->count;
}

const uint8_t *
sp_otlp_request_piece(const sp_otlp_request *r, size_t i, size_t *len)
{
    const sp_piece *p;

    if (i >= r->count) {
        *len = 0;
        return NULL;
    }
    p = &r->pieces[i];
    *len = p->len;
    return p->owned != NULL ? p->owned : r->copies.data + p->off;
}

sp_status
sp_otlp_request_flatten(const sp_otlp_request *r, sp_buf *out)
{
    const uint8_t *p;
    size_t         i, n, start = out->len;
    sp_status      rc;

    if (sp_buf_reserve(out, r->len) != SP_OK) {
        return out->err;
    }
    for (i = 0; i < r->count; i++) {
        p = sp_otlp_request_piece(r, i, &n);
        sp_buf_append(out, p, n);
    }
    if ((rc = out->err) != SP_OK) {
        sp_buf_truncate(out, start);
        out->err = rc;
    }
    return rc;
}
