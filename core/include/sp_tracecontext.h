/*
 * W3C Trace Context, level 1: the traceparent and tracestate headers.
 *
 * Parsing never allocates: results go into caller-provided structs, and a
 * parsed tracestate refers back into the caller's input by offsets. Every
 * rejection has its own reason so callers and tests can tell them apart;
 * nothing here logs.
 */
#ifndef SP_TRACECONTEXT_H
#define SP_TRACECONTEXT_H

#include "sp_common.h"

/* The only trace flag of level 1; the only one we propagate. */
#define SP_TRACE_FLAG_SAMPLED 0x01

#define SP_TRACE_ID_SIZE 16
#define SP_SPAN_ID_SIZE 8

/* Lowercase hex lengths, e.g. for the exporter; the _SIZE forms add NUL. */
#define SP_TRACE_ID_HEX_LEN 32
#define SP_SPAN_ID_HEX_LEN 16
#define SP_TRACE_ID_HEX_SIZE (SP_TRACE_ID_HEX_LEN + 1)
#define SP_SPAN_ID_HEX_SIZE (SP_SPAN_ID_HEX_LEN + 1)

/* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define SP_TRACEPARENT_LEN 55
#define SP_TRACEPARENT_SIZE (SP_TRACEPARENT_LEN + 1)

typedef struct sp_span_context {
    uint8_t trace_id[SP_TRACE_ID_SIZE];
    uint8_t span_id[SP_SPAN_ID_SIZE];
    uint8_t trace_flags;
} sp_span_context;

/* An id is valid when at least one byte is non-zero. */
SP_API bool sp_trace_id_is_valid(const uint8_t id[SP_TRACE_ID_SIZE]);
SP_API bool sp_span_id_is_valid(const uint8_t id[SP_SPAN_ID_SIZE]);

/* Both ids valid. */
SP_API bool sp_span_context_is_valid(const sp_span_context *ctx);

/*
 * Writes bytes[0..n) as 2n lowercase hex digits and a NUL, so out needs
 * 2n + 1 chars. Returns 2n.
 */
SP_API size_t sp_hex_format(const uint8_t *bytes, size_t n, char *out);

/* ---- traceparent */

typedef enum sp_traceparent_result {
    SP_TRACEPARENT_OK = 0,
    SP_TRACEPARENT_BAD_LENGTH,      /* too short for its version */
    SP_TRACEPARENT_BAD_VERSION,     /* version not 2 lowercase hex digits */
    SP_TRACEPARENT_VERSION_FF,      /* version ff is forbidden */
    SP_TRACEPARENT_BAD_SEPARATOR,   /* a '-' missing or misplaced */
    SP_TRACEPARENT_BAD_TRACE_ID,    /* not 32 lowercase hex digits */
    SP_TRACEPARENT_ZERO_TRACE_ID,
    SP_TRACEPARENT_BAD_PARENT_ID,   /* not 16 lowercase hex digits */
    SP_TRACEPARENT_ZERO_PARENT_ID,
    SP_TRACEPARENT_BAD_FLAGS,       /* not 2 lowercase hex digits */
    SP_TRACEPARENT_EXTRA_DATA       /* version 00 longer than 55 chars */
} sp_traceparent_result;

/*
 * Parses one traceparent header value s[0..len); s need not be
 * NUL-terminated. Spaces and tabs around the value (HTTP optional
 * whitespace) are ignored.
 *
 * Version 00 must be exactly 55 chars. A later version (01..fe) must be at
 * least 55 chars and, if longer, continue with '-' after the flags; its
 * first four fields are read as version 00's and the rest is ignored,
 * because we always re-emit version 00.
 *
 * Checks run in this order and the first broken rule is reported: version,
 * length, separators, trace id, parent id, flags. On success *out gets the
 * ids and the flags with only SP_TRACE_FLAG_SAMPLED kept (other bits are
 * unknown to level 1 and must not be propagated); on failure *out is not
 * touched.
 */
SP_API sp_traceparent_result sp_traceparent_parse(const char *s, size_t len,
                                                  sp_span_context *out);

/*
 * Writes the version 00 header value of ctx and a NUL into out. The flags
 * are written as given. Returns SP_TRACEPARENT_LEN.
 */
SP_API size_t sp_traceparent_format(const sp_span_context *ctx,
                                    char out[SP_TRACEPARENT_SIZE]);

/* A short lowercase phrase for logs, e.g. "trace id is all zeros". */
SP_API const char *sp_traceparent_result_text(sp_traceparent_result r);

/* ---- tracestate */

#define SP_TRACESTATE_MAX_MEMBERS 32
#define SP_TRACESTATE_MAX_KEY_LEN 256    /* simple key; tenant@system too */
#define SP_TRACESTATE_MAX_TENANT_LEN 241
#define SP_TRACESTATE_MAX_SYSTEM_LEN 14
#define SP_TRACESTATE_MAX_VALUE_LEN 256

/* The longest canonical tracestate: 32 "key=value" joined by ','. */
#define SP_TRACESTATE_MAX_LEN                                                 \
    (SP_TRACESTATE_MAX_MEMBERS                                                \
         * (SP_TRACESTATE_MAX_KEY_LEN + 1 + SP_TRACESTATE_MAX_VALUE_LEN)      \
     + SP_TRACESTATE_MAX_MEMBERS - 1)
#define SP_TRACESTATE_SIZE (SP_TRACESTATE_MAX_LEN + 1)

/* Where one member's key and value sit in the parsed input. */
typedef struct sp_tracestate_member {
    size_t key_off;
    size_t key_len;
    size_t value_off;
    size_t value_len;
} sp_tracestate_member;

/*
 * A parsed tracestate. It holds offsets into the string it was parsed
 * from, so that string must outlive it and be passed again to read it.
 */
typedef struct sp_tracestate {
    size_t count;
    sp_tracestate_member members[SP_TRACESTATE_MAX_MEMBERS];
} sp_tracestate;

typedef enum sp_tracestate_result {
    SP_TRACESTATE_OK = 0,
    SP_TRACESTATE_TOO_MANY_MEMBERS,  /* more than 32 non-empty members */
    SP_TRACESTATE_MISSING_EQUALS,    /* a member with no '=' */
    SP_TRACESTATE_BAD_KEY,
    SP_TRACESTATE_BAD_VALUE,
    SP_TRACESTATE_DUPLICATE_KEY
} sp_tracestate_result;

/*
 * Parses one tracestate header value s[0..len) (several header lines are
 * joined with ',' by the caller first). Members are separated by ',' with
 * optional spaces and tabs around each; empty members are skipped, so a
 * value of only whitespace and commas is valid and empty.
 *
 * Any invalid member makes the whole header invalid, as level 1 says: then
 * out->count is 0 so that nothing of it can be propagated by mistake.
 * Members keep their order.
 */
SP_API sp_tracestate_result sp_tracestate_parse(const char *s, size_t len,
                                                sp_tracestate *out);

/*
 * Writes the canonical form "k1=v1,k2=v2" of ts (parsed from src) into
 * out[0..cap), NUL-terminated when cap > 0, as snprintf does. Returns the
 * length of the full canonical form, never more than SP_TRACESTATE_MAX_LEN
 * for a parsed ts: a result >= cap means out was truncated. out may be
 * NULL when cap is 0.
 */
SP_API size_t sp_tracestate_format(const sp_tracestate *ts, const char *src,
                                   char *out, size_t cap);

/* A short lowercase phrase for logs, e.g. "duplicate key". */
SP_API const char *sp_tracestate_result_text(sp_tracestate_result r);

#endif
