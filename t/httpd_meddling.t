#!/usr/bin/perl
# httpd: another module that changes a request's strings in place, after
# spanprof has read what it keeps of them, skews no attribute
# (t/bin/mod_meddle.c, built here with apxs, does what such modules do):
#   - the query unescaped in place ("b?%41" becomes "b?A"), so that its
#     length lands on the target's second '?': url.path is still the
#     target's up to its first '?' and url.query the query as sent (the
#     path was cut at the second: "/index.html?b");
#   - the connection's client_ip set for each request to the address a
#     header names, in one buffer the module writes again each time: the
#     second request of a keep-alive connection, whose address is longer,
#     has it whole in network.peer.address (spanprof kept the first one's
#     length, by the pointer: "10.2.2.2" for "10.2.2.222");
#   - a request logged twice (the module runs the log hooks itself, then
#     httpd does): its span is written once, and the two requests after
#     it on the connection have a span each (the second log wrote it again
#     and put its record among the connection's spares twice, where the
#     next two requests then shared it).
# Real apache2, the independent OTLP receiver.

use strict;
use warnings;

use File::Copy qw(copy);
use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans raw_answer keepalive_answers);

Spanprof::Receiver::skip_unless_ready();
plan skip_all => 'apxs is not installed' if system('apxs -q CC >/dev/null 2>&1');

my $dir = new_dir();
copy("$FindBin::Bin/bin/mod_meddle.c", "$dir/mod_meddle.c") or die $!;
system("cd $dir && apxs -c mod_meddle.c > $dir/apxs.log 2>&1") == 0
    or BAIL_OUT('mod_meddle.c does not build: ' . read_file("$dir/apxs.log"));

my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, extra => <<"EXTRA");
LoadModule meddle_module $dir/.libs/mod_meddle.so
KeepAlive On
EXTRA
my $httpd = httpd_start($dir, $port, OTEL_BSP_SCHEDULE_DELAY => '100',
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));

sub attr {
    my ($span, $key) = @_;
    return Spanprof::Receiver::attribute($span->{attributes}, $key) // '';
}

sub span_of {
    my ($trace) = @_;
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    return $span;
}

sub traceparent {
    my ($trace) = @_;
    return "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n";
}

# The query unescaped in place.
{
    my $trace = sprintf '%032x', 0x3edd1e01;
    my $answer = raw_answer($port, "GET /index.html?b?%41 HTTP/1.1\r\n"
        . "Host: 127.0.0.1\r\nConnection: close\r\n"
        . "X-Meddle-Unescape-Query: 1\r\n" . traceparent($trace) . "\r\n");
    like($answer, qr{^HTTP/1\.1 200 }, 'query unescaped in place: 200');
    my $span = span_of($trace);
    ok($span, 'query unescaped in place: the span arrives');
    is(attr($span, 'url.path'), '/index.html',
       'query unescaped in place: url.path up to the first ?');
    is(attr($span, 'url.query'), 'b?%41',
       'query unescaped in place: url.query as sent');
}

# The connection's address rewritten in place, request by request.
{
    my @trace = map { sprintf '%032x', 0x3edd1e10 + $_ } 1 .. 3;
    my @peer = ('10.1.1.1', '10.2.2.222', '10.3.3.3');
    my @codes = keepalive_answers($port, map {
        "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        . "X-Meddle-Peer: $peer[$_]\r\n" . traceparent($trace[$_]) . "\r\n"
    } 0 .. 2);
    is("@codes", '200 200 200', 'peer rewritten: three answers on one '
       . 'connection');
    for my $i (0 .. 2) {
        my $span = span_of($trace[$i]);
        ok($span, "peer rewritten: request $i: the span arrives") or next;
        is(attr($span, 'network.peer.address'), $peer[$i],
           "peer rewritten: request $i: network.peer.address $peer[$i]");
    }
}

# A request logged twice, then two more on the same connection.
{
    my @trace = map { sprintf '%032x', 0x3edd1e20 + $_ } 1 .. 3;
    my @codes = keepalive_answers($port, map {
        "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        . ($_ == 0 ? "X-Meddle-Log-Twice: 1\r\n" : '')
        . traceparent($trace[$_]) . "\r\n"
    } 0 .. 2);
    is("@codes", '200 200 200', 'logged twice: three answers on one '
       . 'connection');
    span_of($trace[2]);
    sleep 1;
    my ($spans) = $recv->collect;
    for my $i (0 .. 2) {
        my @mine = grep { $_->{traceId} eq $trace[$i] } @$spans;
        is(scalar @mine, 1, "logged twice: request $i: one span");
    }
}

stop($httpd);
my @bad = grep { /\[(?:\w+:)?(?:alert|crit|emerg)\]|exit signal/ }
          split /\n/, read_file("$dir/error.log");
is(join("\n", @bad), '', 'no alert or crash in the error log');

done_testing();
