/*
 * Fuzzes the flame graph writer's reading of folded stacks. Invariants
 * beyond "no crash": the output is one whole SVG, valid UTF-8, with no
 * control character but newline and no raw '<' from the input (every
 * name is escaped: the only tags are the writer's own).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_encode.h"
#include "sp_flame.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_buf           out = SP_BUF_INIT(0);
    sp_flame_options o = { "fuzz", "samples", (unsigned)(size % 3000) };
    size_t           i;

    if (sp_flame_svg(&out, (const char *)data, size, &o) == SP_OK) {
        if (out.len < 7 || memcmp(out.data + out.len - 7, "</svg>\n", 7) != 0
            || !sp_utf8_valid((const char *)out.data, out.len))
        {
            abort();
        }
        for (i = 0; i < out.len; i++) {
            if (out.data[i] < 0x20 && out.data[i] != '\n') {
                abort();
            }
            /* Every tag the writer opens starts with a known name. */
            if (out.data[i] == '<' && i + 1 < out.len
                && strchr("?s/rgtT", out.data[i + 1]) == NULL)
            {
                abort();
            }
        }
    }
    sp_buf_free(&out);
    return 0;
}
