#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "sp_tracecontext.h"
#include "sp_tracecontext_cpu.h"
#include "sp_tracecontext_hex.h"
#include "sp_text.h"


/* Trace Context allows only lowercase hex, unlike sp_hex_value(). */
static int
lower_hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

/* Decodes 2n lowercase hex digits into n bytes; false on any other char. */
static bool
lower_hex_decode(const char *s, size_t n, uint8_t *out)
{
    size_t i;
    int hi, lo;

    for (i = 0; i < n; i++) {
        hi = lower_hex_value(s[2 * i]);
        lo = lower_hex_value(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool
all_zero(const uint8_t *bytes, size_t n)
{
    size_t i;
    uint8_t acc = 0;

    for (i = 0; i < n; i++) {
        acc |= bytes[i];
    }
    return acc == 0;
}

bool
sp_trace_id_is_valid(const uint8_t id[SP_TRACE_ID_SIZE])
{
    return !all_zero(id, SP_TRACE_ID_SIZE);
}

bool
sp_span_id_is_valid(const uint8_t id[SP_SPAN_ID_SIZE])
{
    return !all_zero(id, SP_SPAN_ID_SIZE);
}

bool
sp_span_context_is_valid(const sp_span_context *ctx)
{
    return sp_trace_id_is_valid(ctx->trace_id)
           && sp_span_id_is_valid(ctx->span_id);
}

/*
 * Two digits a byte from one table look-up: every traced request formats
 * its traceparent (25 bytes), and the nibble-at-a-time loop was ~300
 * instructions of the worker's share (callgrind).
 */
#define SP_HEX1(x) ((char)((x) < 10 ? '0' + (x) : 'a' + (x) - 10))
#define SP_HEX2(b) SP_HEX1((b) >> 4), SP_HEX1((b) & 0x0f)
#define SP_HEX2_4(b) SP_HEX2(b), SP_HEX2((b) + 1), SP_HEX2((b) + 2), \
                     SP_HEX2((b) + 3)
#define SP_HEX2_16(b) SP_HEX2_4(b), SP_HEX2_4((b) + 4), SP_HEX2_4((b) + 8), \
                      SP_HEX2_4((b) + 12)
#define SP_HEX2_64(b) SP_HEX2_16(b), SP_HEX2_16((b) + 16), \
                      SP_HEX2_16((b) + 32), SP_HEX2_16((b) + 48)

static const char hex_pairs[512] = {
    SP_HEX2_64(0), SP_HEX2_64(64), SP_HEX2_64(128), SP_HEX2_64(192)
};

static inline void
hex1(uint8_t b, char *out)
{
    memcpy(out, hex_pairs + 2 * (size_t)b, 2);
}

#if defined(__SSE2__)

/*
 * Eight bytes as sixteen digits in a few vector instructions: every traced
 * request formats its traceparent, and the table look-ups took ~85
 * instructions of it (callgrind). The high and low nibbles of each byte
 * are interleaved into one byte each, then '0' is added, and 'a' - '0' - 10
 * more to those over 9.
 */
static inline __m128i
hex_digits(__m128i n)
{
    __m128i over9 = _mm_cmpgt_epi8(n, _mm_set1_epi8(9));

    n = _mm_add_epi8(n, _mm_set1_epi8('0'));
    return _mm_add_epi8(n, _mm_and_si128(over9,
                                         _mm_set1_epi8('a' - '0' - 10)));
}

static inline void
hex8(const uint8_t *b, char *out)
{
    __m128i hi, lo;

    hex_nibbles(_mm_loadl_epi64((const __m128i *)(const void *)b), &hi, &lo);
    _mm_storeu_si128((__m128i *)(void *)out,
                     hex_digits(_mm_unpacklo_epi8(hi, lo)));
}

/* A trace id's sixteen bytes from one load, its nibbles split once. */
static inline void
hex16(const uint8_t *b, char *out)
{
    __m128i hi, lo;

    hex_nibbles(_mm_loadu_si128((const __m128i *)(const void *)b), &hi, &lo);
    _mm_storeu_si128((__m128i *)(void *)out,
                     hex_digits(_mm_unpacklo_epi8(hi, lo)));
    _mm_storeu_si128((__m128i *)(void *)(out + 16),
                     hex_digits(_mm_unpackhi_epi8(hi, lo)));
}

#else

/*
 * Eight bytes written out without a loop: the loop's counter and index
 * arithmetic cost as much as the look-ups (the traceparent's 25 bytes took
 * ~220 instructions in three calls), and the compiler does not unroll it
 * at -O2.
 */
static inline void
hex8(const uint8_t *b, char *out)
{
    hex1(b[0], out);
    hex1(b[1], out + 2);
    hex1(b[2], out + 4);
    hex1(b[3], out + 6);
    hex1(b[4], out + 8);
    hex1(b[5], out + 10);
    hex1(b[6], out + 12);
    hex1(b[7], out + 14);
}

static inline void
hex16(const uint8_t *b, char *out)
{
    hex8(b, out);
    hex8(b + 8, out + 16);
}

#endif

size_t
sp_hex_format(const uint8_t *bytes, size_t n, char *out)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        hex8(bytes + i, out + 2 * i);
    }
    for (; i < n; i++) {
        hex1(bytes[i], out + 2 * i);
    }
    out[2 * n] = '\0';
    return 2 * n;
}

/* ---- traceparent */

sp_traceparent_result
sp_traceparent_parse(const char *s, size_t len, sp_span_context *out)
{
    size_t n = len;
    const char *p = s;
    uint8_t version;
    sp_span_context ctx;

    sp_trim_ows(&p, &n);

    if (n < 2) {
        return SP_TRACEPARENT_BAD_LENGTH;
    }
    if (!lower_hex_decode(p, 1, &version)) {
        return SP_TRACEPARENT_BAD_VERSION;
    }
    if (version == 0xff) {
        return SP_TRACEPARENT_VERSION_FF;
    }
    if (n < SP_TRACEPARENT_LEN) {
        return SP_TRACEPARENT_BAD_LENGTH;
    }
    if (version == 0 && n > SP_TRACEPARENT_LEN) {
        return SP_TRACEPARENT_EXTRA_DATA;
    }
    /*
     * A later version may append fields, but only after another '-': a
     * longer flags field would change the meaning of the ones we read.
     */
    if (p[TP_TRACE_ID_POS - 1] != '-' || p[TP_PARENT_ID_POS - 1] != '-'
        || p[TP_FLAGS_POS - 1] != '-'
        || (n > SP_TRACEPARENT_LEN && p[SP_TRACEPARENT_LEN] != '-'))
    {
        return SP_TRACEPARENT_BAD_SEPARATOR;
    }
    if (!lower_hex_decode(p + TP_TRACE_ID_POS, SP_TRACE_ID_SIZE,
                          ctx.trace_id))
    {
        return SP_TRACEPARENT_BAD_TRACE_ID;
    }
    if (!sp_trace_id_is_valid(ctx.trace_id)) {
        return SP_TRACEPARENT_ZERO_TRACE_ID;
    }
    if (!lower_hex_decode(p + TP_PARENT_ID_POS, SP_SPAN_ID_SIZE,
                          ctx.span_id))
    {
        return SP_TRACEPARENT_BAD_PARENT_ID;
    }
    if (!sp_span_id_is_valid(ctx.span_id)) {
        return SP_TRACEPARENT_ZERO_PARENT_ID;
    }
    if (!lower_hex_decode(p + TP_FLAGS_POS, 1, &ctx.trace_flags)) {
        return SP_TRACEPARENT_BAD_FLAGS;
    }
    ctx.trace_flags &= SP_TRACE_FLAG_SAMPLED;

    *out = ctx;
    return SP_TRACEPARENT_OK;
}

/* A traceparent's version, dashes, flags and NUL: the ids' digits are
 * written by the callers, each its own way. */
static inline __attribute__((always_inline)) size_t
sp_traceparent_frame(const sp_span_context *ctx,
                     char out[SP_TRACEPARENT_SIZE])
{
    out[0] = '0';
    out[1] = '0';
    out[TP_TRACE_ID_POS - 1] = '-';
    out[TP_PARENT_ID_POS - 1] = '-';
    out[TP_FLAGS_POS - 1] = '-';
    hex1(ctx->trace_flags, out + TP_FLAGS_POS);
    out[SP_TRACEPARENT_LEN] = '\0';
    return SP_TRACEPARENT_LEN;
}

#if defined(__x86_64__)

/* Set at load time, as sp_crc32c's: before any thread formats one. */
static bool sp_tp_ssse3_cpu;
static bool sp_tp_ssse3;

__attribute__((constructor)) static void
sp_tracecontext_init(void)
{
    unsigned eax, ebx, ecx, edx;

    sp_tp_ssse3_cpu = __get_cpuid(1, &eax, &ebx, &ecx, &edx)
                      && (ecx & bit_SSSE3) != 0;
    sp_tp_ssse3 = sp_tp_ssse3_cpu;
}

/*
 * The ids' digits with pshufb, which looks each nibble up in a register,
 * instead of SSE2's compare, mask and two adds: every traced request
 * formats its traceparent (48 -> 40 instructions a request, callgrind).
 */
__attribute__((target("ssse3"))) static size_t
sp_traceparent_format_ssse3(const sp_span_context *ctx,
                            char out[SP_TRACEPARENT_SIZE])
{
    hex_ids_ssse3(_mm_loadu_si128((const __m128i *)(const void *)
                                  ctx->trace_id),
                  _mm_loadl_epi64((const __m128i *)(const void *)
                                  ctx->span_id), out);
    return sp_traceparent_frame(ctx, out);
}

bool
sp_traceparent_ssse3_available(void)
{
    return sp_tp_ssse3_cpu;
}

void
sp_traceparent_use_ssse3(bool on)
{
    sp_tp_ssse3 = on && sp_tp_ssse3_cpu;
}

#else

bool
sp_traceparent_ssse3_available(void)
{
    return false;
}

void
sp_traceparent_use_ssse3(bool on)
{
    (void)on;
}

#endif

/* The ids' sizes are fixed: written with hex8, without sp_hex_format's
 * loops. */
size_t
sp_traceparent_format(const sp_span_context *ctx,
                      char out[SP_TRACEPARENT_SIZE])
{
#if defined(__x86_64__)
    if (sp_tp_ssse3) {
        return sp_traceparent_format_ssse3(ctx, out);
    }
#endif
    hex16(ctx->trace_id, out + TP_TRACE_ID_POS);
    hex8(ctx->span_id, out + TP_PARENT_ID_POS);
    return sp_traceparent_frame(ctx, out);
}

const char *
sp_traceparent_result_text(sp_traceparent_result r)
{
    switch (r) {
    case SP_TRACEPARENT_OK:
        return "valid";
    case SP_TRACEPARENT_BAD_LENGTH:
        return "wrong length";
    case SP_TRACEPARENT_BAD_VERSION:
        return "version is not two lowercase hex digits";
    case SP_TRACEPARENT_VERSION_FF:
        return "version ff is invalid";
    case SP_TRACEPARENT_BAD_SEPARATOR:
        return "dash missing or misplaced";
    case SP_TRACEPARENT_BAD_TRACE_ID:
        return "trace id is not 32 lowercase hex digits";
    case SP_TRACEPARENT_ZERO_TRACE_ID:
        return "trace id is all zeros";
    case SP_TRACEPARENT_BAD_PARENT_ID:
        return "parent id is not 16 lowercase hex digits";
    case SP_TRACEPARENT_ZERO_PARENT_ID:
        return "parent id is all zeros";
    case SP_TRACEPARENT_BAD_FLAGS:
        return "trace flags are not two lowercase hex digits";
    case SP_TRACEPARENT_EXTRA_DATA:
        return "data after the flags of version 00";
    }
    return "unknown traceparent result";
}

/* ---- tracestate */

static bool
is_lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* What may follow the first char of a simple key, tenant id or system id. */
static bool
is_key_char(char c)
{
    return is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' || c == '*'
           || c == '/';
}

static bool
key_chars_valid(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!is_key_char(s[i])) {
            return false;
        }
    }
    return true;
}

static bool
key_valid(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);
    size_t tenant, system;

    if (at == NULL) {
        return n >= 1 && n <= SP_TRACESTATE_MAX_KEY_LEN && is_lcalpha(k[0])
               && key_chars_valid(k + 1, n - 1);
    }
    /* A second '@' lands in the system id and fails its char check. */
    tenant = (size_t)(at - k);
    system = n - tenant - 1;
    return tenant >= 1 && tenant <= SP_TRACESTATE_MAX_TENANT_LEN
           && (is_lcalpha(k[0]) || is_digit(k[0]))
           && key_chars_valid(k + 1, tenant - 1)
           && system >= 1 && system <= SP_TRACESTATE_MAX_SYSTEM_LEN
           && is_lcalpha(at[1]) && key_chars_valid(at + 2, system - 1);
}

/*
 * Printable ASCII but ',' and '=', 1..256 chars. The grammar's "must not
 * end in a space" needs no check: the caller trimmed trailing spaces as
 * optional whitespace before the ','. So "k=" and "k=  " are invalid.
 */
static bool
value_valid(const char *v, size_t n)
{
    size_t i;

    if (n < 1 || n > SP_TRACESTATE_MAX_VALUE_LEN) {
        return false;
    }
    for (i = 0; i < n; i++) {
        if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=') {
            return false;
        }
    }
    return true;
}

static bool
key_seen(const sp_tracestate *ts, const char *s, size_t off, size_t n)
{
    size_t i;
    const sp_tracestate_member *m;

    for (i = 0; i < ts->count; i++) {
        m = &ts->members[i];
        if (m->key_len == n && memcmp(s + m->key_off, s + off, n) == 0) {
            return true;
        }
    }
    return false;
}

static sp_tracestate_result
tracestate_parse(const char *s, size_t len, sp_tracestate *out)
{
    size_t pos = 0, start, end, eq;
    const char *comma, *equals;
    bool last = false;
    sp_tracestate_member *m;

    while (!last) {
        comma = pos < len ? memchr(s + pos, ',', len - pos) : NULL;
        last = comma == NULL;
        start = pos;
        end = last ? len : (size_t)(comma - s);
        pos = end + 1;

        start += sp_skip_ows(s + start, end - start);
        while (end > start && sp_is_ows(s[end - 1])) {
            end--;
        }
        if (start == end) {
            continue;
        }
        if (out->count == SP_TRACESTATE_MAX_MEMBERS) {
            return SP_TRACESTATE_TOO_MANY_MEMBERS;
        }
        equals = memchr(s + start, '=', end - start);
        if (equals == NULL) {
            return SP_TRACESTATE_MISSING_EQUALS;
        }
        eq = (size_t)(equals - s);
        if (!key_valid(s + start, eq - start)) {
            return SP_TRACESTATE_BAD_KEY;
        }
        if (!value_valid(s + eq + 1, end - eq - 1)) {
            return SP_TRACESTATE_BAD_VALUE;
        }
        if (key_seen(out, s, start, eq - start)) {
            return SP_TRACESTATE_DUPLICATE_KEY;
        }
        m = &out->members[out->count++];
        m->key_off = start;
        m->key_len = eq - start;
        m->value_off = eq + 1;
        m->value_len = end - eq - 1;
    }
    return SP_TRACESTATE_OK;
}

sp_tracestate_result
sp_tracestate_parse(const char *s, size_t len, sp_tracestate *out)
{
    sp_tracestate_result r;

    out->count = 0;
    r = tracestate_parse(s, len, out);
    if (r != SP_TRACESTATE_OK) {
        out->count = 0;
    }
    return r;
}

/* Appends src[0..n) to out[0..cap) at *len, keeping room for the NUL. */
static void
append(char *out, size_t cap, size_t *len, const char *src, size_t n)
{
    size_t room;

    if (*len + 1 < cap) {
        room = cap - 1 - *len;
        memcpy(out + *len, src, n < room ? n : room);
    }
    *len += n;
}

size_t
sp_tracestate_format(const sp_tracestate *ts, const char *src, char *out,
                     size_t cap)
{
    size_t i, len = 0;
    const sp_tracestate_member *m;

    for (i = 0; i < ts->count; i++) {
        m = &ts->members[i];
        if (i > 0) {
            append(out, cap, &len, ",", 1);
        }
        append(out, cap, &len, src + m->key_off, m->key_len);
        append(out, cap, &len, "=", 1);
        append(out, cap, &len, src + m->value_off, m->value_len);
    }
    if (cap > 0) {
        out[len < cap ? len : cap - 1] = '\0';
    }
    return len;
}

const char *
sp_tracestate_result_text(sp_tracestate_result r)
{
    switch (r) {
    case SP_TRACESTATE_OK:
        return "valid";
    case SP_TRACESTATE_TOO_MANY_MEMBERS:
        return "more than 32 members";
    case SP_TRACESTATE_MISSING_EQUALS:
        return "member without '='";
    case SP_TRACESTATE_BAD_KEY:
        return "invalid key";
    case SP_TRACESTATE_BAD_VALUE:
        return "invalid value";
    case SP_TRACESTATE_DUPLICATE_KEY:
        return "duplicate key";
    }
    return "unknown tracestate result";
}
