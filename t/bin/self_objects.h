/*
 * The executable mappings of this process as a worker reports them
 * (sp_object: path, addresses, GNU build id), from dl_iterate_phdr. For
 * the test driver and the exporter benchmark, which act as workers.
 */
#ifndef SELF_OBJECTS_H
#define SELF_OBJECTS_H

#include "sp_record.h"

#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAX_OBJECTS 64

static sp_object objects[MAX_OBJECTS];
static char      paths[MAX_OBJECTS][4096];
static uint16_t  object_count;

static int
add_object(struct dl_phdr_info *info, size_t size, void *ctx)
{
    int i;

    (void)size;
    (void)ctx;
    for (i = 0; i < info->dlpi_phnum && object_count < MAX_OBJECTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        sp_object        *o;
        int               j;

        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) {
            continue;
        }
        o = &objects[object_count];
        memset(o, 0, sizeof(*o));
        o->start = info->dlpi_addr + ph->p_vaddr;
        o->end = o->start + ph->p_memsz;
        o->load_bias = info->dlpi_addr;
        o->file_offset = ph->p_offset;
        if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') {
            ssize_t n = readlink("/proc/self/exe", paths[object_count],
                                 sizeof(paths[0]) - 1);
            if (n <= 0) {
                continue;
            }
            paths[object_count][n] = '\0';
        } else {
            snprintf(paths[object_count], sizeof(paths[0]), "%s",
                     info->dlpi_name);
        }
        if (paths[object_count][0] != '/') {
            continue;   /* the vdso */
        }
        o->path = paths[object_count];
        o->path_len = strlen(o->path);
        for (j = 0; j < info->dlpi_phnum; j++) {
            const ElfW(Phdr) *nh = &info->dlpi_phdr[j];
            const char *p, *end;

            if (nh->p_type != PT_NOTE) {
                continue;
            }
            p = (const char *)(info->dlpi_addr + nh->p_vaddr);
            end = p + nh->p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
                const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)(const void *)p;
                const char *name = p + sizeof(*n);
                const char *desc = name + ((n->n_namesz + 3) & ~3u);

                if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4
                    && memcmp(name, "GNU", 4) == 0
                    && n->n_descsz <= SP_BUILD_ID_MAX)
                {
                    memcpy(o->build_id, desc, n->n_descsz);
                    o->build_id_len = (uint8_t)n->n_descsz;
                }
                p = desc + ((n->n_descsz + 3) & ~3u);
            }
        }
        object_count++;
    }
    return 0;
}

/* Fills objects[0..object_count). */
static void
self_objects(void)
{
    object_count = 0;
    dl_iterate_phdr(add_object, NULL);
}

#endif
