/*
 * The start of each line the exporter writes to the server's error log,
 * in that server's own format, so that log parsers and people read the
 * log as one:
 *   nginx  "2026/11/24 22:28:34 [warn] 5503#5507: spanprof-exporter: "
 *   httpd  "[Tue Nov 24 22:28:37.971496 2026] [spanprof:warn]
 *           [pid 5671:tid 5675] spanprof-exporter: "
 *          (httpd's default ErrorLogFormat, as a module's lines have it)
 *   plain  "spanprof-exporter[5503]: warn: " (run by hand, in tests)
 * Local time, as both servers write it. The level is one of the servers'
 * names ("error", "warn", "info", "debug"). Private to the core.
 *
 * Two parts, so that a child between fork and exec can write a line: the
 * stamp (time and level) needs localtime_r, which is not
 * async-signal-safe, and is formatted before fork; the ids need only the
 * child's pid and are async-signal-safe, as are the sp_log_put functions.
 */
#ifndef SP_LOG_PREFIX_H
#define SP_LOG_PREFIX_H

#include <stddef.h>
#include <time.h>

typedef enum sp_log_style {
    SP_LOG_STYLE_PLAIN,
    SP_LOG_STYLE_NGINX,
    SP_LOG_STYLE_HTTPD
} sp_log_style;

/* SPANPROF_SERVER's value ("nginx", "httpd"); NULL or another: plain. */
sp_log_style sp_log_style_of(const char *server);

/* Writes the time and the level at buf; returns the length (at most
 * size - 1, NUL-terminated). Not async-signal-safe. */
size_t sp_log_stamp(char *buf, size_t size, sp_log_style style,
                    const struct timespec *now, const char *level);

/* Appends the process and thread ids and the exporter's name after the
 * stamp at buf + n, as far as they fit in size; returns the new length.
 * No NUL. Async-signal-safe. */
size_t sp_log_ids(char *buf, size_t size, size_t n, sp_log_style style,
                  const char *level, unsigned int pid, unsigned int tid);

/* Append s at buf + *n as far as it fits in size (numbers:
 * sp_put_decimal, sp_text.h). No NUL. Async-signal-safe. */
void sp_log_put(char *buf, size_t size, size_t *n, const char *s);

#endif
