#include "sp_symbolizer.h"
#include "sp_asan.h"
#include "sp_scopeindex.h"
#include "sp_symindex.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define SP_WAYS         4       /* address cache associativity */
#define SP_RETRY_MS     10000   /* an unreadable file is tried again */
#define SP_RECHECK_MS   1000    /* a file known by path is stat'ed again */
#define SP_PATH_MAX     4096
#define SP_NAME_BYTES   32      /* name store per cached address */
#define SP_NAMES_MIN    4096
#define SP_OVER_CAP_KEPT 64     /* files over the bound remembered */

#ifdef SP_ASAN
/* ASan's allocator, not glibc's, serves malloc: mallinfo2 says 0. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

typedef enum sp_key_kind {
    SP_KEY_BUILD_ID = 1,
    SP_KEY_PATH = 2
} sp_key_kind;

/* Which file was opened, as stat() tells: the same path may later be
 * another file (a package upgrade). */
typedef struct sp_file_id {
    dev_t           dev;
    ino_t           ino;
    off_t           size;
    struct timespec mtime;
} sp_file_id;

static sp_file_id
sp_file_id_of(const struct stat *st)
{
    sp_file_id id;

    memset(&id, 0, sizeof(id));
    id.dev = st->st_dev;
    id.ino = st->st_ino;
    id.size = st->st_size;
    id.mtime = st->st_mtim;
    return id;
}

static bool
sp_file_id_same(const sp_file_id *a, const sp_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size
           && a->mtime.tv_sec == b->mtime.tv_sec
           && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* One object file, and its libdwfl session while it is usable. */
typedef struct sp_symfile {
    sp_symbolizer  *owner;
    uint64_t        id;         /* never reused; 0: slot free */
    uint64_t        hash;
    int32_t         next;       /* hash chain; -1: end */
    uint8_t         key_kind;
    uint8_t         build_id_len;
    uint8_t         build_id[SP_BUILD_ID_MAX];
    char           *path;       /* the file opened; the key by path */
    size_t          path_len;
    sp_object_file  state;
    int64_t         checked_ms; /* when opened or last stat'ed */
    sp_file_id      file;
    Dwfl           *dwfl;       /* NULL when closed or dropped */
    Dwfl_Module    *mod;
    size_t          debug_bytes; /* heap libdw took for this session */
    size_t          base_bytes; /* of it, once it named its first address */
    bool            symbols_only; /* over the bound: never read DWARF */
    sp_symindex    *symbols;    /* its symbol table indexed, or NULL */
    sp_scopeindex  *scopes;     /* its DWARF units' scopes, or NULL */
    bool            symbols_tried; /* this session: indexed or can't be */
    uint64_t        low;        /* the module's ELF addresses [low, high) */
    uint64_t        high;
    uint64_t        last_use;
} sp_symfile;

/*
 * A file found over the bound, remembered after it leaves the open files,
 * so that opened again it is named from its symbol tables at once: its
 * DWARF is not read, nor the file reported, again. By build id, else by
 * path (its hash) and the file itself.
 */
typedef struct sp_over_cap_key {
    uint64_t        hash;       /* the file's key's */
    uint8_t         key_kind;   /* 0: unused */
    uint8_t         build_id_len;
    uint8_t         build_id[SP_BUILD_ID_MAX];
    sp_file_id      file;
} sp_over_cap_key;

/* What is known of one address of one file. */
typedef struct sp_answer {
    sp_symbol_source source;
    sp_symbol_line   frame;
    uint8_t          inline_count;
    sp_symbol_line   inlined[SP_SYMBOL_MAX_INLINE];
} sp_answer;

typedef struct sp_cached {
    uint64_t        file_id;    /* 0: empty */
    uint64_t        address;    /* the ELF address named */
    uint64_t        used;
    uint64_t        inline_at;  /* position of its frames in the ring */
    sp_symbol_line  frame;
    uint8_t         source;
    uint8_t         inline_count;
} sp_cached;

struct sp_symbolizer {
    Dwfl_Callbacks       callbacks;
    char               **debug_dirs;
    size_t               debug_dir_count;
    sp_symfile          *files;
    uint32_t             max_files;
    uint32_t             file_count;
    int32_t             *buckets;
    uint32_t             bucket_mask;
    uint64_t             next_id;
    uint64_t             tick;
    sp_cached           *cache;
    uint32_t             set_mask;
    /* Inlined frames of cached answers: a ring; an answer whose frames
       were written over is looked up again. */
    sp_symbol_line      *ring;
    uint32_t             ring_mask;
    uint64_t             ring_head;
    /* The names of cached answers, copied out of libdw so that they
       outlive its sessions: interned in one block, emptied whole (and
       the cache with it) when full. name_slots: offsets + 1; 0 free. */
    char                *names;
    size_t               names_size;
    size_t               names_used;
    uint32_t            *name_slots;
    uint32_t             name_mask;
    uint32_t             name_count;
    size_t               max_debug_bytes;
    size_t               debug_bytes;   /* sum of the files' */
    sp_symbolizer_over_cap_fn over_cap;
    void                *over_cap_ctx;
    /* Files over the bound, the oldest written over past
       SP_OVER_CAP_KEPT. */
    sp_over_cap_key      over_caps[SP_OVER_CAP_KEPT];
    uint32_t             over_cap_next;
    sp_symbolizer_stats  stats;
};

static int64_t
sp_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint32_t
sp_pow2(uint32_t n)
{
    uint32_t p = 1;

    while (p < n && p < (UINT32_C(1) << 30)) {
        p <<= 1;
    }
    return p;
}

static uint64_t
sp_hash_key(uint8_t kind, const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t       h = UINT64_C(0xcbf29ce484222325);
    size_t         i;

    h = (h ^ kind) * UINT64_C(0x100000001b3);
    for (i = 0; i < len; i++) {
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    }
    return h;
}

static uint64_t
sp_mix(uint64_t id, uint64_t address)
{
    uint64_t h = address * UINT64_C(0x9e3779b97f4a7c15) ^ id;

    h ^= h >> 29;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    return h ^ (h >> 32);
}

/* ---- separate debug info */

static bool
sp_same_build_id(int fd, const unsigned char *bits, int len)
{
    Elf        *elf;
    const void *id = NULL;
    ssize_t     n;
    bool        same;

    elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf == NULL) {
        return false;
    }
    n = dwelf_elf_gnu_build_id(elf, &id);
    same = n == len && id != NULL && memcmp(id, bits, (size_t)len) == 0;
    elf_end(elf);
    return same;
}

static bool
sp_same_crc(int fd, GElf_Word want)
{
    unsigned char buf[65536];
    uLong         crc = crc32(0L, Z_NULL, 0);
    off_t         at = 0;
    ssize_t       n;

    for (;;) {
        n = pread(fd, buf, sizeof(buf), at);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return false;
        }
        if (n == 0) {
            break;
        }
        crc = crc32(crc, buf, (uInt)n);
        at += n;
    }
    return (GElf_Word)crc == want;
}

/*
 * Opens a candidate debug file, or -1. A file is only the object's debug
 * info if it carries the object's build id; without one, the CRC the
 * debuglink recorded must match (use_crc). The object itself is skipped:
 * a debuglink may name a file next to it with its own name.
 */
static int
sp_open_debug(const char *path, const sp_symfile *f,
    const unsigned char *bits, int len, bool use_crc, GElf_Word crc)
{
    struct stat st;
    int         fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)
        || (st.st_dev == f->file.dev && st.st_ino == f->file.ino))
    {
        close(fd);
        return -1;
    }
    if (len > 0 ? sp_same_build_id(fd, bits, len)
                : use_crc && sp_same_crc(fd, crc))
    {
        return fd;
    }
    close(fd);
    return -1;
}

/* The debug file found: its name goes to libdwfl (which frees it), for
   sp_symbolizer_over_cap_fn. */
static int
sp_found_debug(int fd, const char *path, char **name)
{
    *name = strdup(path);
    return fd;
}

/*
 * libdwfl's find_debuginfo callback. Not dwfl_standard_find_debuginfo:
 * that one asks debuginfod servers over the network when DEBUGINFOD_URLS
 * is set (Debian sets it in login shells), which an exporter must never
 * wait for.
 */
static int
sp_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
    Dwarf_Addr base, const char *file_name, const char *debuglink,
    GElf_Word crc, char **debuginfo_file_name)
{
    const sp_symfile    *f = *userdata;
    const sp_symbolizer *s;
    const unsigned char *bits = NULL;
    GElf_Addr            vaddr;
    char                 path[SP_PATH_MAX];
    char                 hex[2 * SP_BUILD_ID_MAX + 1];
    const char          *slash;
    int                  len, dir_len, fd, i, n;
    size_t               d;

    (void)modname;
    (void)base;
    (void)file_name;
    if (f == NULL) {
        return -1;
    }
    s = f->owner;
    len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len < 0 || len > SP_BUILD_ID_MAX) {
        len = 0;
    }

    if (len >= 2) {
        for (i = 1; i < len; i++) {
            snprintf(hex + 2 * (i - 1), 3, "%02x", bits[i]);
        }
        for (d = 0; d < s->debug_dir_count; d++) {
            n = snprintf(path, sizeof(path), "%s/.build-id/%02x/%s.debug",
                         s->debug_dirs[d], bits[0], hex);
            if (n > 0 && (size_t)n < sizeof(path)) {
                fd = sp_open_debug(path, f, bits, len, false, 0);
                if (fd >= 0) {
                    return sp_found_debug(fd, path, debuginfo_file_name);
                }
            }
        }
    }

    if (debuglink != NULL && debuglink[0] != '\0') {
        slash = strrchr(f->path, '/');
        dir_len = slash == NULL ? 0 : (int)(slash - f->path);
        for (i = -2; i < (int)s->debug_dir_count; i++) {
            if (i == -2) {
                n = snprintf(path, sizeof(path), "%.*s/%s", dir_len,
                             f->path, debuglink);
            } else if (i == -1) {
                n = snprintf(path, sizeof(path), "%.*s/.debug/%s", dir_len,
                             f->path, debuglink);
            } else {
                n = snprintf(path, sizeof(path), "%s%.*s/%s",
                             s->debug_dirs[i], dir_len, f->path, debuglink);
            }
            if (n > 0 && (size_t)n < sizeof(path)) {
                fd = sp_open_debug(path, f, bits, len, true, crc);
                if (fd >= 0) {
                    return sp_found_debug(fd, path, debuginfo_file_name);
                }
            }
        }
    }
    return -1;
}

/* The object file is reported with its own fd: this is never needed. */
static int
sp_find_elf(Dwfl_Module *mod, void **userdata, const char *modname,
    Dwarf_Addr base, char **file_name, Elf **elfp)
{
    (void)mod;
    (void)userdata;
    (void)modname;
    (void)base;
    (void)file_name;
    (void)elfp;
    return -1;
}

/* ---- object files */

static bool
sp_path_usable(const char *path, size_t len)
{
    /* The worker's path, resolved against our own working directory if
       relative, could be another file: only absolute paths. */
    return path != NULL && len > 0 && len < SP_PATH_MAX && path[0] == '/'
           && memchr(path, '\0', len) == NULL;
}

/* Ends f's libdwfl session, and with it all libdw holds of the file. */
static bool
sp_file_end(sp_symbolizer *s, sp_symfile *f)
{
    if (f->dwfl == NULL) {
        return false;
    }
    sp_symindex_free(f->symbols);
    f->symbols = NULL;
    f->symbols_tried = false;
    sp_scopeindex_free(f->scopes);
    f->scopes = NULL;
    dwfl_end(f->dwfl);
    f->dwfl = NULL;
    f->mod = NULL;
    s->debug_bytes -= f->debug_bytes;
    f->debug_bytes = 0;
    f->base_bytes = 0;
    return true;
}

static void
sp_file_close(sp_symbolizer *s, sp_symfile *f)
{
    if (sp_file_end(s, f)) {
        s->stats.files_closed++;
    }
}

static void
sp_file_fail(sp_symbolizer *s, sp_symfile *f, sp_object_file state)
{
    sp_file_end(s, f);
    f->state = state;
    s->stats.files_failed++;
}

/* ---- what libdw holds */

/*
 * Bytes allocated on the heap now, by every thread: the part another
 * thread allocates while libdw works is charged to libdw, which only
 * makes the bound come sooner.
 */
static size_t
sp_heap_bytes(void)
{
#ifdef SP_ASAN
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();

    return mi.uordblks + mi.hblkhd;
#endif
}

/*
 * Charges f's session with what the heap grew by since `before`. libdw
 * keeps what it reads (inflated sections, units, line tables, DIE
 * indexes) until the session ends, so growth is what it holds; a net
 * shrink is not credited (it frees nothing it kept before dwfl_end). A
 * file named from its symbol tables only is not charged: it holds them
 * (read once per session, whatever the addresses), no debug info.
 */
static void
sp_charge(sp_symbolizer *s, sp_symfile *f, size_t before)
{
    size_t after = sp_heap_bytes();

    if (f->dwfl != NULL && !f->symbols_only && after > before) {
        f->debug_bytes += after - before;
        s->debug_bytes += after - before;
    }
}

static bool
sp_over_cap_match(const sp_over_cap_key *k, const sp_symfile *f)
{
    if (k->hash != f->hash || k->key_kind != f->key_kind) {
        return false;
    }
    if (f->key_kind == SP_KEY_BUILD_ID) {
        return k->build_id_len == f->build_id_len
               && memcmp(k->build_id, f->build_id, f->build_id_len) == 0;
    }
    return sp_file_id_same(&k->file, &f->file);
}

static bool
sp_over_cap_known(const sp_symbolizer *s, const sp_symfile *f)
{
    uint32_t i;

    for (i = 0; i < SP_OVER_CAP_KEPT; i++) {
        if (sp_over_cap_match(&s->over_caps[i], f)) {
            return true;
        }
    }
    return false;
}

static void
sp_over_cap_remember(sp_symbolizer *s, const sp_symfile *f)
{
    sp_over_cap_key *k;

    if (sp_over_cap_known(s, f)) {
        return;
    }
    k = &s->over_caps[s->over_cap_next++ % SP_OVER_CAP_KEPT];
    memset(k, 0, sizeof(*k));
    k->hash = f->hash;
    k->key_kind = f->key_kind;
    k->build_id_len = f->build_id_len;
    memcpy(k->build_id, f->build_id, f->build_id_len);
    k->file = f->file;
}

/*
 * From now on f is named from its symbol tables only (.symtab, its own or
 * its debug file's, else .dynsym): its DWARF is never read again, nor
 * that of the same file opened again later.
 */
static void
sp_file_over_cap(sp_symbolizer *s, sp_symfile *f)
{
    const char *debug = NULL;

    f->symbols_only = true;
    sp_over_cap_remember(s, f);
    s->stats.over_cap_objects++;
    if (s->over_cap != NULL) {
        if (f->mod != NULL) {
            dwfl_module_info(f->mod, NULL, NULL, NULL, NULL, NULL, NULL,
                             &debug);
        }
        s->over_cap(s->over_cap_ctx, f->path, debug, f->base_bytes);
    }
    sp_file_end(s, f);
}

/*
 * Past max_debug_bytes, ends every session: libdw's state is dropped
 * whole, and each file opened again at its next uncached address. The
 * address cache keeps its names (they are copies), so hot addresses
 * never need libdw again. The freed heap goes back to the system.
 *
 * What a file reads to name its first address (its debug sections,
 * inflated: libc6-dbg's 12 MiB) is read again at its first address after
 * a reset, and that is most of a reset's cost. When it is more than twice
 * what the sessions read since (each one's growth past its first
 * address), a reset would mostly buy the reading of the same again, for
 * a few new addresses each time, without end: a file whose debug info
 * alone is over the bound, or close under it. Then the file of them that
 * read the most first is named from its symbol tables from now on, which
 * bounds the resets by the files, and each reset's reading again by
 * twice the new reading it makes room for.
 */
static void
sp_debug_bound(sp_symbolizer *s)
{
    sp_symfile *f, *big = NULL;
    size_t      base = 0;
    uint32_t    i;

    if (s->debug_bytes <= s->max_debug_bytes) {
        return;
    }
    for (i = 0; i < s->max_files; i++) {
        f = &s->files[i];
        if (f->dwfl != NULL && !f->symbols_only) {
            base += f->base_bytes;
            if (big == NULL || f->base_bytes > big->base_bytes) {
                big = f;
            }
        }
    }
    if (big != NULL && base / 2 > s->debug_bytes - base) {
        sp_file_over_cap(s, big);
        if (s->debug_bytes <= s->max_debug_bytes) {
            malloc_trim(0);
            return;
        }
    }
    for (i = 0; i < s->max_files; i++) {
        sp_file_end(s, &s->files[i]);
    }
    s->stats.debug_resets++;
    malloc_trim(0);
}

/*
 * Opens f->path. Every (re)open takes a new id, so what the address cache
 * holds for an earlier file is never taken for this one.
 */
static void
sp_file_session(sp_symbolizer *s, sp_symfile *f, const sp_object *obj,
    int64_t now)
{
    struct stat          st;
    Dwfl_Module         *mod;
    Elf                 *elf;
    GElf_Ehdr            ehdr;
    GElf_Addr            bias, vaddr, low, high;
    const unsigned char *bits = NULL;
    const char          *name;
    void               **userdata = NULL;
    int                  fd, len;

    f->id = ++s->next_id;
    f->checked_ms = now;
    if (!sp_path_usable(f->path, f->path_len)) {
        sp_file_fail(s, f, SP_OBJECT_FILE_UNREADABLE);
        return;
    }
    /* O_NONBLOCK: a FIFO at the path must not block the exporter. */
    fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        sp_file_fail(s, f, SP_OBJECT_FILE_UNREADABLE);
        return;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        sp_file_fail(s, f, SP_OBJECT_FILE_UNREADABLE);
        return;
    }
    f->file = sp_file_id_of(&st);
    s->stats.files_opened++;

    f->dwfl = dwfl_begin(&s->callbacks);
    if (f->dwfl == NULL) {
        close(fd);
        sp_file_fail(s, f, SP_OBJECT_FILE_UNREADABLE);
        return;
    }
    name = strrchr(f->path, '/') + 1;
    dwfl_report_begin(f->dwfl);
    /* Placed at bias 0: module addresses are the file's own, and one
       session serves every worker, wherever each loaded it. */
    mod = dwfl_report_elf(f->dwfl, name, f->path, fd, 0, true);
    if (mod == NULL) {
        close(fd);
        sp_file_fail(s, f, SP_OBJECT_FILE_NOT_ELF);
        return;
    }
    dwfl_report_end(f->dwfl, NULL, NULL);
    dwfl_module_info(mod, &userdata, &low, &high, NULL, NULL, NULL, NULL);
    if (userdata != NULL) {
        *userdata = f;
    }

    elf = dwfl_module_getelf(mod, &bias);
    if (elf == NULL || gelf_getehdr(elf, &ehdr) == NULL
        || (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN))
    {
        sp_file_fail(s, f, SP_OBJECT_FILE_NOT_ELF);
        return;
    }
    len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (obj->build_id_len > 0
        && (len != obj->build_id_len
            || memcmp(bits, obj->build_id, obj->build_id_len) != 0))
    {
        sp_file_fail(s, f, SP_OBJECT_FILE_MISMATCH);
        return;
    }
    f->mod = mod;
    f->low = low;
    f->high = high;
    f->state = SP_OBJECT_FILE_OK;
}

static void
sp_file_open(sp_symbolizer *s, sp_symfile *f, const sp_object *obj,
    int64_t now)
{
    size_t before = sp_heap_bytes();

    sp_file_session(s, f, obj, now);
    sp_charge(s, f, before);
    if (f->state == SP_OBJECT_FILE_OK && !f->symbols_only
        && sp_over_cap_known(s, f))
    {
        f->symbols_only = true;
    }
}

/*
 * Opens again a file whose session sp_debug_bound ended. When it is still
 * the file it was, it keeps its id, and so its cached answers.
 */
static void
sp_file_reopen(sp_symbolizer *s, sp_symfile *f, const sp_object *obj)
{
    uint64_t   id = f->id;
    sp_file_id was = f->file;

    sp_file_open(s, f, obj, sp_now_ms());
    if (f->state == SP_OBJECT_FILE_OK && sp_file_id_same(&f->file, &was)) {
        f->id = id;
    }
}

static bool
sp_file_changed(const sp_symfile *f)
{
    struct stat st;
    sp_file_id  now;

    /* Gone: the open file is still what workers that loaded it run. */
    if (stat(f->path, &st) != 0) {
        return false;
    }
    now = sp_file_id_of(&st);
    return !sp_file_id_same(&now, &f->file);
}

static void
sp_file_unlink(sp_symbolizer *s, sp_symfile *f)
{
    int32_t *link = &s->buckets[f->hash & s->bucket_mask];
    int32_t  self = (int32_t)(f - s->files);

    while (*link != -1 && *link != self) {
        link = &s->files[*link].next;
    }
    if (*link == self) {
        *link = f->next;
    }
}

static void
sp_file_evict(sp_symbolizer *s, sp_symfile *f)
{
    sp_file_unlink(s, f);
    sp_file_close(s, f);
    free(f->path);
    memset(f, 0, sizeof(*f));
    s->file_count--;
}

static sp_symfile *
sp_file_find(sp_symbolizer *s, uint8_t kind, const void *key, size_t len,
    uint64_t hash)
{
    int32_t     i = s->buckets[hash & s->bucket_mask];
    sp_symfile *f;

    while (i != -1) {
        f = &s->files[i];
        if (f->hash == hash && f->key_kind == kind
            && (kind == SP_KEY_BUILD_ID
                ? f->build_id_len == len && memcmp(f->build_id, key, len) == 0
                : f->path_len == len
                  && (len == 0 || memcmp(f->path, key, len) == 0)))
        {
            return f;
        }
        i = f->next;
    }
    return NULL;
}

/* Takes the worker's path, or "" when it cannot be used. */
static bool
sp_set_path(sp_symfile *f, const sp_object *obj)
{
    const char *path = obj->path;
    size_t      len = obj->path_len;
    char       *copy;

    if (!sp_path_usable(path, len)) {
        path = "";
        len = 0;
    }
    if (f->path != NULL && f->path_len == len
        && memcmp(f->path, path, len) == 0)
    {
        return true;
    }
    copy = malloc(len + 1);
    if (copy == NULL) {
        return false;
    }
    memcpy(copy, path, len);
    copy[len] = '\0';
    free(f->path);
    f->path = copy;
    f->path_len = len;
    return true;
}

/*
 * The cached file of obj, opened if new; NULL only when out of memory.
 * A file that failed is tried again after SP_RETRY_MS, with the path of
 * the object asking (the same build may be readable elsewhere); one known
 * by path is stat'ed again after SP_RECHECK_MS and reopened if changed.
 */
static sp_symfile *
sp_file_get(sp_symbolizer *s, const sp_object *obj)
{
    sp_symfile *f, *lru;
    const void *key;
    size_t      len;
    uint8_t     kind;
    uint64_t    hash;
    int64_t     now;
    uint32_t    i;

    if (obj->build_id_len > 0) {
        kind = SP_KEY_BUILD_ID;
        key = obj->build_id;
        len = obj->build_id_len;
    } else if (sp_path_usable(obj->path, obj->path_len)) {
        kind = SP_KEY_PATH;
        key = obj->path;
        len = obj->path_len;
    } else {
        kind = SP_KEY_PATH;
        key = "";
        len = 0;
    }
    hash = sp_hash_key(kind, key, len);
    f = sp_file_find(s, kind, key, len, hash);

    if (f != NULL) {
        f->last_use = ++s->tick;
        if (f->state == SP_OBJECT_FILE_OK && kind == SP_KEY_BUILD_ID) {
            return f;
        }
        now = sp_now_ms();
        if (f->state != SP_OBJECT_FILE_OK) {
            if (now - f->checked_ms < SP_RETRY_MS) {
                return f;
            }
        } else if (now - f->checked_ms < SP_RECHECK_MS) {
            return f;
        } else if (!sp_file_changed(f)) {
            f->checked_ms = now;
            return f;
        }
        sp_file_close(s, f);
        f->state = SP_OBJECT_FILE_UNREADABLE;
        f->checked_ms = now;
        if (!sp_set_path(f, obj)) {
            return NULL;
        }
        sp_file_open(s, f, obj, now);
        return f;
    }

    if (s->file_count == s->max_files) {
        lru = NULL;
        for (i = 0; i < s->max_files; i++) {
            if (s->files[i].id != 0
                && (lru == NULL || s->files[i].last_use < lru->last_use))
            {
                lru = &s->files[i];
            }
        }
        sp_file_evict(s, lru);
    }
    for (i = 0; s->files[i].id != 0; i++) {
    }
    f = &s->files[i];
    if (!sp_set_path(f, obj)) {
        return NULL;
    }
    f->owner = s;
    f->hash = hash;
    f->key_kind = kind;
    if (kind == SP_KEY_BUILD_ID) {
        f->build_id_len = (uint8_t)len;
        memcpy(f->build_id, key, len);
    }
    f->last_use = ++s->tick;
    f->next = s->buckets[hash & s->bucket_mask];
    s->buckets[hash & s->bucket_mask] = (int32_t)i;
    s->file_count++;
    sp_file_open(s, f, obj, sp_now_ms());
    return f;
}

/* ---- naming */

static const char *
sp_die_name(Dwarf_Die *die)
{
    Dwarf_Attribute attr;
    const char     *name;

    /* The linkage name, as the symbol tables say it (C++: mangled). */
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) != NULL
        || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr) != NULL)
    {
        name = dwarf_formstring(&attr);
        if (name != NULL && name[0] != '\0') {
            return name;
        }
    }
    if (dwarf_attr_integrate(die, DW_AT_name, &attr) != NULL) {
        name = dwarf_formstring(&attr);
        if (name != NULL && name[0] != '\0') {
            return name;
        }
    }
    return NULL;
}

static void
sp_call_site(Dwarf_Die *die, sp_symbol_line *at)
{
    Dwarf_Attribute attr;
    Dwarf_Word      value;
    Dwarf_Die       cu;
    Dwarf_Files    *files;
    size_t          count;

    at->function = NULL;
    at->file = NULL;
    at->line = 0;
    if (dwarf_attr(die, DW_AT_call_line, &attr) != NULL
        && dwarf_formudata(&attr, &value) == 0 && value <= UINT32_MAX)
    {
        at->line = (uint32_t)value;
    }
    if (dwarf_attr(die, DW_AT_call_file, &attr) != NULL
        && dwarf_formudata(&attr, &value) == 0
        && dwarf_diecu(die, &cu, NULL, NULL) != NULL
        && dwarf_getsrcfiles(&cu, &files, &count) == 0 && value < count)
    {
        at->file = dwarf_filesrc(files, value, NULL, NULL);
    }
}

/*
 * The most one index (a symbol table's, a DWARF unit's) may take: a
 * quarter of the bound, so that no single one can make the bound reset
 * sessions that would only build it again.
 */
static size_t
sp_index_max_bytes(const sp_symbolizer *s)
{
    return s->max_debug_bytes / 4;
}

/*
 * From DWARF: the function whose ranges contain the address (so no
 * containment check is needed here), the inlined calls around it, and
 * the line. False when no function of the debug info contains it.
 *
 * The scopes come from the file's index of its units (sp_scopeindex.h),
 * held like libdw's state: allocated during the lookup, so charged in
 * the growth sp_charge measures, and dropped with the session; a unit's
 * at most sp_index_max_bytes.
 */
static bool
sp_resolve_dwarf(sp_symfile *f, uint64_t a, sp_answer *ans)
{
    Dwarf_Addr      bias;
    Dwarf_Die      *cu, *scopes = NULL;
    Dwfl_Line      *row;
    sp_symbol_line  at = { NULL, NULL, 0 };
    sp_symbol_line  ring[SP_SYMBOL_MAX_INLINE];
    unsigned        total = 0, kept, j;
    bool            found = false;
    int             n, i, line;

    cu = dwfl_module_addrdie(f->mod, a, &bias);
    if (cu == NULL) {
        return false;
    }
    if (f->scopes == NULL) {
        f->scopes = sp_scopeindex_new(sp_index_max_bytes(f->owner));
    }
    /* The innermost scope at the address, then its parents in the tree
       (as dwarf_getscopes_die gives them; dwarf_getscopes itself goes on
       from an inlined call to the parents of its abstract origin). */
    n = sp_scopeindex_get(f->scopes, cu, a - bias, &scopes);
    if (n <= 0) {
        return false;
    }
    row = dwfl_module_getsrc(f->mod, a);
    if (row != NULL) {
        at.file = dwfl_lineinfo(row, NULL, &line, NULL, NULL, NULL);
        at.line = line > 0 ? (uint32_t)line : 0;
    }
    for (i = 0; i < n && !found; i++) {
        switch (dwarf_tag(&scopes[i])) {
        case DW_TAG_inlined_subroutine:
            at.function = sp_die_name(&scopes[i]);
            ring[total % SP_SYMBOL_MAX_INLINE] = at;
            total++;
            sp_call_site(&scopes[i], &at);
            break;
        case DW_TAG_subprogram:
            at.function = sp_die_name(&scopes[i]);
            found = at.function != NULL;
            i = n;
            break;
        default:
            break;
        }
    }
    free(scopes);
    if (!found) {
        return false;
    }
    kept = total < SP_SYMBOL_MAX_INLINE ? total : SP_SYMBOL_MAX_INLINE;
    ans->source = SP_SYMBOL_DWARF;
    ans->frame = at;
    ans->inline_count = (uint8_t)kept;
    for (j = 0; j < kept; j++) {
        ans->inlined[j] = ring[(total - kept + j) % SP_SYMBOL_MAX_INLINE];
    }
    return true;
}

static bool
sp_elf_has_symtab(Elf *elf)
{
    Elf_Scn  *scn = NULL;
    GElf_Shdr shdr;

    while (elf != NULL && (scn = elf_nextscn(elf, scn)) != NULL) {
        if (gelf_getshdr(scn, &shdr) != NULL && shdr.sh_type == SHT_SYMTAB) {
            return true;
        }
    }
    return false;
}

/*
 * Indexes f's symbol table once per session, so that each address is
 * named by binary search rather than by dwfl_module_addrinfo's pass over
 * every symbol. The index is held like libdw's state: a file named with
 * DWARF has it charged in the growth sp_charge measures; one named from
 * its symbol tables only (not charged for them) has it charged here. A
 * table whose index would take more than sp_index_max_bytes is not
 * indexed.
 */
static void
sp_index_symbols(sp_symfile *f)
{
    sp_symbolizer *s = f->owner;
    size_t         bytes;
    int            n;

    f->symbols_tried = true;
    n = dwfl_module_getsymtab(f->mod);
    if (sp_symindex_max_bytes(n) > sp_index_max_bytes(s)
        || sp_symindex_build(f->mod, &f->symbols) != SP_OK)
    {
        return;
    }
    if (f->symbols_only) {
        bytes = sp_symindex_bytes(f->symbols);
        f->debug_bytes += bytes;
        s->debug_bytes += bytes;
    }
}

/* From .symtab, else .dynsym (libdwfl's choice), if a symbol contains a. */
static void
sp_resolve_symbol(sp_symfile *f, uint64_t a, sp_answer *ans)
{
    GElf_Off    offset = 0;
    GElf_Addr   value;
    GElf_Sym    sym;
    Elf        *elf = NULL;
    const char *name;
    int         type, ndx = SP_SYMINDEX_ASK;

    memset(&sym, 0, sizeof(sym));
    if (!f->symbols_tried) {
        sp_index_symbols(f);
    }
    if (f->symbols != NULL) {
        ndx = sp_symindex_find(f->symbols, a);
    }
    if (ndx == SP_SYMINDEX_NONE) {
        return;
    }
    if (ndx == SP_SYMINDEX_ASK) {
        name = dwfl_module_addrinfo(f->mod, a, &offset, &sym, NULL, &elf,
                                    NULL);
    } else {
        name = dwfl_module_getsym_info(f->mod, ndx, &sym, &value, NULL, &elf,
                                       NULL);
        offset = a - value;
    }
    if (name == NULL || name[0] == '\0') {
        return;
    }
    type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) {
        return;
    }
    /* When no sized symbol contains the address, libdwfl answers with
       the nearest label below it: containment is checked here. */
    if (sym.st_size == 0 ? offset != 0 : offset >= sym.st_size) {
        return;
    }
    ans->source = sp_elf_has_symtab(elf) ? SP_SYMBOL_SYMTAB
                                         : SP_SYMBOL_DYNSYM;
    ans->frame.function = name;
}

static void
sp_resolve(sp_symfile *f, uint64_t a, sp_answer *ans)
{
    memset(ans, 0, sizeof(*ans));
    if (f->symbols_only || !sp_resolve_dwarf(f, a, ans)) {
        sp_resolve_symbol(f, a, ans);
    }
}

/* ---- the address cache */

static bool
sp_cache_get(sp_symbolizer *s, uint64_t id, uint64_t a, sp_symbol *out)
{
    sp_cached *e = &s->cache[(sp_mix(id, a) & s->set_mask) * SP_WAYS];
    unsigned   w, j;

    for (w = 0; w < SP_WAYS; w++, e++) {
        if (e->file_id != id || e->address != a) {
            continue;
        }
        if (e->inline_count > 0
            && s->ring_head - e->inline_at > (uint64_t)s->ring_mask + 1)
        {
            e->file_id = 0;
            return false;
        }
        e->used = ++s->tick;
        out->source = (sp_symbol_source)e->source;
        out->frame = e->frame;
        out->inline_count = e->inline_count;
        for (j = 0; j < e->inline_count; j++) {
            out->inlined[j] = s->ring[(e->inline_at + j) & s->ring_mask];
        }
        return true;
    }
    return false;
}

static void
sp_cache_put(sp_symbolizer *s, uint64_t id, uint64_t a, const sp_answer *ans)
{
    sp_cached *set = &s->cache[(sp_mix(id, a) & s->set_mask) * SP_WAYS];
    sp_cached *e = set;
    unsigned   w, j;

    for (w = 0; w < SP_WAYS; w++) {
        if (set[w].file_id == 0) {
            e = &set[w];
            break;
        }
        if (set[w].used < e->used) {
            e = &set[w];
        }
    }
    e->file_id = id;
    e->address = a;
    e->used = ++s->tick;
    e->frame = ans->frame;
    e->source = (uint8_t)ans->source;
    e->inline_count = ans->inline_count;
    e->inline_at = s->ring_head;
    for (j = 0; j < ans->inline_count; j++) {
        s->ring[(s->ring_head + j) & s->ring_mask] = ans->inlined[j];
    }
    s->ring_head += ans->inline_count;
}

/* ---- the names of cached answers */

static void
sp_names_flush(sp_symbolizer *s)
{
    uint32_t i;

    /* Every cached answer points into the store: a new id for each file
       makes them all unreachable, without a pass over the cache. */
    for (i = 0; i < s->max_files; i++) {
        if (s->files[i].id != 0) {
            s->files[i].id = ++s->next_id;
        }
    }
    memset(s->name_slots, 0,
           ((size_t)s->name_mask + 1) * sizeof(*s->name_slots));
    s->names_used = 0;
    s->name_count = 0;
    s->stats.name_flushes++;
}

/* The store's copy of text, added if new; NULL when the store is full. */
static const char *
sp_name_copy(sp_symbolizer *s, const char *text)
{
    size_t   len = strlen(text);
    uint32_t i = (uint32_t)sp_hash_key(0, text, len) & s->name_mask;
    uint32_t at;

    while ((at = s->name_slots[i]) != 0) {
        if (strcmp(s->names + at - 1, text) == 0) {
            return s->names + at - 1;
        }
        i = (i + 1) & s->name_mask;
    }
    if (len >= s->names_size - s->names_used
        || s->name_count >= (s->name_mask + 1) / 2)
    {
        return NULL;
    }
    memcpy(s->names + s->names_used, text, len + 1);
    s->name_slots[i] = (uint32_t)s->names_used + 1;
    s->names_used += len + 1;
    s->name_count++;
    return s->names + s->name_slots[i] - 1;
}

/*
 * Points ans's strings at copies in the store, emptying it first if they
 * do not fit. False (ans unchanged) when they could not fit at all.
 */
static bool
sp_names_take(sp_symbolizer *s, sp_answer *ans)
{
    const char    **text[2 * (1 + SP_SYMBOL_MAX_INLINE)];
    const char     *copy[2 * (1 + SP_SYMBOL_MAX_INLINE)];
    sp_symbol_line *l;
    size_t          need = 0;
    unsigned        n = 0, i, j, round;

    for (j = 0; j <= ans->inline_count; j++) {
        l = j == 0 ? &ans->frame : &ans->inlined[j - 1];
        if (l->function != NULL) {
            text[n++] = &l->function;
        }
        if (l->file != NULL) {
            text[n++] = &l->file;
        }
    }
    for (i = 0; i < n; i++) {
        need += strlen(*text[i]) + 1;
    }
    if (need > s->names_size / 2) {
        return false;
    }
    for (round = 0; round < 2; round++) {
        for (i = 0; i < n; i++) {
            copy[i] = sp_name_copy(s, *text[i]);
            if (copy[i] == NULL) {
                break;
            }
        }
        if (i == n) {
            for (i = 0; i < n; i++) {
                *text[i] = copy[i];
            }
            return true;
        }
        sp_names_flush(s);
    }
    return false;
}

/* ---- the API */

static sp_status
sp_parse_debug_dirs(sp_symbolizer *s, const char *dirs)
{
    const char *p, *end;
    size_t      n = 1, len;

    for (p = dirs; *p != '\0'; p++) {
        n += *p == ':';
    }
    s->debug_dirs = calloc(n, sizeof(char *));
    if (s->debug_dirs == NULL) {
        return SP_ERR_NOMEM;
    }
    for (p = dirs; ; p = end + 1) {
        end = strchr(p, ':');
        if (end == NULL) {
            end = p + strlen(p);
        }
        len = (size_t)(end - p);
        if (len > 0) {
            if (p[0] != '/' || len >= SP_PATH_MAX / 2) {
                return SP_ERR_INVALID;
            }
            s->debug_dirs[s->debug_dir_count] = strndup(p, len);
            if (s->debug_dirs[s->debug_dir_count] == NULL) {
                return SP_ERR_NOMEM;
            }
            s->debug_dir_count++;
        }
        if (*end == '\0') {
            break;
        }
    }
    return SP_OK;
}

sp_status
sp_symbolizer_create(const sp_symbolizer_options *options,
    sp_symbolizer **out)
{
    sp_symbolizer *s;
    const char    *dirs = SP_SYMBOLIZER_DEFAULT_DEBUG_DIRS;
    uint32_t       files = SP_SYMBOLIZER_DEFAULT_OBJECTS;
    uint32_t       addresses = SP_SYMBOLIZER_DEFAULT_ADDRESSES;
    size_t         debug_bytes = SP_SYMBOLIZER_DEFAULT_DEBUG_BYTES;
    uint32_t       i;
    sp_status      rc;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    *out = NULL;
    if (options != NULL) {
        if (options->debug_dirs != NULL) {
            dirs = options->debug_dirs;
        }
        if (options->max_objects > 0) {
            files = options->max_objects < 65536 ? options->max_objects
                                                 : 65536;
        }
        if (options->max_addresses > 0) {
            addresses = options->max_addresses;
        }
        if (options->max_debug_bytes > 0) {
            debug_bytes = options->max_debug_bytes;
        }
    }
    addresses = sp_pow2(addresses < SP_WAYS ? SP_WAYS : addresses);
    elf_version(EV_CURRENT);

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return SP_ERR_NOMEM;
    }
    s->callbacks.find_elf = sp_find_elf;
    s->callbacks.find_debuginfo = sp_find_debuginfo;
    s->callbacks.section_address = dwfl_offline_section_address;
    s->max_files = files;
    s->max_debug_bytes = debug_bytes;
    if (options != NULL) {
        s->over_cap = options->over_cap;
        s->over_cap_ctx = options->over_cap_ctx;
    }
    s->bucket_mask = sp_pow2(2 * files) - 1;
    s->set_mask = addresses / SP_WAYS - 1;
    s->ring_mask = sp_pow2(addresses < SP_SYMBOL_MAX_INLINE
                           ? SP_SYMBOL_MAX_INLINE : addresses) - 1;
    s->files = calloc(files, sizeof(*s->files));
    s->buckets = malloc(((size_t)s->bucket_mask + 1) * sizeof(int32_t));
    s->cache = calloc(addresses, sizeof(*s->cache));
    s->ring = calloc((size_t)s->ring_mask + 1, sizeof(*s->ring));
    s->names_size = (size_t)addresses * SP_NAME_BYTES;
    if (s->names_size < SP_NAMES_MIN || s->names_size > (UINT32_C(1) << 30)) {
        s->names_size = s->names_size < SP_NAMES_MIN ? SP_NAMES_MIN
                                                     : UINT32_C(1) << 30;
    }
    s->name_mask = sp_pow2((uint32_t)(s->names_size / 16)) - 1;
    s->names = malloc(s->names_size);
    s->name_slots = calloc((size_t)s->name_mask + 1,
                           sizeof(*s->name_slots));
    if (s->files == NULL || s->buckets == NULL || s->cache == NULL
        || s->ring == NULL || s->names == NULL || s->name_slots == NULL)
    {
        sp_symbolizer_destroy(s);
        return SP_ERR_NOMEM;
    }
    for (i = 0; i <= s->bucket_mask; i++) {
        s->buckets[i] = -1;
    }
    rc = sp_parse_debug_dirs(s, dirs);
    if (rc != SP_OK) {
        sp_symbolizer_destroy(s);
        return rc;
    }
    *out = s;
    return SP_OK;
}

void
sp_symbolizer_destroy(sp_symbolizer *s)
{
    size_t i;

    if (s == NULL) {
        return;
    }
    if (s->files != NULL) {
        for (i = 0; i < s->max_files; i++) {
            sp_file_end(s, &s->files[i]);
            free(s->files[i].path);
        }
    }
    if (s->debug_dirs != NULL) {
        for (i = 0; i < s->debug_dir_count; i++) {
            free(s->debug_dirs[i]);
        }
    }
    free(s->debug_dirs);
    free(s->files);
    free(s->buckets);
    free(s->cache);
    free(s->ring);
    free(s->names);
    free(s->name_slots);
    free(s);
}

sp_status
sp_symbolizer_lookup(sp_symbolizer *s, const sp_object *objects,
    size_t count, uint64_t address, bool return_address, sp_symbol *out)
{
    const sp_object *obj = NULL;
    sp_symfile      *f;
    sp_answer        ans;
    uint64_t         at, a;
    size_t           i, before;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    out->object_index = -1;
    out->address = address;
    if (s == NULL || (objects == NULL && count > 0)) {
        return SP_ERR_INVALID;
    }
    s->stats.lookups++;
    /* A return address names the call before it, which can be the last
       instruction of a function or of an object. */
    if (return_address && address == 0) {
        return SP_ERR_NOT_FOUND;
    }
    at = return_address ? address - 1 : address;
    for (i = 0; i < count; i++) {
        if (at >= objects[i].start && at < objects[i].end) {
            obj = &objects[i];
            break;
        }
    }
    if (obj == NULL || i > INT32_MAX) {
        return SP_ERR_NOT_FOUND;
    }
    out->object_index = (int)i;
    out->object = obj;
    out->elf_address = address - obj->load_bias;
    if (obj->build_id_len > SP_BUILD_ID_MAX) {
        /* No GNU build id is that long: no file can be this object. */
        out->file_state = SP_OBJECT_FILE_MISMATCH;
        return SP_OK;
    }

    f = sp_file_get(s, obj);
    if (f == NULL) {
        out->file_state = SP_OBJECT_FILE_UNREADABLE;
        return SP_ERR_NOMEM;
    }
    out->file_state = f->state;
    a = at - obj->load_bias;
    if (f->state != SP_OBJECT_FILE_OK || a < f->low || a >= f->high) {
        sp_debug_bound(s);
        return SP_OK;
    }
    /* Answered from the cache even when the bound dropped the file's
       session: its names are copies. */
    if (sp_cache_get(s, f->id, a, out)) {
        s->stats.cache_hits++;
        return SP_OK;
    }
    if (f->mod == NULL) {
        sp_file_reopen(s, f, obj);
        out->file_state = f->state;
        if (f->state != SP_OBJECT_FILE_OK || a < f->low || a >= f->high) {
            sp_debug_bound(s);
            return SP_OK;
        }
    }
    /* Nothing is measured for a file named from its symbol tables only
       (sp_charge): mallinfo2 would be most of such a lookup's cost. */
    before = f->symbols_only ? 0 : sp_heap_bytes();
    sp_resolve(f, a, &ans);
    if (!f->symbols_only) {
        sp_charge(s, f, before);
    }
    if (f->base_bytes == 0) {
        f->base_bytes = f->debug_bytes;
    }
    /* A name too long for the store is not cached, and points into
       libdw until the next lookup: the bound waits until then. */
    if (sp_names_take(s, &ans)) {
        sp_cache_put(s, f->id, a, &ans);
        sp_debug_bound(s);
    }
    out->source = ans.source;
    out->frame = ans.frame;
    out->inline_count = ans.inline_count;
    memcpy(out->inlined, ans.inlined,
           ans.inline_count * sizeof(ans.inlined[0]));
    return SP_OK;
}

void
sp_symbolizer_stats_get(const sp_symbolizer *s, sp_symbolizer_stats *out)
{
    if (out == NULL) {
        return;
    }
    if (s == NULL) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = s->stats;
    out->objects = s->file_count;
    out->debug_bytes = s->debug_bytes;
}

const char *
sp_object_file_name(sp_object_file state)
{
    switch (state) {
    case SP_OBJECT_FILE_NONE:
        return "none";
    case SP_OBJECT_FILE_OK:
        return "ok";
    case SP_OBJECT_FILE_UNREADABLE:
        return "unreadable";
    case SP_OBJECT_FILE_NOT_ELF:
        return "not_elf";
    case SP_OBJECT_FILE_MISMATCH:
        return "build_id_mismatch";
    }
    return "unknown";
}
