/*
 * CRC32C (sp_crc32c.h): published vectors, a bit-at-a-time reference
 * written from the definition, and the hardware path against the software
 * path, which writer and reader rely on agreeing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sp_test.h"
#include "sp_crc32c.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* The definition: reflected, polynomial 0x82f63b78, all-ones in and out. */
static uint32_t
reference(uint32_t crc, const unsigned char *p, size_t len)
{
    uint32_t c = ~crc;
    size_t   i;
    int      k;

    for (i = 0; i < len; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
    }
    return ~c;
}

/* Every path this machine has: the dispatcher, software, SSE4.2. */
static size_t
paths(crc_fn *out, const char **names)
{
    size_t n = 0;

    out[n] = sp_crc32c;
    names[n++] = "sp_crc32c";
    out[n] = sp_crc32c_soft;
    names[n++] = "soft";
#if defined(__x86_64__)
    if (sp_crc32c_hardware()) {
        out[n] = sp_crc32c_sse42;
        names[n++] = "sse42";
    }
#endif
    return n;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* RFC 3720 B.4 and the "check" value of the CRC catalogues. */
static void
known_vectors(void **state)
{
    unsigned char zeros[32], ones[32], up[32], down[32];
    crc_fn        fn[3];
    const char   *name[3];
    size_t        n = paths(fn, name), i, k;
    struct {
        const void *p;
        size_t      len;
        uint32_t    crc;
    } v[] = {
        { "123456789", 9, 0xe3069283u },
        { "", 0, 0 },
        { "a", 1, 0xc1d04330u },
        { zeros, 32, 0x8a9136aau },
        { ones, 32, 0x62a8ab43u },
        { up, 32, 0x46dd794eu },
        { down, 32, 0x113fdb5cu },
    };

    (void)state;
    memset(zeros, 0, sizeof(zeros));
    memset(ones, 0xff, sizeof(ones));
    for (i = 0; i < 32; i++) {
        up[i] = (unsigned char)i;
        down[i] = (unsigned char)(31 - i);
    }
    for (k = 0; k < n; k++) {
        for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
            if (fn[k](0, v[i].p, v[i].len) != v[i].crc) {
                fail_msg("%s: vector %zu gives %08x, not %08x", name[k], i,
                         fn[k](0, v[i].p, v[i].len), v[i].crc);
            }
            assert_int_equal(reference(0, v[i].p, v[i].len), v[i].crc);
        }
    }
}

/*
 * Each path against the reference over random bytes of every length
 * from 0 to 1100, at every alignment, continued from a random CRC. Every
 * length reaches each of the hardware path's remainders (words mod 64,
 * the 4-, 2- and 1-byte tails) with no and one whole 512-byte block, and
 * the first of them with two.
 */
static void
every_path_agrees_with_the_definition(void **state)
{
    static unsigned char buf[1100 + 8];
    crc_fn               fn[3];
    const char          *name[3];
    size_t               n = paths(fn, name), len, align, k, i;
    uint32_t             seed, want, got;

    (void)state;
    printf("# paths: %zu (%s)\n", n, n == 3 ? "SSE4.2 here" : "no SSE4.2");
    for (len = 0; len <= 1100; len++) {
        for (align = 0; align < 8; align++) {
            for (i = 0; i < len; i++) {
                buf[align + i] = (unsigned char)rnd();
            }
            seed = len % 3 == 0 ? 0 : rnd();
            want = reference(seed, buf + align, len);
            for (k = 0; k < n; k++) {
                got = fn[k](seed, buf + align, len);
                if (got != want) {
                    fail_msg("%s: length %zu at +%zu: %08x, want %08x",
                             name[k], len, align, got, want);
                }
            }
        }
    }
}

/* A CRC continued over the second part equals the CRC of the whole. */
static void
continuing_is_the_same_as_one_pass(void **state)
{
    unsigned char buf[300];
    crc_fn        fn[3];
    const char   *name[3];
    size_t        n = paths(fn, name), cut, k, i;
    uint32_t      whole;

    (void)state;
    for (i = 0; i < sizeof(buf); i++) {
        buf[i] = (unsigned char)rnd();
    }
    whole = reference(0, buf, sizeof(buf));
    for (k = 0; k < n; k++) {
        for (cut = 0; cut <= sizeof(buf); cut++) {
            if (fn[k](fn[k](0, buf, cut), buf + cut, sizeof(buf) - cut)
                != whole)
            {
                fail_msg("%s: cut at %zu", name[k], cut);
            }
        }
    }
}

/*
 * What the ring relies on, on a span-sized record (412 bytes: the
 * header's 12 then a 400-byte body): every burst of up to 32 bits, at
 * every bit position, changes the CRC. A burst of length b has its first
 * and last bits set; between them, a few random patterns each.
 */
static void
every_short_burst_is_caught(void **state)
{
    static unsigned char buf[412];
    size_t               bit, b, t, i;
    uint32_t             good, pattern;

    (void)state;
    for (i = 0; i < sizeof(buf); i++) {
        buf[i] = (unsigned char)rnd();
    }
    good = sp_crc32c(0, buf, sizeof(buf));
    for (bit = 0; bit < sizeof(buf) * 8; bit++) {
        for (b = 1; b <= 32 && bit + b <= sizeof(buf) * 8; b++) {
            for (t = 0; t < (b > 2 ? 2u : 1u); t++) {
                pattern = b == 1 ? 1 : 1u | 1u << (b - 1) | rnd();
                pattern &= b == 32 ? 0xffffffffu : (1u << b) - 1;
                for (i = 0; i < b; i++) {
                    if (pattern >> i & 1) {
                        buf[(bit + i) / 8] ^= (unsigned char)(1u
                                                             << (bit + i) % 8);
                    }
                }
                if (sp_crc32c(0, buf, sizeof(buf)) == good) {
                    fail_msg("burst %08x of %zu bits at bit %zu missed",
                             pattern, b, bit);
                }
                for (i = 0; i < b; i++) {
                    if (pattern >> i & 1) {
                        buf[(bit + i) / 8] ^= (unsigned char)(1u
                                                             << (bit + i) % 8);
                    }
                }
            }
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_vectors),
        cmocka_unit_test(every_path_agrees_with_the_definition),
        cmocka_unit_test(continuing_is_the_same_as_one_pass),
        cmocka_unit_test(every_short_burst_is_caught),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
