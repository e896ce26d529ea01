/*
 * /proc/<pid>/stat and /proc/self/task/<tid>/stat, read in one place.
 */
#ifndef SP_PROCSTAT_H
#define SP_PROCSTAT_H

#include <stddef.h>

/*
 * Reads the stat file at path into buf (cap bytes) and returns where its
 * third field (the state letter) starts, or NULL when it cannot be read.
 * The name (field 2) may hold anything, ')' and spaces included, so the
 * fields start after its last ')'.
 */
char *sp_proc_stat_fields(const char *path, char *buf, size_t cap);

#endif
