/*
 * The exporter's lines in the server's syslog (sp_syslog.h): the value
 * the modules pass, the header each server writes, one datagram a line.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_syslog.h"

static void
levels_are_the_log_level_s(void **state)
{
    int max = 99;

    (void)state;
    assert_true(sp_log_level_named("crit", 4, &max));
    assert_int_equal(max, -1);
    assert_true(sp_log_level_named("error", 5, &max));
    assert_int_equal(max, SP_LOG_ERROR);
    assert_true(sp_log_level_named("warn", 4, &max));
    assert_int_equal(max, SP_LOG_WARN);
    assert_true(sp_log_level_named("info,", 4, &max));
    assert_int_equal(max, SP_LOG_INFO);
    assert_false(sp_log_level_named("notice", 6, &max));
    assert_false(sp_log_level_named("war", 3, &max));
    assert_int_equal(max, SP_LOG_INFO);
    assert_int_equal(sp_syslog_severity(SP_LOG_ERROR), 3);
    assert_int_equal(sp_syslog_severity(SP_LOG_WARN), 4);
    assert_int_equal(sp_syslog_severity(SP_LOG_INFO), 6);
    assert_int_equal(sp_syslog_severity(SP_LOG_DEBUG), 7);
}

static void
nginx_s_value_parses(void **state)
{
    sp_syslog           s;
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)&s.addr;

    (void)state;
    assert_int_equal(sp_syslog_parse("warn,23,web1,127.0.0.1:5140,nginx",
                                     &s), SP_OK);
    assert_int_equal(s.max_level, SP_LOG_WARN);
    assert_int_equal(s.facility, 23);
    assert_string_equal(s.hostname, "web1");
    assert_string_equal(s.tag, "nginx");
    assert_int_equal(in->sin_family, AF_INET);
    assert_int_equal(ntohs(in->sin_port), 5140);
    assert_int_equal(ntohl(in->sin_addr.s_addr), 0x7f000001);
    assert_int_equal(s.addr_len, sizeof(*in));
}

static void
other_addresses_parse(void **state)
{
    sp_syslog            s;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&s.addr;
    struct sockaddr_un  *un = (struct sockaddr_un *)(void *)&s.addr;

    (void)state;
    assert_int_equal(sp_syslog_parse("info,0,,[::1]:514,t", &s), SP_OK);
    assert_int_equal(in6->sin6_family, AF_INET6);
    assert_int_equal(ntohs(in6->sin6_port), 514);
    assert_true(IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr));
    assert_string_equal(s.hostname, "");

    /* httpd's: the system's logger, a tag that may hold commas */
    assert_int_equal(sp_syslog_parse("crit,17,,unix:/dev/log,my,tag", &s),
                     SP_OK);
    assert_int_equal(s.max_level, -1);
    assert_int_equal(un->sun_family, AF_UNIX);
    assert_string_equal(un->sun_path, "/dev/log");
    assert_string_equal(s.tag, "my,tag");
}

static void
what_is_not_a_syslog_is_refused(void **state)
{
    static const char *const bad[] = {
        "",
        "warn",
        "warn,23,h,127.0.0.1:514",              /* no tag */
        "warn,23,h,127.0.0.1:514,",             /* empty tag */
        "notice,23,h,127.0.0.1:514,nginx",      /* not a level */
        "warn,24,h,127.0.0.1:514,nginx",        /* no such facility */
        "warn,-1,h,127.0.0.1:514,nginx",
        "warn,,h,127.0.0.1:514,nginx",
        "warn,23,a b,127.0.0.1:514,nginx",      /* a space in the host */
        "warn,23,h,127.0.0.1,nginx",            /* no port */
        "warn,23,h,127.0.0.1:0,nginx",
        "warn,23,h,127.0.0.1:65536,nginx",
        "warn,23,h,127.0.0.1:51x,nginx",
        "warn,23,h,localhost:514,nginx",        /* not numeric */
        "warn,23,h,::1:514,nginx",              /* v6 without brackets */
        "warn,23,h,[127.0.0.1]:514,nginx",
        "warn,23,h,unix:,nginx",
        "warn,23,h,127.0.0.1:514/,nginx",       /* an endpoint's '/' */
        "warn,23,h,http://127.0.0.1:514,nginx",
        NULL
    };
    char      longer[200];
    sp_syslog s;
    int       i;

    (void)state;
    for (i = 0; bad[i] != NULL; i++) {
        if (sp_syslog_parse(bad[i], &s) != SP_ERR_INVALID) {
            fail_msg("accepted \"%s\"", bad[i]);
        }
    }
    assert_int_equal(sp_syslog_parse(NULL, &s), SP_ERR_INVALID);
    /* longer than sun_path */
    snprintf(longer, sizeof(longer), "warn,1,,unix:/%0120d,t", 0);
    assert_int_equal(sp_syslog_parse(longer, &s), SP_ERR_INVALID);
}

static void
headers_are_the_server_s(void **state)
{
    sp_syslog s;
    char      buf[128];
    struct tm tm;

    (void)state;
    memset(&tm, 0, sizeof(tm));
    tm.tm_mon = 10;
    tm.tm_mday = 6;
    tm.tm_hour = 21;
    tm.tm_min = 5;
    tm.tm_sec = 9;

    /* nginx: "<189>Nov 26 21:00:01 vm nginx: " (ngx_syslog_add_header) */
    assert_int_equal(sp_syslog_parse("info,23,vm,127.0.0.1:514,nginx", &s),
                     SP_OK);
    sp_syslog_header(&s, SP_LOG_STYLE_NGINX, 4, &tm, 77, buf, sizeof(buf));
    assert_string_equal(buf, "<188>Nov  6 21:05:09 vm nginx: ");
    /* nohostname */
    assert_int_equal(sp_syslog_parse("info,23,,127.0.0.1:514,nginx", &s),
                     SP_OK);
    sp_syslog_header(&s, SP_LOG_STYLE_NGINX, 6, &tm, 77, buf, sizeof(buf));
    assert_string_equal(buf, "<190>Nov  6 21:05:09 nginx: ");

    /* httpd through glibc's syslog(3): "<141>Nov 26 21:03:51
     * apache2[29069]: " */
    tm.tm_mday = 26;
    assert_int_equal(sp_syslog_parse("info,17,,unix:/dev/log,apache2", &s),
                     SP_OK);
    assert_int_equal(sp_syslog_header(&s, SP_LOG_STYLE_HTTPD, 5, &tm, 29069,
                                      buf, sizeof(buf)),
                     strlen("<141>Nov 26 21:05:09 apache2[29069]: "));
    assert_string_equal(buf, "<141>Nov 26 21:05:09 apache2[29069]: ");

    /* cut, NUL-terminated */
    assert_int_equal(sp_syslog_header(&s, SP_LOG_STYLE_HTTPD, 5, &tm, 1,
                                      buf, 6), 5);
    assert_string_equal(buf, "<141>");
}

static void
a_line_is_one_datagram(void **state)
{
    char                dir[] = "/tmp/test_syslog_XXXXXX", value[200];
    char                got[64];
    struct sockaddr_un  un;
    struct sockaddr_in  in;
    socklen_t           len = sizeof(in);
    sp_syslog           s;
    int                 fd;
    ssize_t             n;

    (void)state;
    assert_non_null(mkdtemp(dir));
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    snprintf(un.sun_path, sizeof(un.sun_path), "%s/log", dir);
    fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0);

    snprintf(value, sizeof(value), "warn,1,,unix:%s,t", un.sun_path);
    assert_int_equal(sp_syslog_parse(value, &s), SP_OK);
    sp_syslog_send(&s, "<12>one", 7);
    sp_syslog_send(&s, "<12>two", 7);
    n = recv(fd, got, sizeof(got), MSG_DONTWAIT);
    assert_int_equal(n, 7);
    assert_memory_equal(got, "<12>one", 7);
    n = recv(fd, got, sizeof(got), MSG_DONTWAIT);
    assert_int_equal(n, 7);
    assert_memory_equal(got, "<12>two", 7);
    close(fd);
    unlink(un.sun_path);
    rmdir(dir);

    /* Nobody there: nothing happens, nothing waits. */
    sp_syslog_send(&s, "<12>three", 9);

    fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(0x7f000001);
    assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&in, &len), 0);
    snprintf(value, sizeof(value), "warn,23,h,127.0.0.1:%u,nginx",
             (unsigned)ntohs(in.sin_port));
    assert_int_equal(sp_syslog_parse(value, &s), SP_OK);
    sp_syslog_send(&s, "<188>udp", 8);
    n = recv(fd, got, sizeof(got), 0);
    assert_int_equal(n, 8);
    assert_memory_equal(got, "<188>udp", 8);
    close(fd);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(levels_are_the_log_level_s),
        cmocka_unit_test(nginx_s_value_parses),
        cmocka_unit_test(other_addresses_parse),
        cmocka_unit_test(what_is_not_a_syslog_is_refused),
        cmocka_unit_test(headers_are_the_server_s),
        cmocka_unit_test(a_line_is_one_datagram),
    };

    return cmocka_run_group_tests_name("syslog", tests, NULL, NULL);
}
