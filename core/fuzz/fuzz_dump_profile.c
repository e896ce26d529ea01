/*
 * Fuzzes spanprof-dump's reading of a serialized pprof Profile (what a
 * LogRecord body holds once base64 and gzip are undone): ids that point
 * nowhere, string indices out of range, hostile values. Invariants beyond
 * "no crash": a profile is taken whole or not at all (a refused one adds
 * no sample); the top table's total equals the folded stacks' sum.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_dump.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sp_dump        *d;
    sp_dump_stats   st;
    sp_dump_filter  f;
    sp_dump_row    *rows;
    sp_buf          folded = SP_BUF_INIT(0);
    size_t          n, i, sp = 0;
    int64_t         sum, fsum = 0;
    sp_status       rc;
    sp_dump_options o = { 1u << 20, 16u << 20 };

    if (sp_dump_create(&o, &d) != SP_OK) {
        return 0;
    }
    rc = sp_dump_add_profile(d, data, size, "svc", SP_DUMP_SOURCE_SNAPSHOT);
    sp_dump_get_stats(d, &st);
    if (rc == SP_ERR_INVALID && (st.samples != 0 || st.profiles_bad != 1)) {
        abort();
    }
    memset(&f, 0, sizeof(f));
    f.value = size % 2 ? SP_DUMP_VALUE_CPU_NS : SP_DUMP_VALUE_SAMPLES;
    f.service_root = size % 3 == 0;
    if (sp_dump_folded(d, &f, &folded) == SP_OK
        && sp_dump_top(d, &f, &rows, &n, &sum) == SP_OK)
    {
        for (i = 0; i < folded.len; i++) {
            if (folded.data[i] == ' ') {
                sp = i;
            } else if (folded.data[i] == '\n') {
                fsum += strtoll((const char *)folded.data + sp + 1, NULL, 10);
            }
        }
        if (fsum != sum) {
            abort();
        }
        free(rows);
    }
    sp_buf_free(&folded);
    sp_dump_destroy(d);
    return 0;
}
