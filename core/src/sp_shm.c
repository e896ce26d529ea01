/*
 * The region's memory as a memfd: see sp_shm.h for why a descriptor.
 */
#include "sp_shm.h"
#include "sp_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Larger than any region sp_region_size can describe: refuse anything
 * bigger from an inherited descriptor rather than map it. */
#define SP_SHM_MAX_BYTES ((size_t)SP_REGION_MAX_SLOTS * SP_RING_MAX_BYTES)

static size_t
sp_shm_round_to_page(size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t p = page > 0 ? (size_t)page : 4096;

    return (n + p - 1) / p * p;
}

/* Maps size bytes of fd shared into out; errno kept on failure. */
static sp_status
sp_shm_map(int fd, size_t size, sp_shm *out)
{
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (base == MAP_FAILED) {
        return errno == ENOMEM ? SP_ERR_NOMEM : SP_ERR_IO;
    }
    out->fd = fd;
    out->base = base;
    out->size = size;
    return SP_OK;
}

sp_status
sp_shm_create(uint32_t slots, size_t ring_bytes, sp_shm *out)
{
    size_t need, size;
    int fd, saved;
    sp_status st;

    memset(out, 0, sizeof(*out));
    out->fd = -1;

    need = sp_region_size(slots, ring_bytes);
    if (need == 0) {
        return SP_ERR_INVALID;
    }
    size = sp_shm_round_to_page(need);

    fd = memfd_create("spanprof", MFD_CLOEXEC);
    if (fd < 0) {
        return errno == ENOMEM ? SP_ERR_NOMEM : SP_ERR_IO;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        saved = errno;
        close(fd);
        errno = saved;
        return saved == ENOMEM || saved == ENOSPC ? SP_ERR_NOMEM : SP_ERR_IO;
    }
    st = sp_shm_map(fd, size, out);
    if (st != SP_OK) {
        saved = errno;
        close(fd);
        errno = saved;
        return st;
    }
    st = sp_region_init(out->base, size, slots, ring_bytes);
    if (st != SP_OK) {
        sp_shm_close(out);
    }
    return st;
}

sp_status
sp_shm_open_fd(int fd, sp_shm *out)
{
    struct stat sb;

    memset(out, 0, sizeof(*out));
    out->fd = -1;

    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)
        || sb.st_size <= 0 || (uint64_t)sb.st_size > SP_SHM_MAX_BYTES)
    {
        return SP_ERR_INVALID;
    }
    return sp_shm_map(fd, (size_t)sb.st_size, out) == SP_OK ? SP_OK
                                                             : SP_ERR_IO;
}

void
sp_shm_close(sp_shm *shm)
{
    if (shm->base != NULL && shm->size > 0) {
        munmap(shm->base, shm->size);
    }
    if (shm->base != NULL && shm->fd >= 0) {
        close(shm->fd);
    }
    shm->base = NULL;
    shm->size = 0;
    shm->fd = -1;
}
