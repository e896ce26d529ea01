#!/usr/bin/perl
# httpd entry spans, header by header (the nginx test's matrix, from
# Spanprof::HeaderMatrix): real apache2 (event MPM) with the module, a
# recording HTTP upstream behind mod_proxy, the exporter the module starts
# and the independent OTLP receiver. For each case of incoming trace
# headers, over HTTP/1.1 and over HTTP/2 (h2c, mod_http2): what the
# upstream receives, what the SPANPROF_* variables log through LogFormat,
# and the exported span (ids, parent, name, attributes, status). Then
# snapshot selection through httpd: highest, off, and the trace-id rule.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Upstream;
use Spanprof::HeaderMatrix qw(run_matrix check_samples_in_spans);
use Spanprof::Cases qw(spans wait_spans);
use Time::HiRes qw(sleep);

Spanprof::Receiver::skip_unless_ready(curl => 1, apache_modules => ['http2']);

my $PROBABILITY = 0.1;    # the highest SPEC 1 allows
my $mods = '/usr/lib/apache2/modules';

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $upstream = '127.0.0.1:' . $up->port;

# /fail is answered 503 by mod_rewrite in the URI translation, before any
# handler (the span is named after the method only).
my $port = httpd_conf($dir, mpm => 'event', extra => <<"EXTRA");
LoadModule proxy_module $mods/mod_proxy.so
LoadModule proxy_http_module $mods/mod_proxy_http.so
LoadModule http2_module $mods/mod_http2.so
LoadModule rewrite_module $mods/mod_rewrite.so
Protocols h2c http/1.1
LimitRequestFieldSize 32768
LogFormat "%{x-case}i|%{SPANPROF_TRACE_ID}e|%{SPANPROF_SPAN_ID}e|%{SPANPROF_SNAPSHOT}e|%{SPANPROF_TRACEPARENT}e|%{SPANPROF_BAGGAGE}e|%>s" sp
CustomLog $dir/sp.log sp
ProxyPass /proxy http://$upstream/proxy
RewriteEngine On
RewriteRule ^/fail - [R=503,L]
RewriteRule ^/moved http://example.com/ [R=301,L]
EXTRA

my $httpd = httpd_start($dir, $port,
    $recv->snapshot_env(export_interval => '200'),
    SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY,
);
ok($httpd, 'httpd starts with the module')
    or BAIL_OUT(read_file("$dir/error.log") . read_file("$dir/stderr.log"));

run_matrix(recv => $recv, up => $up, log => "$dir/sp.log", server => 'httpd',
           port_of => sub { $port },
           route_of => sub { $_[0] ? 'proxy-server' : undef },
           probability => $PROBABILITY);

# An HTTP/1.1 request upgraded to h2c (Upgrade: h2c, answered 101) is one
# client request, served again as the first stream of the new connection:
# one span, that stream's, whose parent is the span the client named.
{
    my ($tid, $sid) = ('5a' x 16, '6b' x 8);
    my $code = `curl -s -o /dev/null -w '%{http_code}' --http2 -H 'traceparent: 00-$tid-$sid-01' http://127.0.0.1:$port/`;
    is($code, '200', 'h2c upgrade: answered over HTTP/2');
    my @first = wait_spans($recv, sub { $_[0]{traceId} eq $tid });
    sleep 0.5;      # a second span would be exported by now (BSP 100 ms)
    my @mine = wait_spans($recv, sub { $_[0]{traceId} eq $tid }, 2);
    is(scalar @mine, 1, 'h2c upgrade: one span for the request');
    is($mine[0]{parentSpanId}, $sid, 'h2c upgrade: the parent is the client\'s');
    is(Spanprof::Receiver::attribute($mine[0]{attributes},
                                     'network.protocol.version'),
       '2', 'h2c upgrade: the span is the HTTP/2 stream\'s');
    is(Spanprof::Receiver::attribute($mine[0]{attributes},
                                     'http.response.status_code'),
       200, 'h2c upgrade: its status is the response\'s, not 101');
}

# The same upgrade made with "OPTIONS *" (RFC 7540 3.2), which core
# switches before any fixups, then a slow request on the new connection:
# one span, the OPTIONS stream's; the HTTP/1.1 request, whose thread runs
# the session for the slow stream's 3 s, is neither a span nor sampled.
{
    my ($tid, $sid, $out) = ('', '6d' x 8, '');
    # In parallel (-Z), so that curl sends the second request as soon as
    # the connection is HTTP/2: after, mod_http2 may have ended the
    # session, idle, with a GOAWAY. On a busy machine it still may: then
    # again, in a trace of its own.
    for my $try (1 .. 5) {
        $tid = sprintf '5c%030x', $try;
        $out = `curl -Z -s -o /dev/null -w '%{http_code} ' --http2 -X OPTIONS --request-target '*' -H 'traceparent: 00-$tid-$sid-01' -H 'baggage: splunk.trace.snapshot.volume=highest' http://127.0.0.1:$port/ --next -s -o /dev/null -w '%{http_code} %{http_version}' --http2 -H 'baggage: splunk.trace.snapshot.volume=off' http://127.0.0.1:$port/proxy/slow 2>/dev/null`;
        last if $out eq '200 200 2';
    }
    is($out, '200 200 2', 'OPTIONS * h2c upgrade: both answered over HTTP/2');
    wait_spans($recv, sub { $_[0]{traceId} eq $tid });
    sleep 0.5;      # a second span and the samples are exported by now
    my @mine = grep { $_->{traceId} eq $tid } spans($recv);
    is(scalar @mine, 1, 'OPTIONS * h2c upgrade: one span');
    is(join(' ', map { Spanprof::Receiver::attribute($mine[0]{attributes}, $_)
                       // '' } qw(network.protocol.version
                                  http.response.status_code)),
       '2 200', 'OPTIONS * h2c upgrade: the HTTP/2 stream\'s, 200');
    my (undef, $samples) = $recv->collect;
    my @under = grep { ($_->{labels}{trace_id} // '') eq $tid } @$samples;
    my @other = grep { $_->{labels}{span_id} ne ($mine[0]{spanId} // '') }
                @under;
    ok(@under < 100, 'OPTIONS * h2c upgrade: the session is not sampled '
                     . 'for it') or diag(scalar(@under) . ' samples');
    is(scalar @other, 0, 'OPTIONS * h2c upgrade: no sample under another '
                         . 'span of its trace');
}

# An Upgrade: h2c request answered before the handler (a rewrite to 503,
# a redirect) is not switched: it goes out over HTTP/1.1 and is the
# span, with the client's parent.
for my $case (['/fail', 503], ['/moved', 301]) {
    my ($path, $status) = @$case;
    my ($tid, $sid) = (sprintf('%032x', 0x7c00 + $status), '6b' x 8);
    my $code = `curl -s -o /dev/null -w '%{http_code}' --http2 -H 'traceparent: 00-$tid-$sid-01' http://127.0.0.1:$port$path`;
    is($code, $status, "h2c offered, $path: answered $status");
    my @mine = wait_spans($recv, sub { $_[0]{traceId} eq $tid });
    is(scalar @mine, 1, "h2c offered, $path: one span");
    next unless @mine;
    is($mine[0]{parentSpanId}, $sid, "h2c offered, $path: the client's parent");
    is(Spanprof::Receiver::attribute($mine[0]{attributes},
                                     'http.response.status_code'),
       $status, "h2c offered, $path: its status");
    is(Spanprof::Receiver::attribute($mine[0]{attributes},
                                     'network.protocol.version'),
       '1.1', "h2c offered, $path: over HTTP/1.1");
}

stop($httpd);
check_samples_in_spans($recv);
my $errors = join "\n", grep { /:(error|crit|alert|emerg)\]/ }
    split /\n/, read_file("$dir/error.log");
is($errors, '', 'nothing above warn in the error log');

done_testing();
