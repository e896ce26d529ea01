/*
 * The exporter's lines in the server's syslog (SP_EXPORTER_SYSLOG_ENV,
 * sp_exporter_launch.h): nginx's "error_log syslog:...", httpd's
 * "ErrorLog syslog[:facility[:tag]]". Without it they went only to the
 * descriptor the exporter was given, which is then another log (nginx's
 * first file log, or the stderr it started with) or /dev/null (httpd
 * points stderr there), and the operator who reads syslog never saw a
 * collector that is down. Each message has the header the server's own
 * have:
 *   nginx  "<PRI>Nov 26 21:00:01 HOST TAG: " then the error log line
 *          (ngx_syslog_writer; no "HOST " with nohostname)
 *   httpd  "<PRI>Nov 26 21:00:01 TAG[PID]: " (glibc's syslog(3), which
 *          httpd calls) then the line without its time, as httpd's
 *          default ErrorLogFormat leaves it out for syslog
 * PRI is the facility times 8 plus the line's severity. Private to the
 * exporter.
 */
#ifndef SP_SYSLOG_H
#define SP_SYSLOG_H

#include "sp_common.h"
#include "sp_exporter.h"
#include "sp_log_prefix.h"

#include <sys/socket.h>
#include <time.h>

typedef struct sp_syslog {
    int                     max_level;  /* sp_log_level; -1: none */
    unsigned int            facility;
    char                    hostname[256];  /* "": none */
    char                    tag[256];
    struct sockaddr_storage addr;
    socklen_t               addr_len;
} sp_syslog;

/*
 * A level as SP_EXPORTER_LOG_LEVEL_ENV names it, the len bytes at name:
 * the most verbose sp_log_level written into *max ("crit": -1, none).
 * false for another word.
 */
bool sp_log_level_named(const char *name, size_t len, int *max);

/* SP_EXPORTER_SYSLOG_ENV's value into *s; SP_ERR_INVALID when it is not
 * one. */
sp_status sp_syslog_parse(const char *value, sp_syslog *s);

/* The severity of a line of that level (RFC 3164: error 3 ... debug 7). */
unsigned int sp_syslog_severity(sp_log_level level);

/*
 * The header of a message at buf, for a line of that severity written at
 * tm (local time) by process pid, in the style's form; returns its
 * length (at most size - 1, NUL-terminated).
 */
size_t sp_syslog_header(const sp_syslog *s, sp_log_style style,
                        unsigned int severity, const struct tm *tm,
                        unsigned int pid, char *buf, size_t size);

/*
 * Sends the len bytes at msg as one datagram, without waiting: a syslog
 * daemon that is gone or behind costs the line, never the exporter's
 * progress (nginx's own writer does not wait either). A socket a
 * message: the two threads that log share nothing, and a daemon that
 * restarted (a new /dev/log) is reached at the next line.
 */
void sp_syslog_send(const sp_syslog *s, const char *msg, size_t len);

#endif
