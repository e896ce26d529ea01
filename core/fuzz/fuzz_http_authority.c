/*
 * Where a request was addressed: the input as an authority, as a
 * Forwarded header and as an X-Forwarded-Host list. Checks, aborting on a
 * violation: what parses lies inside the input, a host has only the bytes
 * of an authority and a port is one; the host= found in a Forwarded
 * header lies inside it; the first element of a list has no comma and no
 * OWS at its ends; an authority parses as the byte-at-a-time parser
 * that came before the fast paths does.
 */
#include <stdlib.h>
#include <string.h>

#include "sp_http_authority.h"
#include "../tests/sp_authority_ref.h"

#define CHECK(x) do { if (!(x)) abort(); } while (0)

static int
inside(const char *s, size_t len, const char *v, size_t v_len)
{
    return v >= s && v_len <= len && (size_t)(v - s) <= len - v_len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char  *s = (const char *)data;
    const char  *v;
    size_t       len, i;
    sp_authority a, b;
    sp_status    rc;

    rc = sp_authority_parse(s, size, &a);
    CHECK(rc == sp_authority_parse_ref(s, size, &b));
    if (rc == SP_OK) {
        CHECK(a.host == b.host && a.host_len == b.host_len
              && a.port == b.port);
        CHECK(inside(s, size, a.host, a.host_len) && a.host_len > 0);
        CHECK(a.port >= 0 && a.port <= 65535);
        for (i = 0; i < a.host_len; i++) {
            CHECK(a.host[i] > ' ' && a.host[i] < 0x7f && a.host[i] != '/'
                  && a.host[i] != '@' && a.host[i] != '[');
        }
    }

    if (sp_forwarded_param(s, size, "host", 4, &v, &len) == SP_OK) {
        CHECK(inside(s, size, v, len));
        CHECK(memchr(v, '"', len) == NULL && memchr(v, '\\', len) == NULL);
        if (sp_authority_parse(v, len, &a) == SP_OK) {
            CHECK(inside(s, size, a.host, a.host_len));
        }
    }

    sp_list_first(s, size, &v, &len);
    CHECK(inside(s, size, v, len));
    CHECK(memchr(v, ',', len) == NULL);
    CHECK(len == 0 || (v[0] != ' ' && v[0] != '\t' && v[len - 1] != ' '
                       && v[len - 1] != '\t'));
    return 0;
}
