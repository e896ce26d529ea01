#!/usr/bin/perl
# Attribution in nginx's event loop on the paths t/nginx_attribution.t
# does not take: one worker serves selected cheap requests while it gzips
# (level 9) for unselected ones whose work resumes from other events:
#   h2:       streams of one HTTP/2 connection, the client's windows so
#             small that nginx waits for each WINDOW_UPDATE and goes on
#             with the heavy streams from the connection's read event; the
#             selected stream streams from a slow upstream meanwhile
#   timers:   limit_rate on the heavy requests (writes resumed by a
#             timer), gzip fed by upstream read events, a selected
#             request that limit_req delays, one reading a slowly
#             streaming upstream
#   ssi:      the heavy work in a subrequest of an unselected request,
#             posted after its first subrequest's upstream answered
#   pipeline: HTTP/1.1 pipelining, selected and heavy unselected requests
#             one after another on the same connections
# No sample under a selected cheap request's ids may show the heavy work
# (deflate, nginx's gzip filter). What the HTTP/2 connection's flush sends
# for other streams (README, "not covered") is no such frame. Each path's
# reverse (heavy requests selected) shows the work under their ids, so the
# checks can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use IO::Socket::INET;
use JSON::PP ();
use POSIX ();

use Spanprof::Server qw(top_dir new_dir free_port read_file write_file
                        spawn wait_for_port stop nginx_conf nginx_cmd
                        gzip_location);
use Spanprof::Receiver;
use Spanprof::Upstream;

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
# One each: the test upstream answers one connection at a time.
my $up_slow = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $up_drip = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $up_sub = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $h2 = free_port();
my $port = free_port();

write_file("$dir/page.html", '<html><!--# include virtual="/sub/slow1" -->'
    . '<!--# include virtual="/plain" --></html>' . "\n");
write_file("$dir/small.txt", "small\n");
chmod 0644, "$dir/page.html", "$dir/small.txt";

# Few gzip buffers: deflate stops as soon as the client (window, rate)
# takes no more, and goes on at the event that lets it.
my $gz = 'gzip_buffers 4 4k;';
nginx_conf($dir, port => $port, connections => 256,
    http => "    log_format tagged
        '\$arg_t \$spanprof_trace_id \$status \$spanprof_snapshot';
    limit_req_zone \$binary_remote_addr zone=slowly:1m rate=20r/m;",
    server => "        listen 127.0.0.1:$h2 http2;
        access_log $dir/access.log tagged;
        location /slow { proxy_pass http://127.0.0.1:${\ $up_slow->port}; }
        location /drip {
            proxy_pass http://127.0.0.1:${\ $up_drip->port};
            proxy_buffering off;
        }
        location /sub/ { proxy_pass http://127.0.0.1:${\ $up_sub->port}/; }
        location /limited {
            limit_req zone=slowly burst=5;
            alias $dir/small.txt;
        }
        location /plain { alias $dir/big.txt; default_type text/plain; }
        " . gzip_location($dir, lines => 200000, extra => $gz) . "
        " . gzip_location($dir, path => '/rated',
                          extra => "$gz limit_rate 200k;") . "
        " . gzip_location($dir, path => '/bigproxy', extra => $gz,
                          serve => "proxy_pass http://127.0.0.1:$port/plain;
            proxy_set_header Accept-Encoding \"\";") . "
        " . gzip_location($dir, path => '/ssi', extra => $gz,
                          serve => "alias $dir/page.html; ssi on;
            default_type text/html;"));

my $master = spawn({
    $recv->snapshot_env(schedule_delay => '200'),
}, "$dir/stderr.log", nginx_cmd($dir));
ok(wait_for_port($port, 20) && wait_for_port($h2, 20), 'nginx listens')
    or BAIL_OUT(read_file("$dir/error.log"));

my $serial = 0;

# Runs $code in a child; returns its pid.
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

sub volume { "baggage: splunk.trace.snapshot.volume=$_[0]" }

# A curl request in the background, tagged t=$tag for the access log.
sub request {
    my ($path, $tag, $volume) = @_;
    my $sep = $path =~ /\?/ ? '&' : '?';
    my @cmd = ('curl', '-s', '-m', '30', '-o', '/dev/null',
               '-H', 'Accept-Encoding: gzip', '-H', volume($volume),
               "http://127.0.0.1:$port$path${sep}t=$tag");
    return background(sub { exec(@cmd) or POSIX::_exit(127) });
}

# Streams of one HTTP/2 connection (t/bin/h2_client.js) with a small
# window: [path, tag, volume] each.
sub h2_streams {
    my (@streams) = @_;
    my $plan = JSON::PP->new->encode({
        port => $h2, timeout_ms => 30000,
        settings => { initialWindowSize => 16384 },
        requests => [ map { {
            path => "$_->[0]?t=$_->[1]",
            headers => [['accept-encoding', 'gzip'],
                        ['baggage', "splunk.trace.snapshot.volume=$_->[2]"]],
        } } @streams ],
    });
    my $out = "$dir/h2." . ++$serial;
    write_file("$out.plan", $plan);
    return background(sub {
        open STDIN, '<', "$out.plan";
        open STDOUT, '>', $out;
        exec('node', top_dir() . '/t/bin/h2_client.js')
            or POSIX::_exit(127);
    });
}

# HTTP/1.1 requests pipelined on one connection, in one write: [path,
# tag, volume] each; the last one closes it.
sub pipelined {
    my (@reqs) = @_;
    my $text = '';
    for my $i (0 .. $#reqs) {
        my ($path, $tag, $volume) = @{ $reqs[$i] };
        $text .= "GET $path?t=$tag HTTP/1.1\r\nHost: localhost\r\n"
            . "Accept-Encoding: gzip\r\n" . volume($volume) . "\r\n"
            . ($i == $#reqs ? "Connection: close\r\n" : '') . "\r\n";
    }
    return background(sub {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                      Timeout => 5) or POSIX::_exit(1);
        print $s $text;
        my $end = time + 30;
        1 while time < $end && sysread($s, my $buf, 65536);
        POSIX::_exit(0);
    });
}

sub finish { waitpid($_, 0) for @_ }

# Trace ids by tag, from the access log, once it has all of @tags: the
# last request of a pipelined connection is logged after nginx's lingering
# close, when the client has closed too.
sub ids {
    my (@tags) = @_;
    my %id;
    my $end = time + 10;
    while (1) {
        for (split /\n/, read_file("$dir/access.log")) {
            my ($tag, $id, $status, $snapshot) = split ' ';
            $id{$tag} = { id => $id, status => $status,
                          snapshot => $snapshot };
        }
        last if time > $end || !grep { !$id{$_} } @tags;
        sleep 0.1;
    }
    return \%id;
}

# --- the paths, each with its reverse: the selected requests in %cheap
# (their samples must show no heavy work) and %heavy (theirs must show
# it), the others in %unselected.
my (%cheap, %heavy, %unselected);
my @drift;    # [selected cheap tag, heavy tags served while it was open]

# h2: a selected stream reading a slow upstream, six heavy ones.
my $h = h2_streams(['/drip50', 'h2.sel', 'highest'],
                   map { ['/big', "h2.heavy$_", 'off'] } 1 .. 6);
finish($h);
$cheap{'h2.sel'} = 1;
$unselected{"h2.heavy$_"} = 1 for 1 .. 6;
push @drift, ['h2.sel', map { "h2.heavy$_" } 1 .. 6];
# reverse: heavy streams selected, a cheap one not
$h = h2_streams(['/drip20', 'h2r.cheap', 'off'],
                map { ['/big', "h2r.heavy$_", 'highest'] } 1 .. 3);
finish($h);
$unselected{'h2r.cheap'} = 1;
$heavy{"h2r.heavy$_"} = 1 for 1 .. 3;

# timers: limit_req delays the selected one (the first request of the
# zone goes at once, the next waits 3 s); limit_rate and upstream reads
# feed the heavy ones.
finish(request('/limited', 'tm.prime', 'off'));
$unselected{'tm.prime'} = 1;
my @pids = (request('/drip50', 'tm.drip', 'highest'),
            request('/limited', 'tm.limited', 'highest'));
sleep 0.3;
push @pids, map { request('/rated', "tm.rated$_", 'off'),
                  request('/bigproxy', "tm.proxy$_", 'off') } 1 .. 3;
# and one that comes when they have begun: the last phase checker to run
# before their work resumes (from a timer, an upstream read) is its own
sleep 0.5;
push @pids, request('/slow2', 'tm.late', 'highest');
finish(@pids);
$cheap{$_} = 1 for qw(tm.drip tm.limited tm.late);
$unselected{"tm.rated$_"} = $unselected{"tm.proxy$_"} = 1 for 1 .. 3;
push @drift, ['tm.drip', map { ("tm.rated$_", "tm.proxy$_") } 1 .. 3];
@pids = (request('/drip30', 'tmr.cheap', 'off'));
sleep 0.3;
push @pids, map { request('/rated', "tmr.rated$_", 'highest'),
                  request('/bigproxy', "tmr.proxy$_", 'highest') } 1 .. 2;
finish(@pids);
$unselected{'tmr.cheap'} = 1;
$heavy{"tmr.rated$_"} = $heavy{"tmr.proxy$_"} = 1 for 1 .. 2;

# ssi: each page waits for its first subrequest's upstream (1 s, one at a
# time), then gzips its second one, a big file.
@pids = (request('/slow6', 'ssi.sel', 'highest'));
sleep 0.3;
push @pids, map { request('/ssi', "ssi.heavy$_", 'off') } 1 .. 3;
finish(@pids);
$cheap{'ssi.sel'} = 1;
$unselected{"ssi.heavy$_"} = 1 for 1 .. 3;
push @drift, ['ssi.sel', map { "ssi.heavy$_" } 1 .. 3];
@pids = (request('/slow3', 'ssir.cheap', 'off'));
sleep 0.3;
push @pids, map { request('/ssi', "ssir.heavy$_", 'highest') } 1 .. 2;
finish(@pids);
$unselected{'ssir.cheap'} = 1;
$heavy{"ssir.heavy$_"} = 1 for 1 .. 2;

# pipeline: heavy requests right after a selected one on its connection,
# and before and after one on another, both at once.
@pids = (pipelined(['/drip40', 'pl.a1', 'highest'],
                   ['/big', 'pl.a2', 'off'], ['/big', 'pl.a3', 'off']));
sleep 0.3;
push @pids, pipelined(['/big', 'pl.b1', 'off'], ['/big', 'pl.b2', 'off'],
                      ['/slow2', 'pl.b3', 'highest'], ['/big', 'pl.b4', 'off']);
finish(@pids);
$cheap{$_} = 1 for qw(pl.a1 pl.b3);
$unselected{$_} = 1 for qw(pl.a2 pl.a3 pl.b1 pl.b2 pl.b4);
push @drift, ['pl.a1', 'pl.b1', 'pl.b2', 'pl.b4'];
finish(pipelined(['/slow1', 'plr.c1', 'off'], ['/big', 'plr.c2', 'highest'],
                 ['/big', 'plr.c3', 'highest']));
$unselected{'plr.c1'} = 1;
$heavy{$_} = 1 for qw(plr.c2 plr.c3);

# --- what the worker did, as the exporter sent it
my @all = (keys %cheap, keys %heavy, keys %unselected);
my $ids = ids(@all);
is(join(' ', sort grep { ($ids->{$_}{status} // '') ne '200' } @all), '',
   'every request answered 200 (' . scalar(@all) . ')');
is(join(' ', sort grep { ($ids->{$_}{snapshot} // '') ne '1' }
                     keys %cheap, keys %heavy), '',
   'the selected requests were profiled ($spanprof_snapshot 1)');
is(join(' ', sort grep { ($ids->{$_}{snapshot} // '') eq '1' }
                     keys %unselected), '', '... the others were not');
like(read_file("$dir/error.log"), qr/delaying request/,
     'limit_req delayed tm.limited');
is(scalar(grep { $_->{uri} eq '/slow1' } $up_sub->requests), 5,
   'each SSI page made its first subrequest upstream');
my %tag_of = map { ($ids->{$_}{id} // '') => $_ } @all;

my (%spans, %samples);
my $end = time + 20;
while (time < $end) {
    my ($spans, $samples) = $recv->collect;
    %spans = %samples = ();
    for (@$spans) {
        my $tag = $tag_of{ $_->{traceId} } or next;
        # the entry span, not /bigproxy's /plain request (its child)
        $spans{$tag} = $_ unless $_->{parentSpanId};
    }
    push @{ $samples{ $tag_of{ $_->{labels}{trace_id} // '' } // '' } }, $_
        for @$samples;
    last if keys(%spans) == @all && !grep { !$samples{$_} } keys %heavy;
    sleep 0.2;
}
is(scalar(keys %spans), scalar(@all), 'every request\'s entry span');

sub heavy_frames {
    return grep { ($_->{function} // '') =~ /^(deflate|ngx_http_gzip_)/ }
        @{ $_[0]{frames} };
}

# Preconditions: the heavy work was done while the selected cheap request
# was open (its span's start and end around theirs).
for my $d (@drift) {
    my ($sel, @others) = @$d;
    my $s = $spans{$sel} or next;
    my @out = grep {
        my $o = $spans{$_};
        !$o || $o->{startTimeUnixNano} < $s->{startTimeUnixNano}
            || $o->{endTimeUnixNano} > $s->{endTimeUnixNano}
    } @others;
    is("@out", '', "$sel was open while the heavy requests were served");
}

# The functions a selected cheap request's samples were in, most first.
sub leaves {
    my %n;
    $n{ $_->{frames}[0]{function} // '?' }++ for @_;
    my @f = sort { $n{$b} <=> $n{$a} || $a cmp $b } keys %n;
    return join ', ', map { "$_ $n{$_}" } @f[0 .. ($#f < 5 ? $#f : 5)];
}

for my $tag (sort keys %cheap) {
    my @of = @{ $samples{$tag} // [] };
    is(scalar(grep { heavy_frames($_) } @of), 0,
       "$tag: no sample under its ids shows the heavy work done meanwhile "
       . 'for others (' . scalar(@of) . ' samples)');
    diag("$tag: " . leaves(@of)) if @of && $ENV{TEST_VERBOSE};
}
for my $tag (sort keys %heavy) {
    cmp_ok(scalar(grep { heavy_frames($_) } @{ $samples{$tag} // [] }),
           '>', 0, "$tag (selected, heavy): samples under its ids show "
                   . 'its gzip work');
}
is(join(' ', sort grep { $samples{$_} } keys %unselected), '',
   'no sample carries the ids of an unselected request');

# Sampling for a selected request stops when its span ends (SPEC 3), also
# with the next request of its connection already read (pipelining).
my @outside;
for my $tag (keys %cheap, keys %heavy) {
    my $span = $spans{$tag} or next;
    for (@{ $samples{$tag} // [] }) {
        my $ms = $_->{labels}{'source.event.time'} // -1;
        push @outside, $tag
            if $ms < int($span->{startTimeUnixNano} / 1e6) - 1
               || $ms > int($span->{endTimeUnixNano} / 1e6) + 1;
    }
}
is("@outside", '', 'every sample under a selected span\'s ids was taken '
                   . 'while it was open');

stop($master);
done_testing();
