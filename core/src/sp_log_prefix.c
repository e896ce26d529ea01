/*
 * Line prefixes in the servers' error log formats: see sp_log_prefix.h.
 */
#include "sp_log_prefix.h"
#include "sp_exporter_launch.h"
#include "sp_text.h"

#include <stdio.h>
#include <string.h>

/* httpd writes English names whatever the locale (apr_day_snames); so
 * does this, rather than strftime's %a and %b. */
static const char sp_days[7][4] = {
    "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"
};
static const char sp_months[12][4] = {
    "Jan", "Feb", "Mar", "Apr", "May", "Jun",
    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"
};

sp_log_style
sp_log_style_of(const char *server)
{
    if (server == NULL) {
        return SP_LOG_STYLE_PLAIN;
    }
    if (strcmp(server, "nginx") == 0) {
        return SP_LOG_STYLE_NGINX;
    }
    if (strcmp(server, "httpd") == 0) {
        return SP_LOG_STYLE_HTTPD;
    }
    return SP_LOG_STYLE_PLAIN;
}

size_t
sp_log_stamp(char *buf, size_t size, sp_log_style style,
             const struct timespec *now, const char *level)
{
    struct tm tm;
    int       n;

    if (size == 0) {
        return 0;
    }
    buf[0] = '\0';
    if (style == SP_LOG_STYLE_PLAIN) {
        return 0;
    }
    if (localtime_r(&now->tv_sec, &tm) == NULL) {
        memset(&tm, 0, sizeof(tm));
    }
    if (style == SP_LOG_STYLE_NGINX) {
        n = snprintf(buf, size, "%04d/%02d/%02d %02d:%02d:%02d [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, level);
    } else {
        n = snprintf(buf, size,
                     "[%s %s %02d %02d:%02d:%02d.%06ld %04d] [spanprof:%s] ",
                     sp_days[tm.tm_wday % 7], sp_months[tm.tm_mon % 12],
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now->tv_nsec / 1000, tm.tm_year + 1900, level);
    }
    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    return (size_t)n < size ? (size_t)n : size - 1;
}

void
sp_log_put(char *buf, size_t size, size_t *n, const char *s)
{
    while (*s != '\0' && *n < size) {
        buf[(*n)++] = *s++;
    }
}

size_t
sp_log_ids(char *buf, size_t size, size_t n, sp_log_style style,
           const char *level, unsigned int pid, unsigned int tid)
{
    switch (style) {
    case SP_LOG_STYLE_NGINX:
        sp_put_decimal(buf, size, &n, pid);
        sp_log_put(buf, size, &n, "#");
        sp_put_decimal(buf, size, &n, tid);
        sp_log_put(buf, size, &n, ": " SP_EXPORTER_NAME ": ");
        break;
    case SP_LOG_STYLE_HTTPD:
        sp_log_put(buf, size, &n, "[pid ");
        sp_put_decimal(buf, size, &n, pid);
        sp_log_put(buf, size, &n, ":tid ");
        sp_put_decimal(buf, size, &n, tid);
        sp_log_put(buf, size, &n, "] " SP_EXPORTER_NAME ": ");
        break;
    default:
        sp_log_put(buf, size, &n, SP_EXPORTER_NAME "[");
        sp_put_decimal(buf, size, &n, pid);
        sp_log_put(buf, size, &n, "]: ");
        sp_log_put(buf, size, &n, level);
        sp_log_put(buf, size, &n, ": ");
    }
    return n;
}
