/*
 * The exporter's line prefixes in each server's error log format
 * (sp_log_prefix.h), compared with lines the servers write themselves.
 */
#include <stdlib.h>
#include <time.h>

#include "sp_test.h"
#include "sp_log_prefix.h"

/* The whole prefix, NUL-terminated. */
static const char *
prefix(sp_log_style style, time_t sec, long nsec, const char *level,
       unsigned int pid, unsigned int tid)
{
    static char     buf[256];
    struct timespec ts = { sec, nsec };
    size_t          n;

    n = sp_log_stamp(buf, sizeof(buf), style, &ts, level);
    n = sp_log_ids(buf, sizeof(buf) - 1, n, style, level, pid, tid);
    buf[n] = '\0';
    return buf;
}

static void
in_local_time(const char *tz)
{
    setenv("TZ", tz, 1);
    tzset();
}

static void
nginx_lines_look_like_nginx_s(void **state)
{
    (void)state;
    in_local_time("UTC");
    /* nginx: "2026/11/24 22:08:34 [warn] 5503#5503: spanprof: ..." */
    assert_string_equal(prefix(SP_LOG_STYLE_NGINX, 1795558114, 0, "warn",
                               5503, 5507),
                        "2026/11/24 22:08:34 [warn] 5503#5507: "
                        "spanprof-exporter: ");
    assert_string_equal(prefix(SP_LOG_STYLE_NGINX, 1767225600, 999999999,
                               "error", 7, 7),
                        "2026/01/01 00:00:00 [error] 7#7: "
                        "spanprof-exporter: ");
}

static void
httpd_lines_look_like_httpd_s(void **state)
{
    (void)state;
    in_local_time("UTC");
    /* httpd's default ErrorLogFormat for a module's line; days of the
     * month with a leading zero, microseconds always six digits. */
    assert_string_equal(prefix(SP_LOG_STYLE_HTTPD, 1795558114, 971496000,
                               "warn", 5671, 5675),
                        "[Tue Nov 24 22:08:34.971496 2026] [spanprof:warn] "
                        "[pid 5671:tid 5675] spanprof-exporter: ");
    assert_string_equal(prefix(SP_LOG_STYLE_HTTPD, 1767225600, 1000,
                               "info", 1, 1),
                        "[Thu Jan 01 00:00:00.000001 2026] [spanprof:info] "
                        "[pid 1:tid 1] spanprof-exporter: ");
}

static void
the_time_is_local(void **state)
{
    (void)state;
    in_local_time("CET-1");
    assert_string_equal(prefix(SP_LOG_STYLE_NGINX, 1795558114, 0, "info",
                               1, 1),
                        "2026/11/24 23:08:34 [info] 1#1: "
                        "spanprof-exporter: ");
    in_local_time("UTC");
}

static void
without_a_server_the_plain_format(void **state)
{
    (void)state;
    assert_int_equal(sp_log_style_of(NULL), SP_LOG_STYLE_PLAIN);
    assert_int_equal(sp_log_style_of(""), SP_LOG_STYLE_PLAIN);
    assert_int_equal(sp_log_style_of("lighttpd"), SP_LOG_STYLE_PLAIN);
    assert_int_equal(sp_log_style_of("nginx"), SP_LOG_STYLE_NGINX);
    assert_int_equal(sp_log_style_of("httpd"), SP_LOG_STYLE_HTTPD);
    assert_string_equal(prefix(SP_LOG_STYLE_PLAIN, 1795558114, 0, "error",
                               4711, 4712),
                        "spanprof-exporter[4711]: error: ");
}

static void
a_small_buffer_cuts_the_prefix(void **state)
{
    char            buf[12];
    struct timespec ts = { 1795558114, 0 };
    size_t          n;

    (void)state;
    in_local_time("UTC");
    n = sp_log_stamp(buf, sizeof(buf), SP_LOG_STYLE_NGINX, &ts, "warn");
    assert_int_equal(n, sizeof(buf) - 1);
    assert_string_equal(buf, "2026/11/24 ");
    n = sp_log_ids(buf, sizeof(buf), n, SP_LOG_STYLE_NGINX, "warn", 5, 5);
    assert_int_equal(n, sizeof(buf));
    assert_memory_equal(buf, "2026/11/24 5", sizeof(buf));
    assert_int_equal(sp_log_stamp(buf, 0, SP_LOG_STYLE_NGINX, &ts, "warn"),
                     0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nginx_lines_look_like_nginx_s),
        cmocka_unit_test(httpd_lines_look_like_httpd_s),
        cmocka_unit_test(the_time_is_local),
        cmocka_unit_test(without_a_server_the_plain_format),
        cmocka_unit_test(a_small_buffer_cuts_the_prefix),
    };

    return cmocka_run_group_tests_name("log_prefix", tests, NULL, NULL);
}
