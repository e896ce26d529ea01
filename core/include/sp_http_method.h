/*
 * Which request methods an entry span names as they were sent. The HTTP
 * semantic conventions know RFC 9110's methods and PATCH; any other
 * method is reported as "_OTHER" (its name in
 * http.request.method_original, "HTTP" in the span's name), so that a
 * client sending made-up methods cannot give the backend one span name
 * per method. OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS replaces the list
 * (servers with WebDAV or PURGE know more methods).
 */
#ifndef SP_HTTP_METHOD_H
#define SP_HTTP_METHOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_common.h"

#define SP_HTTP_METHODS_MAX         32   /* methods in a list */
#define SP_HTTP_METHODS_TEXT_MAX    255  /* its text, commas included */

/* The conventions' list, in their order. */
#define SP_HTTP_METHODS_STANDARD \
    "CONNECT,DELETE,GET,HEAD,OPTIONS,PATCH,POST,PUT,TRACE"

/* What http.request.method says of a method that is not known. */
#define SP_HTTP_METHOD_OTHER        "_OTHER"
/* What the span's name starts with then. */
#define SP_HTTP_METHOD_OTHER_NAME   "HTTP"

typedef struct sp_http_methods {
    bool    standard;   /* the conventions' list: a switch, no search */
    uint8_t count;
    uint8_t off[SP_HTTP_METHODS_MAX];
    uint8_t len[SP_HTTP_METHODS_MAX];
    char    text[SP_HTTP_METHODS_TEXT_MAX + 1];  /* "A,B,C", NUL */
} sp_http_methods;

/* The conventions' list. */
SP_API void sp_http_methods_standard(sp_http_methods *out);

/*
 * A comma-separated list of methods (RFC 9110 tokens, case-sensitive;
 * spaces and tabs around each are dropped), at most SP_HTTP_METHODS_MAX of
 * them in at most SP_HTTP_METHODS_TEXT_MAX bytes once spaces are dropped.
 * SP_ERR_INVALID for an empty list or element, a character outside a
 * token; SP_ERR_TOO_LONG past a limit. *out is written only on SP_OK;
 * out->text is then the list without its spaces.
 */
SP_API sp_status sp_http_methods_parse(const char *s, size_t len,
                                       sp_http_methods *out);

/* Whether method[0..len) is in the list, compared exactly. */
SP_API bool sp_http_method_known(const sp_http_methods *m,
                                 const char *method, size_t len);

#endif
