#!/usr/bin/perl
# nginx entry spans, header by header: real nginx with the module over HTTP/1.1
# and HTTP/2 (h2c), a recording HTTP upstream behind proxy_pass, the
# exporter the module starts, and the independent OTLP receiver. For each
# case of incoming trace headers: what the upstream receives, what the
# $spanprof_* variables log, and the exported span (ids, parent, name,
# attributes, status). Then snapshot selection through nginx: highest,
# off, and the trace-id rule on random ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case log_case upstream_case spans wait_spans);

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;
plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

my $PROBABILITY = 0.1;    # the highest SPEC 1 allows
my $IN_TRACE = '0af7651916cd43dd8448eb211c80319c';
my $IN_PARENT = 'b7ad6b7169203331';
my $TP_RE = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/;
my $VOLUME = 'splunk.trace.snapshot.volume';

# SPEC 3: the last 7 hex digits against floor(p * 0x0FFFFFFF).
sub selected_by_id {
    my ($trace_id) = @_;
    return hex(substr $trace_id, -7) <= int($PROBABILITY * 0x0FFFFFFF);
}

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $h2 = free_port();
my $upstream = '127.0.0.1:' . $up->port;

my $port = nginx_conf($dir,
    http => <<"HTTP",
    large_client_header_buffers 4 32k;
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_snapshot|\$spanprof_traceparent|'
                  '\$spanprof_baggage|\$status';
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        location /proxy { proxy_pass http://$upstream; }
        location /fail { return 503; }
SERVER
);

my %env = (
    SPLUNK_SNAPSHOT_PROFILER_ENABLED      => 'true',
    SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY,
    OTEL_EXPORTER_OTLP_ENDPOINT           => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY               => '100',
    SPLUNK_PROFILER_EXPORT_INTERVAL       => '200',
);
my $nginx = nginx_start($dir, $port, %env);
ok($nginx, 'nginx starts with the module') or BAIL_OUT(read_file("$dir/error.log"));

# One request through curl; returns its case id (to find its access log
# line and what the upstream got) and HTTP code.
sub request {
    my (%o) = @_;
    my ($case, $code) = curl_case(%o,
        url => sprintf('http://127.0.0.1:%d%s', $o{h2} ? $h2 : $port,
                       $o{path} // '/proxy'));
    return ($case, $code);
}

sub log_line {
    log_case("$dir/sp.log", $_[0],
             qw(trace_id span_id snapshot traceparent baggage status));
}

sub upstream_got {
    my ($r) = upstream_case($up, $_[0]);
    return $r && $r->{headers};
}

sub span_of {
    my ($span_id) = @_;
    my ($s) = wait_spans($recv, sub { $_[0]{spanId} eq $span_id });
    return $s;
}

sub members { split /,/, $_[0] // '' }

sub volume_of {
    my ($baggage) = @_;
    for (members($baggage)) { return $1 if /^\Q$VOLUME\E=([^;]*)/ }
    return undef;
}

# ---- the matrix of incoming headers

my $tp = "00-$IN_TRACE-$IN_PARENT";
my @invalid = (
    [ 'version ff'          => "ff-$IN_TRACE-$IN_PARENT-01" ],
    [ 'zero trace id'       => '00-' . ('0' x 32) . "-$IN_PARENT-01" ],
    [ 'zero parent id'      => "00-$IN_TRACE-" . ('0' x 16) . '-01' ],
    [ 'upper-case hex'      => '00-' . uc($IN_TRACE) . "-$IN_PARENT-01" ],
    [ 'short trace id'      => '00-' . substr($IN_TRACE, 1) . "-$IN_PARENT-01" ],
    [ 'long parent id'      => "00-$IN_TRACE-${IN_PARENT}0-01" ],
    [ 'non-hex flags'       => "$tp-0g" ],
    [ 'wrong delimiter'     => "00_${IN_TRACE}_${IN_PARENT}_01" ],
    [ 'v00 with more data'  => "$tp-01-extra" ],
    [ 'garbage'             => 'not a traceparent' ],
);

my @big = map { "k$_=v$_" } 0 .. 199;
my $long = 'x' x 100;
my @cases = (
    { name => 'no trace headers', headers => [] },
    { name => 'valid traceparent, sampled', parent => 1,
      headers => [ [ traceparent => "$tp-01" ] ] },
    { name => 'valid traceparent, not sampled', parent => 1, unsampled => 1,
      headers => [ [ traceparent => "$tp-00" ] ] },
    (map { { name => "invalid traceparent: $_->[0]", invalid => 1,
             headers => [ [ traceparent => $_->[1] ],
                          [ tracestate => 'rojo=00f067aa0ba902b7' ] ] } }
         @invalid),
    { name => 'tracestate', parent => 1,
      tracestate => 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
      headers => [ [ traceparent => "$tp-01" ],
                   [ tracestate => 'rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE' ] ] },
    { name => 'two tracestate headers', parent => 1,
      tracestate => 'rojo=1,congo=2',
      headers => [ [ traceparent => "$tp-01" ], [ tracestate => 'rojo=1' ],
                   [ tracestate => 'congo=2' ] ] },
    { name => 'baggage without the volume', kept => ['k=v', 'p=1;prop'],
      headers => [ [ baggage => 'k=v,p=1;prop' ] ] },
    { name => 'baggage volume highest', volume => 'highest',
      headers => [ [ baggage => "a=1,$VOLUME=highest" ] ] },
    { name => 'baggage volume off', volume => 'off',
      headers => [ [ baggage => "$VOLUME=off,a=1" ] ] },
    { name => 'baggage volume other', volume => 'loud',
      headers => [ [ baggage => "$VOLUME=loud" ] ] },
    { name => 'highest with an unsampled parent', volume => 'highest',
      parent => 1, unsampled => 1,
      headers => [ [ traceparent => "$tp-00" ],
                   [ baggage => "$VOLUME=highest" ] ] },
    # The volume needs a member: 179 received ones stay.
    { name => 'baggage over 180 members', kept => ['k0=v0', 'k178=v178'],
      dropped => ['k179=v179', 'k199=v199'],
      headers => [ [ baggage => join ',', @big ] ] },
    { name => 'baggage over 8192 bytes', kept => ["a0=$long"],
      headers => [ [ baggage => join ',', map { "a$_=$long" } 0 .. 99 ] ] },
    { name => 'malformed baggage members', kept => ['good=1', 'enc=a%20b'],
      dropped => ['=novalue', 'bad key=1', 'x=y z', 'noequals'],
      headers => [ [ baggage => 'good=1, =novalue,bad key=1,x=y z,'
                                 . 'noequals,enc=a%20b' ] ] },
    { name => 'two baggage headers', kept => ['a=1', 'b=2'],
      headers => [ [ baggage => 'a=1' ], [ baggage => 'b=2' ] ] },
    { name => '5xx', path => '/fail', status => 503, headers => [] },
    { name => 'query', path => '/proxy?q=1&r=2', query => 'q=1&r=2',
      headers => [] },
);

my @check;
for my $h2 (0, 1) {
    my $proto = $h2 ? 'HTTP/2' : 'HTTP/1.1';
    for my $c (@cases) {
        my ($case, $code) = request(h2 => $h2, headers => $c->{headers},
                                    path => $c->{path});
        push @check, { %$c, case => $case, code => $code, h2 => $h2,
                       what => "$proto, $c->{name}" };
    }
}

for my $c (@check) {
    my $what = $c->{what};
    my $status = $c->{status} // 200;
    is($c->{code}, $status, "$what: answered $status");

    my $l = log_line($c->{case});
    ok($l, "$what: access log line") or next;
    my $proxied = ($c->{path} // '/proxy') =~ m{^/proxy};
    my $got = $proxied ? upstream_got($c->{case}) : undef;
    ok($got, "$what: the upstream got the request") if $proxied;

    # The entry span's ids in the variables.
    like($l->{trace_id}, qr/^[0-9a-f]{32}$/, "$what: \$spanprof_trace_id");
    like($l->{span_id}, qr/^[0-9a-f]{16}$/, "$what: \$spanprof_span_id");
    my $flags = $c->{unsampled} ? '00' : '01';
    is($l->{traceparent}, "00-$l->{trace_id}-$l->{span_id}-$flags",
       "$what: \$spanprof_traceparent is the entry span, flags $flags");
    if ($c->{parent}) {
        is($l->{trace_id}, $IN_TRACE, "$what: continues the trace");
    } else {
        isnt($l->{trace_id}, $IN_TRACE, "$what: a new trace");
    }
    isnt($l->{span_id}, $IN_PARENT, "$what: a new span id");

    # Selection and the baggage going on.
    my $volume = $c->{volume};
    my $selected = defined $volume ? $volume eq 'highest'
                                   : selected_by_id($l->{trace_id});
    my $profiled = $selected && !$c->{unsampled} ? 1 : 0;
    is($l->{snapshot}, $profiled, "$what: \$spanprof_snapshot $profiled");
    is(volume_of($l->{baggage}), $volume // ($selected ? 'highest' : 'off'),
       "$what: baggage carries the volume" . ($volume ? ' as received' : ''));
    my @m = members($l->{baggage});
    ok(@m <= 180 && length($l->{baggage}) <= 8192,
       "$what: baggage within 180 members and 8192 bytes");
    my %m = map { $_ => 1 } @m;
    ok($m{$_}, "$what: baggage keeps $_") for @{ $c->{kept} // [] };
    ok(!$m{$_}, "$what: baggage drops $_") for @{ $c->{dropped} // [] };
    is(scalar(grep { /^\Q$VOLUME\E=/ } @m), 1, "$what: one volume member");

    if ($got) {
        is_deeply($got->{traceparent}, [ $l->{traceparent} ],
                  "$what: upstream traceparent is the entry span's");
        is_deeply($got->{baggage}, [ $l->{baggage} ],
                  "$what: upstream baggage, once");
        if ($c->{tracestate}) {
            is_deeply($got->{tracestate}, [ $c->{tracestate} ],
                      "$what: upstream tracestate as received");
        } else {
            ok(!exists $got->{tracestate}, "$what: no upstream tracestate");
        }
    }

    # The exported span.
    if ($c->{unsampled}) {
        $c->{absent} = $l->{span_id};
        next;
    }
    my $s = span_of($l->{span_id});
    ok($s, "$what: span exported") or next;
    is($s->{traceId}, $l->{trace_id}, "$what: span trace id");
    is($s->{parentSpanId} // '', $c->{parent} ? $IN_PARENT : '',
       "$what: span parent");
    is($s->{traceState} // '', $c->{tracestate} // '',
       "$what: span tracestate");
    my $route = $proxied ? '/proxy' : '/fail';
    is($s->{name}, "GET $route", "$what: name GET $route");
    is($s->{kind}, 2, "$what: kind SERVER");
    is($s->{status}{code} // 0, $status >= 500 ? 2 : 0,
       "$what: status " . ($status >= 500 ? 'Error' : 'unset'));
    my %want = (
        'http.request.method'       => 'GET',
        'url.path'                  => $route,
        'url.scheme'                => 'http',
        'http.response.status_code' => $status,
        'http.route'                => $route,
        'server.address'            => '127.0.0.1',
        'server.port'               => $c->{h2} ? $h2 : $port,
        'client.address'            => '127.0.0.1',
        'network.peer.address'      => '127.0.0.1',
        'network.protocol.version'  => $c->{h2} ? '2' : '1.1',
        'url.query'                 => $c->{query},
        'splunk.snapshot.profiling' => $profiled ? 1 : undef,
    );
    for my $k (sort keys %want) {
        is(attribute($s->{attributes}, $k), $want{$k}, "$what: $k");
    }
    like(attribute($s->{attributes}, 'user_agent.original') // '',
         qr{^curl/}, "$what: user_agent.original");
    cmp_ok($s->{endTimeUnixNano}, '>=', $s->{startTimeUnixNano},
           "$what: ends after it starts");
}

# Unsampled entry spans are not exported (checked last: by now every
# sampled span has arrived, and they were sent in between).
my %exported = map { $_->{spanId} => 1 } spans($recv);
for my $c (grep { $_->{absent} } @check) {
    ok(!$exported{ $c->{absent} }, "$c->{what}: span not exported");
}
is(scalar(grep { $_->{traceId} eq $IN_TRACE && !$_->{parentSpanId} }
           spans($recv)),
   0, 'no exported span takes the incoming trace without its parent');

# ---- selection through nginx: highest, off, and random trace ids

my (%sel, $bad_rule, $bad_baggage);
for my $volume ('highest', 'off') {
    my $n = 0;
    for (1 .. 20) {
        my ($case) = request(headers => [ [ baggage => "$VOLUME=$volume" ] ]);
        my $l = log_line($case);
        $n += $l && $l->{snapshot} eq '1';
    }
    $sel{$volume} = $n;
}
is($sel{highest}, 20, 'volume highest: every request selected');
is($sel{off}, 0, 'volume off: no request selected');

my ($n, $hits) = (200, 0);
my @ids = map { join '', map { sprintf '%04x', int rand 65536 } 1 .. 8 } 1 .. $n;
for my $id (@ids) {
    my ($case) = request(headers => [ [ traceparent => "00-$id-$IN_PARENT-01" ] ]);
    my $l = log_line($case) or next;
    my $want = selected_by_id($id) ? 1 : 0;
    $hits += $l->{snapshot};
    $bad_rule++ if $l->{snapshot} ne $want;
    $bad_baggage++
        if volume_of($l->{baggage}) ne ($want ? 'highest' : 'off');
}
ok(!$bad_rule, "no baggage: each of $n random trace ids selected by SPEC 3's rule");
ok(!$bad_baggage, 'no baggage: the volume sent on says the decision');
# p = 0.1 over 200: mean 20, sd 4.2; 6 sd above, and at least one. The
# fraction over 20,000 ids is test_entry's.
ok($hits > 0 && $hits < 46, "selected fraction near $PROBABILITY ($hits of $n)");

my ($case1) = request(headers => [ [ traceparent => "00-$ids[0]-$IN_PARENT-01" ] ]);
my ($case2) = request(headers => [ [ traceparent => "00-$ids[0]-$IN_PARENT-01" ] ]);
is(log_line($case1)->{snapshot}, log_line($case2)->{snapshot},
   'the same trace id, the same decision');

stop($nginx);
my $log = read_file("$dir/error.log");
unlike($log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error log');

done_testing();
