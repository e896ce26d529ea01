/*
 * The exporter's lines in the server's syslog: see sp_syslog.h.
 */
#include "sp_syslog.h"
#include "sp_endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* Both servers write English names whatever the locale. */
static const char sp_syslog_months[12][4] = {
    "Jan", "Feb", "Mar", "Apr", "May", "Jun",
    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"
};

bool
sp_log_level_named(const char *name, size_t len, int *max)
{
    static const char *const names[] = { "error", "warn", "info" };
    int                      i;

    if (len == 4 && memcmp(name, "crit", 4) == 0) {
        *max = -1;
        return true;
    }
    for (i = 0; i < 3; i++) {
        if (strlen(names[i]) == len && memcmp(name, names[i], len) == 0) {
            *max = SP_LOG_ERROR + i;
            return true;
        }
    }
    return false;
}

unsigned int
sp_syslog_severity(sp_log_level level)
{
    switch (level) {
    case SP_LOG_ERROR: return 3;
    case SP_LOG_WARN:  return 4;
    case SP_LOG_INFO:  return 6;
    default:           return 7;
    }
}

/* The text up to the next comma at *p, which moves past it; NULL when
 * there is none. */
static const char *
sp_syslog_field(const char **p, size_t *len)
{
    const char *start = *p, *comma = strchr(start, ',');

    if (comma == NULL) {
        return NULL;
    }
    *len = (size_t)(comma - start);
    *p = comma + 1;
    return start;
}

/*
 * "a.b.c.d:port", "[v6]:port" or "unix:/path", numeric, into s. host:port
 * is read as an endpoint without a scheme is (sp_endpoint.h), then must
 * be an address: the exporter resolves nothing.
 */
static sp_status
sp_syslog_address(const char *text, size_t len, sp_syslog *s)
{
    size_t               n;
    sp_endpoint          ep;
    struct sockaddr_in  *in = (struct sockaddr_in *)(void *)&s->addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&s->addr;
    struct sockaddr_un  *un = (struct sockaddr_un *)(void *)&s->addr;

    memset(&s->addr, 0, sizeof(s->addr));
    if (len > 5 && memcmp(text, "unix:", 5) == 0) {
        n = len - 5;
        if (n >= sizeof(un->sun_path) || memchr(text + 5, '\0', n)) {
            return SP_ERR_INVALID;
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, text + 5, n);
        s->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path)
                                  + n + 1);
        return SP_OK;
    }

    /* An endpoint may end in '/', an address does not. */
    if (len == 0 || text[len - 1] == '/'
        || sp_endpoint_parse(text, len, &ep) != SP_OK || ep.scheme)
    {
        return SP_ERR_INVALID;
    }
    if (ep.host[0] == '[') {
        ep.host[strlen(ep.host) - 1] = '\0';
        if (inet_pton(AF_INET6, ep.host + 1, &in6->sin6_addr) != 1) {
            return SP_ERR_INVALID;
        }
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(ep.port);
        s->addr_len = sizeof(*in6);
        return SP_OK;
    }
    if (inet_pton(AF_INET, ep.host, &in->sin_addr) != 1) {
        return SP_ERR_INVALID;
    }
    in->sin_family = AF_INET;
    in->sin_port = htons(ep.port);
    s->addr_len = sizeof(*in);
    return SP_OK;
}

sp_status
sp_syslog_parse(const char *value, sp_syslog *s)
{
    const char   *p = value, *f;
    char          number[8], *end;
    size_t        len;
    unsigned long facility;

    memset(s, 0, sizeof(*s));
    if (value == NULL) {
        return SP_ERR_INVALID;
    }

    f = sp_syslog_field(&p, &len);
    if (f == NULL || !sp_log_level_named(f, len, &s->max_level)) {
        return SP_ERR_INVALID;
    }

    f = sp_syslog_field(&p, &len);
    if (f == NULL || len == 0 || len >= sizeof(number)) {
        return SP_ERR_INVALID;
    }
    memcpy(number, f, len);
    number[len] = '\0';
    errno = 0;
    facility = strtoul(number, &end, 10);
    if (errno != 0 || *end != '\0' || number[0] < '0' || number[0] > '9'
        || facility > 23)
    {
        return SP_ERR_INVALID;
    }
    s->facility = (unsigned int)facility;

    f = sp_syslog_field(&p, &len);
    if (f == NULL || len >= sizeof(s->hostname)
        || memchr(f, ' ', len) != NULL)
    {
        return SP_ERR_INVALID;
    }
    memcpy(s->hostname, f, len);

    f = sp_syslog_field(&p, &len);
    if (f == NULL || sp_syslog_address(f, len, s) != SP_OK) {
        return SP_ERR_INVALID;
    }

    len = strlen(p);
    if (len == 0 || len >= sizeof(s->tag)) {
        return SP_ERR_INVALID;
    }
    memcpy(s->tag, p, len + 1);
    return SP_OK;
}

size_t
sp_syslog_header(const sp_syslog *s, sp_log_style style,
                 unsigned int severity, const struct tm *tm,
                 unsigned int pid, char *buf, size_t size)
{
    int n;

    if (size == 0) {
        return 0;
    }
    /* "%2d": RFC 3164's day, as ngx_cached_syslog_time and glibc's %e. */
    if (style == SP_LOG_STYLE_HTTPD) {
        n = snprintf(buf, size, "<%u>%s %2d %02d:%02d:%02d %s[%u]: ",
                     s->facility * 8 + severity,
                     sp_syslog_months[tm->tm_mon % 12], tm->tm_mday,
                     tm->tm_hour, tm->tm_min, tm->tm_sec, s->tag, pid);
    } else {
        n = snprintf(buf, size, "<%u>%s %2d %02d:%02d:%02d %s%s%s: ",
                     s->facility * 8 + severity,
                     sp_syslog_months[tm->tm_mon % 12], tm->tm_mday,
                     tm->tm_hour, tm->tm_min, tm->tm_sec, s->hostname,
                     s->hostname[0] != '\0' ? " " : "", s->tag);
    }
    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    return (size_t)n < size ? (size_t)n : size - 1;
}

void
sp_syslog_send(const sp_syslog *s, const char *msg, size_t len)
{
    int fd;

    fd = socket(s->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0) {
        return;
    }
    (void)sendto(fd, msg, len, MSG_NOSIGNAL,
                 (const struct sockaddr *)&s->addr, s->addr_len);
    close(fd);
}
