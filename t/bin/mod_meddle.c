/*
 * A third-party module for t/httpd_meddling.t: what some modules do to a
 * request's fields in place, after spanprof's post_read_request, asked
 * for by a request header:
 *
 *   X-Meddle-Unescape-Query   the query (r->args, the very string of
 *                             r->parsed_uri.query) unescaped in place,
 *                             shorter than the client sent it;
 *   X-Meddle-Peer: address    the connection's client_ip set to the
 *                             address, in a buffer of the connection's
 *                             that every such request writes again: the
 *                             same pointer, other bytes;
 *   X-Meddle-Log-Twice        the request logged once more, by the
 *                             module itself (ap_run_log_transaction in
 *                             its fixups), before httpd logs it.
 *
 * Built by the test with apxs; not part of spanprof.
 */

#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "http_request.h"

#include "apr_strings.h"

#define MEDDLE_PEER_SIZE 64

module AP_MODULE_DECLARE_DATA meddle_module;

static int
meddle_post_read_request(request_rec *r)
{
    conn_rec   *c = r->connection;
    const char *peer;
    char       *buf;

    if (r->args != NULL
        && apr_table_get(r->headers_in, "X-Meddle-Unescape-Query") != NULL)
    {
        (void) ap_unescape_url(r->args);
    }
    peer = apr_table_get(r->headers_in, "X-Meddle-Peer");
    if (peer != NULL && strlen(peer) < MEDDLE_PEER_SIZE) {
        buf = ap_get_module_config(c->conn_config, &meddle_module);
        if (buf == NULL) {
            buf = apr_palloc(c->pool, MEDDLE_PEER_SIZE);
            ap_set_module_config(c->conn_config, &meddle_module, buf);
        }
        apr_cpystrn(buf, peer, MEDDLE_PEER_SIZE);
        c->client_ip = buf;
    }
    return DECLINED;
}

static int
meddle_fixups(request_rec *r)
{
    if (r->main == NULL && r->prev == NULL
        && apr_table_get(r->headers_in, "X-Meddle-Log-Twice") != NULL)
    {
        (void) ap_run_log_transaction(r);
    }
    return DECLINED;
}

static void
meddle_register_hooks(apr_pool_t *p)
{
    ap_hook_post_read_request(meddle_post_read_request, NULL, NULL,
                              APR_HOOK_MIDDLE);
    ap_hook_fixups(meddle_fixups, NULL, NULL, APR_HOOK_LAST);
}

module AP_MODULE_DECLARE_DATA meddle_module = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    meddle_register_hooks,
    AP_MODULE_FLAG_NONE
};
