/*
 * Percent-decoding (RFC 3986 section 2.1), shared by W3C Baggage values,
 * OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES.
 */
#ifndef SP_PERCENT_H
#define SP_PERCENT_H

#include "sp_common.h"

/*
 * Decodes in[0..len) into out. A '%' must be followed by two hex digits of
 * either case, else SP_ERR_INVALID. SP_ERR_TOO_LONG if the result needs more
 * than cap bytes. out is not NUL-terminated; *out_len gets the decoded size,
 * which is never larger than len, so cap == len always suffices.
 */
SP_API sp_status sp_percent_decode(const char *in, size_t len, char *out,
                                   size_t cap, size_t *out_len);

/* The value of hex digit c (0-9, a-f, A-F), or -1. */
SP_API int sp_hex_value(char c);

#endif
