/*
 * An OTLP endpoint as an operator writes it: http[s]://host[:port][/], or
 * host:port[/] without a scheme (OpenTelemetry lets a gRPC endpoint take
 * the client's own "host:port" form). The configuration test and the
 * exporter's client both read endpoints here, so whatever passes
 * `nginx -t` or `apachectl configtest` is what the exporter connects to.
 */
#ifndef SP_ENDPOINT_H
#define SP_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_common.h"

/* The longest host a DNS name can be, with room for a [IPv6%zone]. */
#define SP_ENDPOINT_HOST_MAX      255
#define SP_ENDPOINT_DEFAULT_PORT  4317

/*
 * The scheme is case-insensitive; host is a name, an IPv4 address or a
 * [IPv6] literal (kept with its brackets); the port defaults to 4317 for
 * both schemes. Without a scheme the port is required (a bare word is
 * more likely a mistake than a collector) and the endpoint is TLS, as
 * OpenTelemetry's "insecure" option defaults to false.
 */
typedef struct sp_endpoint {
    bool     tls;
    bool     scheme;    /* written with http:// or https:// */
    char     host[SP_ENDPOINT_HOST_MAX + 1];
    uint16_t port;
} sp_endpoint;

/*
 * The len bytes at s (no NUL needed). SP_ERR_INVALID for anything else,
 * SP_ERR_TOO_LONG for a host longer than SP_ENDPOINT_HOST_MAX. out may be
 * NULL to only check.
 */
SP_API sp_status sp_endpoint_parse(const char *s, size_t len,
    sp_endpoint *out);

#endif
