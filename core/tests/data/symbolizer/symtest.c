/*
 * The program test_symbolizer.c names: compiled by the test, as a shared
 * object, with -g, without -g, and stripped, then loaded with dlopen.
 *
 * The test finds the lines it expects by the "LINE:" markers below, so
 * this file may be edited freely as long as every marker stays on the
 * line it describes. Code order matters: built with -fno-toplevel-reorder,
 * the functions are laid out in this order, so the static function and
 * the label follow an exported function, the trap a nearest-symbol
 * symbolizer falls into.
 */
#ifndef SP_SYMTEST_VARIANT
#define SP_SYMTEST_VARIANT "default"
#endif

#define SP_NOINLINE __attribute__((noinline, noclone, used))

/* Makes each variant's bytes, hence its build id, differ. */
const char *sp_symtest_variant = SP_SYMTEST_VARIANT;

/* The return address of the last call to sp_symtest_record. */
void *sp_symtest_return_address;
volatile int sp_symtest_sink;

SP_NOINLINE void
sp_symtest_record(void)
{
    sp_symtest_return_address = __builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

SP_NOINLINE int
sp_symtest_exported(int n)
{
    int r = n + 7;

    sp_symtest_record();                        /* LINE:exported_call */
    sp_symtest_sink = r;
    return r * 2;
}

/*
 * An exported symbol without a size (an assembly label, as hand-written
 * assembly often has): in .dynsym, so after stripping it is the nearest
 * symbol below sp_symtest_hidden.
 */
__asm__(".text\n"
        ".globl sp_symtest_label\n"
        ".type sp_symtest_label, @function\n"
        "sp_symtest_label:\n"
        "    nop\n"
        "    ret\n");

SP_NOINLINE static int
sp_symtest_hidden(int n)                        /* LINE:hidden_decl */
{
    int r = n * 3;

    sp_symtest_record();                        /* LINE:hidden_call */
    sp_symtest_sink = r;
    return r + 1;
}

static inline __attribute__((always_inline)) int
sp_symtest_inlined(int n)
{
    int r = n - 5;

    sp_symtest_record();                        /* LINE:inlined_call */
    sp_symtest_sink = r;
    return r;
}

SP_NOINLINE int
sp_symtest_outer(int n)
{
    int r;

    r = sp_symtest_inlined(n);                  /* LINE:outer_call */
    sp_symtest_sink = r;
    return r + 11;
}

/* The static function's address and a call into it, for the test. */
SP_NOINLINE void *
sp_symtest_hidden_address(void)
{
    return (void *)sp_symtest_hidden;
}

SP_NOINLINE int
sp_symtest_call_hidden(int n)
{
    int r = sp_symtest_hidden(n);

    sp_symtest_sink = r;
    return r;
}
