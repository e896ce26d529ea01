/*
 * The loaded-object table; see sp_objects.h.
 */
#include "sp_objects.h"
#include "sp_record.h"

#include <elf.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SP_OBJECTS_MAX 1024

typedef struct sp_object_scan {
    sp_object *objects;
    uint16_t   count;
    char       exe[PATH_MAX];
    uint64_t   changes;
    bool       main_seen;
    bool       failed;
} sp_object_scan;

static void
sp_find_build_id(const struct dl_phdr_info *info, sp_object *o)
{
    const ElfW(Phdr) *ph;
    const unsigned char *p, *end;
    int i;

    for (i = 0; i < info->dlpi_phnum; i++) {
        ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) {
            continue;
        }
        p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            size_t name = (n->n_namesz + 3) & ~(size_t)3;
            size_t desc = (n->n_descsz + 3) & ~(size_t)3;
            const unsigned char *d = p + sizeof(*n) + name;

            if (d + desc > end) {
                break;
            }
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4
                && memcmp(p + sizeof(*n), "GNU", 4) == 0
                && n->n_descsz > 0 && n->n_descsz <= SP_BUILD_ID_MAX)
            {
                memcpy(o->build_id, d, n->n_descsz);
                o->build_id_len = (uint8_t)n->n_descsz;
                return;
            }
            p = d + desc;
        }
    }
}

static int
sp_object_visit(struct dl_phdr_info *info, size_t size, void *ctx)
{
    sp_object_scan *scan = ctx;
    const char *path = info->dlpi_name;
    sp_object base;
    int i;

    (void)size;
    scan->changes = info->dlpi_adds + info->dlpi_subs;
    if (scan->objects == NULL) {
        return 0;
    }
    if (path == NULL || path[0] == '\0') {
        /* The first entry without a name is the main program. */
        if (scan->main_seen || scan->exe[0] == '\0') {
            return 0;
        }
        scan->main_seen = true;
        path = scan->exe;
    } else if (strncmp(path, "linux-vdso", 10) == 0) {
        return 0;
    }

    memset(&base, 0, sizeof(base));
    base.load_bias = info->dlpi_addr;
    base.path = path;
    base.path_len = strlen(path);
    sp_find_build_id(info, &base);

    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        sp_object *o;

        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) {
            continue;
        }
        if (scan->count >= SP_OBJECTS_MAX) {
            scan->failed = true;
            return 1;
        }
        o = &scan->objects[scan->count++];
        *o = base;
        o->start = info->dlpi_addr + ph->p_vaddr;
        o->end = o->start + ph->p_memsz;
        o->file_offset = ph->p_offset;
    }
    return 0;
}

/*
 * With every signal blocked, so that no sample is taken while this thread
 * holds glibc's loader lock. The handler's unwinder (libgcc's, with
 * _dl_find_object) no longer takes that lock; libunwind, the one before,
 * did (dl_iterate_phdr) under its own cache lock. A handler that came
 * while this thread was half-way through taking or leaving the loader
 * lock waited for it for good; one that came while this thread held it
 * waited for libunwind's cache lock, held by another thread's handler
 * waiting for the loader lock. Both happened in httpd's worker threads,
 * which scan here after requests (sp_sampler_poll).
 */
static void
sp_objects_scan(sp_object_scan *scan)
{
    sigset_t all, old;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    dl_iterate_phdr(sp_object_visit, scan);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

uint64_t
sp_objects_change_count(void)
{
    sp_object_scan scan;

    memset(&scan, 0, sizeof(scan));
    sp_objects_scan(&scan);
    return scan.changes;
}

void *
sp_objects_build(uint32_t pid, uint32_t generation, size_t *len)
{
    sp_object_scan *scan;
    ssize_t         n;
    size_t          size;
    void           *body = NULL;

    scan = calloc(1, sizeof(*scan));
    if (scan == NULL) {
        return NULL;
    }
    scan->objects = calloc(SP_OBJECTS_MAX, sizeof(sp_object));
    if (scan->objects == NULL) {
        free(scan);
        return NULL;
    }
    n = readlink("/proc/self/exe", scan->exe, sizeof(scan->exe) - 1);
    scan->exe[n > 0 ? n : 0] = '\0';
    sp_objects_scan(scan);

    size = sp_objects_size(scan->objects, scan->count);
    body = malloc(size);
    if (body != NULL) {
        *len = sp_objects_encode(body, pid, generation, scan->objects,
                                 scan->count);
    }
    free(scan->objects);
    free(scan);
    return body;
}
