/*
 * otlp_json_logs: one OTLP/JSON line of profiling logs, as spanprof's
 * console exporter writes it, made by spanprof's own encoders
 * (sp_otlp_logs_add_pprof, sp_otlp_logs_serialize, sp_otlp_json_append),
 * for t/dump.t.
 *
 *   otlp_json_logs SERVICE SOURCE PROFILE.pb...   > LINE
 *
 * Each serialized pprof Profile becomes one LogRecord (SOURCE: snapshot
 * or continuous) of a resource with service.name SERVICE; all go in one
 * ExportLogsServiceRequest, written as one line on standard output.
 */
#include "sp_common.h"
#include "sp_encode.h"
#include "sp_otlp.h"
#include "sp_otlp_json.h"
#include "sp_record.h"
#include "sp_resource.h"

#include <stdio.h>
#include <string.h>

static int
read_file(const char *path, sp_buf *out)
{
    FILE  *f = fopen(path, "rb");
    char   tmp[65536];
    size_t n;

    if (f == NULL) {
        return -1;
    }
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
        sp_buf_append(out, tmp, n);
    }
    fclose(f);
    return sp_buf_status(out) == SP_OK ? 0 : -1;
}

int
main(int argc, char **argv)
{
    sp_otlp_logs *l = NULL;
    sp_resource  *res = NULL;
    sp_buf        prof = SP_BUF_INIT(0), req = SP_BUF_INIT(0);
    sp_buf        line = SP_BUF_INIT(0);
    uint8_t       source;
    int           i, rc = 1;

    if (argc < 4) {
        fprintf(stderr, "usage: otlp_json_logs SERVICE SOURCE PROFILE...\n");
        return 2;
    }
    source = strcmp(argv[2], "continuous") == 0 ? SP_SOURCE_CONTINUOUS
                                                : SP_SOURCE_SNAPSHOT;
    if (sp_resource_create(&res) != SP_OK
        || sp_resource_set_string(res, "service.name", argv[1]) != SP_OK
        || sp_otlp_logs_create(NULL, &l) != SP_OK)
    {
        fprintf(stderr, "otlp_json_logs: cannot set up\n");
        goto done;
    }
    for (i = 3; i < argc; i++) {
        prof.len = 0;
        if (read_file(argv[i], &prof) != 0
            || sp_otlp_logs_add_pprof(l, res, 100 + (uint32_t)i, source,
                                      1700000000000000000ULL, 0, prof.data,
                                      prof.len, 0) != SP_OK)
        {
            fprintf(stderr, "otlp_json_logs: %s: cannot add\n", argv[i]);
            goto done;
        }
    }
    if (sp_otlp_logs_serialize(l, &req) != SP_OK
        || sp_otlp_json_append(&line, SP_OTLP_SIGNAL_LOGS, req.data, req.len)
           != SP_OK
        || fwrite(line.data, 1, line.len, stdout) != line.len)
    {
        fprintf(stderr, "otlp_json_logs: cannot encode\n");
        goto done;
    }
    rc = 0;
done:
    sp_otlp_logs_destroy(l);
    sp_resource_destroy(res);
    sp_buf_free(&prof);
    sp_buf_free(&req);
    sp_buf_free(&line);
    return rc;
}
