#!/usr/bin/perl
# nginx: upstream flows that retry or last, as an SRE meets them. Real
# nginx with the module (one worker), recording upstreams, the module's
# exporter and the independent OTLP receiver, over HTTP/1.1 and HTTP/2:
#   - proxy_next_upstream error timeout http_502 over upstreams that are
#     down (connection refused), too slow (proxy_read_timeout) or answer
#     502, before a backup that answers, or with none left (502, 504,
#     proxy_next_upstream_tries): every attempt that reaches an upstream
#     carries exactly one traceparent whose parent is the exported span
#     (the same for every attempt), the tracestate received and our
#     baggage; one span, with the status nginx logs, lasting at least the
#     timeouts it waited; 499 when the client gives up meanwhile;
#   - proxy_buffering off, a response streamed in 100 ms chunks for 1 s
#     (server-sent events), selected, while unselected requests gzip in
#     the same worker: the span lasts the stream, its samples were taken
#     inside it and show none of the others' work;
#   - a selected WebSocket tunnel the upstream closes (upstream events
#     drive it) and one nginx closes on proxy_read_timeout: 101 as nginx
#     logs, the span ends then; the same isolation from heavy requests;
#   - grpc_pass, a server-streaming call of 1 s: the backend gets the
#     trace headers as gRPC metadata, the span lasts the call;
#   - keepalive_requests 2 with three requests pipelined (three streams
#     over HTTP/2): a span for each request nginx served, none for the
#     one it did not; return 444 and limit_conn over HTTP/2.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop gzip_location);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case log_case upstream_case wait_spans
                       raw_answer h2_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';
my $STATE = 'vendor=opaque';
my $TP_RE = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;
my $READ_TIMEOUT = 0.3;    # proxy_read_timeout of the slow upstream, s

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
# One each where requests could overlap: upstream.pl answers one
# connection at a time.
my $good = Spanprof::Upstream->start(dir => $dir);
my $bad = Spanprof::Upstream->start(dir => $dir, status => 502);
my $hang = Spanprof::Upstream->start(dir => $dir, delay => 1);
my $drip = Spanprof::Upstream->start(dir => $dir);
my $ws = Spanprof::Upstream->start(dir => $dir);
my $grpc = Spanprof::Upstream->start(dir => $dir, proto => 'grpc');
my ($down, $h2, $ka, $ka2) = (free_port(), free_port(), free_port(),
                              free_port());
my %at = (down => "127.0.0.1:$down",
          map { $_->[0] => '127.0.0.1:' . $_->[1]->port }
              [ good => $good ], [ bad => $bad ], [ hang => $hang ]);
my $big = gzip_location($dir, lines => 100000);

# Each upstream block: its servers never marked failed (max_fails=0), so
# every request tries them all; the backup only after them.
my %blocks = (
    down     => [ [qw(down)], 'good' ],
    timeout  => [ [qw(hang)], 'good' ],
    bad      => [ [qw(bad)], 'good' ],
    chain    => [ [qw(down hang bad)], 'good' ],
    allfail  => [ [qw(down bad)] ],
    alltime  => [ [qw(hang)] ],
    tries    => [ [qw(down bad)], 'good' ],
);
my $upstreams = '';
for my $name (sort keys %blocks) {
    my ($primary, $backup) = @{ $blocks{$name} };
    $upstreams .= "    upstream $name {\n"
        . join('', map { "        server $at{$_} max_fails=0;\n" } @$primary)
        . ($backup ? "        server $at{$backup} backup;\n" : '')
        . "    }\n";
}

my $upgrade = 'proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade;'
            . ' proxy_set_header Connection upgrade;';
my $port = nginx_conf($dir, log_level => 'info', connections => 256,
    main => 'worker_shutdown_timeout 1s;',
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_traceparent|\$spanprof_baggage|\$status|'
                  '\$request_time|\$upstream_status|\$spanprof_snapshot';
    limit_conn_zone \$binary_remote_addr zone=addr:1m;
$upstreams
    server {
        listen 127.0.0.1:$ka;
        listen 127.0.0.1:$ka2 http2;
        keepalive_requests 2;
        access_log $dir/sp.log sp;
        location / { proxy_pass http://$at{good}; }
    }
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        location /n/ {
            proxy_next_upstream error timeout http_502;
            proxy_read_timeout ${\ int($READ_TIMEOUT * 1000)}ms;
            location /n/down/ { proxy_pass http://down; }
            location /n/timeout/ { proxy_pass http://timeout; }
            location /n/bad/ { proxy_pass http://bad; }
            location /n/chain/ { proxy_pass http://chain; }
            location /n/allfail/ { proxy_pass http://allfail; }
            location /n/alltime/ { proxy_pass http://alltime; }
            location /n/tries/ {
                proxy_next_upstream_tries 2;
                proxy_pass http://tries;
            }
        }
        location /sse/ {
            proxy_buffering off;
            proxy_pass http://127.0.0.1:${\ $drip->port};
        }
        location /ws/ {
            proxy_pass http://127.0.0.1:${\ $ws->port};
            $upgrade
        }
        location /idle/ {
            proxy_read_timeout 1s;
            proxy_pass http://127.0.0.1:${\ $ws->port};
            $upgrade
        }
        location /grpc. { grpc_pass grpc://127.0.0.1:${\ $grpc->port}; }
        location /close { return 444; }
        location /limited {
            limit_conn addr 1;
            proxy_pass http://127.0.0.1:${\ $hang->port};
        }
        $big
SERVER
);

my $nginx = nginx_start($dir, $port, $recv->snapshot_env);
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my $traces = 0;
sub new_trace { sprintf '%032x', 0xf20000 + ++$traces }
my $serial = 0;
sub new_case { 'u' . ++$serial }

sub log_line {
    log_case("$dir/sp.log", $_[0],
             qw(trace_id span_id traceparent baggage status request_time
                upstream_status snapshot));
}

sub attr { attribute($_[0]{attributes}, $_[1]) // '' }

sub spans_of {
    my ($trace, $n) = @_;
    return wait_spans($recv, sub { $_[0]{traceId} eq $trace }, $n);
}

sub duration {
    ($_[0]{endTimeUnixNano} - $_[0]{startTimeUnixNano}) / 1e9;
}

# One span for the request of access log line $l, the child of $PARENT
# when the client sent a traceparent, with the status nginx logs.
sub one_span {
    my ($what, $l, %o) = @_;
    ok($l, "$what: logged") or return;
    my @s = spans_of($l->{trace_id});
    is(scalar @s, 1, "$what: one span") or return;
    my $s = $s[0];
    is($s->{spanId}, $l->{span_id}, "$what: the span the log names");
    is(attr($s, 'http.response.status_code'), $l->{status},
       "$what: http.response.status_code $l->{status}, as logged");
    is($s->{status}{code} // 0, $l->{status} >= 500 ? 2 : 0,
       "$what: status " . ($l->{status} >= 500 ? 'Error' : 'unset'));
    is($s->{parentSpanId} // '', $PARENT, "$what: child of the client's span")
        if $o{parent};
    is(attr($s, 'network.protocol.version'), $o{h2} ? '2' : '1.1',
       "$what: network.protocol.version");
    # $request_time runs between nginx's cached times, which lag on a busy
    # machine; what this is for (a span ended at another event: a
    # keep-alive or lingering close, a timeout) is seconds
    my $off = duration($s) - $l->{request_time};
    ok(abs($off) < 1, "$what: lasts \$request_time ($l->{request_time})")
        or diag("the span lasted " . duration($s));
    return $s;
}

# Each upstream in @ups got exactly one request of $case, with one
# traceparent whose parent is the entry span of log line $l, the
# tracestate received and our baggage.
sub attempts {
    my ($what, $case, $l, @ups) = @_;
    my ($trace, $span) = ($l->{traceparent} // '') =~ $TP_RE;
    is($span, $l->{span_id}, "$what: the entry span is the upstreams' parent");
    for my $name (@ups) {
        my $up = { good => $good, bad => $bad, hang => $hang }->{$name};
        my @r = upstream_case($up, $case);
        is(scalar @r, 1, "$what: the $name upstream got it once") or next;
        is_deeply([ @{ $r[0]{headers} }{qw(traceparent tracestate baggage)} ],
                  [ [ $l->{traceparent} ], [ $STATE ], [ $l->{baggage} ] ],
                  "$what: the $name upstream got one traceparent (the entry "
                  . 'span), the tracestate and our baggage');
    }
}

# Runs $code in a child; its pid.
sub background {
    my ($code) = @_;
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        $code->();
        POSIX::_exit(0);
    }
    return $pid;
}

# Unselected heavy requests (gzip at level 9), $n one after another, in a
# child, each tagged x-case $tag.N, the first after 0.1 s: while the
# selected request its caller makes meanwhile is open.
my %heavy_of;    # what => the tags of the heavy requests beside it
sub heavy {
    my ($what, $tag, $n) = @_;
    $heavy_of{$what} = [ map { "$tag.$_" } 1 .. $n ];
    return background(sub {
        sleep 0.1;
        for (1 .. $n) {
            system('curl', '-s', '-o', '/dev/null', '-m', '10',
                   '-H', "x-case: $tag.$_", '-H', 'Accept-Encoding: gzip',
                   '-H', 'baggage: splunk.trace.snapshot.volume=off',
                   "http://127.0.0.1:$port/big");
        }
    });
}

# ---- proxy_next_upstream

my @retry = (
    # location, status, $upstream_status, the upstreams reached, the
    # timeouts waited
    [ down    => 200, '502, 200', [qw(good)], 0 ],
    [ timeout => 200, '504, 200', [qw(hang good)], 1 ],
    [ bad     => 200, '502, 200', [qw(bad good)], 0 ],
    [ chain   => 200, qr/^(50[24], ){3}200$/, [qw(hang bad good)], 1 ],
    [ allfail => 502, '502, 502', [qw(bad)], 0 ],
    [ alltime => 504, '504', [qw(hang)], 1 ],
    [ tries   => 502, '502, 502', [qw(bad)], 0 ],
);
my %retried;    # the cases the backup must have answered
for my $proto (0, 1) {
    for my $c (@retry) {
        my ($name, $code, $ustatus, $reached, $waits) = @$c;
        my $what = ($proto ? 'HTTP/2' : 'HTTP/1.1')
                 . " proxy_next_upstream $name";
        my $trace = new_trace();
        my ($case, $got) = curl_case(h2 => $proto,
            url => 'http://127.0.0.1:' . ($proto ? $h2 : $port)
                   . "/n/$name/x",
            headers => [ [ traceparent => "00-$trace-$PARENT-01" ],
                         [ tracestate => $STATE ], [ baggage => 'user=a' ] ]);
        is($got, $code, "$what: answers $code");
        $retried{$case} = 1 if grep { $_ eq 'good' } @$reached;
        my $l = log_line($case);
        ok($l, "$what: logged") or next;
        ref $ustatus ? like($l->{upstream_status}, $ustatus,
                            "$what: upstreams tried ($l->{upstream_status})")
                     : is($l->{upstream_status}, $ustatus,
                          "$what: upstreams tried");
        like($l->{baggage}, qr/^user=a,splunk\.trace\.snapshot\.volume=/,
             "$what: our baggage");
        my $s = one_span($what, $l, parent => 1, h2 => $proto) or next;
        is($s->{traceId}, $trace, "$what: the client's trace");
        is($s->{name}, "GET /n/$name/", "$what: named after the location");
        # nginx's timers run on its cached time, which may lag a little
        cmp_ok(duration($s), '>=', $waits * $READ_TIMEOUT - 0.05,
               "$what: the span lasts the timeout waited") if $waits;
        attempts($what, $case, $l, @$reached);
    }
}
is(join(' ', sort grep { $retried{$_} } map { $_->{headers}{'x-case'}[0] }
              $good->requests),
   join(' ', sort keys %retried),
   'proxy_next_upstream: the backup was asked only where it answered');

# The client gives up while nginx waits for a slow upstream: 499.
{
    my $what = 'HTTP/1.1 client gone while nginx waits to retry';
    my $trace = new_trace();
    my ($case) = curl_case(timeout => 0.15,
        url => "http://127.0.0.1:$port/n/alltime/gone",
        headers => [ [ traceparent => "00-$trace-$PARENT-01" ] ]);
    my $l = log_line($case);
    is($l && $l->{status}, 499, "$what: nginx logs 499");
    one_span($what, $l, parent => 1);

    $what = 'HTTP/2 stream reset while nginx waits to retry';
    $case = new_case();
    my ($r) = h2_requests($h2, "$dir/gone.plan",
        { path => '/n/alltime/gone', reset_after_ms => 150,
          headers => [ [ 'x-case', $case ] ] });
    ok($r && $r->{reset}, "$what: reset");
    $l = log_line($case);
    is($l && $l->{status}, 499, "$what: nginx logs 499");
    one_span($what, $l, h2 => 1);
}

# ---- a selected stream (proxy_buffering off) beside heavy requests

my @selected;    # [what, span] of the selected requests

sub selected_log {
    my ($what, $l) = @_;
    is($l && $l->{snapshot}, '1', "$what: selected (\$spanprof_snapshot)");
}

for my $proto (0, 1) {
    my $what = ($proto ? 'HTTP/2' : 'HTTP/1.1') . ' streamed response';
    my $pid = heavy($what, "heavy.sse$proto", 3);
    my $t0 = time;
    my ($case, $code, $body) = curl_case(h2 => $proto,
        url => 'http://127.0.0.1:' . ($proto ? $h2 : $port) . '/sse/drip10',
        headers => [ [ baggage => 'splunk.trace.snapshot.volume=highest' ] ]);
    my $t1 = time;
    waitpid $pid, 0;
    is($code, 200, "$what: 200");
    is(scalar(() = $body =~ /^line \d+ of a slow upstream$/mg), 10,
       "$what: ten chunks");
    my $l = log_line($case);
    selected_log($what, $l);
    my $s = one_span($what, $l, h2 => $proto) or next;
    cmp_ok(duration($s), '>=', 0.9, "$what: the span lasts the stream");
    # not at a later event (a keep-alive or lingering close, a timeout)
    ok($s->{startTimeUnixNano} / 1e9 >= $t0 - 0.05
       && $s->{endTimeUnixNano} / 1e9 <= $t1 + 0.5,
       "$what: and ends with it");
    push @selected, [ $what, $s ];
}

# ---- WebSocket: closed by the upstream, by proxy_read_timeout

# A tunnel to $path, selected: the handshake, then what comes until the
# connection closes, pinging every 50 ms when $ping: (case, the answer,
# when it closed).
sub tunnel {
    my ($path, $ping) = @_;
    my ($case, $trace) = (new_case(), new_trace());
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or die "connect: $!";
    print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n"
           . "Upgrade: websocket\r\nConnection: Upgrade\r\nx-case: $case\r\n"
           . "traceparent: 00-$trace-$PARENT-01\r\ntracestate: $STATE\r\n"
           . "baggage: splunk.trace.snapshot.volume=highest\r\n\r\n";
    my ($got, $n) = ('', 0);
    my $end = time + 10;
    while (time < $end) {
        my $rin = '';
        vec($rin, fileno $s, 1) = 1;
        if (select(my $rout = $rin, undef, undef, 0.05)) {
            sysread($s, $got, 65536, length $got) or last;
        } elsif ($ping) {
            print $s 'ping ' . ++$n . ';';
        }
    }
    my $closed = time;
    close $s;
    return ($case, $got, $closed);
}

{
    my $what = 'WebSocket closed by the upstream';
    my $pid = heavy($what, 'heavy.ws', 3);
    my ($case, $got, $closed) = tunnel('/ws/ticks40', 1);
    waitpid $pid, 0;
    like($got, qr{^HTTP/1\.1 101 }, "$what: 101");
    like($got, qr/tick 40\n\z/, "$what: every tick came, then the close");
    my $l = log_line($case);
    is($l && $l->{status}, 101, "$what: nginx logs 101");
    selected_log($what, $l);
    my $s = one_span($what, $l, parent => 1);
    # 40 ticks 20 ms apart
    ok($s && duration($s) >= 0.78
       && $s->{endTimeUnixNano} / 1e9 <= $closed + 0.5,
       "$what: the span ends when the tunnel closes");
    attempts($what, $case, $l) if $l;
    my ($r) = upstream_case($ws, $case);
    is_deeply($r && [ @{ $r->{headers} }{qw(traceparent tracestate)} ],
              [ [ $l->{traceparent} ], [ $STATE ] ],
              "$what: the upstream got the entry span and the tracestate");
    push @selected, [ $what, $s ] if $s;
}
{
    my $what = 'WebSocket idle past proxy_read_timeout';
    my ($case, $got, $closed) = tunnel('/idle/quiet', 0);
    like($got, qr{^HTTP/1\.1 101 }, "$what: 101");
    my $l = log_line($case);
    is($l && $l->{status}, 101, "$what: nginx logs 101 (not 408)");
    my $s = one_span($what, $l, parent => 1);
    ok($s && duration($s) >= 1 - 0.05
       && $s->{endTimeUnixNano} / 1e9 <= $closed + 0.5,
       "$what: the span ends when nginx closes the tunnel");
    push @selected, [ $what, $s ] if $s;
}

# ---- the client gives up mid-stream: over HTTP/1.1 it closes the
# connection; over HTTP/2 it resets the stream (RST_STREAM CANCEL) while
# another of the connection goes on

{
    my $what = 'HTTP/1.1 client gone mid-stream';
    my ($case, $code, $body) = curl_case(timeout => 0.4,
        url => "http://127.0.0.1:$port/sse/drip30",
        headers => [ [ baggage => 'splunk.trace.snapshot.volume=highest' ] ]);
    like($body, qr/^line 1 of/, "$what: part of the stream came");
    my $s = one_span($what, log_line($case));
    # the stream lasts 3 s
    ok($s && duration($s) < 2,
       "$what: the span ends when the client went, not with the stream");
    push @selected, [ $what, $s ] if $s;

    $what = 'HTTP/2 stream reset mid-stream';
    my @c = (new_case(), new_case());
    my $sel = [ baggage => 'splunk.trace.snapshot.volume=highest' ];
    my @r = h2_requests($h2, "$dir/reset.plan",
        { path => '/sse/drip30', reset_after_ms => 400,
          headers => [ [ 'x-case', $c[0] ], $sel ] },
        { path => '/sse/drip3', headers => [ [ 'x-case', $c[1] ], $sel ] });
    ok($r[0] && $r[0]{reset} && $r[0]{bytes} > 0,
       "$what: part of the stream came, then the client reset it");
    is($r[1] && $r[1]{status}, 200, "$what: the other stream goes on");
    $s = one_span($what, log_line($c[0]), h2 => 1);
    ok($s && duration($s) < 2,
       "$what: the span ends with the reset, not with the stream");
    push @selected, [ $what, $s ] if $s;
    my $other = one_span("$what, the other stream", log_line($c[1]), h2 => 1);
    push @selected, [ "$what, the other stream", $other ] if $other;
}

# ---- grpc_pass: a server-streaming call

{
    my $what = 'grpc_pass streaming call';
    my ($case, $trace) = (new_case(), new_trace());
    my ($r) = h2_requests($h2, "$dir/grpc.plan", {
        method => 'POST', path => '/grpc.Ticks/stream10', body => "\0" x 5,
        headers => [ [ 'content-type', 'application/grpc' ],
                     [ te => 'trailers' ], [ 'x-case', $case ],
                     [ traceparent => "00-$trace-$PARENT-01" ],
                     [ tracestate => $STATE ],
                     [ baggage => 'splunk.trace.snapshot.volume=highest' ] ],
    });
    my $t1 = time;
    is($r && $r->{status}, 200, "$what: 200");
    is($r && $r->{bytes}, 10 * 69, "$what: ten messages");
    my $l = log_line($case);
    selected_log($what, $l);
    my $s = one_span($what, $l, parent => 1, h2 => 1);
    ok($s && duration($s) >= 0.9 && $s->{endTimeUnixNano} / 1e9 <= $t1 + 0.5,
       "$what: the span lasts the call");
    my ($m) = upstream_case($grpc, $case);
    is_deeply($m && [ @{ $m->{headers} }{qw(traceparent tracestate baggage)} ],
              [ [ $l->{traceparent} ], [ $STATE ], [ $l->{baggage} ] ],
              "$what: the backend's metadata: the entry span, the tracestate"
              . ' and our baggage');
    push @selected, [ $what, $s ] if $s;
}

# ---- keepalive_requests 2: three pipelined, three streams

{
    my @c = map { new_case() } 1 .. 3;
    my $answer = raw_answer($ka, join '', map {
        "GET /k/$_ HTTP/1.1\r\nHost: localhost\r\nx-case: $_\r\n\r\n" } @c);
    is(join(' ', $answer =~ m{^HTTP/1\.1 (\d+)}mg), '200 200',
       'keepalive_requests 2, pipelined: two answers, then the close');
    my @l = map { log_line($_) } @c[0, 1];
    one_span("keepalive_requests 2, pipelined request $_", $l[$_ - 1])
        for 1, 2;
    isnt($l[0] && $l[0]{span_id}, $l[1] && $l[1]{span_id},
         'keepalive_requests 2, pipelined: a span each');
    is(scalar(upstream_case($good, $c[2])), 0,
       'keepalive_requests 2, pipelined: the third never went upstream');
    ok(!grep({ /^\Q$c[2]\E\|/ } split /\n/, read_file("$dir/sp.log")),
       'keepalive_requests 2, pipelined: nor was logged');

    my @h = map { new_case() } 1 .. 3;
    my @r = h2_requests($ka2, "$dir/ka.plan", map { {
        path => "/k/$_", headers => [ [ 'x-case', $_ ] ] } } @h);
    my @ok = grep { $r[$_] && $r[$_]{status} == 200 } 0 .. 2;
    cmp_ok(scalar @ok, '<=', 2,
           'keepalive_requests 2, HTTP/2: at most two streams answered');
    for my $i (0 .. 2) {
        my $what = "keepalive_requests 2, HTTP/2 stream " . ($i + 1);
        if (grep { $_ == $i } @ok) {
            one_span($what, log_line($h[$i]), h2 => 1);
        } else {
            ok(!grep({ /^\Q$h[$i]\E\|/ } split /\n/, read_file("$dir/sp.log")),
               "$what: refused, not logged");
        }
    }
}

# ---- HTTP/2: return 444, limit_conn

{
    my $c444 = new_case();
    my ($r) = h2_requests($h2, "$dir/444.plan",
        { path => '/close', headers => [ [ 'x-case', $c444 ] ] });
    ok($r && !$r->{status}, 'HTTP/2 return 444: no answer')
        or diag(explain $r);
    my $l = log_line($c444);
    is($l && $l->{status}, 444, 'HTTP/2 return 444: logged 444');
    one_span('HTTP/2 return 444', $l, h2 => 1);

    my @c = map { new_case() } 1 .. 2;
    my @r = h2_requests($h2, "$dir/limit.plan",
        map { { path => "/limited/$_", headers => [ [ 'x-case', $_ ] ] } }
        @c);
    is(join(' ', sort map { $_->{status} } @r), '200 503',
       'HTTP/2 limit_conn 1: one stream of two refused');
    one_span("HTTP/2 limit_conn, stream $_", log_line($c[$_ - 1]), h2 => 1)
        for 1, 2;
}

# ---- sampling: inside the selected spans, none of the others' work

# The sampler runs: a selected heavy request's samples show its work.
my ($hcase, $hcode) = curl_case(url => "http://127.0.0.1:$port/big",
    headers => [ [ 'Accept-Encoding' => 'gzip' ],
                 [ baggage => 'splunk.trace.snapshot.volume=highest' ] ]);
my $hl = log_line($hcase);
selected_log('a selected heavy request', $hl);
my ($hspan) = one_span('a selected heavy request', $hl);

sub heavy_samples {
    grep { grep { ($_->{function} // '') =~ /^(deflate|ngx_http_gzip_)/ }
           @{ $_->{frames} } } @_;
}

my %heavy_trace;    # trace id => tag, of the unselected heavy requests
my @samples;
my $end = time + 10;
while (1) {
    (undef, my $got) = $recv->collect;
    @samples = @$got;
    last if time > $end || grep { ($_->{labels}{span_id} // '')
                                  eq ($hspan // {})->{spanId} } @samples;
    sleep 0.2;
}
sleep 1;    # a profile export interval and more
(undef, my $got) = $recv->collect;
@samples = @$got;
my @under = grep { ($_->{labels}{span_id} // '') eq ($hspan // {})->{spanId} }
            @samples;
cmp_ok(scalar(heavy_samples(@under)), '>', 0,
       'a selected heavy request: samples under its ids show its gzip work');
for my $what (sort keys %heavy_of) {
    my ($sel) = grep { $_->[0] eq $what } @selected;
    my @inside;
    for my $tag (@{ $heavy_of{$what} }) {
        my $l = log_line($tag);
        next unless $l && $l->{status} == 200;
        $heavy_trace{ $l->{trace_id} } = $tag;
        my ($h) = spans_of($l->{trace_id});
        push @inside, $tag if $sel && $h
            && $h->{startTimeUnixNano} < $sel->[1]{endTimeUnixNano}
            && $h->{endTimeUnixNano} > $sel->[1]{startTimeUnixNano};
    }
    cmp_ok(scalar @inside, '>', 0,
           "$what: heavy unselected requests were served while it was open"
           . " (@inside)");
}
is(scalar(grep { $heavy_trace{ $_->{labels}{trace_id} // '' } } @samples),
   0, 'no sample carries the ids of an unselected request');
for my $sel (@selected) {
    my ($what, $span) = @$sel;
    my @of = grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
             @samples;
    my @out = grep {
        my $ms = $_->{labels}{'source.event.time'} // -1;
        $ms < int($span->{startTimeUnixNano} / 1e6) - 1
            || $ms > int($span->{endTimeUnixNano} / 1e6) + 1
    } @of;
    is(scalar @out, 0, "$what: every sample under its ids ("
       . scalar(@of) . ') taken while its span was open');
    is(scalar(heavy_samples(@of)), 0,
       "$what: none shows the heavy work done meanwhile for others");
}

# ---- a reload with a tunnel open: the old worker keeps it until
# worker_shutdown_timeout closes it, and its span still arrives

{
    my $what = 'WebSocket open across a reload';
    my ($case, $trace) = (new_case(), new_trace());
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or die "connect: $!";
    print $s "GET /ws/echo HTTP/1.1\r\nHost: localhost\r\n"
           . "Upgrade: websocket\r\nConnection: Upgrade\r\nx-case: $case\r\n"
           . "traceparent: 00-$trace-$PARENT-01\r\n"
           . "baggage: splunk.trace.snapshot.volume=highest\r\n\r\n";
    my $got = '';
    while ($got !~ /\r\n\r\n/) {
        sysread($s, $got, 4096, length $got) or last;
    }
    like($got, qr{^HTTP/1\.1 101 }, "$what: 101");
    my $reload = time;
    is(system("/usr/sbin/nginx -p $dir -c $dir/nginx.conf -s reload"
              . " 2>$dir/reload.log"), 0, "$what: nginx -s reload")
        or diag(read_file("$dir/reload.log"));
    print $s 'after the reload;';
    my $echo = '';
    my $t = time + 10;
    while (time < $t) {
        my $n = sysread($s, $echo, 4096, length $echo);
        last unless $n;
    }
    my $closed = time;
    like($echo, qr/^after the reload;/,
         "$what: the old worker still relays it");
    close $s;
    my $l = log_line($case);
    my $span = one_span($what, $l, parent => 1);
    ok($span && $span->{endTimeUnixNano} / 1e9 >= $reload + 1 - 0.1
       && $span->{endTimeUnixNano} / 1e9 <= $closed + 0.5,
       "$what: the span ends when worker_shutdown_timeout closes the tunnel");
    my ($c2, $code) = curl_case(url => "http://127.0.0.1:$port/big");
    is($code, 200, "$what: the new workers answer");
    one_span("$what: a request to the new workers", log_line($c2));
}

stop($nginx);
unlike(read_file("$dir/error.log"), qr/\[(alert|emerg|crit)\]/,
       'no alert in the error log');

done_testing();
