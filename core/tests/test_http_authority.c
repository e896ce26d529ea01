#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_test.h"
#include "sp_http_authority.h"
#include "sp_authority_ref.h"

/* "host|port" of an authority, or "invalid". */
static const char *
authority(const char *s)
{
    static char  out[300];
    sp_authority a;

    if (sp_authority_parse(s, strlen(s), &a) != SP_OK) {
        return "invalid";
    }
    snprintf(out, sizeof(out), "%.*s|%lld", (int)a.host_len, a.host,
             (long long)a.port);
    return out;
}

/* The host= of a Forwarded header, "none" or "invalid". */
static const char *
forwarded(const char *s)
{
    static char out[300];
    const char *v;
    size_t      len;
    sp_status   st = sp_forwarded_param(s, strlen(s), "host", 4, &v, &len);

    if (st != SP_OK) {
        return st == SP_ERR_NOT_FOUND ? "none" : "invalid";
    }
    snprintf(out, sizeof(out), "%.*s", (int)len, v);
    return out;
}

static void
authorities_give_host_and_port(void **state)
{
    (void)state;
    assert_string_equal(authority("example.com"), "example.com|0");
    assert_string_equal(authority("example.com:8080"), "example.com|8080");
    assert_string_equal(authority("Example.COM:443"), "Example.COM|443");
    assert_string_equal(authority("10.0.0.1:80"), "10.0.0.1|80");
    assert_string_equal(authority("[::1]"), "::1|0");
    assert_string_equal(authority("[2001:db8::7]:8443"), "2001:db8::7|8443");
    assert_string_equal(authority("host:"), "host|0");
    assert_string_equal(authority("host:65535"), "host|65535");
    assert_string_equal(authority("host:00080"), "host|80");
    assert_string_equal(authority("xn--bcher-kva.example"),
                        "xn--bcher-kva.example|0");
    assert_string_equal(authority("a%2eb"), "a%2eb|0");
}

/* The bitmap against RFC 3986's lists, byte by byte. */
static void
reg_name_bytes_are_rfc3986s(void **state)
{
    const char *rfc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789-._~!$&'()*+,;=%";
    unsigned    c;

    (void)state;
    for (c = 0; c < 256; c++) {
        assert_int_equal(sp_is_reg_name_char((unsigned char)c),
                         c != 0 && strchr(rfc, (int)c) != NULL);
    }
}

static void
what_is_no_authority_is_refused(void **state)
{
    sp_authority a = { "kept", 4, 7 };

    (void)state;
    assert_string_equal(authority(""), "invalid");
    assert_string_equal(authority(":80"), "invalid");
    assert_string_equal(authority("host:65536"), "invalid");
    assert_string_equal(authority("host:99999999999999999999"), "invalid");
    assert_string_equal(authority("host:8o"), "invalid");
    assert_string_equal(authority("host:80:81"), "invalid");
    assert_string_equal(authority("host name"), "invalid");
    assert_string_equal(authority("host/path"), "invalid");
    assert_string_equal(authority("user@host"), "invalid");
    assert_string_equal(authority("[::1"), "invalid");
    assert_string_equal(authority("[]"), "invalid");
    assert_string_equal(authority("[::1]x"), "invalid");
    assert_string_equal(authority("[::1]:x"), "invalid");
    assert_string_equal(authority("[<script>]"), "invalid");
    assert_string_equal(authority("caf\xc3\xa9"), "invalid");
    assert_string_equal(authority("host\r\nX: y"), "invalid");
    /* a NUL inside the length is a byte like any other */
    assert_int_equal(sp_authority_parse("ho\0st", 5, &a), SP_ERR_INVALID);
    assert_int_equal(sp_authority_parse(NULL, 0, &a), SP_ERR_INVALID);
    /* nothing written on failure */
    assert_string_equal(a.host, "kept");
    assert_int_equal(a.port, 7);
}

static void
forwarded_host_is_the_first_elements(void **state)
{
    (void)state;
    assert_string_equal(forwarded("host=example.com"), "example.com");
    assert_string_equal(forwarded("for=192.0.2.60;proto=http;by=203.0.113.43"
                                  ";host=\"example.com:8080\""),
                        "example.com:8080");
    assert_string_equal(forwarded("for=a;HOST=first.example, "
                                  "for=b;host=second.example"),
                        "first.example");
    /* a later element's is a hop's inside the chain, not the client's */
    assert_string_equal(forwarded("for=a, for=b;host=second.example"),
                        "none");
    assert_string_equal(forwarded(" , for=a;host=first.example"),
                        "first.example");
    assert_string_equal(forwarded(" ;; host = x"), "invalid");
    assert_string_equal(forwarded(",,;host=x ; for=y"), "x");
    assert_string_equal(forwarded("Host=\"[::1]:8443\""), "[::1]:8443");
    /* bare, with a port: against the RFC, but proxies write it */
    assert_string_equal(forwarded("host=example.com:8080;proto=https"),
                        "example.com:8080");
    assert_string_equal(forwarded("hostname=x;host=y"), "y");
    assert_string_equal(forwarded("for=\"_hidden\";host=y"), "y");
    assert_string_equal(forwarded("host=\"\""), "");
}

static void
forwarded_without_host_or_malformed(void **state)
{
    const char *v = "kept";
    size_t      len = 4;

    (void)state;
    assert_string_equal(forwarded(""), "none");
    assert_string_equal(forwarded("for=192.0.2.60;proto=https"), "none");
    assert_string_equal(forwarded("for=a, for=b"), "none");
    assert_string_equal(forwarded("host"), "invalid");
    assert_string_equal(forwarded("=x;host=y"), "invalid");
    assert_string_equal(forwarded("for=\"unterminated;host=y"), "invalid");
    assert_string_equal(forwarded("host=\"a\\\"b\""), "invalid");
    assert_string_equal(forwarded("for=a b;host=y"), "invalid");
    assert_string_equal(forwarded("for=a\"b\";host=y"), "invalid");
    assert_string_equal(forwarded("host=\\\"b\""), "invalid");
    assert_string_equal(forwarded("host=x\"b\""), "invalid");
    assert_string_equal(forwarded("host=x y"), "invalid");
    /* the host comes before what is malformed after it */
    assert_string_equal(forwarded("host=y;=="), "y");
    assert_int_equal(sp_forwarded_param(NULL, 0, "host", 4, &v, &len), SP_ERR_NOT_FOUND);
    assert_string_equal(v, "kept");
}

static void
forwarded_proto_and_schemes(void **state)
{
    const char *v;
    size_t      len;
    const char *h = "for=1.2.3.4;Proto=https;host=x, proto=http";

    (void)state;
    assert_int_equal(sp_forwarded_param(h, strlen(h), "proto", 5, &v, &len),
                     SP_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(v, "https", 5);
    assert_int_equal(sp_forwarded_param(h, strlen(h), "by", 2, &v, &len),
                     SP_ERR_NOT_FOUND);
    assert_true(sp_is_scheme("https", 5));
    assert_true(sp_is_scheme("svn+ssh", 7));
    assert_true(sp_is_scheme("coap.tcp-1", 10));
    assert_false(sp_is_scheme("", 0));
    assert_false(sp_is_scheme(NULL, 0));
    assert_false(sp_is_scheme("1http", 5));
    assert_false(sp_is_scheme("ht tp", 5));
    assert_false(sp_is_scheme("http:", 5));
    assert_false(sp_is_scheme("caf\xc3\xa9", 5));
}

static void
list_first_is_the_clients(void **state)
{
    const char *v;
    size_t      len;

    (void)state;
    sp_list_first(" a.example:8080 , proxy.internal", 32, &v, &len);
    assert_int_equal(len, 14);
    assert_memory_equal(v, "a.example:8080", 14);
    sp_list_first("only", 4, &v, &len);
    assert_int_equal(len, 4);
    sp_list_first(", b", 3, &v, &len);
    assert_int_equal(len, 0);
    sp_list_first("", 0, &v, &len);
    assert_int_equal(len, 0);
}

/* s[0..len) parsed as the byte-at-a-time parser does, from a buffer of
 * exactly len bytes (ASan then sees a read past it). */
static void
same_as_ref(const char *s, size_t len)
{
    char        *buf = malloc(len > 0 ? len : 1);
    sp_authority a = { "kept", 4, 7 }, b = { "kept", 4, 7 };
    sp_status    ra, rb;

    assert_non_null(buf);
    memcpy(buf, s, len);
    ra = sp_authority_parse(buf, len, &a);
    rb = sp_authority_parse_ref(buf, len, &b);
    if (ra != rb || a.host != b.host || a.host_len != b.host_len
        || a.port != b.port)
    {
        fail_msg("\"%.*s\" (%zu bytes): %d %.*s|%lld, expected %d %.*s|%lld",
                 (int)len, s, len, ra, (int)a.host_len, a.host,
                 (long long)a.port, rb, (int)b.host_len, b.host,
                 (long long)b.port);
    }
    free(buf);
}

/* Bytes on each side of the classes the parser tells apart: digits,
 * reg-name bytes, ':', brackets, and bytes whose high bit or low nibble
 * could pass a digit's test done a word at a time. */
static const char sp_alphabet[] = "09/:.[]aF-%@ \0\x80\xb0\xb9\xba\xff";

static void
parses_as_the_byte_at_a_time_parser(void **state)
{
    static const char *hosts[] = {
        "", "a", "ab", "abc", "abcd", "10.0.0.1", "127.0.0.1", "Example.COM",
        "xn--bcher-kva.example", "a%2eb", "[::1]", "[2001:db8::7]", "[]",
        "h st", "caf\xc3\xa9", "0123456789", "host:", "a.b.c.d.e.f.g.h.i",
    };
    static const char *ports[] = {
        "", "0", "8", "80", "443", "8080", "65535", "65536", "99999",
        "065535", "0000065535", "00000000", "000000000", "12345678",
        "123456789", "99999999999999999999", "6553 5", "8o", "80:81", ":",
    };
    const size_t n = sizeof(sp_alphabet) - 1;
    char         s[64];
    size_t       h, p, len, i, j, k;
    uint32_t     x = 1;

    (void)state;
    /* Every string of up to four bytes of the alphabet. */
    for (len = 0; len <= 4; len++) {
        size_t total = 1;

        for (i = 0; i < len; i++) {
            total *= n;
        }
        for (k = 0; k < total; k++) {
            size_t v = k;

            for (i = 0; i < len; i++, v /= n) {
                s[i] = sp_alphabet[v % n];
            }
            same_as_ref(s, len);
        }
    }
    /* Each host with each port, and with each byte of the alphabet in
     * place of each of the port's bytes. */
    for (h = 0; h < sizeof(hosts) / sizeof(hosts[0]); h++) {
        for (p = 0; p < sizeof(ports) / sizeof(ports[0]); p++) {
            len = (size_t)snprintf(s, sizeof(s), "%s:%s", hosts[h],
                                   ports[p]);
            same_as_ref(s, strlen(hosts[h]));
            same_as_ref(s, len);
            for (i = strlen(hosts[h]) + 1; i < len; i++) {
                char c = s[i];

                for (j = 0; j < n; j++) {
                    s[i] = sp_alphabet[j];
                    same_as_ref(s, len);
                }
                s[i] = c;
            }
        }
    }
    /* Longer strings, mostly digits around a ':'. */
    for (k = 0; k < 200000; k++) {
        x = x * 1103515245u + 12345u;
        len = (x >> 16) % 24;
        for (i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            j = (x >> 16) % (n + 12);
            s[i] = j < n ? sp_alphabet[j] : (char)('0' + j - n);
        }
        same_as_ref(s, len);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(authorities_give_host_and_port),
        cmocka_unit_test(parses_as_the_byte_at_a_time_parser),
        cmocka_unit_test(reg_name_bytes_are_rfc3986s),
        cmocka_unit_test(what_is_no_authority_is_refused),
        cmocka_unit_test(forwarded_host_is_the_first_elements),
        cmocka_unit_test(forwarded_without_host_or_malformed),
        cmocka_unit_test(forwarded_proto_and_schemes),
        cmocka_unit_test(list_first_is_the_clients),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
