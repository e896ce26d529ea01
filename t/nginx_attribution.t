#!/usr/bin/perl
# Attribution in nginx's event loop: one worker serves a selected request
# and, at the same time, unselected CPU-heavy ones (gzip at level 9). The
# selected request waits for a slow upstream while the worker compresses
# for the others, so every sample the CPU-time timer takes in that time is
# a sample of the heavy work: none of them may carry the selected span's
# ids. The reverse (heavy requests selected, a cheap one not) shows the
# heavy work under the heavy requests' ids, so the check can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop
                        nginx_conf nginx_cmd gzip_location);
use Spanprof::Receiver;
use Spanprof::Upstream;

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $port = nginx_conf($dir, connections => 256,
    http => '    add_header X-Trace $spanprof_trace_id always;',
    server => "location /slow { proxy_pass http://127.0.0.1:${\ $up->port}; }
        " . gzip_location($dir, lines => 60000));

my $master = spawn({
    $recv->snapshot_env(schedule_delay => '200'),
}, "$dir/stderr.log", nginx_cmd($dir));
ok(wait_for_port($port, 20), 'nginx listens')
    or BAIL_OUT(read_file("$dir/error.log"));

my $serial = 0;

# Starts curl in the background; returns the file its headers go to.
sub request {
    my ($path, $volume) = @_;
    my $out = "$dir/headers." . ++$serial;
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        exec 'curl', '-s', '-m', '30', '-D', $out, '-o', '/dev/null',
            '-H', 'Accept-Encoding: gzip',
            '-H', "baggage: splunk.trace.snapshot.volume=$volume",
            "http://127.0.0.1:$port$path";
        exit 127;
    }
    return { pid => $pid, out => $out, path => $path };
}

# Waits for the requests; returns their trace ids (in order), or undef
# for one that did not answer 200.
sub finish {
    my @ids;
    for my $r (@_) {
        waitpid($r->{pid}, 0);
        my $h = read_file($r->{out}) // '';
        push @ids, $h =~ m{^HTTP/\S+ 200} && $h =~ /^X-Trace: ([0-9a-f]{32})/mi
            ? $1 : undef;
    }
    return @ids;
}

sub heavy_frame {
    my ($sample) = @_;
    return grep { ($_->{function} // '') =~ /^(deflate|ngx_http_gzip_)/ }
        @{ $sample->{frames} };
}

# Samples by trace id, once the exporter has sent what there is.
sub samples_by_trace {
    my ($want) = @_;
    my %by;
    my $end = time + 20;
    while (time < $end) {
        my (undef, $samples) = $recv->collect;
        %by = ();
        push @{ $by{ $_->{labels}{trace_id} // '' } }, $_ for @$samples;
        last if $want->(\%by);
        sleep 0.2;
    }
    return \%by;
}

# --- a selected cheap request while unselected heavy ones keep the worker
# (the eight took over 3 s once on a busy machine: 10 s of upstream)
my $slow = request('/slow10', 'highest');
sleep 0.3;
my @heavy = map { request('/big', 'off') } 1 .. 8;
my @heavy_ids = finish(@heavy);
is(waitpid($slow->{pid}, POSIX::WNOHANG()), 0,
   'the heavy requests were served while the selected one was still open');
my ($slow_id) = finish($slow);
is(scalar(grep { defined } @heavy_ids), 8,
   'the unselected heavy requests answered 200');
ok($slow_id, 'the selected request through the slow upstream answered 200');

# CPU time of the master's worker processes (utime + stime), in ns.
sub workers_cpu_ns {
    my $tck = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
    my $ns = 0;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my ($pid) = $stat =~ m{/proc/(\d+)/};
        my $cmd = read_file("/proc/$pid/cmdline") // '';
        my $st = read_file($stat) // next;
        my @f = split ' ', substr($st, rindex($st, ')') + 2);
        # after "(comm) ": state ppid ...; utime and stime are 12 and 13
        next unless $f[1] == $master && $cmd =~ /worker process/;
        $ns += ($f[11] + $f[12]) * 1e9 / $tck;
    }
    return $ns;
}

# --- the reverse: heavy requests selected, a cheap one not
my $cheap = request('/slow', 'off');
sleep 0.3;
my $cpu_before = workers_cpu_ns();
my @sel = map { request('/big', 'highest') } 1 .. 4;
my @sel_ids = finish(@sel);
my $cpu_sel = workers_cpu_ns() - $cpu_before;
my ($cheap_id) = finish($cheap);
is(scalar(grep { defined } @sel_ids), 4, 'the selected heavy requests answered 200');

my $by = samples_by_trace(sub {
    my ($by) = @_;
    return (grep { $by->{$_ // ''} } @sel_ids) == @sel_ids;
});

my @of_slow = @{ $by->{ $slow_id // 'x' } // [] };
is(scalar(grep { heavy_frame($_) } @of_slow), 0,
   'no sample under the selected cheap request\'s ids shows the gzip work '
   . 'done meanwhile for others (' . scalar(@of_slow) . ' samples)');
my %slow_spans = map { $_->{labels}{span_id} // '' => 1 } @of_slow;
ok(keys(%slow_spans) <= 1, 'its samples carry one span id');
is(scalar(map { @{ $by->{$_} // [] } } grep { defined } @heavy_ids, $cheap_id),
   0, 'no sample carries the ids of an unselected request');

my @of_sel = map { @{ $by->{$_ // 'x'} // [] } } @sel_ids;
cmp_ok(scalar(grep { heavy_frame($_) } @of_sel), '>', 0,
       'the selected heavy requests\' samples show their gzip work');
# The CPU-time timer fires on the kernel's tick (every 4 ms at 250 Hz):
# at 1 ms each sample must weigh the intervals it stands for, or the
# profile's CPU comes to about a quarter of what the worker spent. What
# nginx does before the phases (reading the request) is not attributed.
my $cpu_prof = 0;
$cpu_prof += $_->{values}[1] // 0 for @of_sel;
my $ratio = $cpu_sel > 0 ? $cpu_prof / $cpu_sel : 0;
ok($ratio >= 0.5 && $ratio <= 2,
   sprintf('cpu/nanoseconds of the selected heavy requests\' samples '
           . '(%.0f ms) is within a factor of 2 of the worker\'s CPU time '
           . '(%.0f ms)', $cpu_prof / 1e6, $cpu_sel / 1e6));
my $spread = grep { my $id = $_; grep { heavy_frame($_) } @{ $by->{$id // 'x'} // [] } }
    @sel_ids;
cmp_ok($spread, '>=', 3, "gzip frames under $spread of the 4 heavy requests' ids");

# --- sampling of a selected request stops when its span ends (SPEC 3),
# also once no selected request is left and the worker's phase checkers
# are nginx's own again: heavy unselected requests after the selected
# ones must not carry their ids, and every sample under a selected span's
# ids was taken between the span's start and end.
my @after = map { request('/big', 'off') } 1 .. 4;
my @after_ids = finish(@after);
is(scalar(grep { defined } @after_ids), 4,
   'unselected heavy requests after the selected ones answered 200');
my %want_span;
my $spans = [];
my $end = time + 20;
while (time < $end) {
    ($spans) = $recv->collect;
    %want_span = map { $_->{spanId} => $_ } grep {
        my $t = $_->{traceId}; grep { defined && $_ eq $t } @sel_ids, $slow_id
    } @$spans;
    last if keys(%want_span) == @sel_ids + 1;
    sleep 0.2;
}
is(scalar(keys %want_span), @sel_ids + 1, 'the selected requests\' spans');
$by = samples_by_trace(sub { 1 });
is(scalar(map { @{ $by->{$_} // [] } } grep { defined } @after_ids), 0,
   'no sample carries the ids of the unselected requests that came after');
my ($in, $out) = (0, 0);
for my $s (map { @{ $by->{$_ // 'x'} // [] } } @sel_ids, $slow_id) {
    my $span = $want_span{ $s->{labels}{span_id} // '' } or next;
    my $ms = $s->{labels}{'source.event.time'} // -1;
    if ($ms >= int($span->{startTimeUnixNano} / 1e6) - 1
        && $ms <= int($span->{endTimeUnixNano} / 1e6) + 1)
    {
        $in++;
    } else {
        $out++;
    }
}
cmp_ok($in, '>', 0, "samples under the selected spans' ids ($in)");
is($out, 0, '... all of them taken while their span was open');

stop($master);
done_testing();
