/*
 * What sp_authority_parse() must give, written from the grammar rather
 * than for speed, and shaped unlike it (whole parts found first, then
 * checked), so that the unit test and the fuzzer compare two readings of
 * RFC 3986's authority over many inputs:
 *
 *   authority = ( "[" 2*( HEXDIG / ":" / "." ) "]" / 1*reg-name-char )
 *               [ ":" *DIGIT ]           ; the port's value at most 65535
 */
#ifndef SP_AUTHORITY_REF_H
#define SP_AUTHORITY_REF_H

#include <string.h>

#include "sp_http_authority.h"

static bool
sp_ref_all(const char *s, size_t n, bool (*in)(unsigned char))
{
    while (n > 0) {
        if (!in((unsigned char)s[--n])) {
            return false;
        }
    }
    return true;
}

static bool
sp_ref_is_literal_char(unsigned char c)
{
    return strchr("0123456789abcdefABCDEF:.", c) != NULL && c != '\0';
}

static bool
sp_ref_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static sp_status
sp_authority_parse_ref(const char *s, size_t len, sp_authority *out)
{
    const char *close, *host, *rest;
    size_t      host_len, rest_len, zeros;
    int64_t     port = 0;

    if (s == NULL || len == 0) {
        return SP_ERR_INVALID;
    }
    if (s[0] == '[') {
        close = memchr(s, ']', len);
        if (close == NULL || close - s < 3
            || !sp_ref_all(s + 1, (size_t)(close - s) - 1,
                           sp_ref_is_literal_char))
        {
            return SP_ERR_INVALID;
        }
        host = s + 1;
        host_len = (size_t)(close - s) - 1;
        rest = close + 1;
    } else {
        host_len = 0;
        while (host_len < len
               && sp_is_reg_name_char((unsigned char)s[host_len]))
        {
            host_len++;
        }
        if (host_len == 0) {
            return SP_ERR_INVALID;
        }
        host = s;
        rest = s + host_len;
    }
    rest_len = len - (size_t)(rest - s);
    if (rest_len > 0) {
        if (rest[0] != ':' || !sp_ref_all(rest + 1, rest_len - 1,
                                          sp_ref_is_digit))
        {
            return SP_ERR_INVALID;
        }
        /* leading zeros say nothing; more than five digits are too many */
        for (zeros = 1; zeros < rest_len && rest[zeros] == '0'; zeros++) {
        }
        if (rest_len - zeros > 5) {
            return SP_ERR_INVALID;
        }
        for (; zeros < rest_len; zeros++) {
            port = port * 10 + (rest[zeros] - '0');
        }
        if (port > 65535) {
            return SP_ERR_INVALID;
        }
    }
    out->host = host;
    out->host_len = host_len;
    out->port = port;
    return SP_OK;
}

#endif
