/*
 * The list of known methods (OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS):
 * what is accepted keeps its limits, knows each of its methods and
 * nothing else of the input's lines, and its text parses to itself.
 */
#include "sp_http_method.h"

#include <stdlib.h>
#include <string.h>

#define CHECK(x) do { if (!(x)) abort(); } while (0)

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char     *s = (const char *)data;
    sp_http_methods m, again;
    unsigned        i;

    /* any bytes asked of the conventions' list */
    sp_http_methods_standard(&m);
    CHECK(m.standard && m.count == 9);
    (void)sp_http_method_known(&m, s, size);

    if (sp_http_methods_parse(s, size, &m) != SP_OK) {
        return 0;
    }
    CHECK(m.count >= 1 && m.count <= SP_HTTP_METHODS_MAX);
    CHECK(strlen(m.text) <= SP_HTTP_METHODS_TEXT_MAX);
    CHECK(strchr(m.text, ' ') == NULL && strchr(m.text, '\t') == NULL);
    for (i = 0; i < m.count; i++) {
        CHECK(m.len[i] > 0);
        CHECK(m.off[i] + m.len[i] <= strlen(m.text));
        CHECK(sp_http_method_known(&m, m.text + m.off[i], m.len[i]));
    }
    /* a method with a comma in it is never one of the list */
    CHECK(!sp_http_method_known(&m, m.text, strlen(m.text)) || m.count == 1);
    CHECK(sp_http_methods_parse(m.text, strlen(m.text), &again) == SP_OK);
    CHECK(again.count == m.count && strcmp(again.text, m.text) == 0
          && again.standard == m.standard);
    return 0;
}
