/*
 * What the exporter's symbolizer holds as it meets more and more distinct
 * addresses (bench/README.md, "exporter/"; built and run by
 * `bench/exporter/run.sh symbolizer`): the exporter's settings (its
 * cache size, /usr/lib/debug), lookups of distinct return addresses
 * spread over all the code of this process's objects, libc included, in
 * a scattered order; at each checkpoint VmRSS and its peak (VmHWM), what
 * libdw holds as the symbolizer measures it, and its resets.
 *
 *   bench_symbolizer [LOOKUPS [MAX_DEBUG_MIB [FILE...]]]
 *
 * LOOKUPS default 1000000; MAX_DEBUG_MIB the symbolizer's bound of
 * libdw's state (default, or 0: the exporter's, SPANPROF_DEBUG_MAX_BYTES).
 * FILEs (absolute paths): their code instead of this process's, as a
 * worker that loaded them at their own addresses would report it, for
 * the cost per new address of one file (an executable such as nginx
 * cannot be loaded here). BENCH_DEBUG_DIRS: the symbolizer's debug
 * directories instead of /usr/lib/debug ("": none).
 */
#include "self_objects.h"
#include "sp_exporter.h"
#include "sp_symbolizer.h"

#include <fcntl.h>
#include <gelf.h>
#include <stdlib.h>
#include <time.h>

/* VmRSS or VmHWM (the peak), KiB. */
static long
status_kib(const char *field)
{
    char   line[256];
    long   kib = -1;
    size_t len = strlen(field);
    FILE  *f = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, len) == 0) {
            kib = strtol(line + len, NULL, 10);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

/* FILE's executable segments, at the file's own addresses; false when
   it is not an ELF file that can be read. */
static bool
file_objects(const char *path)
{
    Elf       *elf;
    GElf_Phdr  ph;
    Elf_Scn   *scn = NULL;
    Elf_Data  *data;
    GElf_Shdr  sh;
    GElf_Nhdr  nh;
    sp_object *o;
    size_t     n, i, at, name_at, desc_at;
    uint8_t    id[SP_BUILD_ID_MAX];
    size_t     id_len = 0;
    int        fd = open(path, O_RDONLY);

    elf_version(EV_CURRENT);
    elf = fd < 0 ? NULL : elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf == NULL || elf_getphdrnum(elf, &n) != 0) {
        return false;
    }
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_NOTE
            || (data = elf_getdata(scn, NULL)) == NULL)
        {
            continue;
        }
        at = 0;
        while ((at = gelf_getnote(data, at, &nh, &name_at, &desc_at)) > 0) {
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_descsz <= sizeof(id)) {
                memcpy(id, (char *)data->d_buf + desc_at, nh.n_descsz);
                id_len = nh.n_descsz;
            }
        }
    }
    for (i = 0; i < n && object_count < MAX_OBJECTS; i++) {
        if (gelf_getphdr(elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD
            || !(ph.p_flags & PF_X))
        {
            continue;
        }
        o = &objects[object_count++];
        memset(o, 0, sizeof(*o));
        o->start = ph.p_vaddr;
        o->end = ph.p_vaddr + ph.p_memsz;
        o->file_offset = ph.p_offset;
        o->path = path;
        o->path_len = strlen(path);
        memcpy(o->build_id, id, id_len);
        o->build_id_len = (uint8_t)id_len;
    }
    return true;
}

static void
report(sp_symbolizer *s, uint64_t done, double seconds)
{
    sp_symbolizer_stats st;

    sp_symbolizer_stats_get(s, &st);
    printf("lookups %8llu  rss_kib %6ld  hwm_kib %6ld  libdw_kib %6llu  "
           "resets %4llu  name_flushes %3llu  cache_hits %7llu  %.1f s\n",
           (unsigned long long)done, status_kib("VmRSS:"),
           status_kib("VmHWM:"),
           (unsigned long long)(st.debug_bytes >> 10),
           (unsigned long long)st.debug_resets,
           (unsigned long long)st.name_flushes,
           (unsigned long long)st.cache_hits, seconds);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    sp_symbolizer_options o;
    sp_symbolizer        *s;
    sp_symbol             sym;
    struct timespec       t0, t1;
    uint64_t              lookups = 1000000, code = 0, step, at, i, next;
    uint16_t              k;

    if (argc > 1) {
        lookups = strtoull(argv[1], NULL, 10);
    }
    memset(&o, 0, sizeof(o));
    o.max_addresses = SP_EXPORTER_SYMBOL_CACHE;
    if (argc > 2) {
        o.max_debug_bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
    }
    o.debug_dirs = getenv("BENCH_DEBUG_DIRS");
    if (argc > 3) {
        for (i = 3; i < (uint64_t)argc; i++) {
            if (!file_objects(argv[i])) {
                fprintf(stderr, "%s: not a readable ELF file\n", argv[i]);
                return 1;
            }
        }
    } else {
        self_objects();
    }
    for (k = 0; k < object_count; k++) {
        code += objects[k].end - objects[k].start;
    }
    if (lookups == 0 || code == 0
        || sp_symbolizer_create(&o, &s) != SP_OK)
    {
        return 1;
    }
    step = code / lookups > 0 ? code / lookups : 1;
    printf("%u objects, %llu bytes of code, every %llu bytes\n",
           object_count, (unsigned long long)code,
           (unsigned long long)step);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    report(s, 0, 0);
    next = 1;
    for (i = 0; i < lookups; i++) {
        /* Every address once, in a scattered order: all the objects
           grow at once, as a server's stacks make them. */
        at = (i * UINT64_C(2654435761)) % lookups * step % code;
        for (k = 0; at >= objects[k].end - objects[k].start; k++) {
            at -= objects[k].end - objects[k].start;
        }
        /* A return address: the byte after the one named. */
        sp_symbolizer_lookup(s, objects, object_count,
                             objects[k].start + at + 1, true, &sym);
        if (i + 1 == next || i + 1 == lookups) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            report(s, i + 1, (double)(t1.tv_sec - t0.tv_sec)
                             + (t1.tv_nsec - t0.tv_nsec) / 1e9);
            next = next < 10 ? next * 5 : next * 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.1f us per lookup\n", ((double)(t1.tv_sec - t0.tv_sec) * 1e9
                                    + (double)(t1.tv_nsec - t0.tv_nsec))
                                   / 1e3 / (double)lookups);
    sp_symbolizer_destroy(s);
    return 0;
}
