/*
 * One object file opened with libdwfl as the symbolizer opens it (at its
 * own addresses, its debug info found under /usr/lib/debug), for tests
 * that compare the symbolizer's indexes with libdw itself. Include after
 * sp_test.h.
 */
#ifndef SP_TEST_DWFL_H
#define SP_TEST_DWFL_H

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
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

#endif
