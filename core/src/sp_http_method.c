/*
 * Known request methods (sp_http_method.h).
 */
#include "sp_http_method.h"
#include "sp_text.h"

#include <string.h>

sp_status
sp_http_methods_parse(const char *s, size_t len, sp_http_methods *out)
{
    sp_http_methods m;
    size_t          i = 0, start, end, n = 0;

    if (s == NULL) {
        return SP_ERR_INVALID;
    }
    memset(&m, 0, sizeof(m));
    for (;;) {
        while (i < len && sp_is_ows(s[i])) {
            i++;
        }
        start = i;
        while (i < len && sp_is_tchar((unsigned char)s[i])) {
            i++;
        }
        end = i;
        while (i < len && sp_is_ows(s[i])) {
            i++;
        }
        if (end == start || (i < len && s[i] != ',')) {
            return SP_ERR_INVALID;
        }
        if (m.count == SP_HTTP_METHODS_MAX
            || n + (m.count > 0) + (end - start) > SP_HTTP_METHODS_TEXT_MAX)
        {
            return SP_ERR_TOO_LONG;
        }
        if (m.count > 0) {
            m.text[n++] = ',';
        }
        m.off[m.count] = (uint8_t)n;
        m.len[m.count] = (uint8_t)(end - start);
        m.count++;
        memcpy(m.text + n, s + start, end - start);
        n += end - start;
        if (i == len) {
            break;
        }
        i++;    /* the comma: an element must follow */
    }
    m.text[n] = '\0';
    m.standard = strcmp(m.text, SP_HTTP_METHODS_STANDARD) == 0;
    *out = m;
    return SP_OK;
}

void
sp_http_methods_standard(sp_http_methods *out)
{
    (void)sp_http_methods_parse(SP_HTTP_METHODS_STANDARD,
                                sizeof(SP_HTTP_METHODS_STANDARD) - 1, out);
}

/* The conventions' list by length, then by constant compares: nearly
 * every request asks this with the default list. */
static bool
sp_standard_method(const char *m, size_t len)
{
    switch (len) {
    case 3:
        return memcmp(m, "GET", 3) == 0 || memcmp(m, "PUT", 3) == 0;
    case 4:
        return memcmp(m, "POST", 4) == 0 || memcmp(m, "HEAD", 4) == 0;
    case 5:
        return memcmp(m, "PATCH", 5) == 0 || memcmp(m, "TRACE", 5) == 0;
    case 6:
        return memcmp(m, "DELETE", 6) == 0;
    case 7:
        return memcmp(m, "OPTIONS", 7) == 0 || memcmp(m, "CONNECT", 7) == 0;
    default:
        return false;
    }
}

/* A replaced list, searched: out of line, so that the usual case above
 * sets up no registers for the loop. */
static __attribute__((noinline)) bool
sp_listed_method(const sp_http_methods *m, const char *method, size_t len)
{
    unsigned i;

    for (i = 0; i < m->count; i++) {
        if (m->len[i] == len && memcmp(m->text + m->off[i], method, len) == 0)
        {
            return true;
        }
    }
    return false;
}

bool
sp_http_method_known(const sp_http_methods *m, const char *method,
                     size_t len)
{
    if (method == NULL) {
        return false;
    }
    return m->standard ? sp_standard_method(method, len)
                       : sp_listed_method(m, method, len);
}
