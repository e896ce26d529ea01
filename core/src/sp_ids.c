#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "sp_ids.h"

struct sp_idgen {
    uint64_t s[4];              /* xoshiro256** state, never all zero */
    uint64_t (*next)(void *);   /* replaces the PRNG when set */
    void *ctx;
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

static sp_status
seed(sp_idgen *gen)
{
    uint64_t fresh[4];
    uint64_t mix;
    struct timespec ts;
    int i;

    if (kernel_random(fresh, sizeof(fresh)) == SP_OK) {
        for (i = 0; i < 4; i++) {
            gen->s[i] = fresh[i];
        }
        avoid_zero_state(gen->s);
        return SP_OK;
    }
    /*
     * No kernel randomness: at least make forked siblings differ from one
     * another and from their parent, which share gen->s.
     */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    mix = ((uint64_t)getpid() << 32) ^ ((uint64_t)ts.tv_sec << 20)
          ^ (uint64_t)ts.tv_nsec;
    for (i = 0; i < 4; i++) {
        gen->s[i] ^= splitmix64(&mix);
    }
    avoid_zero_state(gen->s);
    return SP_ERR_IO;
}

sp_idgen *
sp_idgen_create(void)
{
    sp_idgen *gen = calloc(1, sizeof(*gen));

    if (gen == NULL) {
        return NULL;
    }
    if (seed(gen) != SP_OK) {
        free(gen);
        return NULL;
    }
    return gen;
}

sp_idgen *
sp_idgen_create_from(uint64_t (*next)(void *ctx), void *ctx)
{
    sp_idgen *gen = calloc(1, sizeof(*gen));

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

    do {
        v = draw(gen);
    } while (v == 0);
    put_be64(out, v);
}

/* The ids of a generator with its own source (tests). Out of line: with
 * the calls inline, sp_idgen_ids() saved and restored registers for them
 * at every request. */
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
void
sp_idgen_ids(sp_idgen *gen, uint8_t trace_id[SP_TRACE_ID_SIZE],
    uint8_t span_id[SP_SPAN_ID_SIZE])
{
    uint64_t s[4], hi, lo, v;

    if (gen->next != NULL) {
        sp_idgen_ids_next(gen, trace_id, span_id);
        return;
    }
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
