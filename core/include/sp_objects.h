/*
 * The table of a process's loaded objects, written into its ring so the
 * exporter can map a sample's addresses to files and build ids. Built with
 * dl_iterate_phdr, outside any signal handler.
 */
#ifndef SP_OBJECTS_H
#define SP_OBJECTS_H

#include "sp_common.h"
#include "sp_ring.h"

/*
 * A number that changes whenever an object is loaded or unloaded (glibc's
 * dlpi_adds + dlpi_subs): compare it to the last published one to know
 * when to publish again.
 */
SP_API uint64_t sp_objects_change_count(void);

/*
 * The body of an objects record (sp_record.h, SP_RECORD_OBJECTS)
 * describing every loaded object's executable segments: path (the main
 * program's from /proc/self/exe, because servers overwrite argv[0] with
 * their process title), load bias, address range, file offset and GNU
 * build id. Objects without an executable segment, and the vDSO, are left
 * out. Allocated (free() it), its length in *len; NULL when out of
 * memory. Kept by the sampler, which writes it into its ring again
 * whenever a new reader asks (sp_region_want_objects).
 */
SP_API void *sp_objects_build(uint32_t pid, uint32_t generation,
                              size_t *len);

#endif
