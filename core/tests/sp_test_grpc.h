/*
 * A scripted gRPC receiver in the test's own process, on gRPC C core's
 * server API: it answers calls one after another with the codes it was
 * given and keeps the request bytes of each, so a test compares what
 * arrived with what was sent. sp_otlp_init must have been called (gRPC
 * is initialised). Include after sp_test.h.
 */
#ifndef SP_TEST_GRPC_H
#define SP_TEST_GRPC_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#define TEST_GRPC_CALLS 8
/* A script entry: hold the call unanswered, its message unread, until the
 * client gives up on it (its deadline). */
#define TEST_GRPC_HOLD (-1)

typedef struct test_grpc {
    grpc_server           *server;
    grpc_completion_queue *cq;          /* the thread's: calls */
    grpc_completion_queue *done_cq;     /* the shutdown's */
    int                    port;
    char                   endpoint[64];
    pthread_t              thread;
    int                    script[TEST_GRPC_CALLS];
    size_t                 calls;       /* in the script */
    /* what came, per call: filled by the thread, read after the join */
    uint8_t               *got[TEST_GRPC_CALLS];
    size_t                 got_len[TEST_GRPC_CALLS];
    size_t                 answered;
    int                    cancelled[TEST_GRPC_CALLS];
} test_grpc;

static grpc_event
test_grpc_next(test_grpc *s)
{
    return grpc_completion_queue_next(s->cq,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
}

static void
test_grpc_batch(test_grpc *s, grpc_call *call, grpc_op *ops, size_t n)
{
    grpc_event ev;

    if (grpc_call_start_batch(call, ops, n, ops, NULL) != GRPC_CALL_OK) {
        return;
    }
    ev = test_grpc_next(s);
    (void)ev;   /* a failed op (the client went) still completes */
}

static void
test_grpc_keep(test_grpc *s, size_t i, grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    grpc_slice              all;

    if (bb == NULL || !grpc_byte_buffer_reader_init(&r, bb)) {
        return;
    }
    all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    s->got_len[i] = GRPC_SLICE_LENGTH(all);
    s->got[i] = malloc(s->got_len[i] + 1);
    memcpy(s->got[i], GRPC_SLICE_START_PTR(all), s->got_len[i]);
    grpc_slice_unref(all);
}

/* One call: its message kept, then the scripted answer. */
static void
test_grpc_answer(test_grpc *s, grpc_call *call, size_t i)
{
    grpc_byte_buffer *msg = NULL, *reply;
    grpc_slice        empty = grpc_empty_slice();
    grpc_op           ops[3];
    int               cancelled = 0;

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (s->script[i] == TEST_GRPC_HOLD) {
        ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[1].data.recv_close_on_server.cancelled = &cancelled;
        test_grpc_batch(s, call, ops, 2);
        s->cancelled[i] = cancelled;
        return;
    }
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &msg;
    test_grpc_batch(s, call, ops, 2);
    test_grpc_keep(s, i, msg);
    if (msg != NULL) {
        grpc_byte_buffer_destroy(msg);
    }

    reply = grpc_raw_byte_buffer_create(&empty, 1);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[0].data.send_status_from_server.status =
        (grpc_status_code)s->script[i];
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &cancelled;
    ops[2].op = GRPC_OP_SEND_MESSAGE;
    ops[2].data.send_message.send_message = reply;
    test_grpc_batch(s, call, ops, s->script[i] == GRPC_STATUS_OK ? 3 : 2);
    grpc_byte_buffer_destroy(reply);
    s->cancelled[i] = cancelled;
}

static void *
test_grpc_main(void *arg)
{
    test_grpc        *s = arg;
    grpc_call        *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_event        ev;
    size_t            i;

    for (i = 0; i < s->calls; i++) {
        call = NULL;
        grpc_call_details_init(&details);
        grpc_metadata_array_init(&md);
        if (grpc_server_request_call(s->server, &call, &details, &md, s->cq,
                                     s->cq, s) != GRPC_CALL_OK)
        {
            break;
        }
        ev = test_grpc_next(s);
        if (ev.type == GRPC_OP_COMPLETE && ev.success && call != NULL) {
            test_grpc_answer(s, call, i);
            s->answered++;
        }
        if (call != NULL) {
            grpc_call_unref(call);
        }
        grpc_call_details_destroy(&details);
        grpc_metadata_array_destroy(&md);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
            break;
        }
    }
    return NULL;
}

/* Listens on a free port of 127.0.0.1 and answers codes[0..n) in turn
 * (a grpc_status_code, or TEST_GRPC_HOLD). */
static void
test_grpc_start(test_grpc *s, const int *codes, size_t n)
{
    grpc_server_credentials *creds;

    memset(s, 0, sizeof(*s));
    assert_true(n <= TEST_GRPC_CALLS);
    memcpy(s->script, codes, n * sizeof(*codes));
    s->calls = n;
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->done_cq = grpc_completion_queue_create_for_next(NULL);
    s->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    grpc_server_register_completion_queue(s->server, s->done_cq, NULL);
    creds = grpc_insecure_server_credentials_create();
    s->port = grpc_server_add_http2_port(s->server, "127.0.0.1:0", creds);
    grpc_server_credentials_release(creds);
    assert_true(s->port > 0);
    grpc_server_start(s->server);
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d",
             s->port);
    assert_int_equal(pthread_create(&s->thread, NULL, test_grpc_main, s), 0);
}

/* Waits until the script was played (or the server is shut down), then
 * shuts it down. The kept bytes stay readable until test_grpc_free. */
static void
test_grpc_drain(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL).type != GRPC_QUEUE_SHUTDOWN)
    {
    }
    grpc_completion_queue_destroy(cq);
}

static void
test_grpc_stop(test_grpc *s)
{
    int tag;

    grpc_server_shutdown_and_notify(s->server, s->done_cq, &tag);
    grpc_server_cancel_all_calls(s->server);
    pthread_join(s->thread, NULL);
    while (grpc_completion_queue_next(s->done_cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL).tag != &tag)
    {
    }
    grpc_server_destroy(s->server);
    test_grpc_drain(s->cq);
    test_grpc_drain(s->done_cq);
}

static void
test_grpc_free(test_grpc *s)
{
    size_t i;

    for (i = 0; i < TEST_GRPC_CALLS; i++) {
        free(s->got[i]);
    }
}

#endif
