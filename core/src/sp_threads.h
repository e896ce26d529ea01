/*
 * The threads of this process, for the continuous sampler's sweep. Private
 * to the core; declared here so the sweep's order can be tested.
 */
#ifndef SP_THREADS_H
#define SP_THREADS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Fills tids with the ids of this process's threads, except `except`, in
 * increasing order (the order the sweep signals them in), at most cap of
 * them; returns how many. 0 when /proc/self/task cannot be read.
 */
size_t sp_threads_list(pid_t except, pid_t *tids, size_t cap);

/* At most this share of a CPU goes to the sweeps: 1 / (1 + rest). */
#define SP_SWEEP_REST 9

/*
 * When the sweep after one due at due_ns, that ended at end_ns and took
 * cpu_ns of its thread's CPU time, is due (monotonic nanoseconds): an
 * interval later, but never sooner than SP_SWEEP_REST times that CPU time
 * after its end. A sweep reads every thread's state from /proc (about 10
 * us a thread): 150 threads at a 1 ms interval made sweeps run back to
 * back, a CPU per child, and falling further behind. CPU time, not wall
 * time: a sweep preempted on a busy machine (or serialized by valgrind)
 * cost no more. Sweeps are not made up for: a sample's period is the real
 * time since its thread's previous one.
 */
uint64_t sp_sweep_next_due(uint64_t due_ns, uint64_t interval_ns,
                           uint64_t end_ns, uint64_t cpu_ns);

#endif
