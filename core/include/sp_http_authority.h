/*
 * Where a request was sent, for url.scheme, server.address and
 * server.port. The HTTP semantic conventions take the original scheme and
 * host a reverse proxy passed on (Forwarded's proto= and host=,
 * X-Forwarded-Proto, X-Forwarded-Host) before the request's own (its
 * connection's scheme; HTTP/1.1's absolute-form target or Host, HTTP/2's
 * :authority), and both the host and the port from the value found.
 * Clients write these headers as they like: a value that is not a scheme
 * or an authority is not used.
 */
#ifndef SP_HTTP_AUTHORITY_H
#define SP_HTTP_AUTHORITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_common.h"

typedef struct sp_authority {
    const char *host;       /* into the input; an IPv6 literal without its */
    size_t      host_len;   /* brackets, as the conventions write it */
    int64_t     port;       /* 0: none given */
} sp_authority;

/*
 * host [ ":" port ] of RFC 3986 section 3.2.2: a registered name or IPv4
 * address (unreserved, sub-delims and '%' bytes), or an IP literal in
 * brackets (hex digits, ':' and '.'); a port of at most 65535 (an empty
 * one, "host:", counts as none). SP_ERR_INVALID otherwise; *out is
 * written only on SP_OK.
 */
SP_API sp_status sp_authority_parse(const char *s, size_t len,
                                    sp_authority *out);

/* Whether c may be part of a registered name (RFC 3986 section 3.2.2):
 * unreserved, sub-delims, or the '%' of pct-encoded. */
SP_API bool sp_is_reg_name_char(unsigned char c);

/* Whether s[0..len) is a URI scheme (RFC 3986 section 3.1): a letter,
 * then letters, digits, '+', '-' and '.'. */
SP_API bool sp_is_scheme(const char *s, size_t len);

/*
 * The parameter name (host, proto; any case) of a Forwarded header (RFC
 * 7239) in its first element, the one the proxy nearest the client wrote
 * (empty elements before it do not count). Its value is a token, or a
 * quoted string without escapes (a host or scheme has no need of them);
 * a host with a port must be quoted by the RFC, but proxies that leave it
 * bare are read as well. SP_ERR_NOT_FOUND when the first element has
 * none, SP_ERR_INVALID when the header is malformed before its end.
 */
SP_API sp_status sp_forwarded_param(const char *s, size_t len,
                                    const char *name, size_t name_len,
                                    const char **value, size_t *value_len);

/*
 * The first element of a comma-separated header (X-Forwarded-Host,
 * X-Forwarded-Proto: the client's, then each proxy's), without its OWS.
 */
SP_API void sp_list_first(const char *s, size_t len, const char **value,
                          size_t *value_len);

#endif
