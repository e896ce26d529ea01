/*
 * The exporter's own work for one span, for callgrind: a worker's entry
 * span (sp_entry_finish, the fields nginx gives for ab's static-file
 * request) written into a ring, then one sp_exporter_step that reads,
 * checks and adds it to the traces request, as in a server answering one
 * request at a time. With the traces exporter "none" the request is built
 * and dropped at each batch, no gRPC. Only the exporter side is counted:
 *
 *   valgrind --tool=callgrind --toggle-collect=sp_exporter_step \
 *       bench_spans [SPANS [PER_STEP]]
 *
 * then instructions / SPANS (default 100,000) per span, by function with
 * callgrind_annotate. PER_STEP spans (default 1; SPANS a multiple of it) are
 * written before each step: a step's own work is then shared by them.
 */
#include "sp_config.h"
#include "sp_entry.h"
#include "sp_exporter.h"
#include "bench_loop.h"
#include "sp_ids.h"
#include "sp_ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS      4
#define RING_BYTES (1u << 20)


static const char *
env(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

int
main(int argc, char **argv)
{
    long                spans = argc > 1 ? atol(argv[1]) : 100000;
    long                per = argc > 2 ? atol(argv[2]) : 1;
    static char         scratch[SP_ENTRY_SCRATCH_SIZE];
    sp_exporter_loop   *e;
    sp_entry_policy     p;
    sp_entry_headers    in;
    sp_entry_http       h;
    sp_entry            en;
    sp_config          *c;
    sp_region          *region;
    sp_ring            *ring;
    sp_idgen           *ids;
    void               *mem;
    size_t              size = sp_region_size(SLOTS, RING_BYTES);
    long                n;

    setenv("OTEL_LOGS_EXPORTER", "none", 1);
    setenv("OTEL_TRACES_EXPORTER", "none", 1);
    c = sp_config_create(SP_SERVER_NGINX);
    sp_config_complete(c, env, NULL, NULL, NULL);
    sp_entry_policy_from_config(c, &p);
    ids = sp_idgen_create();
    if (ids == NULL || posix_memalign(&mem, 4096, size) != 0
        || sp_region_init(mem, size, SLOTS, RING_BYTES) != SP_OK
        || sp_region_attach(mem, size, &region) != SP_OK)
    {
        fprintf(stderr, "no region\n");
        return 1;
    }
    ring = sp_region_claim(region, (uint32_t)getpid());

    e = bench_exporter_new(c, region);

    /* ab -k's request for /small.html, as nginx's log phase gives it */
    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    h.route = "/"; h.route_len = 1;
    h.path = "/small.html"; h.path_len = 11;
    h.scheme = "http"; h.scheme_len = 4;
    h.authority = "127.0.0.1:40123"; h.authority_len = 15;
    h.server_port = 40123;
    h.client_address = "127.0.0.1"; h.client_address_len = 9;
    h.peer_address = "127.0.0.1"; h.peer_address_len = 9;
    h.protocol_version = "1.0"; h.protocol_version_len = 3;
    h.user_agent = "ApacheBench/2.3"; h.user_agent_len = 15;
    h.status = 200;
    h.pid = (uint32_t)getpid();

    for (n = 0; n < spans; n++) {
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &en);
        if (sp_entry_finish(&p, &en, &h, ring) != SP_OK) {
            fprintf(stderr, "span %ld not written\n", n);
            return 1;
        }
        if (n == 0) {
            sp_record_view v;

            if (sp_ring_read(ring, &v) == SP_OK) {
                printf("span record: %zu bytes of body\n", v.len);
            }
        }
        if ((n + 1) % per != 0) {
            continue;
        }
        if (sp_exporter_step(e) != (size_t)per) {
            fprintf(stderr, "span %ld not read\n", n);
            return 1;
        }
        bench_ms++;
    }
    sp_exporter_flush(e);
    bench_print_counters(e);
    sp_exporter_destroy(e);
    sp_region_detach(region);
    sp_idgen_destroy(ids);
    sp_config_destroy(c);
    free(mem);
    return 0;
}
