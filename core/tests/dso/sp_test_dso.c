/*
 * A shared object test_sampler loads and unloads in sampled threads: its
 * code is new to the unwinder at each load, so a sample in it, or in the
 * loader that maps it and runs its constructor, needs unwind tables the
 * unwinder has not seen.
 */
#include <stdint.h>

#define SP_TEST_DSO_ROUNDS 2000u

volatile uint64_t sp_test_dso_sink;

static uint64_t __attribute__((noinline))
sp_test_dso_mix(uint64_t x)
{
    return x * 6364136223846793005u + 1442695040888963407u;
}

__attribute__((visibility("default"))) uint64_t
sp_test_dso_work(uint64_t seed)
{
    unsigned i;

    for (i = 0; i < SP_TEST_DSO_ROUNDS; i++) {
        seed = sp_test_dso_mix(seed);
    }
    sp_test_dso_sink = seed;
    return seed;
}

__attribute__((constructor)) static void
sp_test_dso_init(void)
{
    sp_test_dso_work(1);
}
