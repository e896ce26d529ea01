#!/usr/bin/perl
# The request method in the entry span, as the HTTP server conventions
# say: the method the client sent, also when an error page redirects the
# request internally (both servers turn it into GET for the page);
# a method the conventions do not know as http.request.method "_OTHER",
# with the method sent in http.request.method_original and "HTTP" in the
# span's name; OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS (and its
# directives) replacing the list of known methods. Real nginx and real
# apache2, curl, the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_start
                        httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $serial = 0;

# Sends $method to $path with a traceparent of a fresh trace id; the
# response's status and the span of that trace.
sub request {
    my ($recv, $port, $method, $path) = @_;
    my $trace = sprintf '%032x', 0x3e7400 + ++$serial;
    my $code = `curl -s -m 10 -o /dev/null -w '%{http_code}' -X $method -H 'traceparent: 00-$trace-00f067aa0ba902b7-01' http://127.0.0.1:$port$path`;
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    return ($code, $span);
}

sub attr {
    my ($span, $key) = @_;
    return Spanprof::Receiver::attribute($span->{attributes}, $key);
}

# @cases: [method, path, status, reported method, original or undef,
#          name]
sub check_cases {
    my ($server, $recv, $port, @cases) = @_;
    for my $c (@cases) {
        my ($method, $path, $status, $reported, $original, $name) = @$c;
        my $what = "$server: $method $path";
        my ($code, $span) = request($recv, $port, $method, $path);
        is($code, $status, "$what: answered $status");
        ok($span, "$what: the span arrives") or next;
        is(attr($span, 'http.request.method'), $reported,
           "$what: http.request.method $reported");
        is(attr($span, 'http.request.method_original'), $original,
           "$what: http.request.method_original "
           . ($original // 'not set'));
        is($span->{name}, $name, "$what: named \"$name\"");
    }
}

sub pages {
    my ($root) = @_;
    mkdir $root;
    chmod 0755, $root;
    for my $page (qw(page.html 404.html)) {
        write_file("$root/$page", "$page\n");
        chmod 0644, "$root/$page";
    }
}

for my $known (undef, 'GET,FOO') {
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    pages("$dir/html");
    my $port = nginx_conf($dir, server => <<"SERVER",
        root $dir/html;
        error_page 404 /404.html;
        location = /404.html { internal; }
SERVER
        location => 'if ($request_method = DELETE) { return 500; }');
    my %env = (OTEL_BSP_SCHEDULE_DELAY => '100',
               OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:'
                                              . $recv->port);
    $env{OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS} = $known if $known;
    my $nginx = nginx_start($dir, $port, %env);
    ok($nginx, 'nginx starts' . ($known ? " with the known methods $known"
                                        : ''))
        or diag(read_file("$dir/error.log"));
    if (!$known) {
        check_cases('nginx', $recv, $port,
            [ 'GET', '/page.html', 200, 'GET', undef, 'GET /' ],
            [ 'POST', '/missing', 404, 'POST', undef, 'POST /404.html' ],
            [ 'DELETE', '/page.html', 500, 'DELETE', undef, 'DELETE /' ],
            [ 'FOO', '/page.html', 405, '_OTHER', 'FOO', 'HTTP /' ]);
    } else {
        check_cases("nginx, known $known", $recv, $port,
            [ 'GET', '/page.html', 200, 'GET', undef, 'GET /' ],
            [ 'FOO', '/page.html', 405, 'FOO', undef, 'FOO /' ],
            [ 'POST', '/page.html', 405, '_OTHER', 'POST', 'HTTP /' ]);
    }
    stop($nginx);
}

for my $known (undef, 'GET,FOO') {
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir, extra => "ErrorDocument 404 /404.html\n");
    pages("$dir/htdocs");
    my %env = (OTEL_BSP_SCHEDULE_DELAY => '100',
               OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:'
                                              . $recv->port);
    $env{OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS} = $known if $known;
    my $httpd = httpd_start($dir, $port, %env);
    ok($httpd, 'httpd starts' . ($known ? " with the known methods $known"
                                        : ''))
        or diag(read_file("$dir/error.log"));
    if (!$known) {
        check_cases('httpd', $recv, $port,
            [ 'GET', '/page.html', 200, 'GET', undef, 'GET' ],
            [ 'POST', '/missing', 404, 'POST', undef, 'POST' ],
            [ 'FOO', '/page.html', 501, '_OTHER', 'FOO', 'HTTP' ]);
    } else {
        check_cases("httpd, known $known", $recv, $port,
            [ 'GET', '/page.html', 200, 'GET', undef, 'GET' ],
            [ 'FOO', '/page.html', 501, 'FOO', undef, 'FOO' ],
            [ 'POST', '/missing', 404, '_OTHER', 'POST', 'HTTP' ]);
    }
    stop($httpd);
}

done_testing();
