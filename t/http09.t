#!/usr/bin/perl
# HTTP/0.9 requests ("GET /path" and nothing else), which both servers
# still answer: nginx makes no header list for them, and the module's
# upstream headers must not assume one (a worker died on signal 11 for
# each such request before). Real nginx (with and without a proxy_pass
# location, propagation on by default) and real apache2; the span says
# network.protocol.version "0.9". And request lines that claim HTTP/2.0 or
# HTTP/3.0, which apache2 serves over HTTP/1.1: "1.1" (it said "2").

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Upstream;
use Spanprof::Cases qw(spans wait_spans raw_answer);

Spanprof::Receiver::skip_unless_ready();

# The raw answer to "GET $path\r\n".
sub get09 {
    my ($port, $path) = @_;
    return raw_answer($port, "GET $path\r\n");
}

sub check_span {
    my ($server, $recv, $path) = @_;
    my ($span) = wait_spans($recv, sub {
        (Spanprof::Receiver::attribute($_[0]->{attributes}, 'url.path')
         // '') eq $path });
    ok($span, "$server: $path over HTTP/0.9 has its span") or return;
    is(Spanprof::Receiver::attribute($span->{attributes},
                                     'network.protocol.version'),
       '0.9', "$server: $path: network.protocol.version 0.9");
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
    my $upstream = '127.0.0.1:' . $up->port;
    my $port = nginx_conf($dir, server => <<"SERVER");
        location /proxy { proxy_pass http://$upstream; }
SERVER
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    is(get09($port, '/'), "ok\n", 'nginx answers an HTTP/0.9 request');
    check_span('nginx', $recv, '/');
    get09($port, '/proxy/x');
    my ($got) = $up->requests;
    ok($got, 'nginx passes an HTTP/0.9 request upstream');
    my ($span) = wait_spans($recv, sub {
        (Spanprof::Receiver::attribute($_[0]->{attributes}, 'url.path')
         // '') eq '/proxy/x' });
    like($got ? $got->{headers}{traceparent}[0] // '' : '',
         qr/^00-[0-9a-f]{32}-\Q@{[ $span ? $span->{spanId} : 'none' ]}\E-01$/,
         'nginx: the upstream gets the entry span as its parent');
    stop($nginx);
    unlike(read_file("$dir/error.log"), qr/exited on signal|\[(alert|crit|emerg)\]/,
           'nginx: no worker died, no alert');
}

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir);
    my $httpd = httpd_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    is(get09($port, '/index.html'), "ok\n",
       'httpd answers an HTTP/0.9 request');
    check_span('httpd', $recv, '/index.html');
    # A request line that claims a version above 1.1 is served all the
    # same, over HTTP/1.1: that is the protocol its span names.
    for my $v ('2.0', '3.0') {
        my ($status) = raw_answer($port, "GET /index.html?v=$v HTTP/$v\r\n"
                                  . "Host: localhost\r\n"
                                  . "Connection: close\r\n\r\n")
                       =~ m{^(HTTP/\S+ \d+)};
        is($status, 'HTTP/1.1 200', "httpd: a request line of HTTP/$v: "
                                    . 'answered over HTTP/1.1');
        my ($span) = wait_spans($recv, sub {
            (Spanprof::Receiver::attribute($_[0]->{attributes}, 'url.query')
             // '') eq "v=$v" });
        is($span && Spanprof::Receiver::attribute($span->{attributes},
                                                  'network.protocol.version'),
           '1.1', "httpd: a request line of HTTP/$v: "
                  . 'network.protocol.version 1.1');
    }
    stop($httpd);
    unlike(read_file("$dir/error.log"), qr/\[[\w:]*(alert|crit|emerg)\]/,
           'httpd: no alert');
}

done_testing();
