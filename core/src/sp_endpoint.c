/*
 * OTLP endpoints (sp_endpoint.h).
 */
#include "sp_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

static bool
sp_endpoint_name_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

static bool
sp_endpoint_literal_byte(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F') || c == ':' || c == '.' || c == '%';
}

/*
 * The inside of [...]: an IPv6 address, then possibly a zone after '%'.
 * gRPC resolves anything else as a name and fails at every export ("DNS
 * resolution failed"), while the configuration test passed.
 */
static bool
sp_endpoint_ipv6_literal(const char *s, size_t len)
{
    char            addr[INET6_ADDRSTRLEN];
    struct in6_addr a;
    const char     *zone = memchr(s, '%', len);
    size_t          n = zone != NULL ? (size_t)(zone - s) : len;

    if (n == 0 || n >= sizeof(addr) || (zone != NULL && len - n < 2)) {
        return false;
    }
    memcpy(addr, s, n);
    addr[n] = '\0';
    return inet_pton(AF_INET6, addr, &a) == 1;
}

sp_status
sp_endpoint_parse(const char *s, size_t len, sp_endpoint *out)
{
    size_t   i, host_start, host_len;
    uint32_t port = SP_ENDPOINT_DEFAULT_PORT;
    bool     tls, scheme = true;

    if (s == NULL) {
        return SP_ERR_INVALID;
    }
    if (len > 7 && strncasecmp(s, "http://", 7) == 0) {
        i = 7;
        tls = false;
    } else if (len > 8 && strncasecmp(s, "https://", 8) == 0) {
        i = 8;
        tls = true;
    } else {
        i = 0;
        tls = true;
        scheme = false;
    }
    if (len > i && s[len - 1] == '/') {
        len--;
    }
    host_start = i;
    if (i < len && s[i] == '[') {
        for (i++; i < len && s[i] != ']'; i++) {
            if (!sp_endpoint_literal_byte(s[i])) {
                return SP_ERR_INVALID;
            }
        }
        if (i == len || !sp_endpoint_ipv6_literal(s + host_start + 1,
                                                  i - host_start - 1))
        {
            return SP_ERR_INVALID;
        }
        i++;
    } else {
        for (; i < len && s[i] != ':'; i++) {
            if (!sp_endpoint_name_byte(s[i])) {
                return SP_ERR_INVALID;
            }
        }
        if (i == host_start) {
            return SP_ERR_INVALID;
        }
    }
    host_len = i - host_start;
    if (i == len && !scheme) {
        return SP_ERR_INVALID;
    }
    if (i < len) {
        if (s[i] != ':' || ++i == len) {
            return SP_ERR_INVALID;
        }
        for (port = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') {
                return SP_ERR_INVALID;
            }
            port = port * 10 + (uint32_t)(s[i] - '0');
            if (port > 65535) {
                return SP_ERR_INVALID;
            }
        }
        if (port == 0) {
            return SP_ERR_INVALID;
        }
    }
    if (host_len > SP_ENDPOINT_HOST_MAX) {
        return SP_ERR_TOO_LONG;
    }
    if (out != NULL) {
        out->tls = tls;
        out->scheme = scheme;
        memcpy(out->host, s + host_start, host_len);
        out->host[host_len] = '\0';
        out->port = (uint16_t)port;
    }
    return SP_OK;
}
