/*
 * The entry span of a request, independent of the server: what the
 * adapters of both servers do with the incoming trace headers, and the
 * span record they write when the request ends.
 *
 *   sp_entry_begin()    from traceparent / tracestate / baggage and the
 *                       configuration: the span's ids and parent, whether
 *                       it is recorded (OTEL_TRACES_SAMPLER), whether the
 *                       trace is selected for snapshot profiling (SPEC 3),
 *                       and the header values to send upstream
 *   sp_entry_finish()   the span record (SPEC 2: name, attributes,
 *                       status) into the worker's ring
 *
 * Malformed input never fails: an invalid traceparent starts a new trace
 * (and drops tracestate), malformed baggage members are dropped.
 */
#ifndef SP_ENTRY_H
#define SP_ENTRY_H

#include "sp_common.h"
#include "sp_config.h"
#include "sp_http_method.h"
#include "sp_ids.h"
#include "sp_ring.h"
#include "sp_selection.h"
#include "sp_tracecontext.h"

/* What an entry span needs of the configuration, read once per process. */
typedef struct sp_entry_policy {
    uint32_t sampler;           /* sp_config's SP_SAMPLER_* */
    double   sampler_ratio;     /* OTEL_TRACES_SAMPLER_ARG */
    uint32_t propagators;       /* SP_PROPAGATOR_* bits */
    bool     snapshot_enabled;  /* SPLUNK_SNAPSHOT_PROFILER_ENABLED */
    uint32_t selection_threshold;
    /* OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS */
    sp_http_methods known_methods;
} sp_entry_policy;

SP_API void sp_entry_policy_from_config(const sp_config *c,
                                        sp_entry_policy *out);

/* Incoming header values; NULL (or len 0) when absent. */
typedef struct sp_entry_headers {
    const char *traceparent;
    size_t      traceparent_len;
    const char *tracestate;
    size_t      tracestate_len;
    const char *baggage;
    size_t      baggage_len;
} sp_entry_headers;

typedef struct sp_entry {
    sp_span_context ctx;            /* this span; flags: sampled iff
                                       recorded */
    uint8_t         parent_span_id[SP_SPAN_ID_SIZE]; /* zero: root */
    bool            remote_parent;
    bool            recorded;
    sp_selection    selection;      /* selection.profiled: sample it */
    uint64_t        start_ns;       /* CLOCK_REALTIME */
    /* Header values to send upstream, NUL-terminated; tracestate and
     * baggage point into the scratch given to sp_entry_begin or at
     * constants (copy them before the scratch is reused) and are NULL
     * when there is nothing to send. */
    char            traceparent[SP_TRACEPARENT_SIZE];
    const char     *tracestate;
    size_t          tracestate_len;
    const char     *baggage;
    size_t          baggage_len;
} sp_entry;

/* Scratch bytes sp_entry_begin may use: tracestate + baggage + NULs. */
#define SP_ENTRY_SCRATCH_SIZE (SP_TRACESTATE_MAX_LEN + 8192 + 2)

SP_API void sp_entry_begin(const sp_entry_policy *p, sp_idgen *ids,
    const sp_entry_headers *in, char *scratch, size_t scratch_size,
    sp_entry *out);

/*
 * What one connection's earlier span wrote of the attributes its later
 * requests nearly always repeat: url.scheme, server.address,
 * server.port, client.address, network.peer.address,
 * network.protocol.version and user_agent.original, one run of bytes in
 * the record, with what they were made of. A request whose inputs are
 * the same bytes copies the run, without parsing its authority and
 * writing seven attributes again: ~140 instructions fewer a request in
 * nginx's worker, ~210 in httpd's child (bench/servers callgrind,
 * README). Any other request writes them as
 * ever and keeps them for the next. The record is the same bytes either
 * way (test_entry_cache, fuzz_entry).
 *
 * The adapter gives each keep-alive connection one, from its second
 * request on (a connection that serves one request pays nothing), and
 * never shares one between threads. The fields are core's:
 * sp_entry_cache_init() makes it empty.
 */
#define SP_ENTRY_CACHE_SIZE 512

typedef struct sp_entry_cache {
    /* The lengths of the authority, the scheme, client.address,
     * network.peer.address, network.protocol.version and
     * user_agent.original, each whole: compared at once, no range to
     * test first; the first SIZE_MAX: nothing kept. */
    size_t        lens[6];
    /* The scheme's and network.protocol.version's addresses when they
     * are read-only, literals of the module or the server (sp_entry.c),
     * else NULL */
    const char   *scheme_ro;
    const char   *version_ro;
    uint16_t      run_off;      /* the run in data */
    uint16_t      run_len;
    /* the sum of the run's values' lengths (url.scheme's,
     * server.address's, the four's), for a hit's reservation */
    uint16_t      kept_len;
    uint16_t      value_off[4]; /* the four values, in data */
    uint8_t       peer_is_client; /* the two values are the same bytes */
    /* 0: the authority, client.address and user_agent.original are each
     * of 8 to 16 bytes, their first and last 8 kept at the start of data
     * (words), the scheme and the version read-only, the peer the
     * client: the usual case, compared with few instructions */
    uint8_t       slow;
    /* words when slow is 0, the authority as received, the scheme, then
     * the run */
    unsigned char data[SP_ENTRY_CACHE_SIZE - 80];
} sp_entry_cache;

SP_API void sp_entry_cache_init(sp_entry_cache *c);

/* A length that says: up to the string's NUL (sp_entry_http). */
#define SP_ENTRY_TO_NUL ((size_t)-1)

/* What the server knows of the request when it ends. Strings may be NULL
 * (attribute left out), with a length of 0: the span cache compares the
 * lengths as they are (a test of each pointer cost 24 instructions a
 * request, callgrind), and the span's room is bounded by their sum;
 * other lengths as given. */
typedef struct sp_entry_http {
    const char *method;     size_t method_len;  /* as the client sent
                                       it, whatever a redirect made of it */
    const char *route;      size_t route_len;   /* low-cardinality */
    const char *path;       size_t path_len;
    const char *query;      size_t query_len;
    const char *scheme;     size_t scheme_len;
    /* Where the client sent the request, in the conventions' order
     * (sp_http_authority.h): the Forwarded, X-Forwarded-Proto and
     * X-Forwarded-Host headers as received, then the request's own
     * authority (HTTP/1.1's absolute-form target or Host, HTTP/2's
     * :authority); NULL: none. url.scheme is Forwarded's proto=, else
     * X-Forwarded-Proto's first, else scheme. server.address and
     * server.port are the first of Forwarded's host=, X-Forwarded-Host's
     * first and authority that holds an authority; one without a port
     * has the scheme's default port when it is the request's own or the
     * scheme came from a proxy. */
    const char *forwarded;      size_t forwarded_len;
    const char *forwarded_proto; size_t forwarded_proto_len;
    const char *forwarded_host; size_t forwarded_host_len;
    const char *authority;      size_t authority_len;
    /* When none does: the server's own name and the port the request
     * came in on. server_address_len may be SP_ENTRY_TO_NUL: the name
     * up to its NUL, measured only when it is used. */
    const char *server_address; size_t server_address_len; /* host, no
                                       port; "[::1]" is written "::1" */
    int64_t     server_port;                    /* 0: left out */
    const char *client_address; size_t client_address_len;
    const char *peer_address;   size_t peer_address_len;
    const char *protocol_version; size_t protocol_version_len; /* "1.1" */
    const char *user_agent; size_t user_agent_len;
    int64_t     status;                         /* 0: left out */
    uint32_t    pid;
    uint64_t    end_ns;                         /* 0: now */
    sp_entry_cache *cache;  /* the connection's; NULL: none */
} sp_entry_http;

/*
 * Writes the span record of a recorded entry into ring: name
 * "{method} {route}" or "{method}", kind SERVER, status ERROR for 5xx,
 * SPEC 2's attributes and splunk.snapshot.profiling=true when profiled.
 * A method not in p->known_methods is written "_OTHER", with the method
 * in http.request.method_original, and "HTTP" in the name. SP_OK;
 * SP_ERR_NOT_FOUND for a span that is not recorded (nothing written);
 * SP_ERR_NOMEM when the ring had no room (counted there).
 */
SP_API sp_status sp_entry_finish(const sp_entry_policy *p, const sp_entry *e,
                                 const sp_entry_http *h, sp_ring *ring);

#endif
