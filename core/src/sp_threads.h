/*
 * The threads of this process, for the continuous sampler's sweep. Private
 * to the core; declared here so the sweep's order can be tested.
 */
#ifndef SP_THREADS_H
#define SP_THREADS_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Fills tids with the ids of this process's threads, except `except`, in
 * increasing order (the order the sweep signals them in), at most cap of
 * them; returns how many. 0 when /proc/self/task cannot be read.
 */
size_t sp_threads_list(pid_t except, pid_t *tids, size_t cap);

#endif
