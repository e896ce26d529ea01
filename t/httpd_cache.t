#!/usr/bin/perl
# httpd: mod_cache in front of mod_proxy. With CacheQuickHandler On (the
# default) a cached response is served by mod_cache's quick handler,
# after post_read_request and before httpd maps the request: no
# translate_name, no <Location> merged, no fixups. Real apache2, event
# and prefork, CacheQuickHandler On and Off, mod_cache_disk and
# mod_cache_socache (shmcb) in turn, a recording HTTP backend
# (t/bin/upstream.pl, "/cacheN": cacheable for N s, 304 to its
# If-None-Match) and the OTLP receiver. Every request has a trace of its
# own (traceparent, tracestate, baggage):
#   - a miss (one backend request), a hit (none), a stale entry
#     revalidated (a conditional request, 304); CacheLock with two
#     requests at once for a stale entry (one revalidates, the other is
#     served stale from the cache) and for a missing one (both go to the
#     backend);
#   - each is exactly one exported span, its ids the access log's
#     %{SPANPROF_TRACE_ID}e / SPAN_ID / TRACEPARENT, its parent the
#     client's, named after its <Location>, hit or miss; each backend
#     request has one traceparent, whose parent is that span, the
#     tracestate received and the baggage of SPEC 3;
#   - a <Location> with "Spanprof Off" exports no span, hit or miss, and
#     logs no ids; a <Location> with "Spanprof On" in a virtual host that
#     is off exports both;
#   - a selected hit that lasts (a slow client) is sampled, and every
#     sample naming a span was taken while it was open.
# Before, a hit served by the quick handler kept its server's defaults:
# its span was named "GET" without http.route (its miss "GET /c"), a hit
# in a <Location> with "Spanprof Off" was exported with the ids in the
# access log, and one in a <Location> that alone is on was not.
# A response header the backend made of the request's traceparent
# ("/echo") is cached and replayed with every hit: the backend's doing;
# the hit's own ids stay its own.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Socket qw(PF_INET SOCK_STREAM SOL_SOCKET SO_RCVBUF inet_aton
              pack_sockaddr_in);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port httpd_conf httpd_start
                        stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case spans wait_spans);
use Spanprof::HeaderMatrix qw(selected_by_id check_samples_in_spans
                               $IN_PARENT $VOLUME);

Spanprof::Receiver::skip_unless_ready(curl => 1, apache2 => 1,
    apache_modules => [qw(cache cache_disk cache_socache socache_shmcb
                          proxy proxy_http)]);

my $PROBABILITY = 0.1;
my $INTERVAL = 1;       # ms, the snapshot sampling's
my $BIG = 90000;        # bytes: more than the slow client's socket and
                        # the server's (SendBufferSize) hold, less than
                        # CacheSocacheMaxSize
my $HOLD = 0.5;         # s the slow client waits before it reads
my $HIGHEST = "user=alice,$VOLUME=highest";
my $OFF = "user=alice,$VOLUME=off";
my @FIELDS = qw(trace_id span_id traceparent baggage snapshot status cache
                warning echo);

my $recv = Spanprof::Receiver->start(dir => new_dir());
my $up = Spanprof::Upstream->start(dir => new_dir());
my $back = 'http://127.0.0.1:' . $up->port;

my ($n, $log, @traced, @untraced, @slow) = (0);

# A GET of $path on $port with a trace of its own, under way; baggage:
# $HIGHEST unless given.
sub start_req {
    my ($port, $path, $baggage) = @_;
    my $c = { case => 'c' . ++$n, path => $path,
              trace => sprintf('cac4e%027x', $n),
              baggage => $baggage // $HIGHEST };
    open $c->{fh}, '-|', 'curl', '-s', '-m', 20, '-o', '/dev/null',
        '-w', '%{http_code}', '-H', "x-case: $c->{case}",
        '-H', "traceparent: 00-$c->{trace}-$IN_PARENT-01",
        '-H', 'tracestate: vendor=opaque', '-H', "baggage: $c->{baggage}",
        "http://127.0.0.1:$port$path"
        or die "curl: $!";
    return $c;
}

# The request done: its code, its access log line, what the backend got
# (recorded before it answered).
sub finish_req {
    my ($c) = @_;
    my $fh = delete $c->{fh};
    local $/;
    $c->{code} = <$fh> // '';
    close $fh;
    $c->{log} = log_case($log, $c->{case}, @FIELDS) // {};
    $c->{backend} = [ grep { ($_->{headers}{'x-case'}[0] // '') eq $c->{case} }
                      $up->requests ];
    return $c;
}

sub req { finish_req(start_req(@_)) }

# The same, from a client that reads nothing for $HOLD s through a small
# receive buffer: the server's write of a $BIG body blocks meanwhile.
sub slow_req {
    my ($port, $path) = @_;
    my $c = { case => 'c' . ++$n, path => $path,
              trace => sprintf('cac4e%027x', $n), baggage => $HIGHEST };
    socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096) or die "SO_RCVBUF: $!";
    connect($s, pack_sockaddr_in($port, inet_aton('127.0.0.1')))
        or die "connect: $!";
    # The Host curl sends: part of the cache's key.
    syswrite($s, "GET $path HTTP/1.0\r\nHost: 127.0.0.1:$port\r\n"
                 . "x-case: $c->{case}\r\n"
                 . "traceparent: 00-$c->{trace}-$IN_PARENT-01\r\n"
                 . "tracestate: vendor=opaque\r\nbaggage: $HIGHEST\r\n\r\n");
    sleep $HOLD;
    my $answer = '';
    1 while sysread($s, $answer, 65536, length $answer);
    close $s;
    ($c->{code}) = $answer =~ m{^HTTP/\S+ (\d+)};
    $c->{length} = length((split /\r\n\r\n/, $answer, 2)[1] // '');
    $c->{log} = log_case($log, $c->{case}, @FIELDS) // {};
    $c->{backend} = [ grep { ($_->{headers}{'x-case'}[0] // '') eq $c->{case} }
                      $up->requests ];
    return $c;
}

# The baggage the backend and SPANPROF_BAGGAGE have (SPEC 3).
sub baggage_of {
    my ($c) = @_;
    return $c->{baggage} if $c->{baggage} =~ /\Q$VOLUME\E=/;
    return "$c->{baggage},$VOLUME="
           . (selected_by_id($c->{trace}, $PROBABILITY) ? 'highest' : 'off');
}

# A request whose scope is on: $w{cache} the X-Cache word (undef: none),
# $w{backend}
# the backend requests (each conditional with $w{conditional}),
# $w{route} its <Location>.
sub check_traced {
    my ($what, $c, %w) = @_;
    my $l = $c->{log};
    my $bag = baggage_of($c);
    my $selected = $bag =~ /\Q$VOLUME\E=highest/ ? 1 : 0;

    push @traced, [ $what, $c ];
    is($c->{code}, 200, "$what: 200");
    if (defined $w{cache}) {
        like($l->{cache} // '', qr/^$w{cache} from /, "$what: a $w{cache}");
    } else {
        is($l->{cache}, '-', "$what: no X-Cache");
    }
    is($l->{trace_id}, $c->{trace}, "$what: SPANPROF_TRACE_ID, the trace");
    like($l->{span_id} // '', qr/^[0-9a-f]{16}$/, "$what: SPANPROF_SPAN_ID");
    is($l->{traceparent}, "00-$c->{trace}-" . ($l->{span_id} // '') . '-01',
       "$what: SPANPROF_TRACEPARENT");
    is($l->{baggage}, $bag, "$what: SPANPROF_BAGGAGE");
    is($l->{snapshot}, $selected, "$what: SPANPROF_SNAPSHOT");
    is(scalar @{ $c->{backend} }, $w{backend},
       "$what: $w{backend} backend request(s)");
    for my $got (@{ $c->{backend} }) {
        is_deeply($got->{headers}{traceparent}, [ $l->{traceparent} ],
                  "$what: the backend's one traceparent, parent the span");
        is_deeply($got->{headers}{tracestate}, [ 'vendor=opaque' ],
                  "$what: the backend's tracestate");
        is_deeply($got->{headers}{baggage}, [ $bag ],
                  "$what: the backend's baggage");
        is_deeply($got->{headers}{'if-none-match'},
                  $w{conditional} ? [ '"v1"' ] : undef,
                  "$what: the backend's request is "
                  . ($w{conditional} ? '' : 'not ') . 'conditional');
    }
    my ($span) = wait_spans($recv,
                            sub { $_[0]{spanId} eq ($l->{span_id} // '') });
    ok($span, "$what: the span is exported") or return;
    my %a = map { $_ => attribute($span->{attributes}, $_) }
            qw(http.route http.response.status_code url.path
               http.request.method splunk.snapshot.profiling);
    is_deeply([ @$span{qw(traceId parentSpanId kind name)}, @a{
                    qw(http.route http.response.status_code url.path
                       http.request.method) } ],
              [ $c->{trace}, $IN_PARENT, 2, "GET $w{route}", $w{route},
                200, $c->{path}, 'GET' ],
              "$what: the span's trace, parent, kind, name, route, status, "
              . 'path, method');
    is($a{'splunk.snapshot.profiling'} ? 1 : 0, $selected,
       "$what: splunk.snapshot.profiling");
}

# A request whose scope is off: no ids, the headers as the client sent
# them.
sub check_untraced {
    my ($what, $c, %w) = @_;
    my $l = $c->{log};

    push @untraced, [ $what, $c ];
    is($c->{code}, 200, "$what: 200");
    like($l->{cache} // '', qr/^$w{cache} from /, "$what: a $w{cache}");
    is(join('|', @$l{qw(trace_id span_id traceparent)}), '-|-|-',
       "$what: no ids in the access log");
    is(scalar @{ $c->{backend} }, $w{backend},
       "$what: $w{backend} backend request(s)");
    for my $got (@{ $c->{backend} }) {
        is_deeply([ @{ $got->{headers} }{qw(traceparent tracestate
                                            baggage)} ],
                  [ [ "00-$c->{trace}-$IN_PARENT-01" ], [ 'vendor=opaque' ],
                    [ $c->{baggage} ] ],
                  "$what: the backend gets the headers as sent");
    }
}

# Two requests for $path, the second 0.3 s after the first (the backend
# waits 1 s before it answers each).
sub two_at_once {
    my ($port, $path) = @_;
    my $first = start_req($port, $path);
    sleep 0.3;
    my $second = start_req($port, $path);
    return (finish_req($first), finish_req($second));
}

sub run {
    my ($mpm, $quick, $store) = @_;
    my $dir = new_dir();
    my $tag = "$mpm-$quick";
    my $p = "/c/$tag";
    my $vhost = free_port();
    my $provider = $store eq 'disk'
        ? "CacheRoot $dir/cache\nCacheEnable disk /c"
        : "CacheSocache shmcb:$dir/cache.shmcb(8388608)\n"
          . "CacheSocacheMaxSize 102400\nCacheEnable socache /c";
    mkdir "$dir/cache";
    chmod 0777, "$dir/cache";
    $log = "$dir/sp.log";
    my $port = httpd_conf($dir, mpm => $mpm,
        modules => [ qw(proxy proxy_http cache),
                     $store eq 'disk' ? 'cache_disk'
                                      : qw(cache_socache socache_shmcb) ],
        extra => <<"EXTRA");
LogFormat "%{x-case}i|%{SPANPROF_TRACE_ID}e|%{SPANPROF_SPAN_ID}e|%{SPANPROF_TRACEPARENT}e|%{SPANPROF_BAGGAGE}e|%{SPANPROF_SNAPSHOT}e|%>s|%{X-Cache}o|%{Warning}o|%{echo-traceparent}o" sp
CustomLog $log sp
SendBufferSize 4096
CacheQuickHandler $quick
$provider
CacheHeader On
CacheLock On
CacheLockPath $dir/cache/lock
CacheLockMaxAge 5
ProxyPass /c $back/c
<Location /c>
</Location>
<Location /c/off>
    Spanprof Off
</Location>
Listen 127.0.0.1:$vhost
<VirtualHost 127.0.0.1:$vhost>
    Spanprof Off
    <Location /c/on>
        Spanprof On
    </Location>
</VirtualHost>
EXTRA
    my $httpd = httpd_start($dir, $port,
        $recv->snapshot_env(interval => $INTERVAL, export_interval => '200'),
        SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY);
    ok($httpd, "$tag: httpd starts") or return;
    my $what = "$tag, $store";

    # Entries that go stale after 1 s, asked again at the end.
    my $reval = "$p/reval/cache1";
    my $locked = "$p/lock/slow1/cache1";
    check_traced("$what: miss of a stale-to-be", req($port, $reval),
                 cache => 'MISS', backend => 1, route => '/c');
    check_traced("$what: miss of a locked-to-be", req($port, $locked),
                 cache => 'MISS', backend => 1, route => '/c');
    my $stale_at = time + 2.2;

    check_traced("$what: miss", req($port, "$p/a/cache60", 'user=alice'),
                 cache => 'MISS', backend => 1, route => '/c');
    check_traced("$what: hit", req($port, "$p/a/cache60"),
                 cache => 'HIT', backend => 0, route => '/c');
    check_traced("$what: hit without a volume",
                 req($port, "$p/a/cache60", 'user=alice'),
                 cache => 'HIT', backend => 0, route => '/c');

    # "/c/%6Fff" is "/c/off" once decoded, as httpd maps it.
    for my $off ('/c/off', '/c/%6Fff') {
        my $path = "$off/$tag/" . ($off =~ /%/ ? 'encoded' : 'plain');
        for my $which (qw(miss hit)) {
            check_untraced("$what: Spanprof Off, $off, $which",
                           req($port, "$path/cache60", $OFF),
                           cache => uc $which,
                           backend => $which eq 'miss' ? 1 : 0);
        }
    }
    for my $which (qw(miss hit)) {
        check_traced("$what: vhost off, <Location> on, $which",
                     req($vhost, "/c/on/$tag/cache60"), cache => uc $which,
                     backend => $which eq 'miss' ? 1 : 0, route => '/c/on');
        check_untraced("$what: vhost off, $which",
                       req($vhost, "$p/vhost/cache60", $OFF),
                       cache => uc $which, backend => $which eq 'miss' ? 1 : 0);
    }

    my $miss = req($port, "$p/echo/cache60");
    my $hit = req($port, "$p/echo/cache60");
    check_traced("$what: echo miss", $miss, cache => 'MISS', backend => 1,
                 route => '/c');
    check_traced("$what: echo hit", $hit, cache => 'HIT', backend => 0,
                 route => '/c');
    is($hit->{log}{echo}, $miss->{log}{traceparent},
       "$what: the backend's echo of the miss's traceparent is cached "
       . 'with the response (the backend\'s doing)');

    # CacheLock, nothing cached yet: one caches, the other, while the lock
    # is held, goes to the backend without caching (no X-Cache).
    my @two = sort { $b->{log}{cache} cmp $a->{log}{cache} }
              two_at_once($port, "$p/lockmiss/slow1/cache60");
    check_traced("$what: CacheLock, miss, cached", $two[0], cache => 'MISS',
                 backend => 1, route => '/c');
    check_traced("$what: CacheLock, miss, not cached", $two[1],
                 cache => undef, backend => 1, route => '/c');

    # A selected hit that lasts.
    my $big = "$p/big/size$BIG/cache60";
    check_traced("$what: miss of a big one", req($port, $big),
                 cache => 'MISS', backend => 1, route => '/c');
    my $slow = slow_req($port, $big);
    is($slow->{length}, $BIG, "$what: the slow client's hit: the whole body");
    check_traced("$what: the slow client's hit", $slow, cache => 'HIT',
                 backend => 0, route => '/c');
    push @slow, [ $what, $slow ];

    sleep $stale_at - time if $stale_at > time;
    check_traced("$what: revalidated", req($port, $reval),
                 cache => 'REVALIDATE', backend => 1, conditional => 1,
                 route => '/c');
    # CacheLock, stale: one revalidates; the other, while the lock is
    # held, is served stale from the cache (Warning 110).
    @two = sort { @{ $b->{backend} } <=> @{ $a->{backend} } }
           two_at_once($port, $locked);
    check_traced("$what: CacheLock, stale, revalidated", $two[0],
                 cache => 'REVALIDATE', backend => 1, conditional => 1,
                 route => '/c');
    check_traced("$what: CacheLock, stale, served stale", $two[1],
                 cache => 'HIT', backend => 0, route => '/c');
    like($two[1]{log}{warning} // '', qr/^110 /,
         "$what: CacheLock, stale, served stale: Warning 110");

    stop($httpd);
    my @bad = grep { /:(?:error|crit|alert|emerg)\]|exit signal/
                     || /spanprof.*:warn\]/ }
              split /\n/, read_file("$dir/error.log");
    is(join("\n", @bad), '', "$what: no error, crash or spanprof warning "
                             . 'in the error log');
}

run(@$_) for [qw(event On disk)], [qw(event Off socache)],
             [qw(prefork On socache)], [qw(prefork Off disk)];

# Everything is flushed: each request is one span, or none.
my %in_trace;
$in_trace{ $_->{traceId} }++ for spans($recv);
is($in_trace{ $_->[1]{trace} } // 0, 1, "$_->[0]: exactly one span")
    for @traced;
is($in_trace{ $_->[1]{trace} } // 0, 0, "$_->[0]: no span") for @untraced;

my (undef, $samples) = $recv->collect;
for (@slow) {
    my ($what, $c) = @$_;
    my $id = $c->{log}{span_id} // '-';
    my $got = grep { ($_->{labels}{span_id} // '') eq $id } @$samples;
    # About $HOLD s / $INTERVAL ms of them.
    cmp_ok($got, '>=', $HOLD * 1000 / $INTERVAL / 20,
           "$what: the slow client's hit is sampled ($got samples)");
}
check_samples_in_spans($recv);

done_testing();
