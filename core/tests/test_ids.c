#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_ids.h"
#include "sp_ids_cpu.h"

/* An injected source replaying fixed words, counting how many it gave. */
typedef struct script {
    const uint64_t *words;
    size_t n;
    size_t used;
} script;

static uint64_t
next_word(void *ctx)
{
    script *sc = ctx;

    assert_true(sc->used < sc->n);
    return sc->words[sc->used++];
}

static void
injected_words_become_ids_most_significant_first(void **state)
{
    const uint64_t words[] = {
        0x0102030405060708u, 0x090a0b0c0d0e0f10u, 0xa1a2a3a4a5a6a7a8u
    };
    const uint8_t trace[16] = {
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
    };
    const uint8_t span[8] = {
        0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8
    };
    script sc = {words, 3, 0};
    sp_idgen *gen = sp_idgen_create_from(next_word, &sc);
    uint8_t t[16], s[8];

    (void)state;
    assert_non_null(gen);
    sp_idgen_trace_id(gen, t);
    sp_idgen_span_id(gen, s);
    assert_memory_equal(t, trace, 16);
    assert_memory_equal(s, span, 8);
    assert_int_equal(sc.used, 3);
    sp_idgen_destroy(gen);
}

static void
trace_ids_are_never_zero(void **state)
{
    const uint64_t words[] = {0, 0, 0, 0, 0, 5};
    const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5};
    script sc = {words, 6, 0};
    sp_idgen *gen = sp_idgen_create_from(next_word, &sc);
    uint8_t t[16];

    (void)state;
    assert_non_null(gen);
    sp_idgen_trace_id(gen, t);
    /* Two zero ids skipped; a zero half of a non-zero id is kept. */
    assert_int_equal(sc.used, 6);
    assert_memory_equal(t, want, 16);
    assert_true(sp_trace_id_is_valid(t));
    sp_idgen_destroy(gen);
}

static void
span_ids_are_never_zero(void **state)
{
    const uint64_t words[] = {0, 0, 0, 0x8000000000000000u};
    const uint8_t want[8] = {0x80, 0, 0, 0, 0, 0, 0, 0};
    script sc = {words, 4, 0};
    sp_idgen *gen = sp_idgen_create_from(next_word, &sc);
    uint8_t s[8];

    (void)state;
    assert_non_null(gen);
    sp_idgen_span_id(gen, s);
    assert_int_equal(sc.used, 4);
    assert_memory_equal(s, want, 8);
    assert_true(sp_span_id_is_valid(s));
    sp_idgen_destroy(gen);
}

static void
reseeding_an_injected_generator_changes_nothing(void **state)
{
    const uint64_t words[] = {42};
    const uint8_t want[8] = {0, 0, 0, 0, 0, 0, 0, 42};
    script sc = {words, 1, 0};
    sp_idgen *gen = sp_idgen_create_from(next_word, &sc);
    uint8_t s[8];

    (void)state;
    assert_non_null(gen);
    assert_int_equal(sp_idgen_reseed(gen), SP_OK);
    assert_int_equal(sc.used, 0);
    sp_idgen_span_id(gen, s);
    assert_memory_equal(s, want, 8);
    sp_idgen_destroy(gen);
    sp_idgen_destroy(NULL);
}

static void
kernel_seeded_generators_differ(void **state)
{
    sp_idgen *a = sp_idgen_create(), *b = sp_idgen_create();
    uint8_t ta[16], tb[16], sa[8], sb[8];

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    sp_idgen_trace_id(a, ta);
    sp_idgen_trace_id(b, tb);
    sp_idgen_span_id(a, sa);
    sp_idgen_span_id(b, sb);
    assert_memory_not_equal(ta, tb, 16);
    assert_memory_not_equal(sa, sb, 8);
    sp_idgen_destroy(a);
    sp_idgen_destroy(b);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

#define DRAWS 4096

static void
kernel_seeded_ids_look_random(void **state)
{
    static uint64_t seen[DRAWS];
    sp_idgen *gen = sp_idgen_create();
    uint8_t s[8], t[16];
    size_t i, j, ones = 0;
    uint64_t v;

    (void)state;
    assert_non_null(gen);
    for (i = 0; i < DRAWS; i++) {
        sp_idgen_span_id(gen, s);
        assert_true(sp_span_id_is_valid(s));
        v = 0;
        for (j = 0; j < 8; j++) {
            v = v << 8 | s[j];
        }
        seen[i] = v;
        ones += (size_t)__builtin_popcountll(v);
    }
    qsort(seen, DRAWS, sizeof(seen[0]), cmp_u64);
    for (i = 1; i < DRAWS; i++) {
        assert_true(seen[i] != seen[i - 1]);
    }
    /* 262144 fair bits: mean 131072, sd 256; allow 8 sd. */
    assert_in_range(ones, 131072 - 2048, 131072 + 2048);
    for (i = 0; i < DRAWS; i++) {
        sp_idgen_trace_id(gen, t);
        assert_true(sp_trace_id_is_valid(t));
        assert_memory_not_equal(t, t + 8, 8);
    }
    sp_idgen_destroy(gen);
}

/*
 * The span id a forked child draws from gen, after reseeding or not,
 * while the parent keeps gen as it was.
 */
static void
child_span_id(sp_idgen *gen, bool reseed, uint8_t out[8])
{
    int fds[2];
    pid_t pid;
    int status;
    uint8_t s[8];

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (reseed && sp_idgen_reseed(gen) != SP_OK) {
            _exit(2);
        }
        sp_idgen_span_id(gen, s);
        _exit(write(fds[1], s, 8) == 8 ? 0 : 1);
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], out, 8), 8);
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void
reseeding_after_fork_stops_repeats(void **state)
{
    sp_idgen *gen = sp_idgen_create();
    uint8_t parent[8], child[8], reseeded[8], other[8];

    (void)state;
    assert_non_null(gen);
    /* Without a reseed the child repeats the parent's next id... */
    child_span_id(gen, false, child);
    sp_idgen_span_id(gen, parent);
    assert_memory_equal(child, parent, 8);
    /* ...with one it does not, and neither do its siblings. */
    child_span_id(gen, true, reseeded);
    child_span_id(gen, true, other);
    sp_idgen_span_id(gen, parent);
    assert_memory_not_equal(reseeded, parent, 8);
    assert_memory_not_equal(other, parent, 8);
    assert_memory_not_equal(reseeded, other, 8);
    sp_idgen_destroy(gen);
}

/* sp_idgen_ids draws what sp_idgen_trace_id then sp_idgen_span_id draw:
 * a forked child (same state) draws with it, the parent with the two. */
static void
ids_draws_as_trace_id_then_span_id(void **state)
{
    const uint64_t words[] = {0, 0, 7, 0, 9};
    const uint8_t want_t[16] = {0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0};
    const uint8_t want_s[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    script sc = {words, 5, 0};
    sp_idgen *gen = sp_idgen_create_from(next_word, &sc);
    uint8_t t[16], s[8], child[24], parent[24];
    int fds[2], status;
    pid_t pid;

    (void)state;
    assert_non_null(gen);
    sp_idgen_ids(gen, t, s);
    assert_int_equal(sc.used, 5);
    assert_memory_equal(t, want_t, 16);
    assert_memory_equal(s, want_s, 8);
    sp_idgen_destroy(gen);

    gen = sp_idgen_create();
    assert_non_null(gen);
    for (int round = 0; round < 64; round++) {
        assert_int_equal(pipe(fds), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            sp_idgen_ids(gen, child, child + 16);
            /* and the state it left is the one the two calls leave */
            sp_idgen_span_id(gen, s);
            _exit(write(fds[1], child, 24) == 24
                  && write(fds[1], s, 8) == 8 ? 0 : 1);
        }
        close(fds[1]);
        assert_int_equal(read(fds[0], child, 24), 24);
        assert_int_equal(read(fds[0], t, 8), 8);
        close(fds[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        sp_idgen_trace_id(gen, parent);
        sp_idgen_span_id(gen, parent + 16);
        sp_idgen_span_id(gen, s);
        assert_memory_equal(child, parent, 24);
        assert_memory_equal(t, s, 8);
    }
    sp_idgen_destroy(gen);
}

/* n bytes from 2n hex digits. */
static void
from_hex(const char *hex, uint8_t *out, size_t n)
{
    size_t i;
    unsigned v;

    for (i = 0; i < n; i++) {
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* FIPS-197's key of appendix C.1, which AES generators are made with. */
static const uint8_t fips_key[16] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
};

static sp_idgen *
aes_gen(const char *ctr_hex)
{
    uint8_t ctr[16];
    sp_idgen *gen;

    from_hex(ctr_hex, ctr, 16);
    gen = sp_idgen_create_aes(fips_key, ctr);
    assert_non_null(gen);
    return gen;
}

/*
 * With AES-NI, the ids are AES-128's blocks of successive counters (the
 * first block is FIPS-197's C.1; the others are as OpenSSL's
 * aes-128-ecb encrypts the counters), a span id the first half of one.
 */
static void
aes_ids_are_blocks_of_successive_counters(void **state)
{
    sp_idgen *gen;
    uint8_t t[16], s[8], want[16];

    (void)state;
    if (!sp_idgen_aes_available()) {
        skip();
    }
    gen = aes_gen("00112233445566778899aabbccddeeff");
    sp_idgen_trace_id(gen, t);
    from_hex("69c4e0d86a7b0430d8cdb78070b4c55a", want, 16);
    assert_memory_equal(t, want, 16);
    sp_idgen_span_id(gen, s);
    from_hex("a556156c72876577", want, 8);
    assert_memory_equal(s, want, 8);
    sp_idgen_ids(gen, t, s);
    from_hex("a7c46bebce78544d528895ad4553702c", want, 16);
    assert_memory_equal(t, want, 16);
    from_hex("ce36ffdc28b4e8ff", want, 8);
    assert_memory_equal(s, want, 8);
    sp_idgen_destroy(gen);
}

/*
 * The counters whose blocks make a zero trace id, and a zero span id (AES
 * decrypts zeros into them): each is drawn again from the next counter,
 * by the single calls and by the calls that draw both at once.
 */
static void
aes_zero_ids_are_drawn_again(void **state)
{
    static const char *zero_trace = "7b1d29a16cf8ccab84f0b8a598e42fa6";
    static const char *zero_span = "45789108d4547dd7ae6e74a59b724209";
    sp_idgen *gen;
    sp_span_context ctx;
    char tp[SP_TRACEPARENT_SIZE];
    uint8_t t[16], s[8], want[16];
    int way;

    (void)state;
    if (!sp_idgen_aes_available()) {
        skip();
    }
    gen = aes_gen(zero_trace);
    sp_idgen_trace_id(gen, t);
    from_hex("7c54947a0108ca8351cfe6bdeb9e7f0e", want, 16);
    assert_memory_equal(t, want, 16);
    sp_idgen_destroy(gen);

    for (way = 0; way < 2; way++) {
        gen = aes_gen(zero_trace);
        if (way == 0) {
            sp_idgen_ids(gen, t, s);
        } else {
            sp_idgen_new_trace(gen, &ctx, tp);
            memcpy(t, ctx.trace_id, 16);
            memcpy(s, ctx.span_id, 8);
            assert_string_equal(tp, "00-7c54947a0108ca8351cfe6bdeb9e7f0e-"
                                    "046a42ee43dc3edb-00");
        }
        from_hex("7c54947a0108ca8351cfe6bdeb9e7f0e", want, 16);
        assert_memory_equal(t, want, 16);
        from_hex("046a42ee43dc3edb", want, 8);
        assert_memory_equal(s, want, 8);
        sp_idgen_destroy(gen);

        gen = aes_gen(zero_span);
        if (way == 0) {
            sp_idgen_ids(gen, t, s);
        } else {
            sp_idgen_new_trace(gen, &ctx, tp);
            memcpy(t, ctx.trace_id, 16);
            memcpy(s, ctx.span_id, 8);
            assert_string_equal(tp, "00-75c7b9206e6dd3b1cec20b6ceab0ae5d-"
                                    "8d0a2c74499d313a-00");
        }
        from_hex("75c7b9206e6dd3b1cec20b6ceab0ae5d", want, 16);
        assert_memory_equal(t, want, 16);
        from_hex("8d0a2c74499d313a", want, 8);
        assert_memory_equal(s, want, 8);
        sp_idgen_destroy(gen);
    }

    /* a single span id skips the zero one too */
    gen = aes_gen(zero_span);
    sp_idgen_trace_id(gen, t);
    sp_idgen_span_id(gen, s);
    from_hex("8d0a2c74499d313a", want, 8);
    assert_memory_equal(s, want, 8);
    sp_idgen_destroy(gen);
}

/* What sp_idgen_new_trace() writes: the ids sp_idgen_ids() draws, no
 * flags, and their traceparent as sp_traceparent_format() writes it. */
static void
check_new_trace(sp_idgen *a, sp_idgen *b)
{
    sp_span_context ctx, want;
    char tp[SP_TRACEPARENT_SIZE], want_tp[SP_TRACEPARENT_SIZE];

    memset(&ctx, 0xff, sizeof(ctx));
    memset(tp, 'X', sizeof(tp));
    sp_idgen_new_trace(a, &ctx, tp);
    sp_idgen_ids(b, want.trace_id, want.span_id);
    want.trace_flags = 0;
    assert_memory_equal(&ctx, &want, sizeof(ctx));
    sp_traceparent_format(&want, want_tp);
    assert_string_equal(tp, want_tp);
}

static void
new_trace_is_the_ids_and_their_traceparent(void **state)
{
    const uint64_t words[] = {
        0x0102030405060708u, 0x090a0b0c0d0e0f10u, 0xa1a2a3a4a5a6a7a8u,
        0x0102030405060708u, 0x090a0b0c0d0e0f10u, 0xa1a2a3a4a5a6a7a8u
    };
    script sa = {words, 3, 0}, sb = {words + 3, 3, 0};
    sp_idgen *a, *b;
    sp_span_context ctx;
    char tp[SP_TRACEPARENT_SIZE];
    int i;

    (void)state;
    a = sp_idgen_create_from(next_word, &sa);
    b = sp_idgen_create_from(next_word, &sb);
    check_new_trace(a, b);
    sp_idgen_destroy(a);
    sp_idgen_destroy(b);

    a = sp_idgen_create_from(next_word, &sa);
    sa.used = 0;
    sp_idgen_new_trace(a, &ctx, tp);
    assert_string_equal(tp, "00-0102030405060708090a0b0c0d0e0f10-"
                            "a1a2a3a4a5a6a7a8-00");
    sp_idgen_destroy(a);

    if (!sp_idgen_aes_available()) {
        return;
    }
    /* every digit, and the counter's low half as it wraps */
    a = aes_gen("f0ffffffffffffff0123456789abcdef");
    b = aes_gen("f0ffffffffffffff0123456789abcdef");
    for (i = 0; i < 4096; i++) {
        check_new_trace(a, b);
    }
    sp_idgen_destroy(a);
    sp_idgen_destroy(b);
}

/* The kernel-seeded tests run twice: with AES where the CPU has it, and
 * with xoshiro256**. */
static int
with_aes(void **state)
{
    (void)state;
    sp_idgen_use_aes(true);
    return 0;
}

static int
with_xoshiro(void **state)
{
    (void)state;
    sp_idgen_use_aes(false);
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(injected_words_become_ids_most_significant_first),
        cmocka_unit_test(trace_ids_are_never_zero),
        cmocka_unit_test(span_ids_are_never_zero),
        cmocka_unit_test(reseeding_an_injected_generator_changes_nothing),
        cmocka_unit_test(kernel_seeded_generators_differ),
        cmocka_unit_test(kernel_seeded_ids_look_random),
        cmocka_unit_test(reseeding_after_fork_stops_repeats),
        cmocka_unit_test(ids_draws_as_trace_id_then_span_id),
        cmocka_unit_test(aes_ids_are_blocks_of_successive_counters),
        cmocka_unit_test(aes_zero_ids_are_drawn_again),
        cmocka_unit_test(new_trace_is_the_ids_and_their_traceparent),
    };

    return cmocka_run_group_tests_name("ids (aes)", tests, with_aes, NULL)
           | cmocka_run_group_tests_name("ids (xoshiro256**)", tests,
                                         with_xoshiro, with_aes);
}
