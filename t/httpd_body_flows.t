#!/usr/bin/perl
# httpd: requests with a body or a life of their own, through mod_proxy and
# beside it, each with a trace of its own (traceparent, tracestate,
# baggage). Real apache2 (event, then prefork), a recording HTTP backend
# (t/bin/upstream.pl), an h2c one (t/bin/grpc_upstream.js), the OTLP
# receiver:
#   - WebSocket: "ProxyPass /ws ws://..." (mod_proxy_wstunnel, which hands
#     it to mod_proxy_http), "ProxyPass /ws2 http://... upgrade=websocket",
#     and mod_proxy_wstunnel's own tunnel (ProxyWebsocketFallbackToProxyHttp
#     Off, whose access log says 200: httpd never sees the backend's 101);
#     a selected tunnel held open is one span that ends when the client
#     closes it, sampled meanwhile (the thread waits in the tunnel's poll);
#     a tunnel the client closes while the backend still sends (its
#     writes fail) is 101 as logged: it was 499, as for a client that
#     gave up on a response, though the 101 was whole;
#   - mod_proxy_http2 (h2c://), ProxyPassMatch, a balancer whose first
#     member is down (failover) in a <Location>;
#   - a 3 MB POST proxied with Content-Length and chunked, each with and
#     without "Expect: 100-continue": the backend gets it intact;
#     mod_reqtimeout cutting a body that stops (408), before mod_proxy
#     connects (it buffers the first 16 KiB) and after it began streaming
#     it (the backend got the headers); LimitRequestBody exceeded (413) on
#     a mod_dav PUT, with Content-Length, with Expect and chunked;
#   - a mod_dav PUT of 3 MB, PROPFIND, a mod_autoindex listing;
#   - MaxKeepAliveRequests 3 and 7 requests of those kinds on one client's
#     connections: httpd closes one after its fourth answer (3 requests
#     kept alive after the first), so two connections (4, 3).
# Each is one span: its ids those of the access log, the client's parent,
# the status logged (%>s), its name and http.route, url.path; each
# backend request has one traceparent whose parent is that span, the
# tracestate and the baggage as received. Every sample naming a span was
# taken while it was open; the error log has no spanprof warning or error
# and no crash.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::MD5 qw(md5_hex);
use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file free_port httpd_conf
                        httpd_start stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case upstream_case spans wait_spans);
use Spanprof::HeaderMatrix qw(check_samples_in_spans $IN_PARENT $VOLUME);

Spanprof::Receiver::skip_unless_ready(curl => 1, apache2 => 1,
    apache_modules => [qw(proxy proxy_http proxy_wstunnel proxy_http2
                          proxy_balancer lbmethod_byrequests slotmem_shm
                          reqtimeout dav dav_fs autoindex alias)]);

my $INTERVAL = 5;        # ms, the snapshot sampling's
my $HOLD = 1;            # s a selected tunnel stays open
my $BIG = 3_000_000;     # bytes of a big body
my $OFF = "k=v,$VOLUME=off";
my $HIGHEST = "k=v,$VOLUME=highest";

my $recv = Spanprof::Receiver->start(dir => new_dir());
my $up = Spanprof::Upstream->start(dir => new_dir());
my $h2 = Spanprof::Upstream->start(dir => new_dir(), proto => 'grpc');
my $back = '127.0.0.1:' . $up->port;

# The same bytes each run, none of them a line end more than by chance.
srand 7;
my $big = join '', map { chr int rand 256 } 1 .. $BIG;
my $big_md5 = md5_hex($big);
my $tmp = new_dir();
write_file("$tmp/big.bin", $big);

my ($n, $dir, $log) = (0);

# A trace of its own for each request: (case, trace id).
sub new_case {
    my ($mpm) = @_;
    $n++;
    return ("b$n", sprintf('b0d1%04x%024x', $mpm eq 'event' ? 1 : 2, $n));
}

sub trace_headers {
    my ($trace, $baggage) = @_;
    return ([ traceparent => "00-$trace-$IN_PARENT-01" ],
            [ tracestate => 'vendor=opaque' ],
            [ baggage => $baggage // $OFF ]);
}

# curl with the case's headers and @args; the HTTP code.
sub curl {
    my ($case, $trace, $url, @args) = @_;
    my @h = map { ('-H', "$_->[0]: $_->[1]") }
            [ 'x-case' => $case ], trace_headers($trace);
    open my $fh, '-|', 'curl', '-s', '-m', 20, '-o', '/dev/null',
        '-w', '%{http_code}', @h, @args, $url or die "curl: $!";
    local $/;
    my $code = <$fh> // '';
    close $fh;
    return $code;
}

sub raw_head {
    my ($method, $path, $case, $trace, $baggage, @more) = @_;
    return "$method $path HTTP/1.1\r\nHost: localhost\r\nx-case: $case\r\n"
         . join('', map { "$_->[0]: $_->[1]\r\n" }
                    trace_headers($trace, $baggage), @more)
         . "\r\n";
}

# What became of a case: one span, as logged, and what its backend got.
# %c: case, trace, what, code (got), status, name, route (undef: none),
# method, path, up (the backend, $up by default), backend (requests it
# got, 0 by default), baggage (sent), body (md5 the backend got),
# cut (the backend's body was cut).
sub check {
    my (%c) = @_;
    my $what = $c{what};
    is($c{code}, $c{status}, "$what: answered $c{status}") if defined $c{code};
    my $l = log_case($log, $c{case}, qw(trace_id span_id status));
    my @span = wait_spans($recv, sub { $_[0]{traceId} eq $c{trace} });
    is(scalar @span, 1, "$what: one span") or return;
    my $span = $span[0];
    my $a = sub { attribute($span->{attributes}, $_[0]) };
    is($l && "$l->{trace_id} $l->{span_id}",
       "$span->{traceId} $span->{spanId}", "$what: the access log's ids");
    is($span->{parentSpanId}, $IN_PARENT, "$what: the client's parent");
    is($l && $l->{status}, $c{status}, "$what: logged $c{status}");
    is($a->('http.response.status_code'), $c{status},
       "$what: the span's status is the one logged");
    is($span->{name}, $c{name}, "$what: named $c{name}");
    is($a->('http.route'), $c{route},
       "$what: http.route " . ($c{route} // 'none'));
    is($a->('http.request.method'), $c{method} // 'GET', "$what: method");
    is($a->('url.path'), $c{path}, "$what: url.path");
    my $want = $c{backend} // 0;
    my @got = $want ? upstream_case($c{up} // $up, $c{case}, $want) : ();
    is(scalar @got, $want, "$what: $want backend request(s)");
    for my $i (0 .. $#got) {
        my $r = $got[$i];
        is_deeply([ @{ $r->{headers} }{qw(traceparent tracestate baggage)} ],
                  [ [ "00-$c{trace}-$span->{spanId}-01" ],
                    [ 'vendor=opaque' ], [ $c{baggage} // $OFF ] ],
                  "$what: backend request $i: one traceparent, parent the "
                  . 'span; the tracestate and baggage');
        is($r->{body_md5}, $c{body}, "$what: backend request $i: the body "
           . 'intact') if $c{body};
        is($r->{body_cut}, 1, "$what: backend request $i: the body cut")
            if $c{cut};
    }
    return $span;
}

# A WebSocket handshake through $port: (socket, status line) once the
# answer's head came.
sub ws_open {
    my ($port, $path, $case, $trace, $baggage) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or die "connect: $!";
    # Small: the client that stops reading makes the server's writes fail.
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
    syswrite($s, raw_head('GET', $path, $case, $trace, $baggage,
                          [ Upgrade => 'websocket' ],
                          [ Connection => 'Upgrade' ]));
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        sysread($s, $head, 4096, length $head) or last;
    }
    return ($s, $head =~ /^(HTTP\/1\.1 \d+)/ ? $1 : $head);
}

# Echoes through an open tunnel: what came back of five pings.
sub ws_echo {
    my ($s) = @_;
    my $echo = '';
    for my $i (1 .. 5) {
        syswrite($s, "ping $i;");
        while ($echo !~ /ping $i;/) {
            sysread($s, $echo, 4096, length $echo) or last;
        }
    }
    return $echo;
}

# A POST whose body stops after $first bytes; the status line of the
# answer.
sub stalled_post {
    my ($port, $path, $case, $trace, $chunked, $first) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or die "connect: $!";
    my $data = 'y' x $first;
    syswrite($s, raw_head('POST', $path, $case, $trace, undef,
                          $chunked ? [ 'Transfer-Encoding' => 'chunked' ]
                                   : [ 'Content-Length' => 1_000_000 ])
                 . ($chunked ? sprintf("%x\r\n%s\r\n", $first, $data)
                             : $data));
    my $answer = '';
    while (sysread($s, $answer, 4096, length $answer)) {}
    return $answer =~ /^HTTP\/1\.1 (\d+)/ ? $1 : 0;
}

# One answer read from $s, its bytes that came before in $$buf: (code,
# whether the server closes the connection after it).
sub read_answer {
    my ($s, $buf) = @_;
    # Until $$buf holds $re; its first group.
    my $take = sub {
        my ($re) = @_;
        while ($$buf !~ $re) {
            sysread($s, $$buf, 65536, length $$buf) or return undef;
        }
        $$buf =~ s/$re//;
        return $1;
    };
    my $head = $take->(qr/\A(.*?\r\n)\r\n/s) // return (0, 1);
    my ($code) = $head =~ /^HTTP\/1\.1 (\d+)/;
    my $close = $head =~ /^Connection:\s*close/mi ? 1 : 0;
    if ($head =~ /^Transfer-Encoding:\s*chunked/mi) {
        while (defined(my $size = $take->(qr/\A([0-9a-fA-F]+)[^\r]*\r\n/))) {
            $size = hex $size;
            $take->(qr/\A()(?s:.){$size}\r\n/) // return ($code, 1);
            last unless $size;
        }
    } else {
        my $len = $head =~ /^Content-Length:\s*(\d+)/mi ? $1 : 0;
        $take->(qr/\A()(?s:.){$len}/) // return ($code, 1);
    }
    return ($code, $close);
}

sub run_mpm {
    my ($mpm) = @_;
    my $t0 = time;
    $dir = new_dir();
    $log = "$dir/sp.log";
    my $dead = '127.0.0.1:' . free_port();
    my ($wsport, $slow) = (free_port(), free_port());
    for (qw(dav lock)) {
        mkdir "$dir/$_";
        chmod 0777, "$dir/$_";
    }
    my $port = httpd_conf($dir, mpm => $mpm,
        modules => [qw(proxy proxy_http proxy_wstunnel proxy_http2
                       proxy_balancer lbmethod_byrequests slotmem_shm
                       reqtimeout dav dav_fs autoindex alias)],
        extra => <<"EXTRA");
LogFormat "%{x-case}i|%{SPANPROF_TRACE_ID}e|%{SPANPROF_SPAN_ID}e|%>s" sp
CustomLog $log sp
MaxKeepAliveRequests 3
KeepAliveTimeout 10
ProxyPass /ws ws://$back/ws
ProxyPass /ws2 http://$back/ws2 upgrade=websocket
ProxyPass /h2 h2c://127.0.0.1:${\ $h2->port}/h2
ProxyPassMatch ^/pm/([a-z0-9]+)\$ http://$back/pm/\$1
ProxyPass /post http://$back/post
<Proxy balancer://pair>
    BalancerMember http://$dead lbset=0
    BalancerMember http://$back lbset=1
</Proxy>
<Location /lb>
    ProxyPass balancer://pair/lb
</Location>
DavLockDB $dir/lock/db
Alias /dav $dir/dav
<Directory $dir/dav>
    Require all granted
</Directory>
<Location /dav>
    Dav On
</Location>
<Location /dav/small>
    LimitRequestBody 1000
</Location>
<Directory $dir/htdocs/list>
    Options +Indexes
</Directory>
Listen 127.0.0.1:$wsport
<VirtualHost 127.0.0.1:$wsport>
    ProxyWebsocketFallbackToProxyHttp Off
    ProxyPass /ws ws://$back/ws
</VirtualHost>
Listen 127.0.0.1:$slow
<VirtualHost 127.0.0.1:$slow>
    RequestReadTimeout header=10 body=1
    ProxyPass /post http://$back/post
</VirtualHost>
EXTRA
    mkdir "$dir/dav/small";
    chmod 0777, "$dir/dav/small";
    mkdir "$dir/htdocs/list";
    chmod 0755, "$dir/htdocs/list";
    for (qw(a b c)) {
        write_file("$dir/htdocs/list/$_.txt", "$_\n");
        chmod 0644, "$dir/htdocs/list/$_.txt";
    }
    my $httpd = httpd_start($dir, $port,
        $recv->snapshot_env(interval => $INTERVAL));
    ok($httpd, "$mpm: httpd starts")
        or return diag(read_file("$dir/error.log"));
    my $url = "http://127.0.0.1:$port";

    # ---- WebSocket
    for my $w ([ 'ws://', $port, '/ws', 101 ],
               [ 'upgrade=websocket', $port, '/ws2', 101 ],
               [ "mod_proxy_wstunnel's own", $wsport, '/ws', 200 ]) {
        my ($kind, $p, $prefix, $status) = @$w;
        my $what = "$mpm: WebSocket $kind, selected";
        my ($case, $trace) = new_case($mpm);
        my $path = "$prefix/chat";
        my ($s, $line) = ws_open($p, $path, $case, $trace, $HIGHEST);
        is($line, 'HTTP/1.1 101', "$what: switched");
        like(ws_echo($s), qr/ping 1;.*ping 5;/s, "$what: the tunnel echoes");
        sleep $HOLD;
        my $closed = time;
        close $s;
        my $span = check(case => $case, trace => $trace, what => $what,
                         status => $status, name => 'GET proxy-server',
                         route => 'proxy-server', path => $path,
                         backend => 1, baggage => $HIGHEST);
        next unless $span;
        cmp_ok($span->{endTimeUnixNano} / 1e9, '>=', $closed - 0.1,
               "$what: the span ends as the tunnel closes");
        is(attribute($span->{attributes}, 'splunk.snapshot.profiling'), 1,
           "$what: selected");
        sleep 0.5;      # the samples' export interval
        my (undef, $samples) = $recv->collect;
        my $got = grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
                  @$samples;
        cmp_ok($got, '>', 0, "$what: sampled while open ($got samples "
               . "in $HOLD s)");

        # The backend keeps sending; the client goes away reading none.
        $what = "$mpm: WebSocket $kind, closed by the client as the "
                . 'backend sends';
        ($case, $trace) = new_case($mpm);
        $path = "$prefix/ticks";
        ($s, $line) = ws_open($p, $path, $case, $trace);
        is($line, 'HTTP/1.1 101', "$what: switched");
        my $tick = '';
        while ($tick !~ /tick 2\n/) {
            sysread($s, $tick, 4096, length $tick) or last;
        }
        like($tick, qr/tick \d+\n/, "$what: ticks come");
        close $s;
        check(case => $case, trace => $trace, what => $what,
              status => $status, name => 'GET proxy-server',
              route => 'proxy-server', path => $path, backend => 1);
    }

    # ---- mod_proxy_http2, ProxyPassMatch, balancer failover
    for my $c ([ 'h2c:// (mod_proxy_http2)', '/h2/x', 'GET proxy-server',
                 'proxy-server', $h2 ],
               [ 'ProxyPassMatch', '/pm/abc1', 'GET proxy-server',
                 'proxy-server', $up ],
               [ 'a balancer whose first member is down', '/lb/x',
                 'GET /lb', '/lb', $up ]) {
        my ($kind, $path, $name, $route, $backend) = @$c;
        my ($case, $trace) = new_case($mpm);
        check(case => $case, trace => $trace, what => "$mpm: $kind",
              code => curl($case, $trace, "$url$path"), status => 200,
              name => $name, route => $route, path => $path, up => $backend,
              backend => 1);
    }

    # ---- request bodies
    for my $b ([ 'Content-Length', 'Expect:' ],
               [ 'chunked', 'Expect:', 'Transfer-Encoding: chunked' ],
               [ 'Content-Length, Expect: 100-continue',
                 'Expect: 100-continue' ],
               [ 'chunked, Expect: 100-continue', 'Expect: 100-continue',
                 'Transfer-Encoding: chunked' ]) {
        my ($kind, @h) = @$b;
        my ($case, $trace) = new_case($mpm);
        my $path = "/post/big$n";
        check(case => $case, trace => $trace,
              what => "$mpm: a 3 MB POST proxied, $kind",
              code => curl($case, $trace, "$url$path",
                           (map { ('-H', $_) } @h),
                           '--data-binary', "\@$tmp/big.bin"),
              status => 200, name => 'POST proxy-server',
              route => 'proxy-server', method => 'POST', path => $path,
              backend => 1, body => $big_md5);
    }
    for my $s ([ 'before mod_proxy connects, Content-Length', 0, 100, 0 ],
               [ 'before mod_proxy connects, chunked', 1, 100, 0 ],
               [ 'as mod_proxy streams it, Content-Length', 0, 100_000, 1 ],
               [ 'as mod_proxy streams it, chunked', 1, 100_000, 1 ]) {
        my ($kind, $chunked, $first, $backend) = @$s;
        my ($case, $trace) = new_case($mpm);
        my $path = "/post/stalled$n";
        check(case => $case, trace => $trace,
              what => "$mpm: mod_reqtimeout cuts a body $kind",
              code => stalled_post($slow, $path, $case, $trace, $chunked,
                                   $first),
              status => 408, name => 'POST proxy-server',
              route => 'proxy-server', method => 'POST', path => $path,
              backend => $backend, cut => $backend);
    }
    write_file("$tmp/small.bin", 'z' x 5000);
    for my $l ([ 'Content-Length', 'Expect:' ],
               [ 'Content-Length, Expect: 100-continue',
                 'Expect: 100-continue' ],
               [ 'chunked', 'Expect:', 'Transfer-Encoding: chunked' ]) {
        my ($kind, @h) = @$l;
        my ($case, $trace) = new_case($mpm);
        my $path = "/dav/small/f$n.bin";
        check(case => $case, trace => $trace,
              what => "$mpm: a mod_dav PUT past LimitRequestBody, $kind",
              code => curl($case, $trace, "$url$path",
                           (map { ('-H', $_) } @h), '-T', "$tmp/small.bin"),
              status => 413, name => 'PUT /dav/small',
              route => '/dav/small', method => 'PUT', path => $path);
    }

    # ---- mod_dav, mod_autoindex
    {
        my ($case, $trace) = new_case($mpm);
        check(case => $case, trace => $trace, what => "$mpm: a mod_dav PUT",
              code => curl($case, $trace, "$url/dav/big.bin",
                           '-T', "$tmp/big.bin"),
              status => 201, name => 'PUT /dav', route => '/dav',
              method => 'PUT', path => '/dav/big.bin');
        is(md5_hex(read_file("$dir/dav/big.bin")), $big_md5,
           "$mpm: a mod_dav PUT: the file intact");
        ($case, $trace) = new_case($mpm);
        check(case => $case, trace => $trace,
              what => "$mpm: a mod_dav PROPFIND",
              code => curl($case, $trace, "$url/dav/", '-X', 'PROPFIND',
                           '-H', 'Depth: 1'),
              status => 207, name => 'HTTP /dav', route => '/dav',
              method => '_OTHER', path => '/dav/');
        ($case, $trace) = new_case($mpm);
        check(case => $case, trace => $trace,
              what => "$mpm: a mod_autoindex listing",
              code => curl($case, $trace, "$url/list/"), status => 200,
              name => 'GET', route => undef, path => '/list/');
    }

    # ---- MaxKeepAliveRequests 3: 7 requests, 2 connections
    {
        my @ka = (
            [ 'GET', '/pm/ka', 200, 'GET proxy-server', 'proxy-server', 1 ],
            [ 'POST', '/post/ka', 200, 'POST proxy-server', 'proxy-server',
              1, 'p' x 5000 ],
            [ 'GET', '/index.html', 200, 'GET', undef, 0 ],
            [ 'GET', '/missing', 404, 'GET', undef, 0 ],
            [ 'PUT', '/dav/ka.txt', 201, 'PUT /dav', '/dav', 0, 'q' x 5000 ],
            [ 'GET', '/list/', 200, 'GET', undef, 0 ],
            [ 'GET', '/h2/ka', 200, 'GET proxy-server', 'proxy-server', 1 ],
        );
        my ($s, $buf, $conns, @codes, @cases) = (undef, '', 0);
        for my $k (@ka) {
            my ($method, $path, undef, undef, undef, undef, $body) = @$k;
            my ($case, $trace) = new_case($mpm);
            push @cases, [ $case, $trace ];
            unless ($s) {
                $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                           Timeout => 10) or die "$!";
                ($buf, $conns) = ('', $conns + 1);
            }
            my @len = defined $body
                      ? ([ 'Content-Length' => length $body ]) : ();
            syswrite($s, raw_head($method, $path, $case, $trace, undef,
                                  @len) . ($body // ''));
            my ($code, $close) = read_answer($s, \$buf);
            push @codes, $code;
            if ($close) {
                close $s;
                undef $s;
            }
        }
        close $s if $s;
        is(join(' ', @codes), join(' ', map { $_->[2] } @ka),
           "$mpm: keep-alive: 7 answers");
        is($conns, 2, "$mpm: keep-alive: over 2 connections (4, 3)");
        my %ids;
        for my $i (0 .. $#ka) {
            my ($method, $path, $status, $name, $route, $backend) =
                @{ $ka[$i] };
            my $span = check(case => $cases[$i][0], trace => $cases[$i][1],
                what => "$mpm: keep-alive request " . ($i + 1),
                status => $status, name => $name, route => $route,
                method => $method, path => $path, backend => $backend,
                up => $path =~ /^\/h2/ ? $h2 : $up);
            $ids{ $span->{spanId} } = 1 if $span;
        }
        is(scalar keys %ids, 7, "$mpm: keep-alive: 7 distinct spans");
    }

    stop($httpd);
    my @bad = grep { /\[spanprof:(?:warn|error|crit|alert|emerg)\]
                      |spanprof-exporter:.*(?:warn|error)
                      |\[(?:\w+:)?(?:alert|crit|emerg)\]|exit\ signal/x }
              split /\n/, read_file("$dir/error.log");
    is(join("\n", @bad), '', "$mpm: no spanprof warning or error, no crash, "
       . 'in the error log');
    note(sprintf '%s: %.1f s', $mpm, time - $t0);
}

run_mpm($_) for qw(event prefork);
check_samples_in_spans($recv);

done_testing();
