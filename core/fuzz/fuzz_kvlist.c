/*
 * Fuzzes the k=v list parser. Invariants checked beyond "no crash":
 * - sp_kvlist_validate (decodes in pieces) agrees with sp_kvlist_parse
 *   (decodes each value at once);
 * - keys follow the documented character rule, values hold no NUL;
 * - sp_kvlist_find returns the last member with that key;
 * - appending "," (an empty member) changes nothing;
 * - re-encoding the parsed list and parsing it again gives the same list.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_kvlist.h"

static int
is_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
           || c == '~';
}

static void
check_same(const sp_kvlist *a, const sp_kvlist *b)
{
    size_t i;

    if (sp_kvlist_count(a) != sp_kvlist_count(b)) {
        abort();
    }
    for (i = 0; i < sp_kvlist_count(a); i++) {
        if (strcmp(sp_kvlist_key(a, i), sp_kvlist_key(b, i)) != 0
            || strcmp(sp_kvlist_value(a, i), sp_kvlist_value(b, i)) != 0)
        {
            abort();
        }
    }
}

static void
check_members(const sp_kvlist *list, const uint8_t *data, size_t size)
{
    size_t i, j, n = sp_kvlist_count(list), commas = 0;
    const char *k, *v, *want;
    const unsigned char *p;

    for (i = 0; i < size; i++) {
        commas += data[i] == ',';
    }
    if (n > commas + 1 || sp_kvlist_key(list, n) != NULL) {
        abort();
    }
    for (i = 0; i < n; i++) {
        k = sp_kvlist_key(list, i);
        v = sp_kvlist_value(list, i);
        if (k == NULL || v == NULL || k[0] == '\0' || strlen(v) > size) {
            abort();
        }
        for (p = (const unsigned char *)k; *p != '\0'; p++) {
            if (*p <= 0x20 || *p >= 0x7f || *p == ',' || *p == '=') {
                abort();
            }
        }
        if (memmem(data, size, k, strlen(k)) == NULL) {
            abort();
        }
        want = v;
        for (j = i + 1; j < n; j++) {
            if (strcmp(sp_kvlist_key(list, j), k) == 0) {
                want = sp_kvlist_value(list, j);
            }
        }
        if (sp_kvlist_find(list, k) != want) {
            abort();
        }
    }
}

/* key=%XX%XX...,key=... with every value byte escaped unless unreserved */
static char *
encode(const sp_kvlist *list, size_t *len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i, cap = 1, n = 0;
    const unsigned char *v;
    char *s;

    for (i = 0; i < sp_kvlist_count(list); i++) {
        cap += strlen(sp_kvlist_key(list, i)) + 2
               + 3 * strlen(sp_kvlist_value(list, i));
    }
    s = malloc(cap);
    if (s == NULL) {
        return NULL;
    }
    for (i = 0; i < sp_kvlist_count(list); i++) {
        if (i > 0) {
            s[n++] = ',';
        }
        memcpy(s + n, sp_kvlist_key(list, i), strlen(sp_kvlist_key(list, i)));
        n += strlen(sp_kvlist_key(list, i));
        s[n++] = '=';
        for (v = (const unsigned char *)sp_kvlist_value(list, i); *v; v++) {
            if (is_unreserved(*v)) {
                s[n++] = (char)*v;
            } else {
                s[n++] = '%';
                s[n++] = hex[*v >> 4];
                s[n++] = hex[*v & 15];
            }
        }
    }
    *len = n;
    return s;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_kvlist *list = NULL, *again = NULL;
    sp_status v, p;
    char *text;
    size_t len;

    v = sp_kvlist_validate((const char *)data, size);
    p = sp_kvlist_parse((const char *)data, size, &list);
    if (p == SP_ERR_NOMEM) {
        return 0;
    }
    if (v != p || (p != SP_OK && p != SP_ERR_INVALID)) {
        abort();
    }
    if (p != SP_OK) {
        if (list != NULL) {
            abort();
        }
        return 0;
    }
    check_members(list, data, size);

    text = malloc(size + 1);
    if (text != NULL) {
        memcpy(text, data, size);
        text[size] = ',';
        if (sp_kvlist_parse(text, size + 1, &again) != SP_OK) {
            abort();
        }
        check_same(list, again);
        sp_kvlist_destroy(again);
        free(text);
    }

    text = encode(list, &len);
    if (text != NULL) {
        if (sp_kvlist_validate(text, len) != SP_OK
            || sp_kvlist_parse(text, len, &again) != SP_OK)
        {
            abort();
        }
        check_same(list, again);
        sp_kvlist_destroy(again);
        free(text);
    }
    sp_kvlist_destroy(list);
    return 0;
}
