/*
 * A serialized OTLP request held as a sequence of byte pieces, for the
 * exporter's hand-over from builder (sp_otlp.h) to queue to gRPC client
 * (sp_otlp_client.h) without copying the request on the way.
 *
 * EXPORTER PROCESS ONLY (heap).
 *
 * The request's bytes are its pieces concatenated in order. A piece is
 * either a copy of bytes given (small ones: a group's header), kept in
 * one buffer of the request's own, or the memory of an sp_buf whose
 * ownership moves into the request (a group's encoded records), so the
 * large part of a request is never copied.
 *
 * Reference-counted: gRPC's transport can still hold a request's memory
 * after a call returned (the deadline passed, the server answered early),
 * so the client takes a reference per slice and gRPC releases it; the
 * queue keeps its own for retries. References may be dropped from any
 * thread. Pieces are added only while the creator holds the only
 * reference; after that a request is read-only and may be read from any
 * thread.
 */
#ifndef SP_OTLP_REQUEST_H
#define SP_OTLP_REQUEST_H

#include "sp_common.h"
#include "sp_encode.h"

typedef struct sp_otlp_request sp_otlp_request;

/* An empty request (length 0, no piece) with one reference. SP_ERR_NOMEM. */
SP_API sp_status sp_otlp_request_create(sp_otlp_request **out);

/* Another reference to r; returns r. */
SP_API sp_otlp_request *sp_otlp_request_ref(sp_otlp_request *r);

/* Drops one reference; the last frees the request. Accepts NULL. */
SP_API void sp_otlp_request_unref(sp_otlp_request *r);

/*
 * Room for `pieces` more pieces and `copied` more bytes of copies: after
 * SP_OK, additions within both cannot fail, so a builder can hand its
 * buffers over all or none. SP_ERR_NOMEM.
 */
SP_API sp_status sp_otlp_request_reserve(sp_otlp_request *r, size_t pieces,
    size_t copied);

/*
 * Appends a copy of p[0..n). Copies that follow each other are one
 * piece. SP_ERR_NOMEM; n 0 adds nothing.
 */
SP_API sp_status sp_otlp_request_copy(sp_otlp_request *r, const void *p,
    size_t n);

/*
 * Appends b's bytes as one piece by taking b's memory: b is left empty,
 * without memory, its limit kept. b's sticky error is returned (nothing
 * taken); SP_ERR_NOMEM (b unchanged). An empty b adds nothing and keeps
 * its memory.
 */
SP_API sp_status sp_otlp_request_take(sp_otlp_request *r, sp_buf *b);

/* Bytes in all; pieces; piece i's bytes and their length (*len), NULL
 * with *len 0 for i out of range. */
SP_API size_t sp_otlp_request_len(const sp_otlp_request *r);
SP_API size_t sp_otlp_request_count(const sp_otlp_request *r);
SP_API const uint8_t *sp_otlp_request_piece(const sp_otlp_request *r,
    size_t i, size_t *len);

/*
 * Appends the request's bytes, contiguous, to out: for readers that need
 * them so (the console exporter's JSON). SP_OK or out's error (out's
 * length back as it was).
 */
SP_API sp_status sp_otlp_request_flatten(const sp_otlp_request *r,
    sp_buf *out);

#endif
