#include <stdlib.h>
#include <string.h>

#include "sp_kvlist.h"
#include "sp_percent.h"
#include "sp_text.h"

/*
 * sp_kvlist_validate decodes values through a stack buffer of this size,
 * one piece at a time, so that it needs no allocation.
 */
#define SP_KV_PIECE 256

struct sp_kvlist {
    size_t n;
    char **keys;
    char **values;
    /* the two arrays and the strings follow in the same block */
};

/* One member as written: key and value trimmed, value not yet decoded. */
typedef struct {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} sp_member;

static int
is_key_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != ',' && c != '=';
}

static int
is_value_char(unsigned char c)
{
    return (c >= 0x20 && c != 0x7f) || c == '\t';
}

/*
 * Finds the member that starts at or after *pos, skipping empty ones, and
 * moves *pos past it. SP_ERR_NOT_FOUND when none is left. Checks the
 * syntax only: the value's escapes are the caller's to decode.
 */
static sp_status
next_member(const char *s, size_t len, size_t *pos, sp_member *m)
{
    const char *b, *e, *eq, *end = s + len;
    size_t i;

    while (*pos < len) {
        b = s + *pos;
        e = memchr(b, ',', (size_t)(end - b));
        if (e == NULL) {
            e = end;
            *pos = len;
        } else {
            *pos = (size_t)(e - s) + 1;
        }
        while (b < e && sp_is_ows(*b)) {
            b++;
        }
        while (e > b && sp_is_ows(e[-1])) {
            e--;
        }
        if (b == e) {
            continue;
        }

        eq = memchr(b, '=', (size_t)(e - b));
        if (eq == NULL) {
            return SP_ERR_INVALID;
        }
        m->key = b;
        m->key_len = (size_t)(eq - b);
        while (m->key_len > 0 && sp_is_ows(m->key[m->key_len - 1])) {
            m->key_len--;
        }
        m->value = eq + 1;
        while (m->value < e && sp_is_ows(*m->value)) {
            m->value++;
        }
        m->value_len = (size_t)(e - m->value);

        if (m->key_len == 0) {
            return SP_ERR_INVALID;
        }
        for (i = 0; i < m->key_len; i++) {
            if (!is_key_char((unsigned char)m->key[i])) {
                return SP_ERR_INVALID;
            }
        }
        for (i = 0; i < m->value_len; i++) {
            if (!is_value_char((unsigned char)m->value[i])) {
                return SP_ERR_INVALID;
            }
        }
        return SP_OK;
    }
    return SP_ERR_NOT_FOUND;
}

/*
 * Whether v decodes to a string without NUL, through a small buffer. A
 * piece never ends inside an escape: if one of its last two bytes is a
 * '%', the piece stops before it. In a valid value a '%' always starts an
 * escape, so the pieces decode exactly as the whole would; in an invalid
 * one the first bad escape is still seen as bad.
 */
static sp_status
check_value(const char *v, size_t len)
{
    char buf[SP_KV_PIECE];
    size_t i = 0, j, n;

    while (i < len) {
        j = len - i > sizeof(buf) ? i + sizeof(buf) : len;
        if (j < len) {
            if (v[j - 1] == '%') {
                j -= 1;
            } else if (v[j - 2] == '%') {
                j -= 2;
            }
        }
        if (sp_percent_decode(v + i, j - i, buf, sizeof(buf), &n) != SP_OK
            || memchr(buf, '\0', n) != NULL)
        {
            return SP_ERR_INVALID;
        }
        i = j;
    }
    return SP_OK;
}

sp_status
sp_kvlist_validate(const char *s, size_t len)
{
    size_t pos = 0;
    sp_member m;
    sp_status rc;

    if (s == NULL) {
        return len == 0 ? SP_OK : SP_ERR_INVALID;
    }
    while ((rc = next_member(s, len, &pos, &m)) == SP_OK) {
        if (check_value(m.value, m.value_len) != SP_OK) {
            return SP_ERR_INVALID;
        }
    }
    return rc == SP_ERR_NOT_FOUND ? SP_OK : rc;
}

sp_status
sp_kvlist_parse(const char *s, size_t len, sp_kvlist **out)
{
    size_t pos, n = 0, bytes = 0, i, dlen;
    sp_member m;
    sp_status rc;
    sp_kvlist *list;
    char *p;

    if (out == NULL || (s == NULL && len != 0)) {
        return SP_ERR_INVALID;
    }
    if (s == NULL) {
        s = "";
    }

    /*
     * First pass: check the syntax and size the block. Each member needs
     * at most its key, its raw value and two NULs, and is at least two
     * bytes long ("k="), so the sum cannot overflow for any real len.
     */
    pos = 0;
    while ((rc = next_member(s, len, &pos, &m)) == SP_OK) {
        n++;
        bytes += m.key_len + m.value_len + 2;
    }
    if (rc != SP_ERR_NOT_FOUND) {
        return rc;
    }
    if (n > (SIZE_MAX - sizeof(*list) - bytes) / (2 * sizeof(char *))) {
        return SP_ERR_TOO_LONG;
    }

    list = malloc(sizeof(*list) + 2 * n * sizeof(char *) + bytes);
    if (list == NULL) {
        return SP_ERR_NOMEM;
    }
    list->n = n;
    list->keys = (char **)(list + 1);
    list->values = list->keys + n;
    p = (char *)(list->values + n);

    /* Second pass: copy keys, decode values straight into the block. */
    pos = 0;
    for (i = 0; i < n; i++) {
        (void)next_member(s, len, &pos, &m);

        list->keys[i] = p;
        memcpy(p, m.key, m.key_len);
        p += m.key_len;
        *p++ = '\0';

        list->values[i] = p;
        if (sp_percent_decode(m.value, m.value_len, p, m.value_len, &dlen)
            != SP_OK
            || memchr(p, '\0', dlen) != NULL)
        {
            free(list);
            return SP_ERR_INVALID;
        }
        p += dlen;
        *p++ = '\0';
    }

    *out = list;
    return SP_OK;
}

void
sp_kvlist_destroy(sp_kvlist *list)
{
    free(list);
}

size_t
sp_kvlist_count(const sp_kvlist *list)
{
    return list->n;
}

const char *
sp_kvlist_key(const sp_kvlist *list, size_t i)
{
    return i < list->n ? list->keys[i] : NULL;
}

const char *
sp_kvlist_value(const sp_kvlist *list, size_t i)
{
    return i < list->n ? list->values[i] : NULL;
}

const char *
sp_kvlist_find(const sp_kvlist *list, const char *key)
{
    size_t i;

    for (i = list->n; i > 0; i--) {
        if (strcmp(list->keys[i - 1], key) == 0) {
            return list->values[i - 1];
        }
    }
    return NULL;
}
