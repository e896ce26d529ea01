/*
 * The symbolizer's index of a symbol table (sp_symindex.c) against
 * dwfl_module_addrinfo itself, address by address: libc's .symtab (from
 * libc6-dbg), nginx's and libcrypto's .dynsym, and a small object made
 * of the cases that decide between symbols (aliases of every binding and
 * size, nested and overlapping symbols, labels of size 0, a local
 * function, an object in the code).
 */
#include "sp_test.h"
#include "sp_symindex.h"
#include "sp_test_dwfl.h"

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define LIBC     "/usr/lib/x86_64-linux-gnu/libc.so.6"
#define LIBCRYPTO "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"
#define NGINX    "/usr/sbin/nginx"

/* The cases, in the order they are laid out in .text. */
static const char cases_s[] =
    "    .text\n"
    /* A global function with a local one and a weak one inside. */
    "    .globl g_big\n    .type g_big, @function\n"
    "    .weak w_nested\n    .type w_nested, @function\n"
    "    .type l_nested, @function\n"
    "g_big:\n    .zero 8\n"
    "l_nested:\n    .zero 8\n"
    "w_nested:\n    .zero 16\n    .size w_nested, 16\n"
    "    .size l_nested, 8\n    .zero 32\n    .size g_big, 64\n"
    /* Aliases at one start: global, weak, local, of other sizes. */
    "    .globl a_global\n    .type a_global, @function\n"
    "    .weak a_weak\n    .type a_weak, @function\n"
    "    .type a_local, @function\n"
    "a_global:\na_weak:\na_local:\n    .zero 32\n"
    "    .size a_global, 32\n    .size a_weak, 48\n    .size a_local, 8\n"
    /* Weak and local only: the weak one is global enough. */
    "    .weak w_only\n    .type w_only, @function\n"
    "    .type l_only, @function\n"
    "w_only:\nl_only:\n    .zero 24\n"
    "    .size w_only, 12\n    .size l_only, 24\n"
    /* Two globals at one start: the smaller one. */
    "    .globl two_a\n    .type two_a, @function\n"
    "    .globl two_b\n    .type two_b, @function\n"
    "two_a:\ntwo_b:\n    .zero 32\n"
    "    .size two_a, 32\n    .size two_b, 16\n"
    /* Labels of size 0, global and local, in a gap. */
    "    .globl label_g\n    .type label_g, @function\n"
    "label_g:\n    .zero 8\n"
    "label_l:\n    .zero 8\n"
    "    .globl label_n\n"
    "label_n:\n    .zero 8\n"
    /* A local function no global one contains. */
    "    .type only_local, @function\n"
    "only_local:\n    .zero 16\n    .size only_local, 16\n"
    /* An object in the code. */
    "    .type text_obj, @object\n"
    "text_obj:\n    .zero 8\n    .size text_obj, 8\n"
    /* Overlapping globals, and a local over their seam. */
    "    .globl ov_a\n    .type ov_a, @function\n"
    "    .globl ov_b\n    .type ov_b, @function\n"
    "    .type ov_l, @function\n"
    "ov_a:\n    .zero 8\n"
    "ov_l:\n    .zero 8\n"
    "ov_b:\n    .zero 32\n"
    "    .size ov_a, 32\n    .size ov_b, 32\n    .size ov_l, 24\n"
    /* A label inside a function, and a function after a gap. */
    "    .globl g_after\n    .type g_after, @function\n"
    "    .zero 8\n"
    "g_after:\n    .zero 4\n"
    "in_after:\n    .zero 12\n    .size g_after, 16\n"
    "    .zero 16\n";

typedef struct tally {
    size_t checked;
    size_t named;       /* the index gave a symbol */
    size_t asked;       /* the index sent the address to libdwfl */
} tally;


/* One address: the index's answer, or its referral, against libdwfl's. */
static void
check(const module *m, const sp_symindex *x, uint64_t a, tally *t)
{
    GElf_Off    off = 0;
    GElf_Sym    want, got;
    GElf_Addr   value;
    Elf        *want_elf = NULL, *got_elf = NULL;
    const char *want_name, *got_name;
    bool        contains;
    int         ndx;

    memset(&want, 0, sizeof(want));
    want_name = dwfl_module_addrinfo(m->mod, a, &off, &want, NULL,
                                     &want_elf, NULL);
    contains = want_name != NULL
               && (want.st_size == 0 ? off == 0 : off < want.st_size);
    ndx = sp_symindex_find(x, a);
    t->checked++;
    if (ndx == SP_SYMINDEX_ASK) {
        t->asked++;
        return;
    }
    if (ndx == SP_SYMINDEX_NONE) {
        if (contains) {
            fail_msg("%#llx: libdwfl names %s+%#llx, the index nothing",
                     (unsigned long long)a, want_name,
                     (unsigned long long)off);
        }
        return;
    }
    got_name = dwfl_module_getsym_info(m->mod, ndx, &got, &value, NULL,
                                       &got_elf, NULL);
    if (!contains || got_name != want_name || a - value != off
        || got.st_size != want.st_size || got.st_info != want.st_info
        || got_elf != want_elf)
    {
        fail_msg("%#llx: libdwfl names %s+%#llx (size %llu), the index "
                 "%s+%#llx (size %llu)", (unsigned long long)a,
                 want_name != NULL ? want_name : "nothing",
                 (unsigned long long)off,
                 (unsigned long long)want.st_size,
                 got_name != NULL ? got_name : "nothing",
                 (unsigned long long)(a - value),
                 (unsigned long long)got.st_size);
    }
    t->named++;
}

/*
 * Every `step`th byte of the file's executable segments, and the bytes
 * at and before every symbol's start and end: where an off-by-one or a
 * wrong preference shows.
 */
static tally
check_module(const char *path, uint64_t step)
{
    module       m;
    sp_symindex *x = NULL;
    GElf_Sym     sym;
    GElf_Addr    value;
    tally        t = { 0, 0, 0 };
    size_t       n, i;
    uint64_t     a, start[8], end[8];
    int          syms, j, d;

    module_open(&m, path);
    assert_int_equal(sp_symindex_build(m.mod, &x), SP_OK);
    assert_non_null(x);
    assert_true(sp_symindex_bytes(x) > 0);
    n = module_code(&m, start, end, 8);
    for (i = 0; i < n; i++) {
        for (a = start[i]; a < end[i]; a += step) {
            check(&m, x, a, &t);
        }
    }
    syms = dwfl_module_getsymtab(m.mod);
    assert_true(syms > 1);
    assert_true(sp_symindex_bytes(x) <= sp_symindex_max_bytes(syms));
    for (j = 1; j < syms; j++) {
        if (dwfl_module_getsym_info(m.mod, j, &sym, &value, NULL, NULL,
                                    NULL) == NULL || value < 1)
        {
            continue;
        }
        for (d = -1; d <= 0; d++) {
            check(&m, x, value + (uint64_t)d, &t);
            if (sym.st_size > 0) {
                check(&m, x, value + sym.st_size + (uint64_t)d, &t);
            }
        }
    }
    print_message("%s: %d symbols, index %zu KiB; %zu addresses: %zu "
                  "named by the index, %zu left to libdwfl\n", path, syms,
                  sp_symindex_bytes(x) >> 10, t.checked, t.named, t.asked);
    sp_symindex_free(x);
    dwfl_end(m.dwfl);
    return t;
}

static void
libc_symtab_names_as_libdwfl_does(void **state)
{
    tally t;

    (void)state;
    t = check_module(LIBC, 97);
    /* libc6-dbg's .symtab, not libc's own .dynsym (3,000 symbols). */
    assert_true(t.checked > 40000);
    assert_true(t.named > t.checked / 2);
    /* Only what a label at the address decides: few. */
    assert_true(t.asked < t.checked / 50);
}

static void
nginx_and_libcrypto_dynsym_name_as_libdwfl_does(void **state)
{
    tally t;

    (void)state;
    t = check_module(NGINX, 251);
    assert_true(t.named > 1000);
    assert_true(t.asked < t.checked / 50);
    t = check_module(LIBCRYPTO, 251);
    assert_true(t.named > 10000);
    assert_true(t.asked < t.checked / 50);
}

static void
every_rule_between_symbols_names_as_libdwfl_does(void **state)
{
    char  src[PATH_MAX], so[PATH_MAX], cmd[3 * PATH_MAX];
    FILE *f;
    tally t;

    (void)state;
    snprintf(src, sizeof(src), "%s/cases.s", scratch_dir);
    snprintf(so, sizeof(so), "%s/libcases.so", scratch_dir);
    f = fopen(src, "w");
    assert_non_null(f);
    assert_int_equal(fputs(cases_s, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof(cmd), "cc -shared -nostdlib -o %s %s", so, src);
    assert_int_equal(system(cmd), 0);
    t = check_module(so, 1);
    assert_true(t.named > 200);
    /* The labels' own bytes, and nothing else. */
    assert_true(t.asked <= 8);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_rule_between_symbols_names_as_libdwfl_does),
        cmocka_unit_test(libc_symtab_names_as_libdwfl_does),
        cmocka_unit_test(nginx_and_libcrypto_dynsym_name_as_libdwfl_does),
    };

    return cmocka_run_group_tests(tests, scratch_setup, scratch_teardown);
}
