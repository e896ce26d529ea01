/*
 * The table of a process's loaded objects, published into its ring so the
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
 * Writes an objects record (sp_record.h) describing every loaded object's
 * executable segments: path (the main program's from /proc/self/exe,
 * because servers overwrite argv[0] with their process title), load bias,
 * address range, file offset and GNU build id. Objects without an
 * executable segment, and the vDSO, are left out. SP_ERR_NOMEM when the
 * table cannot be built or the ring has no room (then counted by the
 * ring), SP_OK.
 */
SP_API sp_status sp_objects_publish(sp_ring *ring, uint32_t pid,
                                    uint32_t generation);

#endif
