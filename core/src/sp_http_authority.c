/*
 * Where a request was addressed (sp_http_authority.h).
 */
#include "sp_http_authority.h"
#include "sp_text.h"

#include <string.h>
#include <strings.h>

/*
 * RFC 3986's reg-name bytes (unreserved, sub-delims, and '%' of
 * pct-encoded), by byte: one load each, where strchr() over the list cost
 * ~20 instructions for each '.' and a bitmap ~13 a byte (callgrind).
 */
static const unsigned char sp_reg_name_bytes[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 10 */
    0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,   /* 20  !$%&'()*+,-. */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0,   /* 30 0-9 ; = */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,   /* 40 A-O */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1,   /* 50 P-Z _ */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,   /* 60 a-o */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0    /* 70 p-z ~ */
};

bool
sp_is_reg_name_char(unsigned char c)
{
    return sp_reg_name_bytes[c];
}

/* ASCII, whatever the process's locale. */
static bool
sp_is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool
sp_is_scheme(const char *s, size_t len)
{
    size_t i;

    if (s == NULL || len == 0 || !sp_is_letter(s[0])) {
        return false;
    }
    for (i = 1; i < len; i++) {
        if (!sp_is_letter(s[i]) && !(s[i] >= '0' && s[i] <= '9')
            && s[i] != '+' && s[i] != '-' && s[i] != '.')
        {
            return false;
        }
    }
    return true;
}

static bool
sp_is_ip_literal_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

/*
 * How many of s's first bytes are a reg-name's. Four bytes a turn, each
 * with its own exit: a Host is checked at every request, and the loop's
 * index and bound took as many instructions as the look-ups (~6 a byte,
 * ~4 so; callgrind).
 */
static inline size_t
sp_reg_name_span(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t               i;

    for (i = 0; i + 4 <= len; i += 4) {
        if (!sp_reg_name_bytes[u[i]]) {
            return i;
        }
        if (!sp_reg_name_bytes[u[i + 1]]) {
            return i + 1;
        }
        if (!sp_reg_name_bytes[u[i + 2]]) {
            return i + 2;
        }
        if (!sp_reg_name_bytes[u[i + 3]]) {
            return i + 3;
        }
    }
    for (; i < len && sp_reg_name_bytes[u[i]]; i++) {
    }
    return i;
}

#define SP_BYTES(b) (0x0101010101010101ull * (b))

/*
 * The n (1 to 8) bytes before end as a decimal number, from the 8-byte
 * word that ends there (the caller has 8 bytes before end): the bytes
 * before the digits count as leading zeros; each byte is checked and the
 * digits combined in pairs, then fours, then eights. ~30 instructions
 * where a loop took ~11 a digit (callgrind). False when one is not a
 * digit.
 */
static inline bool
sp_port_word(const char *end, size_t n, int64_t *port)
{
    uint64_t v;

    memcpy(&v, end - 8, sizeof(v));
    /* The digits' values, 0 where a digit is (and where bytes before
     * them are cleared): a byte is a digit when its value is below 10. */
    v = (v ^ SP_BYTES('0')) & (~0ull << (64 - 8 * n));
    if (((v + SP_BYTES(0x80 - 10)) | v) & SP_BYTES(0x80)) {
        return false;
    }
    v = (v * 10 + (v >> 8)) & 0x00ff00ff00ff00ffull;
    v = (v * 100 + (v >> 16)) & 0x0000ffff0000ffffull;
    v = (v * 10000 + (v >> 32)) & 0xffffffffull;
    *port = (int64_t)v;
    return true;
}

static inline sp_status
sp_authority_set(sp_authority *out, const char *host, size_t host_len,
    int64_t port)
{
    out->host = host;
    out->host_len = host_len;
    out->port = port;
    return SP_OK;
}

sp_status
sp_authority_parse(const char *s, size_t len, sp_authority *out)
{
    const char *host;
    size_t      i, host_len;
    int64_t     port = 0;

    if (s == NULL || len == 0) {
        return SP_ERR_INVALID;
    }
    if (s[0] == '[') {
        for (i = 1; i < len && sp_is_ip_literal_char((unsigned char)s[i]);
             i++)
        {
        }
        if (i == len || s[i] != ']' || i < 3) {
            return SP_ERR_INVALID;
        }
        host = s + 1;
        host_len = i - 1;
        i++;
    } else {
        i = sp_reg_name_span(s, len);
        if (i == 0) {
            return SP_ERR_INVALID;
        }
        host = s;
        host_len = i;
    }
    if (i < len) {
        if (s[i] != ':') {
            return SP_ERR_INVALID;
        }
        i++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* 1 to 8 digits, in the last 8 bytes */
        if (len - i - 1 < 8 && len >= 8) {
            if (!sp_port_word(s + len, len - i, &port) || port > 65535) {
                return SP_ERR_INVALID;
            }
            return sp_authority_set(out, host, host_len, port);
        }
#endif
        for (; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') {
                return SP_ERR_INVALID;
            }
            port = port * 10 + (s[i] - '0');
            if (port > 65535) {
                return SP_ERR_INVALID;
            }
        }
    }
    return sp_authority_set(out, host, host_len, port);
}

/* A token's bytes, and an authority's that are not a token's: the RFC
 * asks for a host with a port to be quoted, but proxies write it bare. */
static bool
sp_is_forwarded_bare(unsigned char c)
{
    return sp_is_tchar(c) || c == ':' || c == '[' || c == ']';
}

/* The end of a Forwarded value starting at s[i]: a quoted string (its
 * bytes between the quotes in *v) or a bare run up to the next
 * separator. len + 1 when it is malformed. */
static size_t
sp_forwarded_value(const char *s, size_t len, size_t i, const char **v,
    size_t *v_len)
{
    size_t start;

    if (i < len && s[i] == '"') {
        start = ++i;
        while (i < len && s[i] != '"') {
            if (s[i] == '\\') {
                return len + 1;
            }
            i++;
        }
        if (i == len) {
            return len + 1;
        }
        *v = s + start;
        *v_len = i - start;
        return i + 1;
    }
    start = i;
    while (i < len && sp_is_forwarded_bare((unsigned char)s[i])) {
        i++;
    }
    *v = s + start;
    *v_len = i - start;
    return i;
}

sp_status
sp_forwarded_param(const char *s, size_t len, const char *want,
    size_t want_len, const char **value, size_t *value_len)
{
    const char *v = NULL;
    size_t      i = 0, name, name_len, v_len = 0;
    bool        in_element = false;

    if (s == NULL) {
        return SP_ERR_NOT_FOUND;
    }
    for (;;) {
        i += sp_skip_ows(s + i, len - i);
        if (i == len) {
            return SP_ERR_NOT_FOUND;
        }
        /*
         * Only the first element is the client's: each proxy appends one
         * with what it received, so a host= further on is a hop's inside
         * the chain, not the host the client asked for.
         */
        if (s[i] == ',' && in_element) {
            return SP_ERR_NOT_FOUND;
        }
        if (s[i] == ';' || s[i] == ',') {   /* an empty pair or element */
            i++;
            continue;
        }
        in_element = true;
        name = i;
        while (i < len && sp_is_tchar((unsigned char)s[i])) {
            i++;
        }
        name_len = i - name;
        if (name_len == 0 || i == len || s[i] != '=') {
            return SP_ERR_INVALID;
        }
        i = sp_forwarded_value(s, len, i + 1, &v, &v_len);
        if (i > len) {
            return SP_ERR_INVALID;
        }
        i += sp_skip_ows(s + i, len - i);
        if (i < len && s[i] != ';' && s[i] != ',') {
            return SP_ERR_INVALID;
        }
        if (name_len == want_len
            && strncasecmp(s + name, want, want_len) == 0)
        {
            *value = v;
            *value_len = v_len;
            return SP_OK;
        }
    }
}

void
sp_list_first(const char *s, size_t len, const char **value,
    size_t *value_len)
{
    const char *comma = s != NULL ? memchr(s, ',', len) : NULL;

    *value = s;
    *value_len = comma != NULL ? (size_t)(comma - s) : len;
    if (s != NULL) {
        sp_trim_ows(value, value_len);
    }
}
