#!/usr/bin/perl
# HTTP/2 streams as an SRE's clients make them: real apache2 (event and
# worker MPMs) with mod_http2, h2c and h2 over TLS (mod_ssl, ALPN), real
# curl and node's http2 (t/bin/h2_client.js), a recording backend behind
# mod_proxy (t/bin/upstream.pl), the exporter and the OTLP receiver;
# snapshot sampling every 5 ms.
#
#   - Five concurrent streams of one connection: one selected that
#     deflates a big file at level 9, one selected that waits on a slow
#     backend, three unselected that deflate too. Each is a span of its
#     own (its parent, status, protocol 2, scheme, the id the access log
#     has); the selected ones' samples come from one thread each, taken
#     while their span lived, and show only their own work: no deflate
#     under the waiting one, no mod_proxy under the deflating one; none
#     under an unselected one. The backend gets one traceparent, parent
#     the exported span, the tracestate received and our baggage.
#   - A stream the client resets (RST_STREAM CANCEL, the connection kept
#     for another) while its backend is slow, and one whose client drops
#     the whole connection (curl's --max-time): a span each, the status
#     httpd logs, samples only while it lived.
#   - A selected request whose peer goes silent, over h2c, h2 and
#     HTTP/1.1: a backend that never answers (ProxyPass timeout=1), a
#     request body that stops coming (mod_reqtimeout's body=1). Its
#     timeout comes: 502, 408. Each wall-clock tick made APR's poll return
#     EINTR, and APR called it again with its whole timeout: the timeout
#     never came, the request waited for good, sampled at every tick all
#     the while (README, "Sampling and EINTR").

use strict;
use warnings;

use FindBin;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop
                        deflate_location free_port);
use Spanprof::Receiver qw(attribute self_signed);
use Spanprof::Upstream;
use Spanprof::Cases qw(wait_spans log_case h2_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1, openssl => 1,
    apache_modules => [qw(http2 ssl socache_shmcb proxy proxy_http deflate
                          filter alias reqtimeout)]);

my $PARENT = 'a1b2c3d4e5f60718';
my $VOLUME = 'splunk.trace.snapshot.volume';
my $STATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
my %PROTO = (h2c => 1, h2 => 2, h1 => 3);
my $serial = 0;

# Accepts (the kernel does, into its backlog) and never answers.
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 128, Proto => 'tcp')
    or die "listen: $!";

# A case and a trace id of its own for each request, telling the MPM and
# the protocol apart.
sub new_case {
    my ($mpm, $proto) = @_;
    my $n = ++$serial;
    return ("c$n", sprintf('f10e%04x%04x%020x', $mpm eq 'event' ? 1 : 2,
                           $PROTO{$proto}, $n));
}

# The headers of a request (a hash: case, trace, volume, and optionally
# state, baggage, gzip): [name, value] pairs.
sub headers_of {
    my ($t) = @_;
    return ([ 'x-case' => $t->{case} ],
            [ traceparent => "00-$t->{trace}-$PARENT-01" ],
            [ baggage => join(',', $t->{baggage} // (),
                              "$VOLUME=$t->{volume}") ],
            $t->{state} ? [ tracestate => $t->{state} ] : (),
            $t->{gzip} ? [ 'accept-encoding' => 'gzip' ] : ());
}

# Each of @requests (hashes: headers_of's, path, max_time: the client
# gives up after that many seconds) sent by $client over $proto (h2c,
# h2, h1); over HTTP/2 as streams of one connection. Returns case =>
# "status version connections".
#   curl: one curl (-Z waits to multiplex); giving up on a stream, it
#     closes the connection when there is no other. With others it sends
#     its RST_STREAM only as the stream's answer comes (curl 7.88.1), and
#     it cannot multiplex h2c with prior knowledge (its second stream
#     fails with "Error in the HTTP2 framing layer", bare httpd alike).
#   node: t/bin/h2_client.js (node's http2), which resets a stream it
#     gives up on there and then (RST_STREAM CANCEL), the connection kept.
sub send_requests {
    my ($client, $proto, $port, $dir, @requests) = @_;
    my %out;
    if ($client eq 'node') {
        my @r = h2_requests({ port => $port, tls => $proto eq 'h2' ? 1 : 0 },
                            "$dir/plan.json", map { {
            path => $_->{path}, headers => [ headers_of($_) ],
            defined $_->{max_time}
                ? (reset_after_ms => $_->{max_time} * 1000) : () } }
            @requests);
        # One connection, made for the first.
        $out{ $requests[$_]{case} } = ($r[$_]{reset} ? '000 0'
                                       : ($r[$_]{status} // 0) . ' 2')
                                      . ($_ ? ' 0' : ' 1')
            for 0 .. $#requests;
        return \%out;
    }
    my @cmd = ('curl', '-Z', '-s');
    for my $i (0 .. $#requests) {
        my $t = $requests[$i];
        push @cmd, '--next' if $i;
        push @cmd, '-s', '-o', '/dev/null', '-m', $t->{max_time} // 15,
            $proto eq 'h2' ? ('-k', '--http2')
            : $proto eq 'h2c' ? '--http2-prior-knowledge' : '--http1.1',
            '-w', "$t->{case} %{http_code} %{http_version} %{num_connects}\\n",
            map { ('-H', "$_->[0]: $_->[1]") } headers_of($t);
        push @cmd, ($proto eq 'h2' ? 'https' : 'http') . "://127.0.0.1:$port"
                   . $t->{path};
    }
    # -s does not quiet -Z's progress meter.
    my $pid = open my $fh, '-|';
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        open STDERR, '>', '/dev/null';
        exec @cmd or die "curl: $!";
    }
    while (my $line = <$fh>) {
        my ($case, $rest) = $line =~ /^(\S+) (.*)$/ or next;
        $out{$case} = $rest;
    }
    close $fh;
    return \%out;
}

# The status of a POST over HTTP/1.1 that sends 10 bytes of the 1000 it
# announces, then nothing; 0 when none came within 8 s.
sub stalled_post {
    my ($port, $t) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 8) or return 0;
    print $s "POST $t->{path} HTTP/1.1\r\nHost: localhost\r\n"
        . join('', map { "$_->[0]: $_->[1]\r\n" } headers_of($t))
        . "Content-Length: 1000\r\n\r\n" . ('x' x 10);
    my $answer = '';
    sysread($s, $answer, 4096) if IO::Select->new($s)->can_read(8);
    close $s;
    return $answer =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
}

# The results of @jobs (subs returning one line), run at once, each in a
# process of its own, in order.
sub at_once {
    my @pipes;
    for my $job (@_) {
        my $pid = open my $fh, '-|';
        die "fork: $!" unless defined $pid;
        if (!$pid) {
            $| = 1;
            print $job->() // '';
            POSIX::_exit(0);    # not the parent's END blocks
        }
        push @pipes, $fh;
    }
    return map { my $r = do { local $/; readline $_ } // ''; close $_; $r }
           @pipes;
}

sub attr { attribute($_[0]{attributes}, $_[1]) }

# The samples under the trace of $span (a decoded OTLP span): its own,
# each trace here has one span.
sub samples_of {
    my ($samples, $span) = @_;
    return grep { ($_->{labels}{trace_id} // '') eq $span->{traceId} }
           @$samples;
}

# Those of @s taken outside their span's life (the label is in whole
# milliseconds).
sub outside {
    my ($span, @s) = @_;
    return grep {
        my $at = $_->{labels}{'source.event.time'} * 1e6;
        $at > $span->{endTimeUnixNano} + 1e6
            || $at < $span->{startTimeUnixNano} - 1e6;
    } @s;
}

sub diag_outside {
    my ($span, @out) = @_;
    diag(join ', ', map { sprintf '%.0f ms after its end',
        ($_->{labels}{'source.event.time'} * 1e6
         - $span->{endTimeUnixNano}) / 1e6 } @out[0 .. ($#out < 4 ? $#out
                                                                   : 4)]);
}

sub has_frame {
    my ($x, $what, $re) = @_;
    return grep { ($_->{$what} // '') =~ $re } @{ $x->{frames} };
}

# Every sample, once they stop coming (the exporter sends them every
# 200 ms).
sub settled_samples {
    my ($recv) = @_;
    my ($last, $samples) = (-1);
    for (1 .. 20) {
        (undef, $samples) = $recv->collect;
        last if @$samples == $last;
        $last = @$samples;
        select(undef, undef, undef, 0.5);
    }
    return $samples;
}

# The spans of the traces of @cases ([what, case, trace, ...]) by trace
# id, and every sample, once all arrived.
sub spans_and_samples {
    my ($recv, @cases) = @_;
    my %traces = map { $_->[2] => 1 } @cases;
    my %span;
    push @{ $span{ $_->{traceId} } }, $_
        for wait_spans($recv, sub { $traces{ $_[0]{traceId} } },
                       scalar keys %traces);
    return (\%span, settled_samples($recv));
}

# Five concurrent streams of one connection over $proto; their checks.
sub concurrent_streams {
    my ($mpm, $proto, $port, $dir) = @_;
    my $what = "$mpm, $proto";
    my @t;
    for my $kind (qw(heavy waiting off off off)) {
        my ($case, $trace) = new_case($mpm, $proto);
        push @t, { case => $case, trace => $trace, kind => $kind,
                   volume => $kind eq 'off' ? 'off' : 'highest',
                   $kind eq 'waiting'
                   ? (path => "/up/slow1?$case", state => $STATE,
                      baggage => 'k=v')
                   : (path => "/big?$case", gzip => 1) };
    }
    my $got = send_requests($proto eq 'h2' ? 'curl' : 'node', $proto, $port,
                            $dir, @t);
    is(join(', ', map { ($got->{ $_->{case} } // '0 0') =~ s/ \d+$//r } @t),
       join(', ', ('200 2') x 5), "$what: five streams answered 200 over "
                                  . 'HTTP/2');
    my $connects = 0;
    $connects += (split ' ', $_)[2] // 0 for values %$got;
    is($connects, 1, "$what: all on one connection");
    return map { [ "$what, $_->{kind} stream $_->{case}", $_->{case},
                   $_->{trace}, $_ ] } @t;
}

sub check_concurrent {
    my ($dir, $up, $span, $samples, @cases) = @_;
    my %ids;
    for (@cases) {
        my ($w, $case, $trace, $t) = @$_;
        my $scheme = $w =~ /, h2,/ ? 'https' : 'http';
        my @s = @{ $span->{$trace} // [] };
        is(scalar @s, 1, "$w: one span") or next;
        my $s = $s[0];
        $ids{ $s->{spanId} } = 1;
        is(join(' ', $s->{parentSpanId} // '',
                map { attr($s, $_) // '' }
                    qw(http.response.status_code network.protocol.version
                       url.scheme)),
           "$PARENT 200 2 $scheme", "$w: parent, status, protocol 2, "
                                    . $scheme);
        is(attr($s, 'splunk.snapshot.profiling') ? 1 : 0,
           $t->{kind} eq 'off' ? 0 : 1, "$w: selected as asked");
        my $log = log_case("$dir/access.log", $case, qw(status span));
        is($log && $log->{span}, $s->{spanId},
           "$w: the access log's span id is the span's");
        my @x = samples_of($samples, $s);
        if ($t->{kind} eq 'off') {
            is(scalar @x, 0, "$w: no sample under an unselected stream");
            next;
        }
        ok(@x >= 3, "$w: sampled (" . @x . ')');
        my %threads = map { $_->{labels}{'thread.os.id'} // '' => 1 } @x;
        is(scalar keys %threads, 1, "$w: on one thread");
        is(scalar(grep { ($_->{labels}{span_id} // '') ne $s->{spanId} } @x),
           0, "$w: every sample under its span id");
        my @out = outside($s, @x);
        is(scalar @out, 0, "$w: every sample taken while it lived")
            or diag_outside($s, @out);
        if ($t->{kind} eq 'heavy') {
            ok((grep { has_frame($_, 'function', qr/^deflate/) } @x),
               "$w: zlib's deflate in its stacks");
            is(scalar(grep { has_frame($_, 'mapping', qr/mod_proxy/) } @x),
               0, "$w: no mod_proxy (the waiting stream's work)");
            next;
        }
        is(scalar(grep { has_frame($_, 'function', qr/^deflate/) } @x), 0,
           "$w: no deflate (the other streams' work)");
        ok((grep { has_frame($_, 'mapping', qr/mod_proxy/) } @x),
           "$w: blocked in mod_proxy");
        my @r = grep { ($_->{uri} // '') =~ /\?\Q$case\E$/ } $up->requests;
        is(scalar @r, 1, "$w: the backend got one request") or next;
        my $h = $r[0]{headers};
        is(join(' | ', @{ $h->{traceparent} // [] }),
           "00-$trace-$s->{spanId}-01",
           "$w: one traceparent, parent the exported span");
        is(join(' | ', @{ $h->{tracestate} // [] }), $STATE,
           "$w: the tracestate received");
        is(join(' | ', @{ $h->{baggage} // [] }), "k=v,$VOLUME=highest",
           "$w: our baggage");
    }
    is(scalar keys %ids, scalar @cases, 'each stream its own span id');
}

# A stream reset while its backend is slow, the connection kept for
# another stream; one whose client drops the connection.
sub reset_streams {
    my ($mpm, $proto, $port, $dir) = @_;
    my $what = "$mpm, $proto";
    my ($rcase, $rtrace) = new_case($mpm, $proto);
    my ($kcase, $ktrace) = new_case($mpm, $proto);
    my $got = send_requests('node', $proto, $port, $dir,
        { case => $rcase, trace => $rtrace, volume => 'highest',
          path => "/up/slow1?$rcase", max_time => 0.4 },
        { case => $kcase, trace => $ktrace, volume => 'off',
          path => "/other/slow2?$kcase" });
    is(($got->{$kcase} // '') =~ s/ \d+$//r, '200 2',
       "$what: the stream kept answered");
    is((split ' ', $got->{$rcase} // '')[0], '000',
       "$what: the client reset the slow stream");
    my ($dcase, $dtrace) = new_case($mpm, $proto);
    send_requests('curl', $proto, $port, $dir,
        { case => $dcase, trace => $dtrace, volume => 'highest',
          path => "/up/slow1?$dcase", max_time => 0.4 });
    return ([ "$what, stream reset", $rcase, $rtrace ],
            [ "$what, connection dropped", $dcase, $dtrace ]);
}

# One span, the status httpd logs (and $status when given), sampled only
# while it lived.
sub check_ended {
    my ($dir, $span, $samples, @cases) = @_;
    for (@cases) {
        my ($what, $case, $trace, $status) = @$_;
        my @s = @{ $span->{$trace} // [] };
        is(scalar @s, 1, "$what: one span") or next;
        my $log = log_case("$dir/access.log", $case, qw(status span));
        ok($log, "$what: logged (" . ($log ? $log->{status} : '-') . ')')
            or next;
        is(join(' ', attr($s[0], 'http.response.status_code') // '',
                $log->{span}),
           ($status // $log->{status}) . " $s[0]{spanId}",
           "$what: the status and span id httpd logs");
        my @x = samples_of($samples, $s[0]);
        ok(@x >= 3, "$what: sampled (" . @x . ')');
        my @out = outside($s[0], @x);
        is(scalar @out, 0, "$what: sampled only while it lived")
            or diag_outside($s[0], @out);
    }
}

sub run_mpm {
    my ($mpm) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $up = Spanprof::Upstream->start(dir => $dir);
    my $up2 = Spanprof::Upstream->start(dir => $dir);
    my ($cert, $key) = self_signed($dir, 'server');
    my $tls = free_port();
    my $port = httpd_conf($dir, mpm => $mpm, log_level => 'info',
        modules => [qw(socache_shmcb ssl http2 proxy proxy_http deflate
                       filter alias reqtimeout)],
        extra => <<"EXTRA");
Protocols h2c http/1.1
ThreadsPerChild 25
H2MinWorkers 8
LogFormat "%{x-case}i|%>s|%{SPANPROF_SPAN_ID}e" cases
CustomLog $dir/access.log cases
${\ deflate_location($dir, lines => 60000) }
ProxyPass /up http://127.0.0.1:${\ $up->port }/up
ProxyPass /other http://127.0.0.1:${\ $up2->port }/other
ProxyPass /never http://127.0.0.1:${\ $silent->sockport }/never timeout=1
RequestReadTimeout header=10 body=1
Listen 127.0.0.1:$tls
<VirtualHost 127.0.0.1:$tls>
    SSLEngine on
    SSLCertificateFile $cert
    SSLCertificateKeyFile $key
    Protocols h2 http/1.1
</VirtualHost>
EXTRA
    my $httpd = httpd_start($dir, $port,
        $recv->snapshot_env(interval => 5, export_interval => '200'));
    ok($httpd, "$mpm: httpd starts with mod_http2 and mod_ssl")
        or return diag(read_file("$dir/error.log")
                       . read_file("$dir/stderr.log"));
    my %to = (h2c => $port, h2 => $tls, h1 => $port);

    my (@streams, @ended);
    for my $proto (qw(h2c h2)) {
        push @streams, concurrent_streams($mpm, $proto, $to{$proto}, $dir);
        push @ended, reset_streams($mpm, $proto, $to{$proto}, $dir);
    }
    # The reset streams' backends answer after 1 s; then they end.
    my ($span, $samples) = spans_and_samples($recv, @streams, @ended);
    check_concurrent($dir, $up, $span, $samples, @streams);
    check_ended($dir, $span, $samples, @ended);

    # Peers gone silent, all at once: a stuck one is given up on after
    # 8 s (and then is sampled for good: its spans and samples are not
    # waited for).
    my @silent = map { [ "$mpm, $_, a backend that never answers",
                         new_case($mpm, $_), 502, $_ ] } qw(h2c h2 h1);
    my ($pcase, $ptrace) = new_case($mpm, 'h1');
    push @silent, [ "$mpm, h1, a request body that stops coming", $pcase,
                    $ptrace, 408, 'post' ];
    my @answers = at_once(map { my $c = $_; sub {
        my $t = { case => $c->[1], trace => $c->[2], volume => 'highest',
                  path => ($c->[4] eq 'post' ? '/up/post' : '/never')
                          . "?$c->[1]", max_time => 8 };
        return stalled_post($port, $t) if $c->[4] eq 'post';
        my $got = send_requests('curl', $c->[4], $to{ $c->[4] }, $dir, $t);
        return ($got->{ $c->[1] } // '0') =~ s/ .*//r;
    } } @silent);
    my $answered = 1;
    for my $i (0 .. $#silent) {
        $answered = 0 unless is($answers[$i], $silent[$i][3],
                                "$silent[$i][0]: answered $silent[$i][3]");
    }
    check_ended($dir, spans_and_samples($recv, @silent), @silent)
        if $answered;

    stop($httpd);
    my @bad = grep { /[[:](alert|crit|emerg)\]|exit signal
                      |spanprof.*(warn|error)/x }
              split /\n/, read_file("$dir/error.log");
    is(join("\n", @bad), '', "$mpm: no alert, crash or spanprof warning "
                             . 'logged');
}

run_mpm($_) for split /,/, ($ENV{SPANPROF_MPMS} // 'event,worker');
done_testing();
