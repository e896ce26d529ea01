/*
 * HTTP's optional whitespace (RFC 9110 section 5.6.3: space and tab), which
 * every header and list format spanprof reads allows around its parts,
 * its tokens' bytes, and the decimal digits of the numbers spanprof
 * writes as text. Private to the core.
 */
#ifndef SP_TEXT_H
#define SP_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline bool
sp_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 9110 section 5.6.2: tchar, the bytes of a token (a method, a
 * baggage key). */
static inline bool
sp_is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9'))
    {
        return true;
    }
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* How many bytes of OWS s[0..len) starts with. */
static inline size_t
sp_skip_ows(const char *s, size_t len)
{
    size_t i = 0;

    while (i < len && sp_is_ows(s[i])) {
        i++;
    }
    return i;
}

/* Narrows *s / *len to drop OWS at both ends. */
static inline void
sp_trim_ows(const char **s, size_t *len)
{
    size_t skip = sp_skip_ows(*s, *len);

    *s += skip;
    *len -= skip;
    while (*len > 0 && sp_is_ows((*s)[*len - 1])) {
        (*len)--;
    }
}

/* v's decimal digits at buf + *n, as far as they fit in size; no NUL.
 * Async-signal-safe (a child between fork and exec writes with it). */
static inline void
sp_put_decimal(char *buf, size_t size, size_t *n, uint64_t v)
{
    char   digits[20];      /* UINT64_MAX's */
    size_t d = 0;

    do {
        digits[d++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (d > 0 && *n < size) {
        buf[(*n)++] = digits[--d];
    }
}

#endif
