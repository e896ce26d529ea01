/*
 * A worker's cost of writing one entry span into its ring, counted in
 * instructions: the fields nginx gives for ab -k's request of a small
 * static file in bench/servers (no location matches it: no route; no end
 * time given), on a keep-alive connection whose span cache holds the run
 * (every span after the first is a hit), each record read and consumed
 * after it is written. Meant to run under callgrind:
 *
 *   valgrind --tool=callgrind --toggle-collect=sp_entry_finish \
 *       build/bench/entry_bench 100000
 *
 * (divide by the spans). After the count, "miss" gives each span no
 * cache, "route" a route of "/" (a "location /").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_entry.h"
#include "sp_ids.h"

#define BENCH_RING  (1u << 20)

/* The configuration's defaults: no variable is set. */
static const char *
bench_no_env(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return NULL;
}

int
main(int argc, char **argv)
{
    long              n = argc > 1 ? atol(argv[1]) : 100000, i;
    int               miss = 0, route = 0, i_arg;
    size_t            size = sp_region_size(1, BENCH_RING);
    char              scratch[SP_ENTRY_SCRATCH_SIZE];
    void             *mem;
    sp_region        *region;
    sp_ring          *ring;
    sp_record_view    v;
    sp_entry_policy   p;
    sp_entry_headers  in;
    sp_entry_http     h;
    sp_entry          e;
    sp_idgen         *ids;
    sp_config        *c;
    static sp_entry_cache cache;

    for (i_arg = 2; i_arg < argc; i_arg++) {
        miss |= strcmp(argv[i_arg], "miss") == 0;
        route |= strcmp(argv[i_arg], "route") == 0;
    }
    c = sp_config_create(SP_SERVER_NGINX);
    sp_config_complete(c, bench_no_env, NULL, NULL, NULL);
    sp_entry_policy_from_config(c, &p);
    ids = sp_idgen_create();
    if (c == NULL || ids == NULL || posix_memalign(&mem, 64, size) != 0
        || sp_region_init(mem, size, 1, BENCH_RING) != SP_OK
        || sp_region_attach(mem, size, &region) != SP_OK)
    {
        fprintf(stderr, "entry_bench: no region\n");
        return 1;
    }
    ring = sp_region_ring(region, 0);
    sp_entry_cache_init(&cache);

    memset(&in, 0, sizeof(in));
    memset(&h, 0, sizeof(h));
    h.method = "GET"; h.method_len = 3;
    if (route) {
        h.route = "/"; h.route_len = 1;
    }
    h.path = "/small.html"; h.path_len = 11;
    h.scheme = "http"; h.scheme_len = 4;
    h.authority = "127.0.0.1:40123"; h.authority_len = 15;
    h.server_port = 40123;
    h.client_address = "127.0.0.1"; h.client_address_len = 9;
    h.peer_address = "127.0.0.1"; h.peer_address_len = 9;
    h.protocol_version = "1.0"; h.protocol_version_len = 3;
    h.user_agent = "ApacheBench/2.3"; h.user_agent_len = 15;
    h.status = 200;
    h.pid = 4242;
    h.cache = miss ? NULL : &cache;

    for (i = 0; i < n; i++) {
        sp_entry_begin(&p, ids, &in, scratch, sizeof(scratch), &e);
        if (sp_entry_finish(&p, &e, &h, ring) != SP_OK
            || sp_ring_read(ring, &v) != SP_OK
            || sp_ring_consume(ring, &v) != SP_OK)
        {
            fprintf(stderr, "entry_bench: span %ld lost\n", i);
            return 1;
        }
    }
    printf("%ld spans\n", n);
    return 0;
}
