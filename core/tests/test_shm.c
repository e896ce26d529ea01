/*
 * The region as a memfd: a worker forked after sp_shm_create writes into
 * the mapping it inherited, and a process that only has the descriptor
 * (the exporter after exec) reads it through sp_shm_open_fd.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_ring.h"
#include "sp_shm.h"

static void
created_region_is_attachable_and_page_sized(void **state)
{
    sp_shm shm;
    sp_region *region;

    (void)state;
    assert_int_equal(sp_shm_create(4, 4096, &shm), SP_OK);
    assert_true(shm.fd >= 0);
    assert_true(shm.size >= sp_region_size(4, 4096));
    assert_int_equal(shm.size % (size_t)sysconf(_SC_PAGESIZE), 0);
    assert_true(fcntl(shm.fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(sp_region_attach(shm.base, shm.size, &region), SP_OK);
    assert_int_equal(sp_region_slot_count(region), 4);
    sp_region_detach(region);
    sp_shm_close(&shm);
    assert_int_equal(shm.fd, -1);
    assert_null(shm.base);
}

static void
bad_sizes_are_refused(void **state)
{
    sp_shm shm;

    (void)state;
    assert_int_equal(sp_shm_create(0, 4096, &shm), SP_ERR_INVALID);
    assert_int_equal(sp_shm_create(4, 1000, &shm), SP_ERR_INVALID);
    assert_int_equal(sp_shm_create(SP_REGION_MAX_SLOTS + 1, 4096, &shm),
                     SP_ERR_INVALID);
    assert_int_equal(shm.fd, -1);
}

static void
worker_writes_reader_with_only_the_fd_reads(void **state)
{
    sp_shm shm, mapped;
    sp_region *region, *reader;
    sp_record_view view;
    pid_t pid;
    int status, fd;
    uint32_t i, found = 0;

    (void)state;
    assert_int_equal(sp_shm_create(2, 8192, &shm), SP_OK);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sp_ring *ring;

        if (sp_region_attach(shm.base, shm.size, &region) != SP_OK) {
            _exit(2);
        }
        ring = sp_region_claim(region, (uint32_t)getpid());
        if (ring == NULL
            || sp_ring_write(ring, SP_RECORD_SPAN, "hello, exporter", 16)
               != SP_OK)
        {
            _exit(3);
        }
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* The exporter's side: a fresh mapping from a descriptor only. */
    fd = dup(shm.fd);
    assert_true(fd >= 0);
    assert_int_equal(sp_shm_open_fd(fd, &mapped), SP_OK);
    assert_int_equal(mapped.size, shm.size);
    assert_ptr_not_equal(mapped.base, shm.base);
    assert_int_equal(sp_region_attach(mapped.base, mapped.size, &reader),
                     SP_OK);
    for (i = 0; i < sp_region_slot_count(reader); i++) {
        sp_ring *r = sp_region_ring(reader, i);

        if (sp_ring_read(r, &view) == SP_OK) {
            assert_int_equal(view.type, SP_RECORD_SPAN);
            assert_int_equal(view.len, 16);
            assert_memory_equal(view.body, "hello, exporter", 16);
            assert_int_equal(sp_ring_consume(r, &view), SP_OK);
            found++;
        }
    }
    assert_int_equal(found, 1);
    sp_region_detach(reader);
    sp_shm_close(&mapped);
    sp_shm_close(&shm);
}

static void
descriptors_that_are_not_a_region_file_are_refused(void **state)
{
    sp_shm shm;
    int p[2];

    (void)state;
    assert_int_equal(sp_shm_open_fd(-1, &shm), SP_ERR_INVALID);
    assert_int_equal(pipe(p), 0);
    assert_int_equal(sp_shm_open_fd(p[0], &shm), SP_ERR_INVALID);
    close(p[0]);
    close(p[1]);
    /* An empty file: nothing to map. */
    p[0] = memfd_create("empty", MFD_CLOEXEC);
    assert_true(p[0] >= 0);
    assert_int_equal(sp_shm_open_fd(p[0], &shm), SP_ERR_INVALID);
    close(p[0]);
}

static void
closing_a_zeroed_handle_touches_nothing(void **state)
{
    sp_shm shm;
    int fd;

    (void)state;
    memset(&shm, 0, sizeof(shm));
    fd = dup(0);
    sp_shm_close(&shm);         /* must not close descriptor 0 */
    assert_int_not_equal(fcntl(0, F_GETFD), -1);
    close(fd);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(created_region_is_attachable_and_page_sized),
        cmocka_unit_test(bad_sizes_are_refused),
        cmocka_unit_test(worker_writes_reader_with_only_the_fd_reads),
        cmocka_unit_test(descriptors_that_are_not_a_region_file_are_refused),
        cmocka_unit_test(closing_a_zeroed_handle_touches_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
