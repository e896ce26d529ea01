/* See sp_procstat.h. */
#include "sp_procstat.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

char *
sp_proc_stat_fields(const char *path, char *buf, size_t cap)
{
    char    *p;
    int      fd;
    ssize_t  n;

    if (cap < 2) {
        return NULL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }
    n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0) {
        return NULL;
    }
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0') {
        return NULL;
    }
    return p + 2;
}
