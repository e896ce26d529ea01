#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_ids.h"

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
    };

    return cmocka_run_group_tests_name("ids", tests, NULL, NULL);
}
