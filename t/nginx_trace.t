#!/usr/bin/perl
# nginx end to end: real nginx with the module, a proxied upstream that
# echoes the trace headers it receives, the real exporter started by the
# module, and the independent OTLP receiver. Checks propagation, variables,
# the exported spans, a profile of gzip work under the request's ids, and
# the exporter's life cycle (reload, kill -9, quit).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file free_port
                        spawn wait_for_port wait_for_log stop
                        gzip_location);
use Spanprof::Receiver qw(attribute);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my ($port, $up, $h2) = (free_port(), free_port(), free_port());
my $TRACE_ID = 'add_header X-Trace $spanprof_trace_id;';
my $big = gzip_location($dir, lines => 49000, extra => $TRACE_ID);
my $bigaio = gzip_location($dir, path => '/bigaio',
                           extra => "aio threads; $TRACE_ID");
my $module = top_dir() . '/build/ngx_http_spanprof_module.so';

write_file("$dir/nginx.conf", <<"CONF");
load_module $module;
daemon off;
worker_processes 1;
error_log $dir/error.log info;
pid $dir/nginx.pid;
events { worker_connections 256; }
http {
    log_format sp '\$spanprof_trace_id \$spanprof_span_id \$spanprof_snapshot '
                  '"\$spanprof_traceparent" "\$spanprof_baggage"';
    access_log $dir/access.log sp;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$port;
        listen 127.0.0.1:$h2 http2;
        location /proxy { proxy_pass http://127.0.0.1:$up; }
        location /quiet { spanprof_propagate off;
                          proxy_pass http://127.0.0.1:$up; }
        location /off { spanprof off; proxy_pass http://127.0.0.1:$up; }
        $big
        $bigaio
        location /fail { return 503; }
        location / { return 200 "ok\\n"; }
    }
    server {
        listen 127.0.0.1:$up;
        spanprof off;
        location / {
            return 200 "tp=\$http_traceparent|ts=\$http_tracestate|bg=\$http_baggage|";
        }
    }
}
CONF

my %env = (
    $recv->snapshot_env(schedule_delay => '200'),
    OTEL_SERVICE_NAME => 'edge',
);

my $master = spawn(\%env, "$dir/stderr.log", '/usr/sbin/nginx', '-p', $dir,
                   '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
ok(wait_for_port($port), 'nginx listens') or BAIL_OUT(read_file("$dir/stderr.log"));

sub curl {
    my (@args) = @_;
    my $out = `curl -s -m 10 @args 2>&1`;
    return $out;
}

sub upstream_saw {
    my ($path, %h) = @_;
    my @hdr = map { "-H " . quotemeta("$_: $h{$_}") } sort keys %h;
    my $body = curl(@hdr, "http://127.0.0.1:$port$path");
    my ($tp, $ts, $bg) = $body =~ /^tp=(.*?)\|ts=(.*?)\|bg=(.*?)\|/s;
    return { tp => $tp // '', ts => $ts // '', bg => $bg // '',
             body => $body };
}

my $IN_TRACE = '0af7651916cd43dd8448eb211c80319c';
my $IN_PARENT = 'b7ad6b7169203331';
my $TP = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/;

# --- propagation

my $none = upstream_saw('/proxy');
like($none->{tp}, $TP, 'no headers: a traceparent goes upstream');
is($none->{ts}, '', 'no headers: no tracestate');
like($none->{bg}, qr/^splunk\.trace\.snapshot\.volume=(highest|off)$/,
     'no headers: the selection decided here goes upstream in baggage');

my $valid = upstream_saw('/proxy',
    traceparent => "00-$IN_TRACE-$IN_PARENT-01",
    tracestate => 'rojo=00f067aa0ba902b7, congo=t61rcWkgMzE',
    baggage => 'user=alice,splunk.trace.snapshot.volume=highest');
my ($vt, $vs, $vf) = $valid->{tp} =~ $TP;
is($vt, $IN_TRACE, 'valid traceparent: the trace continues upstream');
isnt($vs, $IN_PARENT, 'valid traceparent: the parent upstream is our span');
is($vf, '01', 'valid sampled traceparent: sampled upstream');
is($valid->{ts}, 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
   'tracestate passes on');
is($valid->{bg}, 'user=alice,splunk.trace.snapshot.volume=highest',
   'baggage with a received volume passes unchanged');

my $unsampled = upstream_saw('/proxy',
    traceparent => "00-$IN_TRACE-$IN_PARENT-00");
my (undef, $us, $uf) = $unsampled->{tp} =~ $TP;
is($uf, '00', 'unsampled parent: not sampled upstream either');

for my $case (
    [ 'version ff' => "ff-$IN_TRACE-$IN_PARENT-01" ],
    [ 'short' => "00-$IN_TRACE-$IN_PARENT" ],
    [ 'zero trace id' => '00-' . ('0' x 32) . "-$IN_PARENT-01" ],
    [ 'zero parent id' => "00-$IN_TRACE-" . ('0' x 16) . '-01' ],
    [ 'uppercase' => '00-' . uc($IN_TRACE) . "-$IN_PARENT-01" ],
    [ 'bad separator' => "00_$IN_TRACE-$IN_PARENT-01" ],
    [ 'garbage' => "\x01\x02 not a header" ])
{
    my ($what, $value) = @$case;
    my $r = upstream_saw('/proxy', traceparent => $value,
                         tracestate => 'rojo=1');
    my ($t) = $r->{tp} =~ $TP;
    ok(defined $t && $t ne $IN_TRACE,
       "invalid traceparent ($what): a new trace starts");
    is($r->{ts}, '', "invalid traceparent ($what): tracestate is dropped");
}

for my $v (qw(off loud)) {
    my $r = upstream_saw('/proxy',
                         baggage => "splunk.trace.snapshot.volume=$v");
    is($r->{bg}, "splunk.trace.snapshot.volume=$v",
       "baggage volume $v passes unchanged");
}
my $bad = upstream_saw('/proxy', baggage => 'a=1,=broken,b=2,c');
like($bad->{bg}, qr/^a=1,b=2,splunk\.trace\.snapshot\.volume=(highest|off)$/,
     'malformed baggage members are dropped, never the request');
# 200 members: past W3C's 180 (a header past nginx's own 8k buffer is
# refused by nginx before any module sees it).
my $huge = upstream_saw('/proxy', baggage => join(',', map { "k$_=v" } 1 .. 200));
my @members = split /,/, $huge->{bg};
ok(@members > 0 && @members <= 180, 'oversized baggage is cut to 180 members')
    or diag(scalar(@members) . " members: $huge->{body}");

my $quiet = upstream_saw('/quiet', traceparent => "00-$IN_TRACE-$IN_PARENT-01");
is($quiet->{tp}, "00-$IN_TRACE-$IN_PARENT-01",
   'spanprof_propagate off: upstream sees what the client sent');
my $off = upstream_saw('/off');
is($off->{tp}, '', 'spanprof off in a location: nothing is added');

# --- HTTP/2
my $h2body = curl('--http2-prior-knowledge',
                  '-H', quotemeta("traceparent: 00-$IN_TRACE-$IN_PARENT-01"),
                  "http://127.0.0.1:$h2/proxy");
like($h2body, qr/tp=00-$IN_TRACE-[0-9a-f]{16}-01\|/,
     'HTTP/2: the trace continues upstream');

# --- variables
my ($logged) = grep { /^$IN_TRACE $vs / } split /\n/, read_file("$dir/access.log");
ok($logged, '$spanprof_trace_id and $spanprof_span_id in the access log')
    or diag(read_file("$dir/access.log"));
like($logged // '', qr/ 1 "00-$IN_TRACE-$vs-01" "user=alice,/,
     '$spanprof_snapshot, $spanprof_traceparent, $spanprof_baggage');

curl("http://127.0.0.1:$port/fail");
curl('-H', "'Host: [::1]:8080'", "http://127.0.0.1:$port/fail?ipv6");

# --- profiles of CPU-heavy selected requests
my @heavy;
for (1 .. 6) {
    my $hd = curl('-D', '-', '-o', '/dev/null', '-H', "'Accept-Encoding: gzip'",
                  '-H', "'baggage: splunk.trace.snapshot.volume=highest'",
                  "http://127.0.0.1:$port/big");
    push @heavy, $1 if $hd =~ /^X-Trace: ([0-9a-f]{32})/mi;
}
is(scalar @heavy, 6, 'the heavy requests answered with their trace ids');
# The same read by a thread pool (aio threads): the read is the pool's, the
# gzip work after its completion the request's, on the worker's thread.
my @aio;
for (1 .. 3) {
    my $hd = curl('-D', '-', '-o', '/dev/null', '-H', "'Accept-Encoding: gzip'",
                  '-H', "'baggage: splunk.trace.snapshot.volume=highest'",
                  "http://127.0.0.1:$port/bigaio");
    push @aio, $1 if $hd =~ /^X-Trace: ([0-9a-f]{32})/mi;
}
is(scalar @aio, 3, 'aio threads: the heavy requests answered');
my $cheap = curl('-D', '-', '-o', '/dev/null',
                 '-H', "'baggage: splunk.trace.snapshot.volume=off'",
                 "http://127.0.0.1:$port/big");

# --- what arrived
my ($spans, $samples);
my $end = time + 15;
while (time < $end) {
    ($spans, $samples) = $recv->collect;
    my %have = map { $_->{labels}{trace_id} // '' => 1 } @$samples;
    last if @$spans >= 20 && (grep { $have{$_} } @heavy) >= 3
        && (grep { $have{$_} } @aio) >= 1;
    sleep 0.2;
}

my ($vspan) = grep { $_->{traceId} eq $IN_TRACE && $_->{spanId} eq $vs } @$spans;
ok($vspan, 'the span of the valid-traceparent request arrived');
if ($vspan) {
    is($vspan->{parentSpanId}, $IN_PARENT, 'span: remote parent');
    is($vspan->{name}, 'GET /proxy', 'span: name is method and location');
    is($vspan->{kind}, 2, 'span: SERVER');
    my $a = $vspan->{attributes};
    is(attribute($a, 'http.request.method'), 'GET', 'span: http.request.method');
    is(attribute($a, 'url.path'), '/proxy', 'span: url.path');
    is(attribute($a, 'url.scheme'), 'http', 'span: url.scheme');
    is(attribute($a, 'http.response.status_code'), 200, 'span: status code');
    is(attribute($a, 'http.route'), '/proxy', 'span: http.route');
    is(attribute($a, 'server.port'), $port, 'span: server.port');
    is(attribute($a, 'client.address'), '127.0.0.1', 'span: client.address');
    is(attribute($a, 'network.protocol.version'), '1.1',
       'span: network.protocol.version');
    like(attribute($a, 'user_agent.original') // '', qr/^curl/,
         'span: user_agent.original');
    ok(attribute($a, 'splunk.snapshot.profiling'),
       'span: splunk.snapshot.profiling for the selected trace');
    is(attribute($vspan->{resource}{attributes}, 'service.name'), 'edge',
       'resource: service.name');
    is(attribute($vspan->{resource}{attributes}, 'process.runtime.name'),
       'nginx', 'resource: process.runtime.name');
    # The worker's executable, as process.pid is the worker's: not the
    # exporter's, which sends the span.
    is(attribute($vspan->{resource}{attributes}, 'process.executable.name'),
       'nginx', 'resource: process.executable.name');
}
ok(!(grep { $_->{traceId} eq $IN_TRACE && $_->{spanId} eq $us } @$spans),
   'the span under an unsampled parent is not exported');
my ($fail) = grep { ($_->{name} // '') eq 'GET /fail' } @$spans;
is($fail && $fail->{status}{code}, 2, '5xx: span status Error');
my ($v6) = grep { (attribute($_->{attributes}, 'url.query') // '') eq 'ipv6' } @$spans;
is($v6 && attribute($v6->{attributes}, 'server.address'), '::1',
   'server.address: an IPv6 Host without port and brackets');
my ($h2span) = grep { attribute($_->{attributes}, 'network.protocol.version') eq '2' } @$spans;
ok($h2span, 'HTTP/2: the span says protocol version 2');
is($h2span && attribute($h2span->{attributes}, 'server.port'), $h2,
   'HTTP/2: server.port');

# Profiles: the heavy requests' samples carry their ids and show zlib and
# nginx at work; no sample carries an unselected request's ids.
my %heavy = map { $_ => 1 } @heavy;
my @mine = grep { $heavy{ $_->{labels}{trace_id} // '' } } @$samples;
ok(@mine >= 5, 'samples arrived under the heavy requests\' trace ids')
    or diag(scalar(@$samples) . ' samples in all');
my @deflate = grep { grep { ($_->{function} // '') eq 'deflate' } @{ $_->{frames} } } @mine;
ok(@deflate >= 1, 'their stacks show zlib\'s deflate');
ok((grep { grep { ($_->{function} // '') =~ /^ngx_/ } @{ $_->{frames} } } @mine) >= 1,
   'and nginx\'s own functions');
is((grep { !$_->{labels}{span_id} } @mine), 0, 'every such sample has a span id');
my %aio = map { $_ => 1 } @aio;
my @aio_samples = grep { $aio{ $_->{labels}{trace_id} // '' } } @$samples;
ok((grep { grep { ($_->{function} // '') eq 'deflate' } @{ $_->{frames} } }
    @aio_samples) >= 1,
   'aio threads: the gzip work after the completion is the request\'s')
    or diag(scalar(@aio_samples) . ' samples under their ids');
# A thread pool's thread is not the worker's main one, whose id is the
# worker's pid.
is((grep { ($_->{labels}{'thread.os.id'} // '')
           ne (attribute($_->{resource}{attributes}, 'process.pid') // '-') }
    @aio_samples), 0,
   'aio threads: every sample under their ids is of the worker\'s thread');
my ($cheap_id) = $cheap =~ /^X-Trace: ([0-9a-f]{32})/mi;
is((grep { ($_->{labels}{trace_id} // '') eq ($cheap_id // 'x') } @$samples), 0,
   'a request with volume off has no samples');

# --- the exporter's life cycle

sub exporters {
    my @ps = map { [split ' ', $_, 3] } split /\n/, `ps -eo pid=,ppid=,args=`;
    my %children;
    push @{ $children{$_->[1]} }, $_ for @ps;
    my @mine;
    for my $c (@{ $children{$master} // [] }) {
        push @mine, map { $_->[0] }
            grep { $_->[2] =~ /^spanprof-exporter/ } @{ $children{$c->[0]} // [] };
    }
    return @mine;
}

sub settle {
    my ($want) = @_;
    my $end = time + 10;
    my @e;
    while (time < $end) {
        @e = exporters();
        return @e if @e == $want;
        sleep 0.1;
    }
    return @e;
}

my @e = settle(1);
is(scalar @e, 1, 'one exporter process, a grandchild of the master');
for (1 .. 3) {
    kill 'HUP', $master;
    sleep 1.2;
}
@e = settle(1);
is(scalar @e, 1, 'after three reloads: still exactly one exporter');
kill 'KILL', $e[0] if @e;
my $t0 = time;
my @again;
while (time < $t0 + 5) {
    @again = grep { $_ != ($e[0] // 0) } exporters();
    last if @again;
    sleep 0.05;
}
is(scalar @again, 1, 'kill -9: a new exporter starts');

my $last = upstream_saw('/proxy');
my ($lt) = $last->{tp} =~ $TP;
kill 'QUIT', $master;
waitpid($master, 0);
my @left = settle(0);
is(scalar @left, 0, 'nginx -s quit: no exporter is left');
($spans) = $recv->collect;
ok((grep { $_->{traceId} eq ($lt // '') } @$spans),
   'quit: the last span was flushed');

my $errors = join "\n", grep { /\[(alert|crit|emerg|error)\]/ && !/exited on signal 9/ }
    split /\n/, read_file("$dir/error.log");
is($errors, '', 'nothing above warn in the error log (but the kill -9)');

$recv->stop;
done_testing();
