/*
 * HTTP's optional whitespace (RFC 9110 section 5.6.3: space and tab), which
 * every header and list format spanprof reads allows around its parts, and
 * its tokens' bytes. Private to the core.
 */
#ifndef SP_TEXT_H
#define SP_TEXT_H

#include <stdbool.h>
#include <stddef.h>
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

#endif
