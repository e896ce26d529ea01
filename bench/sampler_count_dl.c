/*
 * Counts dl_iterate_phdr calls in a process, to see whether the unwinder
 * inside the sampler's handler asks the loader (bench/README.md):
 *
 *   cc -shared -fPIC -O2 bench/sampler_count_dl.c -o /tmp/count_dl.so -ldl
 *   LD_PRELOAD=/tmp/count_dl.so build/bench/sampler_bench 21
 *
 * Prints the count to stderr at exit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>

typedef int (*sp_phdr_cb)(struct dl_phdr_info *, size_t, void *);

static atomic_long sp_calls;

int
dl_iterate_phdr(sp_phdr_cb cb, void *data)
{
    static int (*real)(sp_phdr_cb, void *);

    if (real == NULL) {
        real = (int (*)(sp_phdr_cb, void *))dlsym(RTLD_NEXT,
                                                  "dl_iterate_phdr");
    }
    atomic_fetch_add(&sp_calls, 1);
    return real(cb, data);
}

__attribute__((destructor)) static void
sp_report(void)
{
    fprintf(stderr, "dl_iterate_phdr calls: %ld\n", (long)sp_calls);
}
