#!/usr/bin/perl
# nginx: requests that proxy_cache, the slice module and mirror answer,
# over HTTP/1.1 and HTTP/2. A MISS, a HIT, an EXPIRED; a STALE whose
# background update (proxy_cache_use_stale updating,
# proxy_cache_background_update on) goes upstream after the client has
# its answer (also on a keep-alive connection, and the request after it
# there); two requests for one key under proxy_cache_lock (one goes
# upstream, the other waits and HITs); a file the slice module asks for
# in 1k ranges, each cached on its own key (a subrequest each); a mirror
# to a slow upstream that is still waiting when the client has its
# answer. Each client request: one entry span, its ids, parent, name and
# status those logged; every request that reaches an upstream for it
# (the background update's and the slices' subrequests too) carries one
# traceparent, the span's, the tracestate received and our baggage (the
# client's selection as sent, else the one made here); a selected request
# has samples under its span when it does CPU work (gzip at level 9), and
# none outside the span's time. The error log has no alert and no worker
# crashed. Real nginx, recording upstreams, the exporter, the OTLP
# receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case upstream_case spans wait_spans h2_requests);

Spanprof::Receiver::skip_unless_ready();

my $PARENT = 'b7ad6b7169203331';
my $VOLUME = 'splunk.trace.snapshot.volume';
my $BIG = 3000000;    # bytes gzip at level 9 takes ~20 ms of CPU for
my $SLICED = 10340;   # 11 slices of 1k, the last one short

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir);
my $slow = Spanprof::Upstream->start(dir => $dir);    # the mirror's
my $at = '127.0.0.1:' . $up->port;
my $h2 = free_port();
my $gzip = 'gzip on; gzip_comp_level 9; gzip_types text/plain; '
         . 'gzip_min_length 0;';

my $port = nginx_conf($dir,
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_baggage|\$status|\$spanprof_snapshot|'
                  '\$upstream_cache_status|\$request_time|\$msec';
    proxy_cache_path $dir/cache levels=1:2 keys_zone=c:1m;
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        proxy_cache c;
        location /cache/ {
            proxy_pass http://$at;
            proxy_cache_valid 200 2s;
            $gzip
        }
        location /stale/ {
            proxy_pass http://$at;
            proxy_cache_valid 200 2s;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
            $gzip
        }
        location /locked/ {
            proxy_pass http://$at;
            proxy_cache_valid 200 1m;
            proxy_cache_lock on;
            $gzip
        }
        location /sliced/ {
            slice 1k;
            proxy_pass http://$at;
            proxy_cache_key \$uri\$slice_range;
            proxy_set_header Range \$slice_range;
            proxy_cache_valid 200 206 1m;
        }
        location /mirrored/ {
            proxy_cache off;
            mirror /mirror;
            proxy_pass http://$at;
            $gzip
        }
        location = /mirror {
            internal;
            proxy_cache off;
            proxy_pass http://127.0.0.1:${\ $slow->port}/slow2;
        }
SERVER
);

my $nginx = nginx_start($dir, $port, $recv->snapshot_env);
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my ($serial, $case) = (0, 2000);

# A request of ours: its case, trace, whether the client selected it, and
# once answered its status and when its answer was whole.
sub new_request {
    my ($path, %o) = @_;
    return { path => $path, case => ++$case, selected => $o{selected} // 1,
             trace => sprintf('%032x', 0xcac4e000 + ++$serial) };
}

sub headers_of {
    my ($q) = @_;
    return ([ 'x-case', $q->{case} ],
            [ traceparent => "00-$q->{trace}-$PARENT-01" ],
            [ tracestate => 'ts=1' ],
            [ baggage => 'k=v' . ($q->{selected} ? ",$VOLUME=highest" : '') ],
            [ 'accept-encoding' => 'gzip' ]);
}

# HTTP/1.1: sends the request (over the connection $s, else a new one),
# returns the socket.
sub send_h1 {
    my ($q, $s) = @_;
    $s //= IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                 Timeout => 10) or die "connect: $!";
    $q->{sent} = time;
    print $s "GET $q->{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        . join('', map { "$_->[0]: $_->[1]\r\n" } headers_of($q)) . "\r\n";
    return $s;
}

# Reads the answer to $q on $s until it is whole (its Content-Length, or
# the last chunk): nginx keeps the connection while a background
# subrequest runs, though the client has its answer. Closes the
# connection unless $keep.
sub read_h1 {
    my ($q, $s, $keep) = @_;
    my $buf = '';
    my $end = time + 15;
    while (time < $end) {
        if ($buf =~ /\A(HTTP\/1\.1 (\d+).*?\r\n\r\n)/s) {
            my ($head, $code) = ($1, $2);
            my $body = substr $buf, length $head;
            if ($head =~ /^Content-Length:\s*(\d+)/mi ? length $body >= $1
                : $body =~ /(?:\A|\r\n)0\r\n\r\n\z/)
            {
                $q->{code} = $code;
                last;
            }
        }
        my $n = sysread $s, $buf, 65536, length $buf;
        last unless $n;
    }
    $q->{answered} = time;
    $q->{code} //= 0;
    close $s unless $keep;
    return $q;
}

sub h1 { my ($q) = @_; return read_h1($q, send_h1($q)) }

# HTTP/2: the requests as concurrent streams of one connection, in order.
sub h2 {
    my (@q) = @_;
    my $sent = time;
    my @r = h2_requests($h2, "$dir/plan.json", map {
        { path => $_->{path}, headers => [ headers_of($_) ] } } @q);
    for my $i (0 .. $#q) {
        @{ $q[$i] }{qw(sent answered code)} =
            ($sent, time, $r[$i] ? $r[$i]{status} : 0);
    }
    return @q;
}

sub log_line {
    log_case("$dir/sp.log", $_[0], qw(trace_id span_id baggage status
                                         snapshot cache request_time msec));
}

sub attr { attribute($_[0]{attributes}, $_[1]) // '' }

my (@checked, %figures);

# What became of request $q: answered $o{status} (200), logged with the
# cache status $o{cache}; one span named GET $o{route}; the requests the
# upstream got for it were to @{ $o{uris} } (none when not given), with
# Range headers @{ $o{ranges} } when given, and the mirror's upstream's
# to @{ $o{mirrored} }; each with our headers.
sub check {
    my ($what, $q, %o) = @_;
    my $status = $o{status} // 200;
    is($q->{code}, $status, "$what: answered $status");
    my $l = log_line($q->{case});
    ok($l, "$what: logged") or return;
    is($l->{status}, $status, "$what: logged $status");
    is($l->{cache}, $o{cache}, "$what: cache status $o{cache}");
    is($l->{trace_id}, $q->{trace}, "$what: continues the client's trace");
    if ($q->{selected}) {
        is($l->{baggage}, "k=v,$VOLUME=highest",
           "$what: the client's selection as sent");
        is($l->{snapshot}, 1, "$what: selected");
    } else {
        like($l->{baggage}, qr/^k=v,$VOLUME=(?:highest|off)$/,
             "$what: the selection made here added");
        is($l->{snapshot}, $l->{baggage} =~ /highest$/ ? 1 : 0,
           "$what: selected as the baggage says");
    }

    my ($s) = wait_spans($recv, sub { $_[0]{traceId} eq $q->{trace} });
    ok($s, "$what: the span arrives") or return;
    is($s->{spanId}, $l->{span_id}, "$what: the span logged");
    is($s->{parentSpanId}, $PARENT, "$what: its parent the client's");
    is($s->{name}, "GET $o{route}", "$what: named GET $o{route}");
    is(attr($s, 'http.response.status_code'), $status,
       "$what: status $status");
    is(attr($s, 'url.path'), $q->{path}, "$what: url.path as sent");

    # The span ends after the last of its subrequests: all that went
    # upstream for it is recorded by now (the upstream writes each
    # request down before it answers).
    my @r = grep { ($_->{headers}{'x-case'}[0] // '') eq $q->{case} }
            $up->requests;
    my @m = grep { ($_->{headers}{'x-case'}[0] // '') eq $q->{case} }
            $slow->requests;
    is_deeply([ map { $_->{uri} } @r ], $o{uris} // [],
              "$what: the upstream requests");
    is_deeply([ map { $_->{uri} } @m ], $o{mirrored} // [],
              "$what: the mirror's upstream requests");
    is_deeply([ map { $_->{headers}{range}[0] } @r ], $o{ranges},
              "$what: the slices asked for") if $o{ranges};
    push @r, @m;
    my $bad = grep {
        my $h = $_->{headers};
        join(',', @{ $h->{traceparent} // [] })
                ne "00-$q->{trace}-$l->{span_id}-01"
            || join(',', @{ $h->{tracestate} // [] }) ne 'ts=1'
            || join(',', @{ $h->{baggage} // [] }) ne $l->{baggage}
    } @r;
    is($bad, 0, "$what: each one traceparent, the span its parent, the "
                . 'tracestate received, our baggage');

    # how the span's end, the access log's time and the client's answer
    # stand; said, not asserted
    my $start = $s->{startTimeUnixNano} / 1e9;
    my $end = $s->{endTimeUnixNano} / 1e9;
    $figures{$what} = sprintf 'span %.3f s, $request_time %s, logged %+.3f '
        . 's after the span\'s end, the client had its answer %.3f s after '
        . 'it sent the request', $end - $start, $l->{request_time},
        $l->{msec} - $end, $q->{answered} - $q->{sent};
    push @checked, [ $what, $q, $s, $o{cpu} ];
}

# ---- MISS, HIT, EXPIRED

for my $v ([ 'HTTP/1.1', 0 ], [ 'HTTP/2', 1 ]) {
    my ($proto, $is_h2) = @$v;
    my $send = $is_h2 ? sub { (h2(@_))[0] } : \&h1;
    for my $selected (1, 0) {
        my $what = "$proto" . ($selected ? '' : ', unselected');
        my $path = "/cache/size$BIG/$is_h2$selected";
        check("$what: MISS", $send->(new_request($path,
                                                 selected => $selected)),
              cache => 'MISS', route => '/cache/', uris => [ $path ],
              cpu => $selected);
        check("$what: HIT", $send->(new_request($path,
                                                selected => $selected)),
              cache => 'HIT', route => '/cache/', cpu => $selected);
        sleep 3.1;    # proxy_cache_valid 2s, in whole seconds
        check("$what: EXPIRED", $send->(new_request($path,
                                                    selected => $selected)),
              cache => 'EXPIRED', route => '/cache/', uris => [ $path ],
              cpu => $selected);
    }
}

# ---- STALE, updated in the background: the update (a subrequest, slow
# upstream) is the client's request's, after its answer

for my $v ([ 'HTTP/1.1', 0 ], [ 'HTTP/2', 1 ]) {
    my ($proto, $is_h2) = @$v;
    my $send = $is_h2 ? sub { (h2(@_))[0] } : \&h1;
    my $path = "/stale/slow1/size$BIG/$is_h2";
    check("$proto: MISS, to be stale", $send->(new_request($path)),
          cache => 'MISS', route => '/stale/', uris => [ $path ]);
    sleep 3.1;
    check("$proto: STALE, background update", $send->(new_request($path)),
          cache => 'STALE', route => '/stale/', uris => [ $path ],
          cpu => 1);
    check("$proto: HIT after the update", $send->(new_request($path)),
          cache => 'HIT', route => '/stale/', cpu => 1);
}

# A STALE answer on a keep-alive connection, and the client's next
# request on it at once: nginx reads that one once the update is done
{
    my $path = "/stale/slow1/size$BIG/keepalive";
    check('keep-alive: MISS, to be stale', h1(new_request($path)),
          cache => 'MISS', route => '/stale/', uris => [ $path ]);
    sleep 3.1;
    my ($a, $b) = (new_request($path), new_request($path));
    my $s = send_h1($a);
    read_h1($a, $s, 1);
    read_h1($b, send_h1($b, $s));
    check('keep-alive: STALE, background update', $a, cache => 'STALE',
          route => '/stale/', uris => [ $path ], cpu => 1);
    check('keep-alive: the next request, HIT', $b, cache => 'HIT',
          route => '/stale/', cpu => 1);
}

# ---- proxy_cache_lock: two requests for one key, the second while the
# first waits for the (slow) upstream

{
    my $path = "/locked/slow1/size$BIG/1";
    my ($a, $b) = (new_request($path), new_request($path));
    my $sa = send_h1($a);
    ok(upstream_case($up, $a->{case}), 'HTTP/1.1 lock: the first upstream');
    my $sb = send_h1($b);
    read_h1($a, $sa);
    read_h1($b, $sb);
    check('HTTP/1.1 lock: the first', $a, cache => 'MISS',
          route => '/locked/', uris => [ $path ]);
    check('HTTP/1.1 lock: the second, waiting', $b, cache => 'HIT',
          route => '/locked/', cpu => 1);

    # two streams of one connection: nginx reads the first one's first
    $path = "/locked/slow1/size$BIG/2";
    ($a, $b) = h2(new_request($path), new_request($path));
    check('HTTP/2 lock: the first', $a, cache => 'MISS',
          route => '/locked/', uris => [ $path ]);
    check('HTTP/2 lock: the second, waiting', $b, cache => 'HIT',
          route => '/locked/', cpu => 1);
}

# ---- slice: the first range is the request's own, the others
# subrequests; then all from the cache

for my $v ([ 'HTTP/1.1', 0 ], [ 'HTTP/2', 1 ]) {
    my ($proto, $is_h2) = @$v;
    my $send = $is_h2 ? sub { (h2(@_))[0] } : \&h1;
    my $path = "/sliced/size$SLICED/$is_h2";
    my @ranges = map { sprintf 'bytes=%d-%d', $_ * 1024, $_ * 1024 + 1023 }
                 0 .. int(($SLICED - 1) / 1024);
    check("$proto: slices, MISS", $send->(new_request($path)),
          cache => 'MISS', route => '/sliced/',
          uris => [ ($path) x @ranges ], ranges => \@ranges);
    check("$proto: slices, HIT", $send->(new_request($path)),
          cache => 'HIT', route => '/sliced/');
}

# ---- mirror to a slow upstream: the client has its answer before the
# mirror's

for my $v ([ 'HTTP/1.1', 0 ], [ 'HTTP/2', 1 ]) {
    my ($proto, $is_h2) = @$v;
    my $send = $is_h2 ? sub { (h2(@_))[0] } : \&h1;
    my $path = "/mirrored/size$BIG/$is_h2";
    check("$proto: mirror", $send->(new_request($path)), cache => '-',
          route => '/mirrored/', uris => [ $path ],
          mirrored => [ '/slow2' ], cpu => 1);
}

# ---- one span each; samples of a selected request under its span, only
# while it was open

sleep 1;    # the last profiles exported
my (undef, $samples) = $recv->collect;
my %of;
push @{ $of{ $_->{labels}{span_id} // '' } }, $_ for @$samples;
for my $c (@checked) {
    my ($what, $q, $s, $cpu) = @$c;
    is(scalar(grep { $_->{traceId} eq $q->{trace} } spans($recv)), 1,
       "$what: one span");
    my ($in, $out) = (0, 0);
    for my $x (@{ $of{ $s->{spanId} } // [] }) {
        my $ms = $x->{labels}{'source.event.time'} // -1;
        ($x->{labels}{trace_id} // '') eq $q->{trace}
            && $ms >= int($s->{startTimeUnixNano} / 1e6) - 1
            && $ms <= int($s->{endTimeUnixNano} / 1e6) + 1 ? $in++ : $out++;
    }
    is($out, 0, "$what: no sample of its ids outside its span ($in in)");
    cmp_ok($in, '>', 0, "$what: samples under its span") if $cpu;
}

stop($nginx);
my $log = read_file("$dir/error.log");
unlike($log, qr/\[(?:alert|crit|emerg)\]/, 'no alert in the error log');
unlike($log, qr/\[error\].*spanprof/, 'no error of ours in the error log');
unlike($log, qr/exited on signal/, 'no worker crashed');
diag("$_: $figures{$_}")
    for grep { /STALE|mirror|lock|next/ } sort keys %figures;

done_testing();
