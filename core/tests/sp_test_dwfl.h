/*
 * One object file opened with libdwfl as the symbolizer opens it (at its
 * own addresses, its debug info found under /usr/lib/debug), for tests
 * that compare the symbolizer's indexes with libdw itself, and a scratch
 * directory for the objects they build. Include after sp_test.h.
 */
#ifndef SP_TEST_DWFL_H
#define SP_TEST_DWFL_H

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct module {
    Dwfl        *dwfl;
    Dwfl_Module *mod;
    Elf         *elf;
    GElf_Addr    bias;
} module;

static void
module_open(module *m, const char *path)
{
    static char                *debuginfo_path = "/usr/lib/debug";
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_build_id_find_elf,
        .find_debuginfo = dwfl_build_id_find_debuginfo,
        .section_address = dwfl_offline_section_address,
        .debuginfo_path = &debuginfo_path,
    };
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    m->dwfl = dwfl_begin(&callbacks);
    assert_non_null(m->dwfl);
    dwfl_report_begin(m->dwfl);
    m->mod = dwfl_report_elf(m->dwfl, "m", path, fd, 0, true);
    assert_non_null(m->mod);
    dwfl_report_end(m->dwfl, NULL, NULL);
    m->elf = dwfl_module_getelf(m->mod, &m->bias);
    assert_non_null(m->elf);
}

/* Where m's code lies, at its own addresses: its executable segments
 * [start, end); how many (at most max). */
static size_t
module_code(const module *m, uint64_t *start, uint64_t *end, size_t max)
{
    GElf_Phdr ph;
    size_t    n, i, k = 0;

    assert_int_equal(elf_getphdrnum(m->elf, &n), 0);
    for (i = 0; i < n && k < max; i++) {
        if (gelf_getphdr(m->elf, (int)i, &ph) == NULL
            || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
        {
            continue;
        }
        start[k] = ph.p_vaddr + m->bias;
        end[k++] = ph.p_vaddr + ph.p_memsz + m->bias;
    }
    return k;
}

/* The group's scratch directory (scratch_setup, scratch_teardown). */
static char scratch_dir[64];

static int
scratch_setup(void **state)
{
    (void)state;
    /* libdwfl would ask debuginfod servers for what is not here. */
    unsetenv("DEBUGINFOD_URLS");
    snprintf(scratch_dir, sizeof(scratch_dir), "/tmp/sp_dwfl_test.XXXXXX");
    return mkdtemp(scratch_dir) == NULL ? -1 : 0;
}

static int
scratch_teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", scratch_dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
