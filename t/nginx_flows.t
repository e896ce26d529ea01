#!/usr/bin/perl
# nginx: request flows with a life of their own, one entry span each.
# Real nginx with the module, recording upstreams, the module's exporter
# and the independent OTLP receiver:
#   - a WebSocket tunnel (proxied upgrade): one span with status 101 that
#     ends when the tunnel closes; the upstream got the entry span as
#     parent; limit_conn refuses a second tunnel meanwhile (503);
#   - HTTP/1.1 pipelining: requests sent in one write are a span each,
#     with their own ids and paths;
#   - requests refused in the phases (limit_req, deny, return 444,
#     client_max_body_size): one span each, with the status nginx logs;
#   - proxy_next_upstream: both attempts carry the entry span as parent;
#   - proxy_set_header traceparent / baggage: the operator's value is the
#     one upstream gets, once;
#   - HTTP/2: a client that gives up mid-response ends its span then;
#   - sampling of the selected tunnel, of a heavy request served meanwhile
#     and of the HTTP/2 request stops with their spans: every sample under
#     their ids was taken while they were open, and heavy requests after
#     them carry no ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop gzip_location);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case log_case upstream_case spans wait_spans
                       raw_answer);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';
my $OWN = '00-11111111111111111111111111111111-2222222222222222-01';
my $TP_RE = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $ws = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my ($h2, $fail, $trickle) = (free_port(), free_port(), free_port());
my $big = gzip_location($dir, lines => 60000);

my $upgrade = 'proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade;'
            . ' proxy_set_header Connection upgrade;';
my $port = nginx_conf($dir, log_level => 'info',
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_traceparent|\$status';
    log_format up '\$http_x_case|\$http_traceparent';
    limit_req_zone \$binary_remote_addr zone=one:1m rate=1r/m;
    limit_conn_zone \$binary_remote_addr zone=addr:1m;
    upstream retry {
        server 127.0.0.1:$fail;
        server 127.0.0.1:${\ $up->port};
    }
    server {
        listen 127.0.0.1:$fail;
        spanprof off;
        access_log $dir/fail.log up;
        return 502;
    }
    server {
        listen 127.0.0.1:$trickle;
        spanprof off;
        location /slow { alias $dir/big.txt; limit_rate 64k; }
    }
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        location /ws {
            limit_conn addr 1;
            proxy_pass http://127.0.0.1:${\ $ws->port};
            $upgrade
        }
        location /limit {
            limit_req zone=one;
            proxy_pass http://127.0.0.1:${\ $up->port};
        }
        location /deny { deny all; }
        location /close { return 444; }
        location /body {
            client_max_body_size 10;
            proxy_pass http://127.0.0.1:${\ $up->port};
        }
        location /retry {
            proxy_next_upstream error http_502;
            proxy_pass http://retry;
        }
        location /own {
            proxy_set_header traceparent $OWN;
            proxy_set_header baggage mine=1;
            proxy_pass http://127.0.0.1:${\ $up->port};
        }
        location /up { proxy_pass http://127.0.0.1:${\ $up->port}; }
        location /slow { proxy_pass http://127.0.0.1:$trickle; }
        $big
SERVER
);

my $nginx = nginx_start($dir, $port, $recv->snapshot_env);
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my $traces = 0;
sub new_trace { sprintf '%032x', 0xf10000 + ++$traces }

sub log_line {
    log_case("$dir/sp.log", $_[0], qw(trace_id span_id traceparent status));
}

sub attr { attribute($_[0]{attributes}, $_[1]) // '' }

# The spans of a trace, once $n (default 1) arrived or after 10 s.
sub spans_of {
    my ($trace, $n) = @_;
    return wait_spans($recv, sub { $_[0]{traceId} eq $trace }, $n);
}

# One span for the request of access log line $l, with its status.
sub one_span {
    my ($what, $l, $code) = @_;
    ok($l, "$what: logged") or return;
    is($l->{status}, $code, "$what: nginx logs $code");
    my @s = spans_of($l->{trace_id});
    is(scalar @s, 1, "$what: one span") or return;
    is($s[0]{spanId}, $l->{span_id}, "$what: the span the log names");
    is(attr($s[0], 'http.response.status_code'), $code,
       "$what: http.response.status_code $code");
    is($s[0]{status}{code} // 0, $code >= 500 ? 2 : 0,
       "$what: status " . ($code >= 500 ? 'Error' : 'unset'));
    return $s[0];
}

my @selected;    # spans whose sampling must have stopped

# ---- a WebSocket tunnel, selected, with limit_conn refusing another

{
    my $trace = new_trace();
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or die "connect: $!";
    print $s "GET /ws/chat HTTP/1.1\r\nHost: localhost\r\n"
           . "Upgrade: websocket\r\nConnection: Upgrade\r\nx-case: ws\r\n"
           . "traceparent: 00-$trace-$PARENT-01\r\n"
           . "baggage: splunk.trace.snapshot.volume=highest\r\n\r\n";
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        sysread($s, $head, 4096, length $head) or last;
    }
    like($head, qr{^HTTP/1\.1 101 }, 'WebSocket: nginx switches protocols');
    my $t0 = time;
    my $echo = '';
    for (1 .. 20) {
        print $s "ping $_;";
        sysread($s, $echo, 4096, length $echo);
        sleep 0.05;
    }
    like($echo, qr/^ping 1;.*ping 20;/, 'WebSocket: the tunnel echoes');

    my ($case, $code) = curl_case(url => "http://127.0.0.1:$port/ws/again");
    is($code, 503, 'limit_conn: a second tunnel meanwhile is refused');
    one_span('limit_conn', log_line($case), 503);

    # Work of another selected request meanwhile is sampled: the checks
    # of sampling below see a sampler that runs.
    ($case, $code) = curl_case(url => "http://127.0.0.1:$port/big",
        headers => [ [ 'Accept-Encoding' => 'gzip' ],
                     [ baggage => 'splunk.trace.snapshot.volume=highest' ] ]);
    my ($heavy) = one_span('a selected heavy request', log_line($case), 200);
    push @selected, $heavy if $heavy;

    sleep 1;
    close $s;
    my $closed = time;

    my $l = log_line('ws');
    my ($span) = one_span('WebSocket', $l, 101);
    ok($span && $span->{endTimeUnixNano} / 1e9 >= $closed - 0.1
       && $span->{endTimeUnixNano} / 1e9 < $closed + 2
       && $span->{startTimeUnixNano} / 1e9 < $t0,
       'WebSocket: the span lasts until the tunnel closes');
    is($span && $span->{parentSpanId}, $PARENT,
       "WebSocket: child of the client's span");
    is(scalar(spans_of($trace)), 1, 'WebSocket: one span for the trace');
    my ($r) = upstream_case($ws, 'ws');
    is_deeply($r && $r->{headers}{traceparent}, [ $l->{traceparent} ],
              'WebSocket: the upstream got the entry span as parent');
    like($r && $r->{headers}{baggage}[0],
         qr/^splunk\.trace\.snapshot\.volume=highest$/,
         'WebSocket: and the baggage');
    push @selected, $span if $span;
}

# ---- pipelining: three requests in one write

{
    my $trace = new_trace();
    my $answer = raw_answer($port, join '',
        "GET /up/p1?q=1 HTTP/1.1\r\nHost: localhost\r\nx-case: p1\r\n\r\n",
        "GET /up/p2 HTTP/1.1\r\nHost: localhost\r\nx-case: p2\r\n"
        . "traceparent: 00-$trace-$PARENT-01\r\n\r\n",
        "GET /up/p3 HTTP/1.1\r\nHost: localhost\r\nx-case: p3\r\n"
        . "Connection: close\r\n\r\n");
    is(join(' ', $answer =~ m{^HTTP/1\.1 (\d+)}mg), '200 200 200',
       'pipelining: three answers');
    my @l = map { log_line($_) } qw(p1 p2 p3);
    is(scalar(grep { defined } @l), 3, 'pipelining: three requests logged');
    my %ids = map { ($_->{span_id} // '') => 1 } grep { defined } @l;
    is(scalar keys %ids, 3, 'pipelining: each its own span id');
    is($l[1] && $l[1]{trace_id}, $trace,
       'pipelining: the second continues its traceparent');
    for my $i (0 .. 2) {
        my $case = 'p' . ($i + 1);
        my $span = one_span("pipelining $case", $l[$i], 200) or next;
        is(attr($span, 'url.path'), "/up/$case", "pipelining $case: url.path");
        my ($r) = upstream_case($up, $case);
        is_deeply($r && $r->{headers}{traceparent}, [ $l[$i]{traceparent} ],
                  "pipelining $case: the upstream got its own entry span");
    }
}

# ---- refused in the phases

{
    my ($c1, $code1) = curl_case(url => "http://127.0.0.1:$port/limit");
    my ($c2, $code2) = curl_case(url => "http://127.0.0.1:$port/limit");
    is("$code1 $code2", '200 503', 'limit_req: the second is refused');
    one_span('limit_req', log_line($c2), 503);

    my ($c3, $code3) = curl_case(url => "http://127.0.0.1:$port/deny");
    is($code3, 403, 'deny all: 403');
    one_span('deny', log_line($c3), 403);

    is(raw_answer($port, "GET /close HTTP/1.1\r\nHost: localhost\r\n"
                         . "x-case: close\r\n\r\n"),
       '', 'return 444: the connection closes with no answer');
    one_span('return 444', log_line('close'), 444);

    my ($code4) = raw_answer($port, "POST /body HTTP/1.1\r\nHost: localhost\r\n"
        . "x-case: body\r\nContent-Length: 38\r\nConnection: close\r\n\r\n"
        . ('x' x 38)) =~ m{^HTTP/1\.1 (\d+)};
    is($code4, 413, 'client_max_body_size: 413');
    one_span('client_max_body_size', log_line('body'), 413);
}

# ---- proxy_next_upstream: one entry span, the same parent twice

{
    my $trace = new_trace();
    my ($case, $code) = curl_case(url => "http://127.0.0.1:$port/retry",
        headers => [ [ traceparent => "00-$trace-$PARENT-01" ] ]);
    is($code, 200, 'proxy_next_upstream: the second upstream answers');
    my $l = log_line($case);
    my $first = log_case("$dir/fail.log", $case, 'traceparent');
    my ($second) = upstream_case($up, $case);
    is($first && $first->{traceparent}, $l->{traceparent},
       'proxy_next_upstream: the first attempt carries the entry span');
    is_deeply($second && $second->{headers}{traceparent},
              [ $l->{traceparent} ],
              'proxy_next_upstream: so does the second');
    is(scalar(spans_of($trace)), 1, 'proxy_next_upstream: one span');
}

# ---- the operator's proxy_set_header wins, whatever came in

for my $c ([ 'no trace headers', [] ],
           [ 'a traceparent and two baggage headers',
             [ [ traceparent => '00-' . new_trace() . "-$PARENT-01" ],
               [ baggage => 'a=1' ], [ baggage => 'b=2' ] ] ])
{
    my ($what, $headers) = @$c;
    my ($case, $code) = curl_case(url => "http://127.0.0.1:$port/own",
                                  headers => $headers);
    my ($r) = upstream_case($up, $case);
    is_deeply($r && [ @{ $r->{headers} }{qw(traceparent baggage)} ],
              [ [ $OWN ], [ 'mine=1' ] ],
              "proxy_set_header, $what: upstream gets the operator's values,"
              . ' once');
}

# ---- HTTP/2: the client gives up mid-response

{
    my $trace = new_trace();
    my $t0 = time;
    my ($case, $code, $body) = curl_case(h2 => 1, timeout => 1,
        url => "http://127.0.0.1:$h2/slow",
        headers => [ [ traceparent => "00-$trace-$PARENT-01" ],
                     [ baggage => 'splunk.trace.snapshot.volume=highest' ] ]);
    my $gone = time;
    cmp_ok(length $body, '>', 0, 'HTTP/2: part of the response came');
    my $l = log_line($case);
    my ($span) = one_span('HTTP/2, client gone', $l, $l ? $l->{status} : 0);
    ok($span && $span->{endTimeUnixNano} / 1e9 < $gone + 1,
       'HTTP/2: the span ends when the client went, not with the transfer');
    is(attr($span // {}, 'network.protocol.version'), '2', 'HTTP/2: version');
    push @selected, $span if $span;
}

# ---- sampling stopped with the selected spans

my @after;
for (1 .. 4) {
    my ($case, $code) = curl_case(url => "http://127.0.0.1:$port/big",
        headers => [ [ 'Accept-Encoding' => 'gzip' ],
                     [ baggage => 'splunk.trace.snapshot.volume=off' ] ]);
    my $l = log_line($case);
    push @after, $l->{trace_id} if $code == 200 && $l;
}
is(scalar @after, 4, 'heavy unselected requests after them answered');
sleep 1;    # a profile export interval and more
my (undef, $samples) = $recv->collect;
my %after = map { $_ => 1 } @after;
is(scalar(grep { $after{ $_->{labels}{trace_id} // '' } } @$samples), 0,
   'no sample carries the ids of the unselected requests after them');
my ($in, $out) = (0, 0);
for my $span (@selected) {
    for my $s (grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
               @$samples)
    {
        my $ms = $s->{labels}{'source.event.time'} // -1;
        $ms >= int($span->{startTimeUnixNano} / 1e6) - 1
            && $ms <= int($span->{endTimeUnixNano} / 1e6) + 1 ? $in++ : $out++;
    }
}
cmp_ok($in, '>', 0, 'samples under the selected spans\' ids');
is($out, 0, "every one ($in) taken while its span was open");

stop($nginx);
unlike(read_file("$dir/error.log"), qr/\[(alert|emerg|crit)\]/,
       'no alert in the error log');

done_testing();
