#include "sp_otlp_client.h"
#include "sp_absl.h"
#include "sp_clock.h"
#include "sp_config.h"
#include "sp_kvlist.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

struct sp_otlp_metadata {
    size_t n;
    char **keys;
    char **values;
};

#define SP_OTLP_SPARE_QUEUES 4

struct sp_otlp_client {
    unsigned               refs;
    sp_endpoint            endpoint;
    char                   url[SP_ENDPOINT_HOST_MAX + 16];
    uint64_t               timeout_ms;
    grpc_channel          *channel;
    grpc_metadata         *md;
    size_t                 md_count;
    /*
     * Completion queues of finished calls, for the next ones: creating,
     * shutting down and destroying one per call cost about 5 % of an
     * export's instructions (bench/exporter/export_call.sh). A queue is
     * kept only once the call's one batch came out of it, so it is empty.
     * As many as exports run at once (one per signal's sender), at most.
     */
    pthread_mutex_t        cq_lock;
    grpc_completion_queue *cq_spare[SP_OTLP_SPARE_QUEUES];
    size_t                 cq_spares;
    /* Under cq_lock too: the calls in flight, for sp_otlp_client_cancel,
     * and whether it was called. */
    struct sp_live_call   *calls;
    bool                   cancelled;
};

/* A call in flight, on its caller's stack. */
typedef struct sp_live_call {
    grpc_call           *call;
    struct sp_live_call *next;
} sp_live_call;

static const char *const sp_status_names[] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"
};

static void
sp_set_err(char *err, size_t size, const char *fmt, const char *arg)
{
    if (err != NULL && size > 0) {
        snprintf(err, size, fmt, arg);
    }
}

/* ---- endpoints */

void
sp_otlp_endpoint_insecure(sp_endpoint *e, bool insecure)
{
    if (!e->scheme) {
        e->tls = !insecure;
    }
}

bool
sp_otlp_endpoint_equal(const sp_endpoint *a, const sp_endpoint *b)
{
    return a->tls == b->tls && a->port == b->port
           && strcasecmp(a->host, b->host) == 0;
}

size_t
sp_otlp_endpoint_target(const sp_endpoint *e, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s:%u", e->host, (unsigned)e->port);

    return n < 0 ? 0 : (size_t)n;
}

/* ---- metadata */

static bool
sp_is_md_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
           || c == '_' || c == '.';
}

static bool
sp_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void
sp_otlp_metadata_destroy(sp_otlp_metadata *md)
{
    size_t i;

    if (md == NULL) {
        return;
    }
    for (i = 0; i < md->n; i++) {
        free(md->keys[i]);
        free(md->values[i]);
    }
    free(md->keys);
    free(md->values);
    free(md);
}

sp_status
sp_otlp_metadata_parse(const char *headers, sp_otlp_metadata **out,
                       char *err, size_t err_size)
{
    sp_kvlist        *list = NULL;
    sp_otlp_metadata *md;
    sp_status         rc;
    size_t            i, n;
    char             *k;
    const char       *v;

    rc = sp_kvlist_parse(headers, headers == NULL ? 0 : strlen(headers),
                         &list);
    if (rc == SP_ERR_INVALID) {
        sp_set_err(err, err_size, "%s",
                   "the headers are not a list \"key=value,...\" with "
                   "percent-encoded values (values not shown)");
        return rc;
    }
    if (rc != SP_OK) {
        return rc;
    }
    n = sp_kvlist_count(list);
    md = calloc(1, sizeof(*md));
    if (md == NULL) {
        sp_kvlist_destroy(list);
        return SP_ERR_NOMEM;
    }
    md->keys = calloc(n + 1, sizeof(char *));
    md->values = calloc(n + 1, sizeof(char *));
    if (md->keys == NULL || md->values == NULL) {
        rc = SP_ERR_NOMEM;
        goto fail;
    }
    for (i = 0; i < n; i++) {
        md->keys[i] = strdup(sp_kvlist_key(list, i));
        md->values[i] = strdup(sp_kvlist_value(list, i));
        md->n = i + 1;
        if (md->keys[i] == NULL || md->values[i] == NULL) {
            rc = SP_ERR_NOMEM;
            goto fail;
        }
        /* HTTP/2 sends header names in lowercase only. */
        for (k = md->keys[i]; *k != '\0'; k++) {
            if (*k >= 'A' && *k <= 'Z') {
                *k = (char)(*k - 'A' + 'a');
            }
            if (!sp_is_md_key_char(*k)) {
                sp_set_err(err, err_size,
                           "header key \"%s\" is not a valid gRPC metadata "
                           "key (allowed: 0-9 a-z _ . -)",
                           sp_kvlist_key(list, i));
                rc = SP_ERR_INVALID;
                goto fail;
            }
        }
        if (strncmp(md->keys[i], "grpc-", 5) == 0) {
            sp_set_err(err, err_size,
                       "header key \"%s\" is reserved for gRPC itself",
                       sp_kvlist_key(list, i));
            rc = SP_ERR_INVALID;
            goto fail;
        }
        if (sp_ends_with(md->keys[i], "-bin")) {
            continue;
        }
        for (v = md->values[i]; *v != '\0'; v++) {
            if ((unsigned char)*v < 0x20 || (unsigned char)*v > 0x7e) {
                sp_set_err(err, err_size,
                           "the value of header \"%s\" holds a byte gRPC "
                           "cannot send in text metadata (value not shown)",
                           sp_kvlist_key(list, i));
                rc = SP_ERR_INVALID;
                goto fail;
            }
        }
    }
    sp_kvlist_destroy(list);
    *out = md;
    return SP_OK;

fail:
    sp_kvlist_destroy(list);
    sp_otlp_metadata_destroy(md);
    return rc;
}

size_t
sp_otlp_metadata_count(const sp_otlp_metadata *md)
{
    return md == NULL ? 0 : md->n;
}

const char *
sp_otlp_metadata_key(const sp_otlp_metadata *md, size_t i)
{
    return md == NULL || i >= md->n ? NULL : md->keys[i];
}

const char *
sp_otlp_metadata_value(const sp_otlp_metadata *md, size_t i)
{
    return md == NULL || i >= md->n ? NULL : md->values[i];
}

/* ---- the library */

static sp_otlp_log_fn sp_log;
static void          *sp_log_ctx;

static void
sp_grpc_log(gpr_log_func_args *args)
{
    const char *severity = "debug";

    if (sp_log == NULL) {
        return;
    }
    if (args->severity == GPR_LOG_SEVERITY_ERROR) {
        severity = "error";
    } else if (args->severity == GPR_LOG_SEVERITY_INFO) {
        severity = "info";
    }
    sp_log(sp_log_ctx, severity, args->message);
}

void
sp_otlp_init(sp_otlp_log_fn log, void *ctx)
{
    sp_log = log;
    sp_log_ctx = ctx;
    gpr_set_log_function(sp_grpc_log);
    /* gRPC reads it once, in grpc_init. */
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", 0);
    sp_absl_no_deadlock_detection();
    grpc_init();
}

void
sp_otlp_shutdown(void)
{
    grpc_shutdown();
}

/* ---- clients */

/* The whole file as a NUL-terminated string for gRPC, which wants one. */
static sp_status
sp_read_pem(const char *path, char **out, char *err, size_t err_size)
{
    sp_status st = sp_config_pem_read(path, out);

    /*
     * gRPC would take anything and fail every handshake later with a
     * vague UNAVAILABLE: say now what is wrong with the file.
     */
    if (st == SP_ERR_IO && err != NULL && err_size > 0) {
        snprintf(err, err_size, "cannot read the certificate file %s: %s",
                 path, strerror(errno));
    } else if (st == SP_ERR_INVALID) {
        sp_set_err(err, err_size, "the certificate file %s holds no PEM "
                   "certificate", path);
    }
    return st;
}

static void
sp_drain_and_destroy(grpc_completion_queue *cq)
{
    grpc_event ev;

    grpc_completion_queue_shutdown(cq);
    do {
        ev = grpc_completion_queue_pluck(cq, NULL,
                                         gpr_inf_future(GPR_CLOCK_REALTIME),
                                         NULL);
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(cq);
}

/* A spare completion queue for a call, else a new one. */
static grpc_completion_queue *
sp_queue_take(sp_otlp_client *c)
{
    grpc_completion_queue *cq = NULL;

    pthread_mutex_lock(&c->cq_lock);
    if (c->cq_spares > 0) {
        cq = c->cq_spare[--c->cq_spares];
    }
    pthread_mutex_unlock(&c->cq_lock);
    return cq != NULL ? cq : grpc_completion_queue_create_for_pluck(NULL);
}

/* Back from a call that left nothing in it: kept, or destroyed when
 * enough are. */
static void
sp_queue_give(sp_otlp_client *c, grpc_completion_queue *cq)
{
    pthread_mutex_lock(&c->cq_lock);
    if (c->cq_spares < SP_OTLP_SPARE_QUEUES) {
        c->cq_spare[c->cq_spares++] = cq;
        cq = NULL;
    }
    pthread_mutex_unlock(&c->cq_lock);
    if (cq != NULL) {
        sp_drain_and_destroy(cq);
    }
}

/*
 * Registers a call as in flight; false when the client was cancelled
 * (then the call is cancelled before it starts).
 */
static bool
sp_call_enter(sp_otlp_client *c, sp_live_call *lc, grpc_call *call)
{
    bool ok;

    pthread_mutex_lock(&c->cq_lock);
    ok = !c->cancelled;
    if (ok) {
        lc->call = call;
        lc->next = c->calls;
        c->calls = lc;
    }
    pthread_mutex_unlock(&c->cq_lock);
    return ok;
}

static void
sp_call_leave(sp_otlp_client *c, sp_live_call *lc)
{
    sp_live_call **pp;

    pthread_mutex_lock(&c->cq_lock);
    for (pp = &c->calls; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == lc) {
            *pp = lc->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->cq_lock);
}

void
sp_otlp_client_cancel(sp_otlp_client *c)
{
    sp_live_call *lc;

    pthread_mutex_lock(&c->cq_lock);
    c->cancelled = true;
    /* Each call is still referenced: it leaves the list before its
     * unref, under this lock. */
    for (lc = c->calls; lc != NULL; lc = lc->next) {
        grpc_call_cancel_with_status(lc->call, GRPC_STATUS_CANCELLED,
                                     SP_OTLP_CANCELLED_TEXT, NULL);
    }
    pthread_mutex_unlock(&c->cq_lock);
}

static void
sp_client_free(sp_otlp_client *c)
{
    size_t i;

    while (c->cq_spares > 0) {
        sp_drain_and_destroy(c->cq_spare[--c->cq_spares]);
    }
    pthread_mutex_destroy(&c->cq_lock);
    if (c->channel != NULL) {
        grpc_channel_destroy(c->channel);
    }
    for (i = 0; i < c->md_count; i++) {
        grpc_slice_unref(c->md[i].key);
        grpc_slice_unref(c->md[i].value);
    }
    free(c->md);
    free(c);
}

sp_status
sp_otlp_client_create(const sp_otlp_client_config *cfg, sp_otlp_client **out,
                      char *err, size_t err_size)
{
    sp_otlp_client           *c;
    sp_otlp_metadata         *md = NULL;
    grpc_channel_credentials *creds;
    grpc_channel_args         args;
    grpc_arg                  arg[4];
    char                      target[SP_ENDPOINT_HOST_MAX + 8];
    char                     *pem = NULL;
    const char               *endpoint;
    uint64_t                  reconnect;
    sp_status                 rc;
    size_t                    i;

    if (err != NULL && err_size > 0) {
        err[0] = '\0';
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return SP_ERR_NOMEM;
    }
    c->refs = 1;
    endpoint = cfg->endpoint != NULL ? cfg->endpoint
                                     : SP_OTLP_DEFAULT_ENDPOINT;
    rc = sp_endpoint_parse(endpoint, strlen(endpoint), &c->endpoint);
    if (rc != SP_OK) {
        sp_set_err(err, err_size, "the endpoint \"%s\" is not "
                   "\"http://host:port\", \"https://host:port\" or "
                   "\"host:port\"", endpoint);
        free(c);
        return rc;
    }
    sp_otlp_endpoint_insecure(&c->endpoint, cfg->insecure);
    snprintf(c->url, sizeof(c->url), "%s://%s:%u",
             c->endpoint.tls ? "https" : "http", c->endpoint.host,
             (unsigned)c->endpoint.port);
    c->timeout_ms = cfg->timeout_ms != 0 ? cfg->timeout_ms
                                         : SP_OTLP_DEFAULT_TIMEOUT_MS;

    rc = sp_otlp_metadata_parse(cfg->headers, &md, err, err_size);
    if (rc != SP_OK) {
        free(c);
        return rc;
    }
    c->md = calloc(md->n + 1, sizeof(grpc_metadata));
    if (c->md == NULL) {
        sp_otlp_metadata_destroy(md);
        free(c);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i < md->n; i++) {
        c->md[i].key = grpc_slice_from_copied_string(md->keys[i]);
        c->md[i].value = grpc_slice_from_copied_string(md->values[i]);
        c->md_count = i + 1;
    }
    sp_otlp_metadata_destroy(md);
    /* Every failure from here on goes through sp_client_free. */
    pthread_mutex_init(&c->cq_lock, NULL);

    if (c->endpoint.tls && cfg->certificate != NULL
        && cfg->certificate[0] != '\0')
    {
        rc = sp_read_pem(cfg->certificate, &pem, err, err_size);
        if (rc != SP_OK) {
            sp_client_free(c);
            return rc;
        }
    }
    /* NULL roots: gRPC's default store, the system's CA bundle. */
    creds = c->endpoint.tls ? grpc_ssl_credentials_create(pem, NULL, NULL,
                                                          NULL)
                            : grpc_insecure_credentials_create();
    free(pem);
    if (creds == NULL) {
        sp_set_err(err, err_size, "%s", "gRPC refused the credentials");
        sp_client_free(c);
        return SP_ERR_INVALID;
    }

    reconnect = cfg->reconnect_ms != 0 ? cfg->reconnect_ms
                                       : SP_OTLP_DEFAULT_RECONNECT_MS;
    if (reconnect > INT32_MAX) {
        reconnect = INT32_MAX;
    }
    memset(arg, 0, sizeof(arg));
    arg[0].type = GRPC_ARG_INTEGER;
    arg[0].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    arg[0].value.integer = (int)reconnect;
    arg[1].type = GRPC_ARG_INTEGER;
    arg[1].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    arg[1].value.integer = (int)reconnect;
    arg[2].type = GRPC_ARG_STRING;
    arg[2].key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING;
    arg[2].value.string = (char *)"spanprof/" SP_VERSION;
    /* Export requests of profiling logs can be large. */
    arg[3].type = GRPC_ARG_INTEGER;
    arg[3].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    arg[3].value.integer = -1;
    args.num_args = 4;
    args.args = arg;

    sp_otlp_endpoint_target(&c->endpoint, target, sizeof(target));
    c->channel = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    if (c->channel == NULL) {
        sp_set_err(err, err_size, "gRPC cannot create a channel to %s",
                   c->url);
        sp_client_free(c);
        return SP_ERR_INVALID;
    }
    *out = c;
    return SP_OK;
}

sp_otlp_client *
sp_otlp_client_share(sp_otlp_client *c)
{
    c->refs++;
    return c;
}

void
sp_otlp_client_destroy(sp_otlp_client *c)
{
    if (c == NULL || --c->refs > 0) {
        return;
    }
    sp_client_free(c);
}

const sp_endpoint *
sp_otlp_client_endpoint(const sp_otlp_client *c)
{
    return &c->endpoint;
}

/* ---- exports */

bool
sp_otlp_status_retryable(int code)
{
    return code == SP_GRPC_UNAVAILABLE || code == SP_GRPC_RESOURCE_EXHAUSTED
           || code == SP_GRPC_DEADLINE_EXCEEDED;
}

const char *
sp_otlp_status_name(int code)
{
    if (code < 0
        || (size_t)code >= sizeof(sp_status_names) / sizeof(sp_status_names[0]))
    {
        return "UNKNOWN_STATUS";
    }
    return sp_status_names[code];
}

static void
sp_copy_text(char *dst, size_t size, const char *src, size_t len)
{
    if (len >= size) {
        len = size - 1;
    }
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static bool
sp_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    unsigned shift;

    *v = 0;
    for (shift = 0; shift < 64; shift += 7) {
        if (*p == end) {
            return false;
        }
        *v |= (uint64_t)(**p & 0x7f) << shift;
        if ((*(*p)++ & 0x80) == 0) {
            return true;
        }
    }
    return false;
}

/* Moves *p past one field of wire type wt; false if it does not fit. */
static bool
sp_skip_field(const uint8_t **p, const uint8_t *end, unsigned wt)
{
    uint64_t v;

    switch (wt) {
    case 0:
        return sp_read_varint(p, end, &v);
    case 1:
        v = 8;
        break;
    case 2:
        if (!sp_read_varint(p, end, &v)) {
            return false;
        }
        break;
    case 5:
        v = 4;
        break;
    default:
        return false;
    }
    if (v > (uint64_t)(end - *p)) {
        return false;
    }
    *p += v;
    return true;
}

static bool
sp_parse_partial(const uint8_t *p, const uint8_t *end, int64_t *rejected,
                 char *msg, size_t msg_size)
{
    uint64_t key, v;

    while (p < end) {
        if (!sp_read_varint(&p, end, &key)) {
            return false;
        }
        if (key == ((1 << 3) | 0)) {
            if (!sp_read_varint(&p, end, &v)) {
                return false;
            }
            *rejected = (int64_t)v;
        } else if (key == ((2 << 3) | 2)) {
            if (!sp_read_varint(&p, end, &v) || v > (uint64_t)(end - p)) {
                return false;
            }
            if (msg_size > 0) {
                sp_copy_text(msg, msg_size, (const char *)p, (size_t)v);
            }
            p += v;
        } else if (!sp_skip_field(&p, end, (unsigned)(key & 7))) {
            return false;
        }
    }
    return true;
}

sp_status
sp_otlp_parse_partial_success(const void *bytes, size_t len,
                              int64_t *rejected, char *msg, size_t msg_size)
{
    const uint8_t *p = bytes, *end = p + len;
    uint64_t       key, v;
    bool           ok = true;

    *rejected = 0;
    if (msg_size > 0) {
        msg[0] = '\0';
    }
    while (ok && p < end) {
        if (!sp_read_varint(&p, end, &key)) {
            ok = false;
        } else if (key == ((1 << 3) | 2)) {
            ok = sp_read_varint(&p, end, &v) && v <= (uint64_t)(end - p)
                 && sp_parse_partial(p, p + v, rejected, msg, msg_size);
            p += ok ? v : 0;
        } else {
            ok = sp_skip_field(&p, end, (unsigned)(key & 7));
        }
    }
    if (!ok) {
        *rejected = 0;
        if (msg_size > 0) {
            msg[0] = '\0';
        }
        return SP_ERR_INVALID;
    }
    return SP_OK;
}

static void
sp_result_init(sp_otlp_result *r, const char *method)
{
    memset(r, 0, sizeof(*r));
    r->attempts = 1;
    sp_copy_text(r->method, sizeof(r->method), method,
                 method == NULL ? 0 : strlen(method));
}

static void
sp_result_set(sp_otlp_result *r, int code, const char *msg, size_t len)
{
    r->code = code;
    r->retryable = sp_otlp_status_retryable(code);
    sp_copy_text(r->message, sizeof(r->message), msg, len);
}

static void
sp_result_text(sp_otlp_result *r, int code, const char *msg)
{
    sp_result_set(r, code, msg, strlen(msg));
}

static void
sp_read_response(grpc_byte_buffer *resp, sp_otlp_result *r)
{
    grpc_byte_buffer_reader reader;
    grpc_slice              all;

    r->response_len = grpc_byte_buffer_length(resp);
    if (r->response_len == 0 || !grpc_byte_buffer_reader_init(&reader, resp))
    {
        return;
    }
    all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    /* A malformed answer still counts as delivered: the status was OK. */
    (void)sp_otlp_parse_partial_success(GRPC_SLICE_START_PTR(all),
                                        GRPC_SLICE_LENGTH(all), &r->rejected,
                                        r->partial_message,
                                        sizeof(r->partial_message));
    grpc_slice_unref(all);
}

/* A slice's part of its request, dropped when gRPC is done with it. */
static void
sp_slice_done(void *req)
{
    sp_otlp_request_unref(req);
}

/*
 * A byte buffer over the request's pieces, not a copy: each slice holds a
 * reference to the request, released whenever gRPC releases the slice
 * (possibly after the call returned, on one of its threads). NULL when
 * out of memory.
 */
static grpc_byte_buffer *
sp_request_buffer(sp_otlp_request *req)
{
    grpc_slice        some[8], *slices = some;
    grpc_byte_buffer *bb;
    const uint8_t    *p;
    size_t            i, n = sp_otlp_request_count(req), len;

    if (n > sizeof(some) / sizeof(some[0])) {
        slices = malloc(n * sizeof(*slices));
        if (slices == NULL) {
            return NULL;
        }
    }
    for (i = 0; i < n; i++) {
        p = sp_otlp_request_piece(req, i, &len);
        slices[i] = grpc_slice_new_with_user_data((void *)p, len,
                                                  sp_slice_done,
                                                  sp_otlp_request_ref(req));
    }
    bb = grpc_raw_byte_buffer_create(slices, n);
    for (i = 0; i < n; i++) {
        grpc_slice_unref(slices[i]);    /* bb holds its own */
    }
    if (slices != some) {
        free(slices);
    }
    return bb;
}

sp_status
sp_otlp_export_timeout(sp_otlp_client *c, const char *method,
                       const void *bytes, size_t len, uint64_t timeout_ms,
                       sp_otlp_result *result)
{
    sp_otlp_request *req = NULL;
    sp_status        rc;

    if (bytes == NULL && len > 0) {
        sp_result_init(result, method);
        sp_result_text(result, SP_GRPC_INVALID_ARGUMENT,
                       "no method or no request bytes");
        return SP_ERR_IO;
    }
    /* The caller's bytes may go once this returns, gRPC's use may not. */
    if (sp_otlp_request_create(&req) != SP_OK
        || sp_otlp_request_copy(req, bytes, len) != SP_OK)
    {
        sp_otlp_request_unref(req);
        sp_result_init(result, method);
        sp_result_text(result, SP_GRPC_INTERNAL,
                       "no memory for the request");
        return SP_ERR_IO;
    }
    rc = sp_otlp_export_request(c, method, req, timeout_ms, result);
    sp_otlp_request_unref(req);
    return rc;
}

sp_status
sp_otlp_export_request(sp_otlp_client *c, const char *method,
                       sp_otlp_request *req, uint64_t timeout_ms,
                       sp_otlp_result *result)
{
    grpc_completion_queue *cq;
    grpc_call             *call;
    grpc_slice             method_slice, details;
    grpc_byte_buffer      *request, *response = NULL;
    grpc_metadata_array    initial_md, trailing_md;
    grpc_status_code       status = GRPC_STATUS_UNKNOWN;
    const char            *error_string = NULL;
    grpc_op                ops[6];
    grpc_call_error        ce;
    grpc_event             ev = { .type = GRPC_OP_COMPLETE };
    gpr_timespec           deadline;
    uint64_t               start = sp_monotonic_ms();
    char                   text[SP_OTLP_MESSAGE_SIZE];
    void                  *tag = &ops;
    sp_live_call           live = { NULL, NULL };

    sp_result_init(result, method);
    if (method == NULL || method[0] != '/' || req == NULL) {
        sp_result_text(result, SP_GRPC_INVALID_ARGUMENT,
                       "no method or no request bytes");
        return SP_ERR_IO;
    }
    if (timeout_ms == 0) {
        timeout_ms = c->timeout_ms;
    }
    cq = sp_queue_take(c);
    deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                            gpr_time_from_millis((int64_t)timeout_ms,
                                                 GPR_TIMESPAN));
    method_slice = grpc_slice_from_static_string(method);
    call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                    cq, method_slice, NULL, deadline, NULL);
    if (call == NULL) {
        sp_queue_give(c, cq);
        sp_result_text(result, SP_GRPC_INTERNAL,
                       "gRPC cannot create the call");
        return SP_ERR_IO;
    }
    request = sp_request_buffer(req);
    if (request == NULL) {
        grpc_call_unref(call);
        sp_queue_give(c, cq);
        sp_result_text(result, SP_GRPC_INTERNAL,
                       "no memory for the request");
        return SP_ERR_IO;
    }
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    details = grpc_empty_slice();

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->md_count;
    ops[0].data.send_initial_metadata.metadata = c->md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = request;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &response;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;

    if (!sp_call_enter(c, &live, call)) {
        /* Its batch then ends at once, with the status set here. */
        grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED,
                                     SP_OTLP_CANCELLED_TEXT, NULL);
    }
    ce = grpc_call_start_batch(call, ops, 6, tag, NULL);
    if (ce != GRPC_CALL_OK) {
        snprintf(text, sizeof(text), "gRPC refused the call (error %d)",
                 (int)ce);
        sp_result_text(result, SP_GRPC_INTERNAL, text);
    } else {
        /* The call's deadline bounds this wait. */
        ev = grpc_completion_queue_pluck(cq, tag,
                                         gpr_inf_future(GPR_CLOCK_REALTIME),
                                         NULL);
        if (ev.type != GRPC_OP_COMPLETE) {
            sp_result_text(result, SP_GRPC_INTERNAL, "gRPC lost the call");
        } else if (GRPC_SLICE_LENGTH(details) > 0) {
            sp_result_set(result, (int)status,
                          (const char *)GRPC_SLICE_START_PTR(details),
                          GRPC_SLICE_LENGTH(details));
        } else {
            sp_result_text(result, (int)status,
                           error_string != NULL ? error_string : "");
        }
        if (ev.type == GRPC_OP_COMPLETE && response != NULL) {
            sp_read_response(response, result);
        }
    }

    sp_call_leave(c, &live);
    grpc_call_unref(call);
    /* Refused, or its batch plucked: nothing of this call left in it. */
    if (ev.type == GRPC_OP_COMPLETE) {
        sp_queue_give(c, cq);
    } else {
        sp_drain_and_destroy(cq);
    }
    grpc_byte_buffer_destroy(request);
    if (response != NULL) {
        grpc_byte_buffer_destroy(response);
    }
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    result->elapsed_ms = sp_monotonic_ms() - start;
    return result->code == SP_GRPC_OK ? SP_OK : SP_ERR_IO;
}

sp_status
sp_otlp_export(sp_otlp_client *c, const char *method, const void *bytes,
               size_t len, sp_otlp_result *result)
{
    return sp_otlp_export_timeout(c, method, bytes, len, 0, result);
}

/* ---- retries */

uint64_t
sp_otlp_backoff_ceiling(const sp_otlp_retry_policy *p, uint32_t retry)
{
    uint64_t base = p->base_ms != 0 ? p->base_ms : SP_OTLP_BACKOFF_BASE_MS;
    uint64_t max = p->max_ms != 0 ? p->max_ms : SP_OTLP_BACKOFF_MAX_MS;
    uint32_t i;

    for (i = 0; i < retry && base < max; i++) {
        if (base > max / 2) {
            return max;
        }
        base *= 2;
    }
    return base < max ? base : max;
}

uint64_t
sp_otlp_backoff_delay(const sp_otlp_retry_policy *p, uint32_t retry,
                      uint64_t r)
{
    return r % (sp_otlp_backoff_ceiling(p, retry) + 1);
}

/* splitmix64: the default jitter, seeded from the kernel per export. */
static uint64_t
sp_default_random(void *ctx)
{
    uint64_t *s = ctx, z;

    z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool
sp_default_sleep(void *ctx, uint64_t ms)
{
    struct timespec ts;

    (void)ctx;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        /* a signal the process handles: sleep the rest */
    }
    return true;
}

sp_status
sp_otlp_export_retry(sp_otlp_client *c, const char *method,
                     const void *bytes, size_t len,
                     const sp_otlp_retry_policy *policy,
                     sp_otlp_result *result)
{
    uint64_t (*draw)(void *) = policy->random;
    void      *draw_ctx = policy->random_ctx;
    bool     (*nap)(void *, uint64_t) = policy->sleep;
    uint64_t   seed = 0, start, used, left, delay, timeout;
    uint32_t   attempt;
    sp_status  rc;
    bool       retry;

    if (policy->max_attempts == 0 && policy->max_elapsed_ms == 0) {
        sp_result_init(result, method);
        sp_result_text(result, SP_GRPC_INVALID_ARGUMENT,
                       "the retry policy has no bound");
        return SP_ERR_INVALID;
    }
    if (draw == NULL) {
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK)
            != (ssize_t)sizeof(seed))
        {
            seed = sp_monotonic_ms() ^ (uint64_t)(uintptr_t)&seed;
        }
        draw = sp_default_random;
        draw_ctx = &seed;
    }
    if (nap == NULL) {
        nap = sp_default_sleep;
    }
    start = sp_monotonic_ms();
    for (attempt = 1;; attempt++) {
        timeout = c->timeout_ms;
        if (policy->max_elapsed_ms != 0) {
            used = sp_monotonic_ms() - start;
            left = used < policy->max_elapsed_ms
                   ? policy->max_elapsed_ms - used : 1;
            if (left < timeout) {
                timeout = left;
            }
        }
        rc = sp_otlp_export_timeout(c, method, bytes, len, timeout, result);

        delay = 0;
        retry = rc != SP_OK && result->retryable
                && (policy->max_attempts == 0
                    || attempt < policy->max_attempts);
        if (retry) {
            delay = sp_otlp_backoff_delay(policy, attempt - 1,
                                          draw(draw_ctx));
            /* A retry needs time left after its wait, not only before. */
            if (policy->max_elapsed_ms != 0
                && sp_monotonic_ms() - start + delay >= policy->max_elapsed_ms)
            {
                retry = false;
                delay = 0;
            }
        }
        result->attempts = attempt;
        result->elapsed_ms = sp_monotonic_ms() - start;
        if (policy->on_attempt != NULL) {
            policy->on_attempt(policy->on_attempt_ctx, result, retry, delay);
        }
        if (!retry) {
            return rc;
        }
        if (!nap(policy->sleep_ctx, delay)) {
            result->elapsed_ms = sp_monotonic_ms() - start;
            return rc;
        }
    }
}

/* ---- messages */

/* Appends s quoted, with '"', '\\' and unprintable bytes escaped. */
static size_t
sp_quote(char *buf, size_t size, size_t pos, const char *s)
{
    const unsigned char *p;
    char                 esc[5];
    size_t               n;

    if (pos + 1 < size) {
        buf[pos] = '"';
    }
    pos++;
    for (p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            snprintf(esc, sizeof(esc), "\\%c", *p);
        } else if (*p < 0x20 || *p > 0x7e) {
            snprintf(esc, sizeof(esc), "\\x%02x", *p);
        } else {
            esc[0] = (char)*p;
            esc[1] = '\0';
        }
        for (n = 0; esc[n] != '\0'; n++, pos++) {
            if (pos + 1 < size) {
                buf[pos] = esc[n];
            }
        }
    }
    if (pos + 1 < size) {
        buf[pos] = '"';
    }
    pos++;
    if (size > 0) {
        buf[pos < size ? pos : size - 1] = '\0';
    }
    return pos;
}

static size_t
sp_append(char *buf, size_t size, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t
sp_append(char *buf, size_t size, size_t pos, const char *fmt, ...)
{
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(pos < size ? buf + pos : NULL, pos < size ? size - pos : 0,
                  fmt, ap);
    va_end(ap);
    return n < 0 ? pos : pos + (size_t)n;
}

static const char *
sp_signal_of(const char *method)
{
    if (strcmp(method, SP_OTLP_LOGS_METHOD) == 0) {
        return "logs";
    }
    if (strcmp(method, SP_OTLP_TRACES_METHOD) == 0) {
        return "traces";
    }
    return NULL;
}

size_t
sp_otlp_result_format(const sp_otlp_client *c, const sp_otlp_result *r,
                      char *buf, size_t size)
{
    const char *signal = sp_signal_of(r->method);
    size_t      pos = 0;

    if (size > 0) {
        buf[0] = '\0';
    }
    if (signal != NULL) {
        pos = sp_append(buf, size, pos, "OTLP export of %s to %s ", signal,
                        c != NULL ? c->url : "?");
    } else {
        pos = sp_append(buf, size, pos, "OTLP export to %s%s ",
                        c != NULL ? c->url : "?", r->method);
    }
    if (r->code == SP_GRPC_OK) {
        pos = sp_append(buf, size, pos, "succeeded");
    } else {
        pos = sp_append(buf, size, pos, "failed: %s (%d) ",
                        sp_otlp_status_name(r->code), r->code);
        pos = sp_quote(buf, size, pos, r->message);
    }
    pos = sp_append(buf, size, pos, " after %u attempt%s in %llu ms",
                    (unsigned)r->attempts, r->attempts == 1 ? "" : "s",
                    (unsigned long long)r->elapsed_ms);
    if (r->code != SP_GRPC_OK) {
        pos = sp_append(buf, size, pos, r->retryable ? ", retryable"
                                                     : ", not retryable");
    } else if (r->rejected != 0 || r->partial_message[0] != '\0') {
        pos = sp_append(buf, size, pos, ", partial success: %lld rejected ",
                        (long long)r->rejected);
        pos = sp_quote(buf, size, pos, r->partial_message);
    }
    return pos;
}
