#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "sp_ids.h"
#include "sp_ids_cpu.h"
#include "sp_tracecontext_hex.h"

#if defined(__x86_64__)
#define SP_IDS_AES 1
#else
#define SP_IDS_AES 0
#endif

struct sp_idgen {
#if SP_IDS_AES
    __m128i key[11];            /* AES-128's round keys; key[0]: the key */
    __m128i ctr;                /* the next block's; its low half counts */
#endif
    uint64_t s[4];              /* xoshiro256** state, never all zero */
    uint64_t (*next)(void *);   /* replaces the PRNG when set */
    void *ctx;
    bool aes;                   /* draws with AES, not xoshiro256** */
};

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t
xoshiro256ss(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* splitmix64: spreads a weak input (pid, clock) over all 64 bits. */
static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static sp_status
read_urandom(void *buf, size_t n)
{
    int fd;
    ssize_t r;
    size_t done = 0;

    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return SP_ERR_IO;
    }
    while (done < n) {
        r = read(fd, (char *)buf + done, n - done);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            close(fd);
            return SP_ERR_IO;
        }
        done += (size_t)r;
    }
    close(fd);
    return SP_OK;
}

static sp_status
kernel_random(void *buf, size_t n)
{
    ssize_t r;
    size_t done = 0;

    while (done < n) {
        r = getrandom((char *)buf + done, n - done, 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            /* ENOSYS on old kernels, or a seccomp filter forbids it. */
            return read_urandom(buf, n);
        }
        done += (size_t)r;
    }
    return SP_OK;
}

/* xoshiro's one forbidden state; 2^-256 from the kernel, but be sure. */
static void
avoid_zero_state(uint64_t s[4])
{
    if ((s[0] | s[1] | s[2] | s[3]) == 0) {
        s[0] = 1;
    }
}

#if SP_IDS_AES

/*
 * Trace and span ids from AES-128 in counter mode, keyed from the kernel,
 * where the CPU has AES-NI: a cipher's output, unpredictable from any
 * number of earlier ids (xoshiro256**'s state can be read back from its
 * output), in fewer instructions: a new trace's ids with their traceparent
 * took ~115 with xoshiro256**, its byte swaps and the formatting call,
 * ~65 with AES (nginx's worker, callgrind). The rounds' latency makes it
 * no faster in time.
 */

/* Set at load time, as sp_tracecontext's: before any generator is made. */
static bool sp_ids_aes_cpu;
static bool sp_ids_aes;

__attribute__((constructor)) static void
sp_ids_init(void)
{
    unsigned eax, ebx, ecx, edx;

    /* Every CPU with AES-NI has SSSE3 and SSE4.1 too; but be sure. */
    sp_ids_aes_cpu = __get_cpuid(1, &eax, &ebx, &ecx, &edx)
                     && (ecx & bit_AES) != 0 && (ecx & bit_SSSE3) != 0
                     && (ecx & bit_SSE4_1) != 0;
    sp_ids_aes = sp_ids_aes_cpu;
}

bool
sp_idgen_aes_available(void)
{
    return sp_ids_aes_cpu;
}

void
sp_idgen_use_aes(bool on)
{
    sp_ids_aes = on && sp_ids_aes_cpu;
}

/* One step of AES-128's key schedule (FIPS-197 5.2), from the previous
 * round key and aeskeygenassist's word of it. */
__attribute__((target("aes"))) static inline __m128i
aes_key_step(__m128i key, __m128i assist)
{
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    return _mm_xor_si128(key, _mm_shuffle_epi32(assist, 0xff));
}

/* aeskeygenassist takes its round constant as an immediate. */
#define AES_KEY_STEP(k, i, rcon)                                          \
    (k)[i] = aes_key_step((k)[(i) - 1],                                   \
                          _mm_aeskeygenassist_si128((k)[(i) - 1], rcon))

/* The round keys from key[0]. */
__attribute__((target("aes"))) static void
aes_expand(__m128i key[11])
{
    AES_KEY_STEP(key, 1, 0x01);
    AES_KEY_STEP(key, 2, 0x02);
    AES_KEY_STEP(key, 3, 0x04);
    AES_KEY_STEP(key, 4, 0x08);
    AES_KEY_STEP(key, 5, 0x10);
    AES_KEY_STEP(key, 6, 0x20);
    AES_KEY_STEP(key, 7, 0x40);
    AES_KEY_STEP(key, 8, 0x80);
    AES_KEY_STEP(key, 9, 0x1b);
    AES_KEY_STEP(key, 10, 0x36);
}

/* The block of the counter c. */
__attribute__((target("aes"))) static inline __m128i
aes_block(const __m128i key[11], __m128i c)
{
    int i;

    c = _mm_xor_si128(c, key[0]);
    for (i = 1; i < 10; i++) {
        c = _mm_aesenc_si128(c, key[i]);
    }
    return _mm_aesenclast_si128(c, key[10]);
}

/* The blocks of gen's next two counters, their rounds interleaved (the
 * loop above fully unrolled), gen's counter past them. */
__attribute__((target("aes"))) static inline
__attribute__((always_inline)) void
aes_pair(sp_idgen *gen, __m128i *a, __m128i *b)
{
    const __m128i one = _mm_set_epi64x(0, 1);
    __m128i       x, y;

    x = gen->ctr;
    y = _mm_add_epi64(x, one);
    gen->ctr = _mm_add_epi64(y, one);
    x = _mm_xor_si128(x, gen->key[0]);
    y = _mm_xor_si128(y, gen->key[0]);
#define AES_PAIR_ROUND(i)                                                 \
    x = _mm_aesenc_si128(x, gen->key[i]);                                 \
    y = _mm_aesenc_si128(y, gen->key[i])
    AES_PAIR_ROUND(1);
    AES_PAIR_ROUND(2);
    AES_PAIR_ROUND(3);
    AES_PAIR_ROUND(4);
    AES_PAIR_ROUND(5);
    AES_PAIR_ROUND(6);
    AES_PAIR_ROUND(7);
    AES_PAIR_ROUND(8);
    AES_PAIR_ROUND(9);
#undef AES_PAIR_ROUND
    *a = _mm_aesenclast_si128(x, gen->key[10]);
    *b = _mm_aesenclast_si128(y, gen->key[10]);
}

/* The next block, its counter's. */
__attribute__((target("aes"))) static inline __m128i
aes_next(sp_idgen *gen)
{
    __m128i b = aes_block(gen->key, gen->ctr);

    gen->ctr = _mm_add_epi64(gen->ctr, _mm_set_epi64x(0, 1));
    return b;
}

/* A trace id is a block, a span id the first half of one; all zeros means
 * "no trace" in Trace Context: draw again. */
__attribute__((target("aes,sse4.1"))) static void
aes_trace_id(sp_idgen *gen, uint8_t out[SP_TRACE_ID_SIZE])
{
    __m128i b;

    do {
        b = aes_next(gen);
    } while (_mm_testz_si128(b, b));
    _mm_storeu_si128((__m128i *)(void *)out, b);
}

__attribute__((target("aes"))) static void
aes_span_id(sp_idgen *gen, uint8_t out[SP_SPAN_ID_SIZE])
{
    __m128i b;

    do {
        b = aes_next(gen);
    } while (_mm_cvtsi128_si64(b) == 0);
    _mm_storel_epi64((__m128i *)(void *)out, b);
}

/* A trace id and a span id, as aes_trace_id() then aes_span_id() draw
 * them: from two blocks at once, unless one must be drawn again. */
__attribute__((target("aes,sse4.1"))) static inline
__attribute__((always_inline)) bool
aes_ids(sp_idgen *gen, __m128i *trace, __m128i *span)
{
    __m128i ctr = gen->ctr;

    aes_pair(gen, trace, span);
    if (__builtin_expect(_mm_testz_si128(*trace, *trace)
                         || _mm_cvtsi128_si64(*span) == 0, 0))
    {
        gen->ctr = ctr;
        return false;
    }
    return true;
}

#endif

/*
 * The generator's state from the kernel: xoshiro256**'s, and AES's key and
 * counter. Without kernel randomness, what it had (a forked child's copy
 * of its parent's) is mixed with the pid and the clock, so that forked
 * siblings differ from one another and from their parent.
 */
static sp_status
seed(sp_idgen *gen)
{
    uint64_t fresh[8], mix;
    struct timespec ts;
    sp_status st;
    int i;

    st = kernel_random(fresh, sizeof(fresh));
    if (st != SP_OK) {
        memcpy(fresh, gen->s, sizeof(gen->s));
#if SP_IDS_AES
        memcpy(fresh + 4, &gen->key[0], 16);
        memcpy(fresh + 6, &gen->ctr, 16);
#endif
        clock_gettime(CLOCK_MONOTONIC, &ts);
        mix = ((uint64_t)getpid() << 32) ^ ((uint64_t)ts.tv_sec << 20)
              ^ (uint64_t)ts.tv_nsec;
        for (i = 0; i < 8; i++) {
            fresh[i] ^= splitmix64(&mix);
        }
    }
    memcpy(gen->s, fresh, sizeof(gen->s));
    avoid_zero_state(gen->s);
#if SP_IDS_AES
    if (gen->aes) {
        memcpy(&gen->key[0], fresh + 4, 16);
        memcpy(&gen->ctr, fresh + 6, 16);
        aes_expand(gen->key);
    }
#endif
    return st;
}

/* The generator's memory, zeroed: aligned for its vectors. */
static sp_idgen *
alloc_gen(void)
{
    sp_idgen *gen = aligned_alloc(_Alignof(sp_idgen), sizeof(sp_idgen));

    if (gen != NULL) {
        memset(gen, 0, sizeof(*gen));
    }
    return gen;
}

sp_idgen *
sp_idgen_create(void)
{
    sp_idgen *gen = alloc_gen();

    if (gen == NULL) {
        return NULL;
    }
#if SP_IDS_AES
    gen->aes = sp_ids_aes;
#endif
    if (seed(gen) != SP_OK) {
        free(gen);
        return NULL;
    }
    return gen;
}

#if SP_IDS_AES
sp_idgen *
sp_idgen_create_aes(const uint8_t key[16], const uint8_t ctr[16])
{
    sp_idgen *gen;

    if (!sp_ids_aes_cpu || (gen = alloc_gen()) == NULL) {
        return NULL;
    }
    gen->aes = true;
    gen->s[0] = 1;
    memcpy(&gen->key[0], key, 16);
    memcpy(&gen->ctr, ctr, 16);
    aes_expand(gen->key);
    return gen;
}
#else
bool
sp_idgen_aes_available(void)
{
    return false;
}

void
sp_idgen_use_aes(bool on)
{
    (void)on;
}

sp_idgen *
sp_idgen_create_aes(const uint8_t key[16], const uint8_t ctr[16])
{
    (void)key;
    (void)ctr;
    return NULL;
}
#endif

sp_idgen *
sp_idgen_create_from(uint64_t (*next)(void *ctx), void *ctx)
{
    sp_idgen *gen = alloc_gen();

    if (gen == NULL) {
        return NULL;
    }
    gen->s[0] = 1;
    gen->next = next;
    gen->ctx = ctx;
    return gen;
}

void
sp_idgen_destroy(sp_idgen *gen)
{
    free(gen);
}

sp_status
sp_idgen_reseed(sp_idgen *gen)
{
    if (gen->next != NULL) {
        return SP_OK;
    }
    return seed(gen);
}

/*
 * Every traced request draws a trace id and a span id: the PRNG is inlined
 * here and the words are stored with one byte swap each, instead of a call
 * per word and a loop per byte (~240 instructions a request, callgrind).
 */
static inline uint64_t
draw(sp_idgen *gen)
{
    return gen->next != NULL ? gen->next(gen->ctx) : xoshiro256ss(gen->s);
}

static inline void
put_be64(uint8_t *out, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
    memcpy(out, &v, sizeof(v));
#else
    int i;

    for (i = 7; i >= 0; i--) {
        out[i] = (uint8_t)v;
        v >>= 8;
    }
#endif
}

void
sp_idgen_trace_id(sp_idgen *gen, uint8_t out[SP_TRACE_ID_SIZE])
{
    uint64_t hi, lo;

#if SP_IDS_AES
    if (gen->aes) {
        aes_trace_id(gen, out);
        return;
    }
#endif
    /* All zeros means "no trace" in Trace Context: draw again. */
    do {
        hi = draw(gen);
        lo = draw(gen);
    } while ((hi | lo) == 0);
    put_be64(out, hi);
    put_be64(out + 8, lo);
}

void
sp_idgen_span_id(sp_idgen *gen, uint8_t out[SP_SPAN_ID_SIZE])
{
    uint64_t v;

#if SP_IDS_AES
    if (gen->aes) {
        aes_span_id(gen, out);
        return;
    }
#endif
    do {
        v = draw(gen);
    } while (v == 0);
    put_be64(out, v);
}

/* The ids of a generator with its own source (tests), or of one whose
 * draw must be repeated. Out of line: with the calls inline,
 * sp_idgen_ids() saved and restored registers for them at every
 * request. */
static __attribute__((noinline)) void
sp_idgen_ids_next(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE])
{
    sp_idgen_trace_id(gen, trace_id);
    sp_idgen_span_id(gen, span_id);
}

/*
 * The state stays in registers from the first draw to the last, and is
 * stored once: ~20 instructions a request fewer than the two calls
 * (callgrind). Loaded and stored word by word: a memcpy() of it went
 * through the stack (~10 instructions more).
 */
static inline __attribute__((always_inline)) void
xoshiro_ids(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE])
{
    uint64_t s[4], hi, lo, v;

    s[0] = gen->s[0];
    s[1] = gen->s[1];
    s[2] = gen->s[2];
    s[3] = gen->s[3];
    do {
        hi = xoshiro256ss(s);
        lo = xoshiro256ss(s);
    } while ((hi | lo) == 0);
    do {
        v = xoshiro256ss(s);
    } while (v == 0);
    gen->s[0] = s[0];
    gen->s[1] = s[1];
    gen->s[2] = s[2];
    gen->s[3] = s[3];
    put_be64(trace_id, hi);
    put_be64(trace_id + 8, lo);
    put_be64(span_id, v);
}

#if SP_IDS_AES
__attribute__((target("aes,sse4.1"))) static void
sp_idgen_ids_aes(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE])
{
    __m128i t, s;

    if (!aes_ids(gen, &t, &s)) {
        sp_idgen_ids_next(gen, trace_id, span_id);
        return;
    }
    _mm_storeu_si128((__m128i *)(void *)trace_id, t);
    _mm_storel_epi64((__m128i *)(void *)span_id, s);
}
#endif

void
sp_idgen_ids(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE])
{
#if SP_IDS_AES
    if (gen->aes) {
        sp_idgen_ids_aes(gen, trace_id, span_id);
        return;
    }
#endif
    if (gen->next != NULL) {
        sp_idgen_ids_next(gen, trace_id, span_id);
        return;
    }
    xoshiro_ids(gen, trace_id, span_id);
}

/* A new trace without AES, or one whose AES draw must be repeated. Out
 * of line, called last: the AES way then keeps no registers for it. */
static __attribute__((noinline)) void
sp_idgen_new_trace_other(sp_idgen *gen, sp_span_context *ctx,
    char out[SP_TRACEPARENT_SIZE])
{
    ctx->trace_flags = 0;
    sp_idgen_ids(gen, ctx->trace_id, ctx->span_id);
    sp_traceparent_format(ctx, out);
}

#if SP_IDS_AES
/*
 * The digits written from the registers the ids were drawn into, with
 * pshufb (every CPU with AES-NI has SSSE3), the frame's bytes with three
 * stores: the version's "00-" with the first digit's byte, which the
 * digits then overwrite, and "-00" with the NUL.
 */
__attribute__((target("aes,sse4.1,ssse3"))) static void
sp_idgen_new_trace_aes(sp_idgen *gen, sp_span_context *ctx,
    char out[SP_TRACEPARENT_SIZE])
{
    __m128i t, s;

    if (!aes_ids(gen, &t, &s)) {
        sp_idgen_new_trace_other(gen, ctx, out);
        return;
    }
    _mm_storeu_si128((__m128i *)(void *)ctx->trace_id, t);
    _mm_storel_epi64((__m128i *)(void *)ctx->span_id, s);
    ctx->trace_flags = 0;
    memcpy(out, "00-0", 4);
    hex_ids_ssse3(t, s, out);
    out[TP_PARENT_ID_POS - 1] = '-';
    memcpy(out + TP_FLAGS_POS - 1, "-00", 4);
}
#endif

void
sp_idgen_new_trace(sp_idgen *gen, sp_span_context *ctx,
    char out[SP_TRACEPARENT_SIZE])
{
#if SP_IDS_AES
    if (gen->aes) {
        sp_idgen_new_trace_aes(gen, ctx, out);
        return;
    }
#endif
    sp_idgen_new_trace_other(gen, ctx, out);
}
