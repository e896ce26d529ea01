/*
 * The shared memory that carries the rings (sp_ring.h) from a server's
 * workers to its exporter process.
 *
 * It is a memfd, not an anonymous mapping, because the exporter is a
 * separate program started with exec: the master (nginx) or parent
 * (httpd) creates it before it forks, the workers inherit the mapping,
 * and the exporter inherits the descriptor (SP_SHM_FD_ENV names it) and
 * maps it itself.
 */
#ifndef SP_SHM_H
#define SP_SHM_H

#include "sp_common.h"

/* The environment variable through which the exporter learns the fd. */
#define SP_SHM_FD_ENV "SPANPROF_REGION_FD"

typedef struct sp_shm {
    int     fd;     /* close-on-exec; the launcher clears it for the child */
    void   *base;   /* this process's mapping */
    size_t  size;
} sp_shm;

/*
 * A new memfd of size bytes (rounded up to the page size), mapped shared
 * and laid out as a region of slots rings of ring_bytes each
 * (sp_region_init). SP_ERR_INVALID for sizes sp_region_init refuses,
 * SP_ERR_NOMEM when the memory cannot be had, SP_ERR_IO otherwise; errno
 * is left as the failing call set it.
 */
SP_API sp_status sp_shm_create(uint32_t slots, size_t ring_bytes,
    sp_shm *out);

/*
 * Maps an inherited region descriptor (the exporter's side): its size is
 * the file's. SP_ERR_INVALID when fd is not a descriptor of a file of a
 * plausible size, SP_ERR_IO when mapping fails.
 */
SP_API sp_status sp_shm_open_fd(int fd, sp_shm *out);

/* Unmaps and closes; fields reset. A zeroed sp_shm is ignored. */
SP_API void sp_shm_close(sp_shm *shm);

#endif
