#!/usr/bin/perl
# What no well-behaved client sends, over HTTP/1.1 and HTTP/2 (h2c), to
# real nginx and real apache2 with the module, each next to the same
# server without it: trace headers repeated a hundred times, tens of KiB
# long, with NULs, controls, invalid UTF-8, odd whitespace and letter
# case; targets and User-Agents with invalid UTF-8, %00 and 8 KiB queries;
# odd Host headers; a hundred concurrent HTTP/2 streams on one connection,
# some profiled, some reset by the client mid-response; clients that go
# away mid-body or mid-response. The promise under test: a malformed
# header never fails or slows a request (each answer is the bare
# server's), the exported span is right (SPEC 2 and 3: one per request,
# its own ids, the status the server logs, no sample under another span),
# no worker restarts, and the error logs stay clean.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file free_port nginx_conf
                        nginx_start httpd_conf httpd_start stop text_file
                        wait_until gzip_location deflate_location);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(spans raw_answer h2_requests);
use Spanprof::HeaderMatrix qw(check_samples_in_spans);
use Spanprof::Procs qw(family thread_stacks);

Spanprof::Receiver::skip_unless_ready(apache_modules => ['http2']);

my $PARENT = 'b7ad6b7169203331';
my $VOLUME = 'splunk.trace.snapshot.volume';
my $serial = 0;
# U+FFFD, as the receiver's JSON lines have it: UTF-8 bytes.
my $FFFD = "\xef\xbf\xbd";

# A trace id of its own for case $n, not selected by SPEC 3's rule (its
# last 7 hex digits are above any probability's threshold).
sub trace_of { sprintf '%08x%s', $_[0], 'e' x 24 }

sub attr { attribute($_[0]{attributes}, $_[1]) }

# ---- the servers: each kind with the module and bare, same configuration

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
text_file("$dir/big.txt", 10000);
my %env = (
    $recv->snapshot_env(export_interval => '200'),
);

# Limits well above the defaults, so that what the servers refuse by
# default reaches the module.
sub nginx_server {
    my ($module) = @_;
    my $sub = new_dir();
    my $h2 = free_port();
    my $big = gzip_location($dir);
    my $port = nginx_conf($sub, module => $module, log_level => 'info',
        http => <<"HTTP",
    large_client_header_buffers 4 64k;
    http2_max_field_size 64k;
    http2_max_header_size 256k;
    log_format hi '\$request|\$status';
HTTP
        server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $sub/access.log hi;
        $big
        location /slow { alias $dir/big.txt; limit_rate 100k; }
        location /up { proxy_pass http://127.0.0.1:${\ $up->port}; }
SERVER
    );
    my $pid = nginx_start($sub, $port, %env);
    return { kind => 'nginx', module => $module, dir => $sub, pid => $pid,
             h1 => $port, h2 => $h2 };
}

sub httpd_server {
    my ($module) = @_;
    my $sub = new_dir();
    # One child, so that one that died would show as another pid.
    my $port = httpd_conf($sub, module => $module, log_level => 'info',
        one_child => 64, modules => [qw(http2 proxy proxy_http deflate filter ratelimit env
                       alias)],
        extra => <<"EXTRA");
Protocols h2c http/1.1
LimitRequestFieldSize 65536
LimitRequestFields 1000
LimitRequestLine 16384
H2MaxHeaderBlockLen 262144
LogFormat "%r|%>s" hi
CustomLog $sub/access.log hi
${\ deflate_location($dir) }
Alias /slow $dir/big.txt
<Location /slow>
    SetOutputFilter RATE_LIMIT
    SetEnv rate-limit 100
</Location>
ProxyPass /up http://127.0.0.1:${\ $up->port}/up
EXTRA
    my $pid = httpd_start($sub, $port, %env);
    return { kind => 'httpd', module => $module, dir => $sub, pid => $pid,
             h1 => $port, h2 => $port };
}

my @pairs;
for my $make (\&nginx_server, \&httpd_server) {
    my ($on, $bare) = ($make->(1), $make->(0));
    ok($on->{pid} && $bare->{pid}, "$on->{kind}: with and without the module")
        or BAIL_OUT(read_file("$on->{dir}/error.log")
                    . read_file("$on->{dir}/stderr.log"));
    # Its exporter started: the processes from now on must stay.
    wait_until(sub { grep { $_->{args} =~ /spanprof-exporter/ }
                          family($on->{pid}) });
    $on->{workers} = [ sort map { $_->{pid} } family($on->{pid}) ];
    push @pairs, [ $on, $bare ];
}

# ---- clients

# (status, body) of a raw HTTP/1.1 request, Connection: close added.
sub h1 {
    my ($port, $target, @headers) = @_;
    my $answer = raw_answer($port, "GET $target HTTP/1.1\r\n"
        . join('', map { "$_->[0]: $_->[1]\r\n" } @headers)
        . "Connection: close\r\n\r\n");
    my ($status) = $answer =~ m{^HTTP/1\.\d (\d+)};
    my (undef, $body) = split /\r\n\r\n/, $answer, 2;
    return ($status // 0, $body // '');
}

sub h2 {
    my ($port, @requests) = @_;
    return h2_requests($port, "$dir/h2plan.json", @requests);
}

# The status the server logged for a case (after it stopped), or undef.
sub logged {
    my ($server, $case) = @_;
    for (split /\n/, read_file("$server->{dir}/access.log")) {
        return $1 if /[?&]case=$case[& ].*\|(\d+)$/;
    }
    return undef;
}

# Error pages name the port they were asked on.
sub same_body {
    my ($on, $bare, $body) = @_;
    $body =~ s/\b$bare->{h1}\b/PORT/g;
    $body =~ s/\b$bare->{h2}\b/PORT/g;
    return $body;
}

# ---- header cases: each over HTTP/1.1 and HTTP/2 unless it says

# name, path (default /), query after case=N, headers (a sub of the case's
# trace id: [name, value] pairs, values as bytes), only (h1 or h2), and
# what the span says: trace (continue: the id and parent sent; new: not
# the id sent), selected, tracestate, attrs (key => value, undef: absent).
sub cases {
    my $tp = sub { "00-$_[0]-$PARENT-01" };
    my $long = 'v' x 60000;
    return (
        { name => '100 baggage headers, the volume in the last',
          selected => 1, trace => 'continue',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             (map { [ baggage => "k$_=v$_" ] } 1 .. 99),
                             [ baggage => "$VOLUME=highest" ] ] } },
        { name => '100 tracestate headers (past 32 members)',
          trace => 'continue', tracestate => '',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             map { [ tracestate => "k$_=v$_" ] } 1 .. 100 ] } },
        { name => '100 traceparent headers', trace => 'new',
          headers => sub { [ map { [ traceparent => $tp->($_[0]) ] }
                             1 .. 100 ] } },
        { name => 'the volume, then a 60 KiB baggage', selected => 1,
          trace => 'continue',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ baggage => "$VOLUME=highest" ],
                             [ baggage => "big=$long" ] ] } },
        # Past the 8192 bytes, the last members go (sp_baggage.h): the
        # volume too, and the trace id decides.
        { name => 'a 60 KiB baggage, then the volume', selected => 0,
          trace => 'continue',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ baggage => "big=$long" ],
                             [ baggage => "$VOLUME=highest" ] ] } },
        { name => 'a 60 KiB tracestate', trace => 'continue',
          tracestate => '',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ tracestate => "big=$long" ] ] } },
        { name => 'a 60 KiB traceparent', trace => 'new',
          headers => sub { [ [ traceparent => $tp->($_[0]) . $long ] ] } },
        { name => 'a NUL in the traceparent', trace => 'new', only => 'h2',
          headers => sub { [ [ traceparent => $tp->($_[0]) . "\0" ] ] } },
        { name => 'a NUL in the baggage', only => 'h2', trace => 'continue',
          selected => 0,
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ baggage => "$VOLUME=highest\0" ] ] } },
        { name => 'controls in the traceparent', trace => 'new',
          headers => sub { [ [ traceparent => "\x01" . $tp->($_[0])
                                              . "\x7f" ] ] } },
        { name => 'invalid UTF-8 in tracestate and baggage',
          trace => 'continue', tracestate => '', selected => 1,
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ tracestate => "a=caf\xe9" ],
                             [ baggage => "k=caf\xe9\xff,$VOLUME=highest" ] ] } },
        { name => 'upper-case hex traceparent', trace => 'new',
          headers => sub { [ [ traceparent => uc $tp->($_[0]) ] ] } },
        { name => 'tabs and spaces around the values', trace => 'continue',
          tracestate => 'a=1,b=2', selected => 1,
          headers => sub { [ [ traceparent => " \t" . $tp->($_[0]) . "\t " ],
                             [ tracestate => "\t a=1 \t, b=2\t" ],
                             [ baggage => " \t$VOLUME = highest \t" ] ] } },
        { name => 'mixed-case header names', only => 'h1', trace => 'continue',
          tracestate => 'a=1', selected => 1,
          headers => sub { [ [ TraceParent => $tp->($_[0]) ],
                             [ TRACESTATE => 'a=1' ],
                             [ BaGgAgE => "$VOLUME=highest" ] ] } },
        { name => 'never-indexed (sensitive) trace headers', only => 'h2',
          trace => 'continue', selected => 1, tracestate => 'a=1,b=2',
          sensitive => [qw(traceparent baggage tracestate)],
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ tracestate => 'a=1' ], [ tracestate => 'b=2' ],
                             [ baggage => 'x=1' ],
                             [ baggage => "$VOLUME=highest" ] ] } },
        { name => 'a User-Agent of invalid UTF-8 and controls',
          attrs => { 'user_agent.original' => "caf$FFFD$FFFD\tx" },
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ 'User-Agent' => "caf\xe9\xff\tx" ] ] } },
        { name => 'an invalid UTF-8 path', path => "/caf\xe9",
          attrs => { 'url.path' => "/caf$FFFD" },
          headers => sub { [ [ traceparent => $tp->($_[0]) ] ] } },
        { name => 'a %00 in the path', path => '/a%00b',
          attrs => { 'url.path' => '/a%00b' },
          headers => sub { [ [ traceparent => $tp->($_[0]) ] ] } },
        { name => 'a %00 in the query', query => 'a=%00',
          headers => sub { [ [ traceparent => $tp->($_[0]) ] ] } },
        { name => 'an 8 KiB query', query => 'q=' . ('x' x 8192),
          headers => sub { [ [ traceparent => $tp->($_[0]) ] ] } },
        (map { my ($what, $host) = @$_;
               { name => "Host $what", only => 'h1', host => $host,
                 headers => sub { [ [ traceparent => $tp->($_[0]) ],
                                    [ Host => $host ] ] } } }
            [ 'empty', '' ],
            [ 'an IPv6 literal with a zone id', '[fe80::1%25eth0]:8080' ],
            [ 'with a trailing dot', 'example.com.' ],
            [ 'with port 0', 'example.com:0' ],
            [ 'with port 99999', 'example.com:99999' ],
            [ 'of controls and invalid UTF-8', "ex\x01am\xe9ple" ]),
        { name => 'two Host headers', only => 'h1',
          headers => sub { [ [ traceparent => $tp->($_[0]) ],
                             [ Host => 'a.example' ],
                             [ Host => 'b.example' ] ] } },
        (map { my ($what, $host) = @$_;
               { name => ":authority $what", only => 'h2', host => $host,
                 headers => sub { [ [ traceparent => $tp->($_[0]) ],
                                    [ ':authority' => $host ] ] } } }
            [ 'with a zone id', '[fe80::1%25eth0]:8080' ],
            [ 'with port 99999', 'example.com:99999' ]),
    );
}

# Sends every case to a server with the module and to the same without;
# returns what to check once the spans are in: [case, what, status].
sub send_cases {
    my ($on, $bare) = @_;
    my (@sent, @h2);
    for my $c (cases()) {
        for my $proto ('h1', 'h2') {
            next if $c->{only} && $c->{only} ne $proto;
            my $n = ++$serial;
            my $target = ($c->{path} // '/') . "?case=$n"
                         . (defined $c->{query} ? "&$c->{query}" : '');
            my @headers = @{ $c->{headers}->(trace_of($n)) };
            my $what = "$on->{kind}, $proto, $c->{name}";
            push @sent, { %$c, n => $n, what => $what };
            if ($proto eq 'h1') {
                unshift @headers, [ Host => 'localhost' ]
                    unless defined $c->{host};
                my @got = map { [ h1($_->{h1}, $target, @headers) ] }
                          $on, $bare;
                is($got[0][0], $got[1][0],
                   "$what: answered $got[1][0] as without the module");
                is(same_body($on, $on, $got[0][1]),
                   same_body($on, $bare, $got[1][1]),
                   "$what: the same body");
                $sent[-1]{status} = $got[0][0];
            } else {
                push @h2, [ $sent[-1], { path => $target,
                    headers => \@headers, sensitive => $c->{sensitive} } ];
            }
        }
    }
    # Every HTTP/2 case as a stream of one connection: names and values
    # the cases share go HPACK-indexed after their first.
    my @on = h2($on->{h2}, map { $_->[1] } @h2);
    my @bare = h2($bare->{h2}, map { $_->[1] } @h2);
    for my $i (0 .. $#h2) {
        my $c = $h2[$i][0];
        my ($a, $b) = ($on[$i] // {}, $bare[$i] // {});
        is(($a->{status} // 0) . ' ' . ($a->{error} // ''),
           ($b->{status} // 0) . ' ' . ($b->{error} // ''),
           "$c->{what}: answered ($b->{status}) as without the module");
        is(same_body($on, $on, $a->{body} // ''),
           same_body($on, $bare, $b->{body} // ''), "$c->{what}: the same body");
        $c->{status} = $a->{status};
    }
    return @sent;
}

# The span of a case sent to server $on is right.
sub check_case {
    my ($on, $c) = @_;
    my $what = $c->{what};
    my $trace = trace_of($c->{n});
    my @s = grep { (attr($_, 'url.query') // '') =~ /^case=$c->{n}(&|$)/
                   || $_->{traceId} eq $trace } spans($recv);
    # A request the server never made (a stream it reset for a header
    # HTTP/2 forbids) is neither logged nor a span.
    my $status = logged($on, $c->{n}) // $c->{status};
    unless ($status) {
        is(scalar @s, 0, "$what: no request, no span");
        return;
    }
    is(scalar @s, 1, "$what: one span") or return;
    my $s = $s[0];
    is(attr($s, 'http.response.status_code'), $status,
       "$what: the status the server logs ($status)");
    is($s->{status}{code} // 0, ($status // 0) >= 500 ? 2 : 0,
       "$what: span status");
    like("$s->{traceId} $s->{spanId}", qr/^[0-9a-f]{32} [0-9a-f]{16}$/,
         "$what: ids");
    if (($c->{trace} // '') eq 'continue') {
        is("$s->{traceId} " . ($s->{parentSpanId} // ''), "$trace $PARENT",
           "$what: continues the trace");
    } elsif (($c->{trace} // '') eq 'new') {
        ok($s->{traceId} ne $trace && !$s->{parentSpanId},
           "$what: a new trace");
    }
    is($s->{traceState} // '', $c->{tracestate}, "$what: tracestate")
        if defined $c->{tracestate};
    is(attr($s, 'splunk.snapshot.profiling') ? 1 : 0, $c->{selected},
       "$what: " . ($c->{selected} ? '' : 'not ') . 'selected')
        if defined $c->{selected};
    for my $k (sort keys %{ $c->{attrs} // {} }) {
        is(attr($s, $k), $c->{attrs}{$k}, "$what: $k");
    }
    if (exists $c->{host}) {
        my $port = attr($s, 'server.port');
        ok(!defined $port || ($port >= 1 && $port <= 65535),
           "$what: server.port " . ($port // 'absent') . ' is a port');
        my $addr = attr($s, 'server.address') // '';
        unlike($addr, qr/[\x00-\x1f\x7f]|$FFFD/,
               "$what: server.address '$addr' is no control");
    }
}

my @checks;
for my $pair (@pairs) {
    push @checks, map { [ $pair->[0], $_ ] } send_cases(@$pair);
}

# ---- many repeated headers cost no more than without the module

# The peak resident KiB of a server's processes, summed; with $reset,
# the peak is their resident size from now on (proc(5), clear_refs).
sub peak_kib {
    my ($server, $reset) = @_;
    my $kib = 0;
    for (family($server->{pid})) {
        write_file("/proc/$_->{pid}/clear_refs", "5\n") if $reset;
        $kib += $1 if read_file("/proc/$_->{pid}/status") =~ /VmHWM:\s+(\d+)/;
    }
    return $kib;
}

# 990 baggage headers of 190 bytes to nginx (under its 1000 header
# lines): joined one by one, each into a new copy of all before it, they
# took 90 MiB of the worker's memory (n * n / 2 copies) and 70 ms; joined
# once, the 190 KiB of the headers. httpd joins them itself, up to its
# LimitRequestFieldSize (64 KiB here: 300 of them).
for my $pair (@pairs) {
    my ($on, $bare) = @$pair;
    my $count = $on->{kind} eq 'nginx' ? 990 : 300;
    my @headers = ([ Host => 'localhost' ],
                   map { [ baggage => "k$_=" . ('v' x 180) ] } 1 .. $count);
    for my $proto ('h1', 'h2') {
        my (@grew, @status);
        for my $server ($on, $bare) {
            my $before = peak_kib($server, 1);
            my $n = ++$serial;
            if ($proto eq 'h1') {
                push @status, (h1($server->{h1}, "/?case=$n", @headers))[0];
            } else {
                push @status, (h2($server->{h2}, { path => "/?case=$n",
                    headers => [ @headers[1 .. $#headers] ] }))[0]{status};
            }
            push @grew, peak_kib($server) - $before;
        }
        my $what = "$on->{kind}, $proto, $count baggage headers";
        is($status[0], $status[1], "$what: answered $status[1] as without"
                                   . ' the module');
        # httpd's threads add their stacks' 8 MiB now and then.
        cmp_ok($grew[0], '<', $grew[1] + 32768, "$what: the server's peak"
               . " memory grew $grew[0] KiB ($grew[1] KiB without the"
               . ' module)');
    }
}

# ---- a hundred concurrent HTTP/2 streams on one connection: a third
# profiled (gzip at level 9 for the sampler to see), a fifth reset by the
# client mid-response

my @streams;    # [server, case, selected, reset]
for my $pair (@pairs) {
    my ($on, $bare) = @$pair;
    my (@plan, @mine);
    for my $i (0 .. 99) {
        my $n = ++$serial;
        my ($selected, $reset) = ($i % 3 == 0, $i % 5 == 0);
        push @mine, [ $on, $n, $selected, $reset ];
        push @plan, {
            path => ($reset ? '/slow' : '/big') . "?case=$n",
            headers => [ [ traceparent => '00-' . trace_of($n) . "-$PARENT-01" ],
                         [ 'accept-encoding' => 'gzip' ],
                         [ baggage => "$VOLUME="
                                      . ($selected ? 'highest' : 'off') ] ],
            $reset ? (reset_after => 16384) : () };
    }
    my @got = map { [ h2($_->{h2}, @plan) ] } $on, $bare;
    my $what = "$on->{kind}, 100 HTTP/2 streams";
    my @differ = grep {
        my ($a, $b) = ($got[0][$_] // {}, $got[1][$_] // {});
        $mine[$_][3]
            ? !($a->{reset} && $b->{reset})
            : ($a->{status} // 0) != 200 || ($b->{status} // 0) != 200
              || $a->{bytes} != $b->{bytes};
    } 0 .. 99;
    is(scalar @differ, 0, "$what: each answered as without the module,"
                          . ' or reset by the client')
        or diag(JSON::PP->new->canonical->encode(
                    [ map { [ $got[0][$_], $got[1][$_] ] } @differ[0 .. 2] ]),
                thread_stacks($on->{pid}));
    push @streams, @mine;
}

# ---- clients that go away mid-request-body or mid-response

# Sends $head and $body over a connection of its own, reads $read bytes
# of the answer (0: none), and closes.
sub walk_away {
    my ($port, $head, $body, $read) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return;
    print $s $head, $body;
    my $got = '';
    while (length $got < $read) {
        sysread($s, $got, 4096, length $got) or last;
    }
    sleep 0.3 unless $read;     # the server reads what came
    close $s;
}

my @gone;    # [server, case, what, the span's status when not logged]
for my $pair (@pairs) {
    my ($on, $bare) = @$pair;
    my %n = map { $_ => ++$serial } qw(body response h2body h2response);
    my $tp = sub { 'traceparent: 00-' . trace_of($n{$_[0]}) . "-$PARENT-01" };
    for my $server ($on, $bare) {
        walk_away($server->{h1}, "POST /up?case=$n{body} HTTP/1.1\r\n"
            . "Host: localhost\r\nContent-Length: 100000\r\n"
            . $tp->('body') . "\r\n\r\n", 'x' x 1000, 0);
        walk_away($server->{h1}, "GET /slow?case=$n{response} HTTP/1.1\r\n"
            . "Host: localhost\r\n" . $tp->('response') . "\r\n\r\n",
            '', 16384);
        h2($server->{h2},
           { path => "/up?case=$n{h2body}", method => 'POST',
             headers => [ [ traceparent => '00-' . trace_of($n{h2body})
                                          . "-$PARENT-01" ],
                          [ 'content-length' => 100000 ] ],
             body => 'x' x 1000, more_body => 1, reset_after_ms => 300 });
    }
    # httpd's span says 499 for an HTTP/1.x client gone mid-response,
    # whatever it logs (README, "httpd").
    push @gone, map { [ $on, $n{$_}, "$on->{kind}, client gone"
                        . " mid-$_", $on->{kind} eq 'httpd'
                                     && $_ eq 'response' ? 499 : undef ] }
                qw(body response h2body);
}

# ---- no worker restarted; every span flushed at stop; clean logs

for my $pair (@pairs) {
    my ($on, $bare) = @$pair;
    is(join(' ', sort map { $_->{pid} } family($on->{pid})),
       join(' ', @{ $on->{workers} }),
       "$on->{kind}: the same workers and exporter as at the start");
    stop($_->{pid}) for $on, $bare;
    my $log = read_file("$on->{dir}/error.log");
    my @bad = grep { /[[:](alert|crit|emerg)\]|exited on signal
                      |exit\ signal|assert/xi } split /\n/, $log;
    is(join("\n", @bad), '', "$on->{kind}: no alert, crash or assertion in the error log");
}

check_case(@$_) for @checks;

# Each stream its own span, its own ids, the status the server logged;
# no sample of one under another's ids, none under an unselected one's.
{
    my (%by_trace, %span_ids);
    push @{ $by_trace{ $_->{traceId} } }, $_ for spans($recv);
    my ($bad, @wrong) = (0);
    my %spans_of;    # span id => [ trace id, selected ]
    for (@streams) {
        my ($on, $n, $selected, $reset) = @$_;
        my $what = "$on->{kind}, HTTP/2 stream of case $n";
        my @s = @{ $by_trace{ trace_of($n) } // [] };
        my $status = logged($on, $n) // 0;
        my $ok = @s == 1 && ($s[0]{parentSpanId} // '') eq $PARENT
            && !$span_ids{ $s[0]{spanId} }++
            && attr($s[0], 'http.response.status_code') == $status
            && ($s[0]{status}{code} // 0) == ($status >= 500 ? 2 : 0)
            && (attr($s[0], 'splunk.snapshot.profiling') ? 1 : 0)
               == ($selected ? 1 : 0);
        push @wrong, "$what: " . scalar(@s) . " spans, logged $status, "
            . JSON::PP->new->canonical->encode($s[0] // {}) unless $ok;
        $spans_of{ $s[0]{spanId} } = [ $s[0]{traceId}, $selected ] if @s;
    }
    is(scalar @wrong, 0, 'HTTP/2 streams: one span each, its own ids, the '
                         . 'status logged, selected as their baggage said')
        or diag(join "\n", @wrong[0 .. ($#wrong < 4 ? $#wrong : 4)]);

    my (undef, $samples) = $recv->collect;
    my ($under, $leaked, $unselected) = (0, 0, 0);
    for my $x (@$samples) {
        my $of = $spans_of{ $x->{labels}{span_id} // '' } or next;
        $under++;
        $leaked++ if ($x->{labels}{trace_id} // '') ne $of->[0];
        $unselected++ unless $of->[1];
    }
    cmp_ok($under, '>', 0, "HTTP/2 streams: $under samples under their ids");
    is($leaked, 0, 'HTTP/2 streams: every sample under a stream\'s span id '
                   . 'has that stream\'s trace id');
    is($unselected, 0, 'HTTP/2 streams: none under an unselected stream');
}

for (@gone) {
    my ($on, $n, $what, $gone) = @$_;
    # Whether nginx had read the request body or was still reading it when
    # the stream went decides 400 or 499, with the module or without.
    my $logged = logged($on, $n);
    ok(defined $logged, "$what: logged (" . ($logged // 'nothing') . ')');
    my @s = grep { $_->{traceId} eq trace_of($n) } spans($recv);
    is(scalar @s, 1, "$what: one span") or next;
    my $status = $gone && ($logged // 0) < 400 ? $gone : $logged;
    is(attr($s[0], 'http.response.status_code'), $status,
       "$what: status $status");
    is($s[0]{status}{code} // 0, ($status // 0) >= 500 ? 2 : 0,
       "$what: span status");
}
check_samples_in_spans($recv);

done_testing();
