/*
 * Fuzzes spanprof-dump's reader of OTLP/JSON lines: the JSON parser, the
 * walk of the OTLP structure, base64, gunzip and pprof decoding behind a
 * LogRecord body, then every question on what was kept. Invariants
 * beyond "no crash": a line the JSON parser refuses is refused by the
 * reader too; the folded stacks, top table and flame graph agree on the
 * total; the flame graph is one whole SVG.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_dump.h"
#include "sp_flame.h"
#include "sp_json.h"

/* The sum of the values of folded lines. */
static int64_t
folded_sum(const sp_buf *b)
{
    int64_t sum = 0;
    size_t  i, sp = 0;

    for (i = 0; i < b->len; i++) {
        if (b->data[i] == ' ') {
            sp = i;
        } else if (b->data[i] == '\n') {
            sum += strtoll((const char *)b->data + sp + 1, NULL, 10);
        }
    }
    return sum;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_dump        *d;
    sp_json        *doc;
    sp_dump_filter  f;
    sp_dump_row    *rows;
    sp_dump_trace  *t;
    sp_dump_span   *s;
    sp_buf          folded = SP_BUF_INIT(0), svg = SP_BUF_INIT(0);
    size_t          n, ns, i;
    int64_t         sum;
    sp_status       rc, jrc;
    sp_dump_options o = { 1u << 20, 16u << 20 };

    if (sp_dump_create(&o, &d) != SP_OK) {
        return 0;
    }
    jrc = sp_json_parse((const char *)data, size, &doc);
    sp_json_destroy(doc);
    rc = sp_dump_add_line(d, (const char *)data, size);
    if (jrc == SP_ERR_INVALID && rc == SP_OK) {
        for (i = 0; i < size; i++) {
            if (data[i] != ' ' && data[i] != '\t' && data[i] != '\r'
                && data[i] != '\n')
            {
                abort();    /* took a line that is not JSON */
            }
        }
    }
    memset(&f, 0, sizeof(f));
    if (sp_dump_folded(d, &f, &folded) == SP_OK
        && sp_dump_top(d, &f, &rows, &n, &sum) == SP_OK)
    {
        if (folded_sum(&folded) != sum) {
            abort();
        }
        free(rows);
        if (sp_flame_svg(&svg, (const char *)folded.data, folded.len, NULL)
            == SP_OK
            && (svg.len < 7 || memcmp(svg.data + svg.len - 7, "</svg>\n", 7)))
        {
            abort();
        }
    }
    if (sp_dump_traces(d, &f, &t, &n) == SP_OK) {
        for (i = 0; i < n && i < 4; i++) {
            f.trace_id = t[i].trace_id;
            sp_buf_clear(&folded);
            sp_dump_folded(d, &f, &folded);
            if (sp_dump_spans(d, t[i].trace_id, &s, &ns) == SP_OK) {
                free(s);
            }
        }
        free(t);
    }
    sp_buf_free(&folded);
    sp_buf_free(&svg);
    sp_dump_destroy(d);
    return 0;
}
