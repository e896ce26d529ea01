#include "sp_test.h"
#include "sp_symbolizer.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * The test program (data/symbolizer/symtest.c) is built here, as shared
 * objects, in every form the symbolizer meets: with DWARF, with .symtab
 * only, stripped to .dynsym, with its DWARF in a separate file found by
 * build id or by debuglink, without a build id. Functions stay in source
 * order, calls stay calls, identical code is not merged.
 */
#define SP_TEST_CFLAGS "-shared -fPIC -O1 -fno-toplevel-reorder " \
    "-fno-optimize-sibling-calls -fno-inline-small-functions -fno-ipa-icf"

typedef enum variant_id {
    V_G,            /* -g */
    V_NOG,          /* no -g: .symtab */
    V_STRIPPED,     /* strip --strip-unneeded: .dynsym */
    V_BID,          /* stripped, DWARF in debug/.build-id/ */
    V_LINK,         /* stripped, DWARF next to it by debuglink */
    V_LINKCRC,      /* no build id, DWARF in .debug/ by debuglink + CRC */
    V_WRONG,        /* stripped, another build's DWARF at its build id */
    V_WRONGLINK,    /* no build id, debuglink to a file of another CRC */
    V_NOBID,        /* no -g, no build id */
    V_OLD,          /* -g, replaced on disk by V_NEW during a test */
    V_COUNT
} variant_id;

static const char *const variant_names[V_COUNT] = {
    "g", "nog", "stripped", "bid", "link", "linkcrc", "wrong", "wronglink",
    "nobid", "old"
};

typedef struct variant {
    char      path[PATH_MAX];
    void     *handle;
    uintptr_t exported;         /* sp_symtest_exported */
    size_t    exported_size;
    uintptr_t label;            /* sp_symtest_label: size 0 */
    uintptr_t hidden;           /* sp_symtest_hidden: static */
    uintptr_t ra_exported;      /* return addresses of calls in each */
    uintptr_t ra_hidden;
    uintptr_t ra_inlined;       /* inlined into sp_symtest_outer */
} variant;

typedef struct table {
    sp_object objects[512];
    char     *paths[512];
    size_t    count;
    int       seen;
} table;

/* Return addresses in libc, and their names from libc6-dbg's DWARF. */
#define LIBC_ADDRESSES 1000

typedef struct answer {
    char    *function;
    char    *file;
    uint32_t line;
} answer;

static const sp_object *libc_object;
static uintptr_t        libc_at[LIBC_ADDRESSES];
static answer           libc_want[LIBC_ADDRESSES];
static size_t           libc_dwarf;     /* 0: not looked up yet */

static char    dir[64];        /* mkdtemp: short */
static char    source[PATH_MAX];
static variant variants[V_COUNT];
static table   objects;

/* The test's own code, to name in the executable. */
static volatile int sp_test_sink;
static void        *sp_test_return_address;

__attribute__((noinline, noclone)) static void
sp_test_record(void)
{
    sp_test_return_address = __builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) void
sp_test_inlined(void)
{
    sp_test_record();
    sp_test_sink++;
}

__attribute__((noinline, noclone, used)) static void
sp_test_own_function(void)
{
    sp_test_inlined();
    sp_test_sink++;
}

/* ---- building and loading the test program */

__attribute__((format(printf, 1, 2))) static bool
run(const char *fmt, ...)
{
    char    cmd[16384];
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return n > 0 && (size_t)n < sizeof(cmd) && system(cmd) == 0;
}

static const char *
lib(variant_id v)
{
    return variants[v].path;
}

static bool
build(void)
{
    int v;

    for (v = 0; v < V_COUNT; v++) {
        snprintf(variants[v].path, sizeof(variants[v].path),
                 "%s/libsymtest_%s.so", dir, variant_names[v]);
    }
    return run("cc " SP_TEST_CFLAGS " -g -DSP_SYMTEST_VARIANT='\"g\"' "
               "%s -o %s", source, lib(V_G))
        && run("cc " SP_TEST_CFLAGS " -DSP_SYMTEST_VARIANT='\"nog\"' "
               "%s -o %s", source, lib(V_NOG))
        && run("cc " SP_TEST_CFLAGS " -DSP_SYMTEST_VARIANT='\"stripped\"' "
               "%s -o %s && strip --strip-unneeded %s", source,
               lib(V_STRIPPED), lib(V_STRIPPED))
        && run("cc " SP_TEST_CFLAGS " -g -DSP_SYMTEST_VARIANT='\"bid\"' "
               "%s -o %s && objcopy --only-keep-debug %s %s/bid.debug "
               "&& strip --strip-unneeded %s", source, lib(V_BID),
               lib(V_BID), dir, lib(V_BID))
        && run("cc " SP_TEST_CFLAGS " -g -DSP_SYMTEST_VARIANT='\"link\"' "
               "%s -o %s && objcopy --only-keep-debug %s %s/link.debug "
               "&& strip --strip-unneeded %s "
               "&& objcopy --add-gnu-debuglink=%s/link.debug %s",
               source, lib(V_LINK), lib(V_LINK), dir, lib(V_LINK), dir,
               lib(V_LINK))
        && run("mkdir -p %s/.debug && cc " SP_TEST_CFLAGS " -g "
               "-Wl,--build-id=none -DSP_SYMTEST_VARIANT='\"linkcrc\"' "
               "%s -o %s && objcopy --only-keep-debug %s "
               "%s/.debug/linkcrc.debug && strip --strip-unneeded %s "
               "&& objcopy --add-gnu-debuglink=%s/.debug/linkcrc.debug %s",
               dir, source, lib(V_LINKCRC), lib(V_LINKCRC), dir,
               lib(V_LINKCRC), dir, lib(V_LINKCRC))
        && run("cc " SP_TEST_CFLAGS " -g -DSP_SYMTEST_VARIANT='\"wrong\"' "
               "%s -o %s && strip --strip-unneeded %s "
               "&& objcopy --only-keep-debug %s %s/g.debug", source,
               lib(V_WRONG), lib(V_WRONG), lib(V_G), dir)
        && run("cc " SP_TEST_CFLAGS " -g -Wl,--build-id=none "
               "-DSP_SYMTEST_VARIANT='\"wronglink\"' %s -o %s "
               "&& objcopy --only-keep-debug %s %s/wronglink.debug "
               "&& strip --strip-unneeded %s "
               "&& objcopy --add-gnu-debuglink=%s/wronglink.debug %s "
               "&& cp %s/.debug/linkcrc.debug %s/wronglink.debug",
               source, lib(V_WRONGLINK), lib(V_WRONGLINK), dir,
               lib(V_WRONGLINK), dir, lib(V_WRONGLINK), dir, dir)
        && run("cc " SP_TEST_CFLAGS " -Wl,--build-id=none "
               "-DSP_SYMTEST_VARIANT='\"nobid\"' %s -o %s", source,
               lib(V_NOBID))
        && run("cc " SP_TEST_CFLAGS " -g -DSP_SYMTEST_VARIANT='\"old\"' "
               "%s -o %s && cc " SP_TEST_CFLAGS " -g "
               "-DSP_SYMTEST_VARIANT='\"new\"' %s -o %s/libsymtest_new.so",
               source, lib(V_OLD), source, dir)
        && run("cc -c -g %s -o %s/symtest.o && echo text >%s/notes.txt "
               "&& mkfifo %s/fifo", source, dir, dir, dir);
}

static void *
sym(void *handle, const char *name)
{
    return dlsym(handle, name);
}

static bool
load(variant *v)
{
    int               (*exported)(int);
    int               (*call_hidden)(int);
    int               (*outer)(int);
    void             *(*hidden_address)(void);
    void            **ra;
    Dl_info           info;
    const ElfW(Sym)  *s = NULL;

    v->handle = dlopen(v->path, RTLD_NOW | RTLD_LOCAL);
    if (v->handle == NULL) {
        return false;
    }
    *(void **)&exported = sym(v->handle, "sp_symtest_exported");
    *(void **)&call_hidden = sym(v->handle, "sp_symtest_call_hidden");
    *(void **)&outer = sym(v->handle, "sp_symtest_outer");
    *(void **)&hidden_address = sym(v->handle, "sp_symtest_hidden_address");
    ra = sym(v->handle, "sp_symtest_return_address");
    v->label = (uintptr_t)sym(v->handle, "sp_symtest_label");
    if (exported == NULL || call_hidden == NULL || outer == NULL
        || hidden_address == NULL || ra == NULL || v->label == 0)
    {
        return false;
    }
    v->exported = (uintptr_t)sym(v->handle, "sp_symtest_exported");
    v->hidden = (uintptr_t)hidden_address();
    exported(1);
    v->ra_exported = (uintptr_t)*ra;
    call_hidden(2);
    v->ra_hidden = (uintptr_t)*ra;
    outer(3);
    v->ra_inlined = (uintptr_t)*ra;
    if (dladdr1((void *)v->exported, &info, (void **)&s, RTLD_DL_SYMENT) == 0
        || s == NULL)
    {
        return false;
    }
    v->exported_size = s->st_size;
    return true;
}

/* ---- the worker's side: its objects, as the sampler will collect them */

static size_t
note_build_id(const struct dl_phdr_info *info, const ElfW(Phdr) *ph,
    uint8_t *out)
{
    const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
    size_t         left = ph->p_memsz;
    size_t         align = ph->p_align == 8 ? 8 : 4;
    size_t         name, desc, need;
    ElfW(Nhdr)     n;

    while (left >= sizeof(n)) {
        memcpy(&n, p, sizeof(n));
        name = (n.n_namesz + align - 1) & ~(align - 1);
        desc = (n.n_descsz + align - 1) & ~(align - 1);
        need = sizeof(n) + name + desc;
        if (need > left) {
            break;
        }
        if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4
            && memcmp(p + sizeof(n), "GNU", 4) == 0 && n.n_descsz > 0
            && n.n_descsz <= SP_BUILD_ID_MAX)
        {
            memcpy(out, p + sizeof(n) + name, n.n_descsz);
            return n.n_descsz;
        }
        p += need;
        left -= need;
    }
    return 0;
}

static int
collect_one(struct dl_phdr_info *info, size_t size, void *ctx)
{
    table      *t = ctx;
    const char *name = info->dlpi_name;
    char        exe[PATH_MAX];
    uint8_t     id[SP_BUILD_ID_MAX];
    size_t      id_len = 0;
    ssize_t     n;
    sp_object  *o;
    int         i;

    (void)size;
    /* The first is the program, unnamed; argv[0] may be anything. */
    if (t->seen++ == 0 && (name == NULL || name[0] == '\0')) {
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0) {
            return 0;
        }
        exe[n] = '\0';
        name = exe;
    }
    if (name == NULL) {
        return 0;
    }
    for (i = 0; i < info->dlpi_phnum && id_len == 0; i++) {
        if (info->dlpi_phdr[i].p_type == PT_NOTE) {
            id_len = note_build_id(info, &info->dlpi_phdr[i], id);
        }
    }
    for (i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_LOAD
            || !(info->dlpi_phdr[i].p_flags & PF_X)
            || t->count == sizeof(t->objects) / sizeof(t->objects[0]))
        {
            continue;
        }
        o = &t->objects[t->count];
        t->paths[t->count] = strdup(name);
        o->start = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        o->end = o->start + info->dlpi_phdr[i].p_memsz;
        o->load_bias = info->dlpi_addr;
        o->file_offset = info->dlpi_phdr[i].p_offset;
        memcpy(o->build_id, id, id_len);
        o->build_id_len = (uint8_t)id_len;
        o->path = t->paths[t->count];
        o->path_len = strlen(name);
        t->count++;
    }
    return 0;
}

static void
collect(table *t)
{
    size_t i;

    for (i = 0; i < t->count; i++) {
        free(t->paths[i]);
    }
    memset(t, 0, sizeof(*t));
    dl_iterate_phdr(collect_one, t);
}

static const sp_object *
object_of(const char *path)
{
    size_t i;

    for (i = 0; i < objects.count; i++) {
        if (strcmp(objects.paths[i], path) == 0) {
            return &objects.objects[i];
        }
    }
    return NULL;
}

/* Puts a debug file where the symbolizer looks for the object's by id. */
static bool
place_by_build_id(const char *debug_file, variant_id v)
{
    const sp_object *o = object_of(lib(v));
    char             hex[2 * SP_BUILD_ID_MAX + 1] = "";
    int              i;

    if (o == NULL || o->build_id_len < 2) {
        return false;
    }
    for (i = 1; i < o->build_id_len; i++) {
        snprintf(hex + 2 * (i - 1), 3, "%02x", o->build_id[i]);
    }
    return run("mkdir -p %s/debug/.build-id/%02x && mv %s "
               "%s/debug/.build-id/%02x/%s.debug", dir, o->build_id[0],
               debug_file, dir, o->build_id[0], hex);
}

static int
setup(void **state)
{
    char  file[PATH_MAX];
    char *slash;
    int   v;

    (void)state;
    /* The test program sits next to this file's source. */
    snprintf(file, sizeof(file), "%s", __FILE__);
    slash = strrchr(file, '/');
    snprintf(slash == NULL ? file : slash + 1,
             sizeof(file) - (slash == NULL ? 0 : (size_t)(slash + 1 - file)),
             "data/symbolizer/symtest.c");
    if (realpath(file, source) == NULL) {
        fprintf(stderr, "test program %s not found\n", file);
        return -1;
    }
    snprintf(dir, sizeof(dir), "/tmp/sp_symtest.XXXXXX");
    if (mkdtemp(dir) == NULL || !build()) {
        fprintf(stderr, "building the test program in %s failed\n", dir);
        return -1;
    }
    for (v = 0; v < V_COUNT; v++) {
        if (!load(&variants[v])) {
            fprintf(stderr, "loading %s failed: %s\n", lib(v), dlerror());
            return -1;
        }
    }
    collect(&objects);
    snprintf(file, sizeof(file), "%s/bid.debug", dir);
    if (!place_by_build_id(file, V_BID)) {
        return -1;
    }
    snprintf(file, sizeof(file), "%s/g.debug", dir);
    return place_by_build_id(file, V_WRONG) ? 0 : -1;
}

static int
teardown(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < objects.count; i++) {
        free(objects.paths[i]);
    }
    for (i = 0; i < LIBC_ADDRESSES; i++) {
        free(libc_want[i].function);
        free(libc_want[i].file);
    }
    for (i = 0; i < V_COUNT; i++) {
        if (variants[i].handle != NULL) {
            dlclose(variants[i].handle);
        }
    }
    if (dir[0] != '\0') {
        run("rm -rf %s", dir);
    }
    return 0;
}

/* ---- helpers */

static uint32_t
marker_line(const char *marker)
{
    char     want[64];
    char     text[512];
    FILE    *f = fopen(source, "r");
    uint32_t line = 0, found = 0;

    snprintf(want, sizeof(want), "LINE:%s ", marker);
    while (f != NULL && found == 0 && fgets(text, sizeof(text), f) != NULL) {
        line++;
        if (strstr(text, want) != NULL) {
            found = line;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    assert_true(found > 0);
    return found;
}

/* What sp_symbolizer_over_cap_fn was told. */
typedef struct over_cap_told {
    int    times;
    char   path[PATH_MAX];
    char   debug_path[PATH_MAX];
    size_t first_bytes;
} over_cap_told;

static void
over_cap_tell(void *ctx, const char *path, const char *debug_path,
    size_t first_bytes)
{
    over_cap_told *t = ctx;

    t->times++;
    snprintf(t->path, sizeof(t->path), "%s", path);
    snprintf(t->debug_path, sizeof(t->debug_path), "%s",
             debug_path != NULL ? debug_path : "");
    t->first_bytes = first_bytes;
}

static sp_symbolizer *
symbolizer_told(const char *debug_dirs, uint32_t max_objects,
    uint32_t max_addresses, size_t max_debug_bytes, over_cap_told *told)
{
    sp_symbolizer_options options = {
        .debug_dirs = debug_dirs, .max_objects = max_objects,
        .max_addresses = max_addresses, .max_debug_bytes = max_debug_bytes,
        .over_cap = told != NULL ? over_cap_tell : NULL,
        .over_cap_ctx = told
    };
    sp_symbolizer *s = NULL;

    assert_int_equal(sp_symbolizer_create(&options, &s), SP_OK);
    assert_non_null(s);
    return s;
}

static sp_symbolizer *
symbolizer_capped(const char *debug_dirs, uint32_t max_objects,
    uint32_t max_addresses, size_t max_debug_bytes)
{
    return symbolizer_told(debug_dirs, max_objects, max_addresses,
                           max_debug_bytes, NULL);
}

static sp_symbolizer *
symbolizer(const char *debug_dirs, uint32_t max_objects,
    uint32_t max_addresses)
{
    return symbolizer_capped(debug_dirs, max_objects, max_addresses, 0);
}

static sp_symbol
lookup_in(sp_symbolizer *s, const sp_object *table, size_t count,
    uintptr_t address, bool return_address, sp_status want)
{
    sp_symbol out;

    assert_int_equal(sp_symbolizer_lookup(s, table, count, address,
                                          return_address, &out), want);
    return out;
}

static sp_symbol
lookup(sp_symbolizer *s, uintptr_t address, bool return_address)
{
    return lookup_in(s, objects.objects, objects.count, address,
                     return_address, SP_OK);
}

static void
assert_function(const sp_symbol *sym, const char *function,
    sp_symbol_source source_want)
{
    assert_int_equal(sym->file_state, SP_OBJECT_FILE_OK);
    assert_non_null(sym->frame.function);
    assert_string_equal(sym->frame.function, function);
    assert_int_equal(sym->source, source_want);
}

static void
assert_unnamed(const sp_symbol *sym, uintptr_t address, variant_id v)
{
    assert_null(sym->frame.function);
    assert_null(sym->frame.file);
    assert_int_equal(sym->frame.line, 0);
    assert_int_equal(sym->inline_count, 0);
    assert_int_equal(sym->source, SP_SYMBOL_NONE);
    /* Unnamed, but its mapping and address are kept for later. */
    assert_non_null(sym->object);
    assert_string_equal(sym->object->path, lib(v));
    assert_true(sym->address == address);
    assert_true(sym->elf_address == address - sym->object->load_bias);
}

static void
assert_no_line(const sp_symbol *sym)
{
    assert_null(sym->frame.file);
    assert_int_equal(sym->frame.line, 0);
    assert_int_equal(sym->inline_count, 0);
}

/* What libdwfl alone says of an address: the trap a test guards. */
static char *
naive_name(const char *path, uint64_t elf_address, int *line)
{
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_build_id_find_elf,
        .find_debuginfo = dwfl_build_id_find_debuginfo,
    };
    Dwfl        *dwfl = dwfl_begin(&callbacks);
    Dwfl_Module *mod;
    Dwfl_Line   *row;
    GElf_Off     offset;
    GElf_Sym     s;
    const char  *name = NULL;
    char        *copy = NULL;
    int          fd = open(path, O_RDONLY | O_CLOEXEC);

    *line = 0;
    assert_non_null(dwfl);
    assert_true(fd >= 0);
    dwfl_report_begin(dwfl);
    mod = dwfl_report_elf(dwfl, "naive", path, fd, 0, true);
    assert_non_null(mod);
    dwfl_report_end(dwfl, NULL, NULL);
    name = dwfl_module_addrinfo(mod, elf_address, &offset, &s, NULL, NULL,
                                NULL);
    if (name != NULL) {
        copy = strdup(name);
    }
    row = dwfl_module_getsrc(mod, elf_address);
    if (row != NULL) {
        dwfl_lineinfo(row, NULL, line, NULL, NULL, NULL);
    }
    dwfl_end(dwfl);
    return copy;
}

static int
count_fds(void)
{
    DIR           *d = opendir("/proc/self/fd");
    struct dirent *e;
    int            n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        n++;
    }
    closedir(d);
    return n;
}

/* ---- tests */

static void
dwarf_names_functions_files_and_lines(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    variant       *v = &variants[V_G];
    sp_symbol      r;

    (void)state;
    r = lookup(s, v->ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DWARF);
    assert_string_equal(r.frame.file, source);
    assert_int_equal(r.frame.line, marker_line("exported_call"));
    assert_int_equal(r.inline_count, 0);
    assert_string_equal(r.object->path, lib(V_G));
    assert_true(r.object == object_of(lib(V_G)));
    assert_int_equal(r.object_index, r.object - objects.objects);
    assert_true(r.address == v->ra_exported);
    assert_true(r.elf_address == v->ra_exported - r.object->load_bias);
    assert_true(r.address >= r.object->start && r.address < r.object->end);

    r = lookup(s, v->ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_DWARF);
    assert_string_equal(r.frame.file, source);
    assert_int_equal(r.frame.line, marker_line("hidden_call"));

    /* Inside the static function, not at a call: its first lines. */
    r = lookup(s, v->hidden + 4, false);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_DWARF);
    assert_string_equal(r.frame.file, source);
    assert_in_range(r.frame.line, marker_line("hidden_decl"),
                    marker_line("hidden_call"));
    sp_symbolizer_destroy(s);
}

static void
inlined_calls_are_frames_of_their_own(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;

    (void)state;
    r = lookup(s, variants[V_G].ra_inlined, true);
    assert_function(&r, "sp_symtest_outer", SP_SYMBOL_DWARF);
    assert_string_equal(r.frame.file, source);
    assert_int_equal(r.frame.line, marker_line("outer_call"));
    assert_int_equal(r.inline_count, 1);
    assert_string_equal(r.inlined[0].function, "sp_symtest_inlined");
    assert_string_equal(r.inlined[0].file, source);
    assert_int_equal(r.inlined[0].line, marker_line("inlined_call"));

    /* Without DWARF the code is the function it was inlined into. */
    r = lookup(s, variants[V_NOG].ra_inlined, true);
    assert_function(&r, "sp_symtest_outer", SP_SYMBOL_SYMTAB);
    assert_no_line(&r);
    sp_symbolizer_destroy(s);
}

static void
symtab_names_static_functions_without_lines(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    variant       *v = &variants[V_NOG];
    sp_symbol      r;

    (void)state;
    r = lookup(s, v->ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_SYMTAB);
    assert_no_line(&r);
    r = lookup(s, v->ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_SYMTAB);
    assert_no_line(&r);
    r = lookup(s, v->hidden + 4, false);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_SYMTAB);
    sp_symbolizer_destroy(s);
}

static void
stripped_names_exported_functions_and_never_a_static_one(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    variant       *v = &variants[V_STRIPPED];
    sp_symbol      r;
    char          *naive;
    int            line;

    (void)state;
    r = lookup(s, v->ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DYNSYM);
    assert_no_line(&r);

    /* The trap: exported code precedes the static function, and the
       nearest symbol below it is an exported label of size 0. */
    assert_true(v->exported < v->hidden);
    assert_true(v->label < v->hidden);
    r = lookup(s, v->hidden + 4, false);
    naive = naive_name(lib(V_STRIPPED), r.elf_address, &line);
    assert_non_null(naive);
    assert_string_equal(naive, "sp_symtest_label");
    free(naive);

    assert_unnamed(&r, v->hidden + 4, V_STRIPPED);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_OK);
    r = lookup(s, v->hidden, false);
    assert_unnamed(&r, v->hidden, V_STRIPPED);
    r = lookup(s, v->ra_hidden, true);
    assert_unnamed(&r, v->ra_hidden, V_STRIPPED);
    sp_symbolizer_destroy(s);
}

static void
a_symbol_of_size_0_names_only_its_own_address(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;
    int            v;

    (void)state;
    for (v = V_G; v <= V_STRIPPED; v++) {
        r = lookup(s, variants[v].label, false);
        assert_function(&r, "sp_symtest_label",
                        v == V_STRIPPED ? SP_SYMBOL_DYNSYM
                                        : SP_SYMBOL_SYMTAB);
        r = lookup(s, variants[v].label + 1, false);
        assert_unnamed(&r, variants[v].label + 1, v);
    }
    sp_symbolizer_destroy(s);
}

static void
lines_come_only_with_a_function_that_contains_them(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    variant       *v = &variants[V_G];
    sp_symbol      r;
    char          *naive;
    int            line;

    (void)state;
    /* The line table covers the label's bytes, with the line of the
       function before it; no function of the DWARF contains them. */
    r = lookup(s, v->label + 1, false);
    naive = naive_name(lib(V_G), r.elf_address, &line);
    free(naive);
    assert_true(line > 0);
    assert_unnamed(&r, v->label + 1, V_G);

    r = lookup(s, v->label, false);
    assert_function(&r, "sp_symtest_label", SP_SYMBOL_SYMTAB);
    assert_no_line(&r);
    sp_symbolizer_destroy(s);
}

static void
a_return_address_names_the_call_before_it(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;
    uintptr_t      end;
    int            v;

    (void)state;
    for (v = V_G; v <= V_STRIPPED; v++) {
        /* The first byte after sp_symtest_exported is the label: as a
           return address, it returns from a call that ended the
           function. */
        end = variants[v].exported + variants[v].exported_size;
        assert_true(end == variants[v].label);
        r = lookup(s, end, true);
        assert_function(&r, "sp_symtest_exported",
                        v == V_G ? SP_SYMBOL_DWARF
                        : v == V_NOG ? SP_SYMBOL_SYMTAB : SP_SYMBOL_DYNSYM);
        assert_true(r.address == end);
        assert_true(r.elf_address == end - r.object->load_bias);
        r = lookup(s, end, false);
        assert_string_equal(r.frame.function, "sp_symtest_label");
    }
    sp_symbolizer_destroy(s);
}

static void
separate_debug_info_is_found_by_build_id(void **state)
{
    char           dirs[PATH_MAX + 32];
    sp_symbolizer *s;
    sp_symbol      r;

    (void)state;
    snprintf(dirs, sizeof(dirs), "/nonexistent:%s/debug", dir);
    s = symbolizer(dirs, 0, 0);
    r = lookup(s, variants[V_BID].ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_DWARF);
    assert_string_equal(r.frame.file, source);
    assert_int_equal(r.frame.line, marker_line("hidden_call"));
    sp_symbolizer_destroy(s);

    /* Without the directory, the same object has only .dynsym. */
    s = symbolizer("", 0, 0);
    r = lookup(s, variants[V_BID].ra_hidden, true);
    assert_unnamed(&r, variants[V_BID].ra_hidden, V_BID);
    r = lookup(s, variants[V_BID].ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DYNSYM);
    sp_symbolizer_destroy(s);
}

static void
separate_debug_info_is_found_by_debuglink(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;

    (void)state;
    /* Next to the object, checked by build id. */
    r = lookup(s, variants[V_LINK].ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_DWARF);
    assert_int_equal(r.frame.line, marker_line("hidden_call"));
    /* In .debug/, no build id: checked by CRC. */
    assert_int_equal(object_of(lib(V_LINKCRC))->build_id_len, 0);
    r = lookup(s, variants[V_LINKCRC].ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_DWARF);
    assert_int_equal(r.frame.line, marker_line("hidden_call"));
    sp_symbolizer_destroy(s);
}

static void
debug_info_of_another_build_is_not_used(void **state)
{
    char           dirs[PATH_MAX + 32];
    sp_symbolizer *s;
    sp_symbol      r;

    (void)state;
    snprintf(dirs, sizeof(dirs), "%s/debug", dir);
    s = symbolizer(dirs, 0, 0);
    /* At its build id's path, the -g variant's debug file. */
    r = lookup(s, variants[V_WRONG].ra_hidden, true);
    assert_unnamed(&r, variants[V_WRONG].ra_hidden, V_WRONG);
    r = lookup(s, variants[V_WRONG].ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DYNSYM);
    /* At its debuglink's path, a file of another CRC. */
    r = lookup(s, variants[V_WRONGLINK].ra_hidden, true);
    assert_unnamed(&r, variants[V_WRONGLINK].ra_hidden, V_WRONGLINK);
    r = lookup(s, variants[V_WRONGLINK].ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DYNSYM);
    sp_symbolizer_destroy(s);
}

static void
a_file_whose_build_id_differs_names_nothing(void **state)
{
    sp_object     *copy = malloc(objects.count * sizeof(*copy));
    sp_object     *o;
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;
    char           path[PATH_MAX + 32];

    (void)state;
    assert_non_null(copy);
    memcpy(copy, objects.objects, objects.count * sizeof(*copy));
    o = &copy[object_of(lib(V_G)) - objects.objects];
    assert_true(o->build_id_len > 0);
    o->build_id[0] ^= 1;
    r = lookup_in(s, copy, objects.count, variants[V_G].ra_exported, true,
                  SP_OK);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_MISMATCH);
    assert_true(r.object == o);
    assert_unnamed(&r, variants[V_G].ra_exported, V_G);
    free(copy);
    sp_symbolizer_destroy(s);

    /* The file a worker loaded is replaced on disk by another build. */
    s = symbolizer("", 0, 0);
    r = lookup(s, variants[V_OLD].ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_DWARF);
    sp_symbolizer_destroy(s);
    snprintf(path, sizeof(path), "%s/libsymtest_new.so", dir);
    assert_int_equal(rename(path, lib(V_OLD)), 0);
    s = symbolizer("", 0, 0);
    r = lookup(s, variants[V_OLD].ra_exported, true);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_MISMATCH);
    assert_unnamed(&r, variants[V_OLD].ra_exported, V_OLD);
    sp_symbolizer_destroy(s);
}

static void
an_object_without_build_id_is_known_by_path(void **state)
{
    sp_symbolizer      *s = symbolizer("", 0, 0);
    sp_symbolizer_stats st;
    sp_symbol           r;

    (void)state;
    assert_int_equal(object_of(lib(V_NOBID))->build_id_len, 0);
    r = lookup(s, variants[V_NOBID].ra_hidden, true);
    assert_function(&r, "sp_symtest_hidden", SP_SYMBOL_SYMTAB);
    r = lookup(s, variants[V_NOBID].ra_exported, true);
    assert_function(&r, "sp_symtest_exported", SP_SYMBOL_SYMTAB);
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.files_opened, 1);
    sp_symbolizer_destroy(s);
}

static void
an_address_outside_every_object_has_no_mapping(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    sp_symbol      r;

    (void)state;
    r = lookup_in(s, objects.objects, objects.count, 0x10, false,
                  SP_ERR_NOT_FOUND);
    assert_int_equal(r.object_index, -1);
    assert_null(r.object);
    assert_null(r.frame.function);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_NONE);
    assert_true(r.address == 0x10);
    r = lookup_in(s, objects.objects, objects.count, 0, true,
                  SP_ERR_NOT_FOUND);
    assert_int_equal(r.object_index, -1);
    /* Only the objects given count: here, none. */
    r = lookup_in(s, NULL, 0, variants[V_G].ra_exported, true,
                  SP_ERR_NOT_FOUND);
    assert_null(r.object);
    assert_null(r.frame.function);
    sp_symbolizer_destroy(s);
}

static void
the_executable_is_named_too(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    uintptr_t      f = (uintptr_t)sp_test_own_function;
    char           exe[PATH_MAX];
    ssize_t        n;
    sp_symbol      r;

    (void)state;
    sp_test_own_function();
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    r = lookup(s, f + 1, false);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_OK);
    assert_string_equal(r.object->path, exe);
    assert_non_null(r.frame.function);
    assert_string_equal(r.frame.function, "sp_test_own_function");
    assert_true(r.elf_address == f + 1 - r.object->load_bias);
    r = lookup(s, (uintptr_t)sp_test_return_address, true);
    assert_function(&r, "sp_test_own_function", SP_SYMBOL_DWARF);
    assert_int_equal(r.inline_count, 1);
    assert_string_equal(r.inlined[0].function, "sp_test_inlined");
    sp_symbolizer_destroy(s);
}

static void
each_file_is_opened_once_and_each_address_named_once(void **state)
{
    sp_symbolizer      *s = symbolizer("", 0, 0);
    sp_symbolizer_stats st;
    sp_symbol           r;
    const char         *first;

    (void)state;
    r = lookup(s, variants[V_G].ra_exported, true);
    first = r.frame.function;
    r = lookup(s, variants[V_G].ra_hidden, true);
    assert_string_equal(r.frame.function, "sp_symtest_hidden");
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.lookups, 2);
    assert_int_equal(st.cache_hits, 0);
    assert_int_equal(st.files_opened, 1);

    r = lookup(s, variants[V_G].ra_exported, true);
    assert_true(r.frame.function == first);
    assert_int_equal(r.frame.line, marker_line("exported_call"));
    r = lookup(s, variants[V_G].ra_inlined, true);
    r = lookup(s, variants[V_G].ra_inlined, true);
    assert_int_equal(r.inline_count, 1);
    assert_string_equal(r.inlined[0].function, "sp_symtest_inlined");
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.lookups, 5);
    assert_int_equal(st.cache_hits, 2);
    assert_int_equal(st.files_opened, 1);
    assert_int_equal(st.objects, 1);
    sp_symbolizer_destroy(s);
}

static void
small_caches_evict_and_stay_right(void **state)
{
    static const variant_id order[] = { V_G, V_NOG, V_STRIPPED, V_LINK };
    sp_symbolizer      *s = symbolizer("", 1, 4);
    sp_symbolizer_stats st;
    sp_symbol           r;
    variant            *v;
    size_t              round, i;

    (void)state;
    for (round = 0; round < 3; round++) {
        for (i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
            v = &variants[order[i]];
            r = lookup(s, v->ra_exported, true);
            assert_string_equal(r.frame.function, "sp_symtest_exported");
            r = lookup(s, v->ra_hidden, true);
            if (order[i] == V_STRIPPED) {
                assert_null(r.frame.function);
            } else {
                assert_string_equal(r.frame.function, "sp_symtest_hidden");
            }
            r = lookup(s, v->ra_inlined, true);
            assert_string_equal(r.frame.function, "sp_symtest_outer");
            if (order[i] == V_G || order[i] == V_LINK) {
                assert_int_equal(r.inline_count, 1);
                assert_string_equal(r.inlined[0].function,
                                    "sp_symtest_inlined");
                assert_int_equal(r.inlined[0].line,
                                 marker_line("inlined_call"));
            } else {
                assert_int_equal(r.inline_count, 0);
            }
            sp_symbolizer_stats_get(s, &st);
            assert_int_equal(st.objects, 1);
        }
    }
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.files_opened, 12);
    assert_int_equal(st.files_closed, 11);
    sp_symbolizer_destroy(s);
}

static void
inlined_frames_written_over_are_looked_up_again(void **state)
{
    /* One set of 4 entries, and room for 8 inlined frames. */
    sp_symbolizer      *s = symbolizer("", 0, 4);
    const variant_id    others[] = { V_G, V_LINK, V_LINKCRC };
    uintptr_t           own;
    sp_symbolizer_stats st;
    sp_symbol           r;
    size_t              round, i;

    (void)state;
    sp_test_own_function();
    own = (uintptr_t)sp_test_return_address;
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 6; i++) {
            /* Kept the most recent, so the entry of `own` stays... */
            r = lookup(s, own, true);
            assert_int_equal(r.inline_count, 1);
            assert_string_equal(r.inlined[0].function, "sp_test_inlined");
            /* ...while six others take turns in the other three ways,
               three of them writing an inlined frame each time. */
            r = lookup(s, i < 3 ? variants[others[i]].ra_inlined
                                : variants[others[i - 3]].ra_exported,
                       true);
            assert_int_equal(r.inline_count, i < 3 ? 1 : 0);
        }
    }
    /* Its frame was written over once: looked up again, once. */
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.lookups, 36);
    assert_int_equal(st.cache_hits, 16);
    sp_symbolizer_destroy(s);
}

static sp_symbol
lookup_fake(sp_symbolizer *s, const char *path, size_t path_len,
    uint8_t build_id_len)
{
    sp_object o;

    memset(&o, 0, sizeof(o));
    o.start = 0x10000;
    o.end = 0x20000;
    o.path = path;
    o.path_len = path_len;
    o.build_id_len = build_id_len;
    return lookup_in(s, &o, 1, 0x11000, false, SP_OK);
}

static void
unusable_files_are_reported_never_followed(void **state)
{
    sp_symbolizer *s = symbolizer("", 0, 0);
    char           path[PATH_MAX + 32];
    char           cwd[PATH_MAX];
    sp_symbol      r;
    sp_object      o;

    (void)state;
    /* A FIFO must not block: the test dies if it does. */
    alarm(20);
    snprintf(path, sizeof(path), "%s/fifo", dir);
    r = lookup_fake(s, path, strlen(path), 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    alarm(0);
    r = lookup_fake(s, "/dev/null", 9, 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    r = lookup_fake(s, "/nonexistent/lib.so", 19, 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    r = lookup_fake(s, NULL, 0, 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    snprintf(path, sizeof(path), "%s/notes.txt", dir);
    r = lookup_fake(s, path, strlen(path), 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_NOT_ELF);
    snprintf(path, sizeof(path), "%s/symtest.o", dir);
    r = lookup_fake(s, path, strlen(path), 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_NOT_ELF);
    assert_null(r.frame.function);

    /* A path cut at a NUL would be another file. */
    snprintf(path, sizeof(path), "%s", lib(V_NOG));
    memcpy(path + strlen(path), "\0x", 3);
    r = lookup_fake(s, path, strlen(lib(V_NOG)) + 2, 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    /* A relative path means the worker's directory, not ours. */
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(dir), 0);
    r = lookup_fake(s, "libsymtest_nog.so", 17, 0);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_UNREADABLE);
    /* No GNU build id is 21 bytes long. */
    r = lookup_fake(s, lib(V_NOG), strlen(lib(V_NOG)), SP_BUILD_ID_MAX + 1);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_MISMATCH);
    assert_null(r.frame.function);

    /* A readable file, but the address maps outside it. */
    memset(&o, 0, sizeof(o));
    o.start = 0x10000;
    o.end = 0x20000;
    o.load_bias = 0x10000 - 0x40000000;
    o.path = lib(V_NOG);
    o.path_len = strlen(lib(V_NOG));
    r = lookup_in(s, &o, 1, 0x11000, false, SP_OK);
    assert_int_equal(r.file_state, SP_OBJECT_FILE_OK);
    assert_null(r.frame.function);
    assert_int_equal(r.source, SP_SYMBOL_NONE);
    sp_symbolizer_destroy(s);
}

static void
no_descriptor_outlives_the_symbolizer(void **state)
{
    char           dirs[PATH_MAX + 32];
    int            before = count_fds();
    sp_symbolizer *s;
    sp_symbol      r;
    int            v;

    (void)state;
    snprintf(dirs, sizeof(dirs), "%s/debug", dir);
    s = symbolizer(dirs, 3, 0);
    for (v = 0; v < V_COUNT; v++) {
        r = lookup(s, variants[v].ra_hidden, true);
        r = lookup(s, variants[v].ra_exported, true);
    }
    r = lookup_fake(s, "/dev/null", 9, 0);
    (void)r;
    sp_symbolizer_destroy(s);
    assert_int_equal(count_fds(), before);
}

/* ---- libc with its separate debug info (libc6-dbg, `make deps`) */

static char *
copy_or_null(const char *text)
{
    return text == NULL ? NULL : strdup(text);
}

static void
assert_same_text(const char *got, const char *want)
{
    if (want == NULL) {
        assert_null(got);
    } else {
        assert_non_null(got);
        assert_string_equal(got, want);
    }
}

/*
 * Return addresses spread over libc's code, each once, and what an
 * unbounded symbolizer names them; false without libc's DWARF.
 */
static bool
libc_with_debug_info(void)
{
    sp_symbolizer      *s;
    sp_symbolizer_stats st;
    sp_symbol           r;
    const char         *base;
    size_t              i, step, dwarf = 0;

    for (i = 0; i < objects.count && libc_object == NULL; i++) {
        base = strrchr(objects.paths[i], '/');
        if (base != NULL && strncmp(base, "/libc.so.", 9) == 0) {
            libc_object = &objects.objects[i];
        }
    }
    if (libc_object == NULL) {
        return false;
    }
    if (libc_dwarf > 0) {
        return libc_dwarf - 1 > LIBC_ADDRESSES / 2;
    }
    step = (libc_object->end - libc_object->start) / LIBC_ADDRESSES;
    s = symbolizer(NULL, 0, 65536);
    for (i = 0; i < LIBC_ADDRESSES; i++) {
        libc_at[i] = libc_object->start + 1
                     + (i * UINT64_C(2654435761)) % LIBC_ADDRESSES * step;
        r = lookup(s, libc_at[i], true);
        dwarf += r.source == SP_SYMBOL_DWARF;
        libc_want[i].function = copy_or_null(r.frame.function);
        libc_want[i].file = copy_or_null(r.frame.file);
        libc_want[i].line = r.frame.line;
    }
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.debug_resets, 0);
    sp_symbolizer_destroy(s);
    libc_dwarf = dwarf + 1;
    return dwarf > LIBC_ADDRESSES / 2;
}

static void
assert_libc_answer(const sp_symbol *r, size_t i)
{
    assert_same_text(r->frame.function, libc_want[i].function);
    assert_same_text(r->frame.file, libc_want[i].file);
    assert_int_equal(r->frame.line, libc_want[i].line);
}

/* The address of a function libc exports. */
static uintptr_t
libc_function(const char *name)
{
    void     *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    uintptr_t f;

    assert_non_null(libc);
    f = (uintptr_t)dlsym(libc, name);
    dlclose(libc);
    assert_true(f != 0);
    return f;
}

/* A function of libc as libc's own DWARF names it, and its file. */
static void
assert_libc_function(sp_symbolizer *s, const char *name, const char *file)
{
    sp_symbol r = lookup(s, libc_function(name) + 1, false);

    assert_function(&r, name, SP_SYMBOL_DWARF);
    assert_non_null(r.frame.file);
    assert_non_null(strstr(r.frame.file, file));
}

static void
assert_libc_names(sp_symbolizer *s)
{
    assert_libc_function(s, "div", "stdlib/div.c");
    assert_libc_function(s, "rand", "stdlib/rand.c");
}

/*
 * What libdw holds of libc once it named libc_at[0] (libc6-dbg's sections,
 * inflated) and, in *full, once it named every libc_at.
 */
static size_t
libc_debug_bytes(size_t *full)
{
    sp_symbolizer      *s = symbolizer(NULL, 0, 65536);
    sp_symbolizer_stats st;
    size_t              first, i;

    lookup(s, libc_at[0], true);
    sp_symbolizer_stats_get(s, &st);
    first = st.debug_bytes;
    for (i = 1; i < LIBC_ADDRESSES; i++) {
        lookup(s, libc_at[i], true);
    }
    sp_symbolizer_stats_get(s, &st);
    *full = st.debug_bytes;
    sp_symbolizer_destroy(s);
    assert_true(first > 0);
    assert_true(*full > first);
    return first;
}

static void
libdw_state_stays_under_its_bound_and_names_stay_right(void **state)
{
    sp_symbolizer      *s;
    sp_symbolizer_stats st;
    sp_symbol           r;
    size_t              first, full, cap, i, opened, hits;

    (void)state;
    if (!libc_with_debug_info()) {
        fail_msg("no DWARF for libc: install libc6-dbg (make deps)");
    }
    first = libc_debug_bytes(&full);

    /* A bound between the two: libdw's state is dropped as it passes.
       Past the first reading there is room to read more than half as
       much again: each reset is worth its reading again, and libc keeps
       its DWARF. */
    cap = first + (full - first) * 3 / 4;
    s = symbolizer_capped(NULL, 0, 65536, cap);
    assert_libc_names(s);
    for (i = 0; i < LIBC_ADDRESSES; i++) {
        r = lookup(s, libc_at[i], true);
        assert_libc_answer(&r, i);
        sp_symbolizer_stats_get(s, &st);
        assert_true(st.debug_bytes <= cap);
    }
    print_message("libdw held %zu KiB after the first lookup, %zu KiB "
                  "after %d; bound %zu KiB: %llu resets\n", first >> 10,
                  full >> 10, LIBC_ADDRESSES, cap >> 10,
                  (unsigned long long)st.debug_resets);
    assert_true(st.debug_resets >= 1);
    assert_int_equal(st.over_cap_objects, 0);
    assert_libc_names(s);

    /* Every answer is kept: the hot addresses never need libdw again. */
    sp_symbolizer_stats_get(s, &st);
    opened = st.files_opened;
    hits = st.cache_hits;
    for (i = 0; i < LIBC_ADDRESSES; i++) {
        r = lookup(s, libc_at[i], true);
        assert_libc_answer(&r, i);
    }
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.cache_hits, hits + LIBC_ADDRESSES);
    assert_int_equal(st.files_opened, opened);
    sp_symbolizer_destroy(s);
}

/*
 * A bound below what libc's debug info takes at its first lookup, or so
 * little above it that each reset would read it all again for a few new
 * addresses: libc's DWARF is read once, then its addresses are named from
 * its symbol table (libc6-dbg's), without lines, instead of being read
 * again for every few new addresses without end.
 */
static void
debug_info_too_big_for_the_bound_is_read_once(void **state)
{
    sp_symbolizer      *s;
    sp_symbolizer_stats st;
    sp_symbol           r;
    over_cap_told       told;
    size_t              first, full, cap[2], c, pass, i, named;
    uint64_t            resets[2];

    (void)state;
    if (!libc_with_debug_info()) {
        fail_msg("no DWARF for libc: install libc6-dbg (make deps)");
    }
    first = libc_debug_bytes(&full);
    cap[0] = first / 2;
    cap[1] = first + first / 8;
    for (c = 0; c < 2; c++) {
        memset(&told, 0, sizeof(told));
        s = symbolizer_told(NULL, 0, 65536, cap[c], &told);
        named = 0;
        /* Passes of new addresses, as new stacks come to an exporter. */
        for (pass = 0; pass < 10; pass++) {
            for (i = pass * 100; i < (pass + 1) * 100; i++) {
                r = lookup(s, libc_at[i], true);
                named += r.frame.function != NULL;
                sp_symbolizer_stats_get(s, &st);
                assert_true(st.debug_bytes <= cap[c]);
            }
            if (pass == 0) {
                resets[0] = st.debug_resets;
            }
        }
        resets[1] = st.debug_resets;
        print_message("libc's debug info: %zu KiB at its first lookup; "
                      "bound %zu KiB: %llu resets after 100 addresses, "
                      "%llu after 1000, %llu files opened, %zu of 1000 "
                      "named\n", first >> 10, cap[c] >> 10,
                      (unsigned long long)resets[0],
                      (unsigned long long)resets[1],
                      (unsigned long long)st.files_opened, named);
        assert_true(st.debug_resets <= 1);
        assert_true(st.files_opened <= 2);
        assert_int_equal(st.over_cap_objects, 1);
        /* Told once, with the files: libc, and libc6-dbg's by build id. */
        assert_int_equal(told.times, 1);
        assert_string_equal(told.path, objects.paths[libc_object
                                                     - objects.objects]);
        assert_non_null(strstr(told.debug_path, "/.build-id/"));
        assert_true(told.first_bytes >= first / 2);
        assert_true(named > LIBC_ADDRESSES / 2);
        /* Exported functions keep their names, from the symbol table. */
        r = lookup(s, libc_function("div") + 1, false);
        assert_function(&r, "div", SP_SYMBOL_SYMTAB);
        assert_null(r.frame.file);
        assert_int_equal(r.frame.line, 0);
        r = lookup(s, libc_function("rand") + 1, false);
        assert_function(&r, "rand", SP_SYMBOL_SYMTAB);
        /* What it holds now is its symbol table's index, charged to the
           bound: a small part of what its DWARF took. */
        sp_symbolizer_stats_get(s, &st);
        assert_true(st.debug_bytes > 0);
        assert_true(st.debug_bytes < first / 16);
        sp_symbolizer_destroy(s);
    }
}

/*
 * libc over the bound, then closed to make room for other files, then
 * opened again for new addresses: it is named from its symbol table at
 * once, its DWARF not read again, nor reported again.
 */
static void
a_file_over_the_bound_stays_so_once_closed(void **state)
{
    sp_symbolizer      *s;
    sp_symbolizer_stats st;
    sp_symbol           r;
    over_cap_told       told;
    size_t              first, full, i;
    int                 v;

    (void)state;
    if (!libc_with_debug_info()) {
        fail_msg("no DWARF for libc: install libc6-dbg (make deps)");
    }
    first = libc_debug_bytes(&full);
    memset(&told, 0, sizeof(told));
    s = symbolizer_told(NULL, 2, 65536, first / 2, &told);
    for (i = 0; i < 10; i++) {
        lookup(s, libc_at[i], true);
    }
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.over_cap_objects, 1);
    assert_int_equal(told.times, 1);
    for (v = V_G; v <= V_NOG; v++) {
        r = lookup(s, variants[v].ra_exported, true);
        assert_function(&r, "sp_symtest_exported",
                        v == V_G ? SP_SYMBOL_DWARF : SP_SYMBOL_SYMTAB);
    }
    sp_symbolizer_stats_get(s, &st);
    assert_true(st.files_closed >= 1);
    for (i = 10; i < 20; i++) {
        r = lookup(s, libc_at[i], true);
        assert_true(r.source != SP_SYMBOL_DWARF);
        assert_null(r.frame.file);
    }
    r = lookup(s, libc_function("div") + 1, false);
    assert_function(&r, "div", SP_SYMBOL_SYMTAB);
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.over_cap_objects, 1);
    assert_int_equal(told.times, 1);
    assert_true(st.debug_bytes < first / 16);
    sp_symbolizer_destroy(s);
}

static void
a_full_name_store_empties_the_cache_and_names_stay_right(void **state)
{
    /* 64 addresses: 4 KiB of names, less than libc's 1000 take. */
    sp_symbolizer      *s = symbolizer(NULL, 0, 64);
    sp_symbolizer_stats st;
    sp_symbol           r;
    size_t              round, i;

    (void)state;
    if (!libc_with_debug_info()) {
        fail_msg("no DWARF for libc: install libc6-dbg (make deps)");
    }
    for (round = 0; round < 2; round++) {
        for (i = 0; i < LIBC_ADDRESSES; i++) {
            r = lookup(s, libc_at[i], true);
            assert_libc_answer(&r, i);
            /* Hot: its own name, from the cache. */
            r = lookup(s, libc_at[i], true);
            assert_libc_answer(&r, i);
        }
    }
    sp_symbolizer_stats_get(s, &st);
    assert_true(st.name_flushes >= 2);
    assert_true(st.cache_hits >= LIBC_ADDRESSES * 2 - st.name_flushes);
    assert_int_equal(st.debug_resets, 0);
    sp_symbolizer_destroy(s);
}

static void
bad_arguments_are_refused(void **state)
{
    sp_symbolizer_options options = { .debug_dirs = "relative/dir" };
    sp_symbolizer        *s = NULL;
    sp_symbolizer_stats   st;
    sp_symbol             r;

    (void)state;
    assert_int_equal(sp_symbolizer_create(&options, &s), SP_ERR_INVALID);
    assert_null(s);
    assert_int_equal(sp_symbolizer_create(NULL, NULL), SP_ERR_INVALID);
    assert_int_equal(sp_symbolizer_create(NULL, &s), SP_OK);
    assert_int_equal(sp_symbolizer_lookup(s, objects.objects, objects.count,
                                          0x1000, false, NULL),
                     SP_ERR_INVALID);
    assert_int_equal(sp_symbolizer_lookup(NULL, objects.objects,
                                          objects.count, 0x1000, false, &r),
                     SP_ERR_INVALID);
    assert_int_equal(sp_symbolizer_lookup(s, NULL, 3, 0x1000, false, &r),
                     SP_ERR_INVALID);
    sp_symbolizer_stats_get(s, &st);
    assert_int_equal(st.lookups, 0);
    sp_symbolizer_destroy(s);
    sp_symbolizer_destroy(NULL);
    sp_symbolizer_stats_get(NULL, &st);
    assert_int_equal(st.lookups, 0);
    assert_string_equal(sp_object_file_name(SP_OBJECT_FILE_MISMATCH),
                        "build_id_mismatch");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dwarf_names_functions_files_and_lines),
        cmocka_unit_test(inlined_calls_are_frames_of_their_own),
        cmocka_unit_test(symtab_names_static_functions_without_lines),
        cmocka_unit_test(
            stripped_names_exported_functions_and_never_a_static_one),
        cmocka_unit_test(a_symbol_of_size_0_names_only_its_own_address),
        cmocka_unit_test(lines_come_only_with_a_function_that_contains_them),
        cmocka_unit_test(a_return_address_names_the_call_before_it),
        cmocka_unit_test(separate_debug_info_is_found_by_build_id),
        cmocka_unit_test(separate_debug_info_is_found_by_debuglink),
        cmocka_unit_test(debug_info_of_another_build_is_not_used),
        cmocka_unit_test(a_file_whose_build_id_differs_names_nothing),
        cmocka_unit_test(an_object_without_build_id_is_known_by_path),
        cmocka_unit_test(an_address_outside_every_object_has_no_mapping),
        cmocka_unit_test(the_executable_is_named_too),
        cmocka_unit_test(each_file_is_opened_once_and_each_address_named_once),
        cmocka_unit_test(small_caches_evict_and_stay_right),
        cmocka_unit_test(inlined_frames_written_over_are_looked_up_again),
        cmocka_unit_test(unusable_files_are_reported_never_followed),
        cmocka_unit_test(no_descriptor_outlives_the_symbolizer),
        cmocka_unit_test(
            libdw_state_stays_under_its_bound_and_names_stay_right),
        cmocka_unit_test(debug_info_too_big_for_the_bound_is_read_once),
        cmocka_unit_test(
            a_full_name_store_empties_the_cache_and_names_stay_right),
        cmocka_unit_test(a_file_over_the_bound_stays_so_once_closed),
        cmocka_unit_test(bad_arguments_are_refused),
    };

    return cmocka_run_group_tests_name("symbolizer", tests, setup, teardown);
}
