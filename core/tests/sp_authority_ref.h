/*
 * sp_authority_parse() as it was before its fast paths (a byte at a time,
 * the port's bound checked at each digit): what the unit test and the
 * fuzzer compare it with, over many inputs.
 */
#ifndef SP_AUTHORITY_REF_H
#define SP_AUTHORITY_REF_H

#include "sp_http_authority.h"

static sp_status
sp_authority_parse_ref(const char *s, size_t len, sp_authority *out)
{
    const char *host;
    size_t      i, host_len;
    int64_t     port = 0;
    char        c;

    if (s == NULL || len == 0) {
        return SP_ERR_INVALID;
    }
    if (s[0] == '[') {
        for (i = 1; i < len; i++) {
            c = s[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
                  || (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
            {
                break;
            }
        }
        if (i == len || s[i] != ']' || i < 3) {
            return SP_ERR_INVALID;
        }
        host = s + 1;
        host_len = i - 1;
        i++;
    } else {
        for (i = 0; i < len && sp_is_reg_name_char((unsigned char)s[i]);
             i++)
        {
        }
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
        for (i++; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') {
                return SP_ERR_INVALID;
            }
            port = port * 10 + (s[i] - '0');
            if (port > 65535) {
                return SP_ERR_INVALID;
            }
        }
    }
    out->host = host;
    out->host_len = host_len;
    out->port = port;
    return SP_OK;
}

#endif
