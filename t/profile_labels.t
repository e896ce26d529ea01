#!/usr/bin/perl
# What real nginx's profiles say, against SPEC 4 and 5, with a stack depth
# that cuts some stacks and not others: the per-sample labels (ids as
# lowercase hex of a span of the worker, its time within that span, the
# worker's thread, a period of at least a millisecond),
# profiling.data.total.frame.count (the locations of every sample of the
# record), sample and period types and the period, the cut stacks marked
# thread.stack.truncated and only they (an uncut stack reaches _start), the
# mapping of /usr/sbin/nginx (its path and GNU build id), frames of the
# stripped binary named only by a symbol that contains them, and Google's
# pprof reading every profile. Then the deprecated text format: one
# LogRecord per stack with the span's ids, its time and period.
# source.event.period is checked as what it is, the real time since the
# worker's previous sample (the time between the two), not as at least
# the interval: a CPU-time timer fires on the kernel's tick, and a worker
# preempted as its signal came takes that sample late, so its next one can
# come well under a millisecond after it. The sampler read a sample's time
# after its unwind, its period before: under load milliseconds apart, so
# that the times of two samples disagreed with the period between them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use MIME::Base64 qw(decode_base64);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file spawn wait_for_port
                        stop nginx_conf nginx_cmd gzip_location);
use Spanprof::Receiver qw(attribute);

Spanprof::Receiver::skip_unless_ready(curl => 1);
my $go = `sh -c 'command -v go' 2>/dev/null`;
chomp $go;

my $DEPTH = 24;
my $NGINX = '/usr/sbin/nginx';

# Starts nginx (2 workers) with %extra in its environment, sends six
# selected gzip requests, two at a time; returns the receiver's requests
# and the spans, once every span and a few samples arrived. Each request
# gzips 6.5 MB, about 40 ms of CPU: the 20 samples checked for come with
# room to spare also when, under load, fewer and heavier samples (timer
# overruns) stand for that CPU time.
sub run {
    my (%extra) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir, workers => 2,
                          server => gzip_location($dir, lines => 120000));
    my $master = spawn({
        $recv->snapshot_env(schedule_delay => '200'),
        SPLUNK_PROFILER_MAX_STACK_DEPTH => $DEPTH,
        %extra,
    }, "$dir/stderr.log", nginx_cmd($dir));
    wait_for_port($port) or BAIL_OUT(read_file("$dir/error.log"));
    for (1 .. 3) {
        `(for i in 1 2; do curl -s -o /dev/null -m 30 -H 'Accept-Encoding: gzip' -H 'baggage: splunk.trace.snapshot.volume=highest' http://127.0.0.1:$port/big & done; wait)`;
    }
    my $end = time + 15;
    my ($spans, @reqs);
    while (time < $end) {
        @reqs = $recv->requests;
        ($spans) = $recv->collect;
        my $logs = grep { $_->{signal} eq 'logs' } @reqs;
        last if @$spans >= 6 && $logs >= 2 && time > $end - 13;
        sleep 0.2;
    }
    stop($master);
    @reqs = $recv->requests;
    ($spans) = $recv->collect;
    $recv->stop;
    return (\@reqs, $spans, $dir);
}

# Samples [pid, time in ms, source.event.period] whose period is not the
# time since the previous sample of its worker, give or take $slack ms
# (the rounding of the two), or for a worker's first sample, not at most
# the time since that worker's first span began (its sampling began with
# that span). Each run has fresh workers: all their samples are here.
sub periods_bad {
    my ($spans, $slack, @samples) = @_;
    my (%first, %last, $bad);
    for my $sp (@$spans) {
        my $pid = attribute($sp->{resource}{attributes}, 'process.pid');
        my $ms = $sp->{startTimeUnixNano} / 1e6;
        $first{$pid} = $ms if !defined $first{$pid} || $ms < $first{$pid};
    }
    for my $s (sort { $a->[1] <=> $b->[1] } @samples) {
        my ($pid, $ms, $period) = @$s;
        my $ok = defined $period && $period >= 0 && (defined $last{$pid}
            ? abs($period - ($ms - $last{$pid})) <= $slack
            : defined $first{$pid} && $period <= $ms - $first{$pid} + $slack);
        $bad++, diag("pid $pid at $ms ms: period " . ($period // 'none')
                     . ' after ' . ($last{$pid} // 'none')) unless $ok;
        $last{$pid} = $ms;
    }
    return $bad // 0;
}

# Every LogRecord with the process.pid of its ResourceLogs.
sub records {
    my ($reqs) = @_;
    my @r;
    for my $req (grep { $_->{signal} eq 'logs' } @$reqs) {
        for my $rl (@{ $req->{request}{resourceLogs} // [] }) {
            my $pid = attribute($rl->{resource}{attributes}, 'process.pid');
            for my $sl (@{ $rl->{scopeLogs} // [] }) {
                push @r, map { { %$_, pid => $pid } }
                    @{ $sl->{logRecords} // [] };
            }
        }
    }
    return @r;
}

# /usr/sbin/nginx's functions by address: [start, size, name] from its
# dynamic symbol table (it has no other: Debian strips it).
my (@syms, $build_id);
for (`readelf -W --dyn-syms $NGINX`) {
    my @f = split ' ';
    next unless @f >= 8 && $f[0] =~ /^\d+:$/ && $f[3] eq 'FUNC' && hex $f[1];
    (my $name = $f[7]) =~ s/@.*//;
    push @syms, [hex $f[1], $f[2] =~ /^0x/ ? hex $f[2] : $f[2], $name];
}
($build_id) = `readelf -n $NGINX` =~ /Build ID: ([0-9a-f]+)/;
my @loads = map { /^\s+LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+\S+\s+0x([0-9a-f]+)/
                  ? [hex $1, hex $2, hex $3] : () } `readelf -lW $NGINX`;

# The ELF address of a file offset of nginx.
sub vaddr {
    my ($off) = @_;
    for (@loads) {
        return $off - $_->[0] + $_->[1]
            if $off >= $_->[0] && $off < $_->[0] + $_->[2];
    }
    return undef;
}

my ($reqs, $spans, $dir) = run();
my %span = map { $_->{spanId} => $_ } @$spans;
is(scalar @$spans, 6, 'six spans');
my @recs = grep { $_->{pprof} } records($reqs);
ok(@recs >= 2, 'profiles arrived') or diag(scalar @recs);

my ($labels_bad, $frames_bad, $types_bad, $cut_bad, $nsamples) = (0) x 5;
my @periods;
my ($named, $misnamed, $map_ok, $cut, $whole) = (0) x 5;
for my $lr (@recs) {
    my $res = $lr->{pprof}{resolved};
    my $prof = $lr->{pprof}{profile};
    my $locations = 0;
    $locations += @{ $_->{locationId} } for @{ $prof->{sample} };
    $frames_bad++ if (attribute($lr->{attributes},
                                'profiling.data.total.frame.count') // -1)
                     != $locations;
    $types_bad++ unless "@{ $res->{sample_types}[0] } @{ $res->{sample_types}[1] }"
                        eq 'samples count cpu nanoseconds'
        && "@{ $res->{period_type} }" eq 'cpu nanoseconds'
        && $res->{period} == 1e6
        && attribute($lr->{attributes}, 'profiling.instrumentation.source')
           eq 'snapshot';
    for my $m (@{ $res->{mappings} }) {
        $map_ok++ if $m->{file} eq $NGINX && $m->{build_id} eq $build_id;
    }
    for my $i (0 .. $#{ $res->{samples} }) {
        my $s = $res->{samples}[$i];
        my $l = $s->{labels};
        my $sp = $span{ $l->{span_id} // '' };
        $nsamples++;
        $labels_bad++, diag(explain $l) unless
            ($l->{trace_id} // '') =~ /^[0-9a-f]{32}\z/
            && ($l->{span_id} // '') =~ /^[0-9a-f]{16}\z/
            && $sp && $sp->{traceId} eq $l->{trace_id}
            && attribute($sp->{resource}{attributes}, 'process.pid')
               eq $lr->{pid}
            && $l->{'source.event.time'} >= int($sp->{startTimeUnixNano} / 1e6)
            && $l->{'source.event.time'} <= $sp->{endTimeUnixNano} / 1e6 + 1
            && $l->{'thread.id'} == $lr->{pid}
            && $l->{'thread.os.id'} == $lr->{pid}
            && $l->{'thread.name'} eq 'nginx'
            && $l->{'thread.state'} eq 'running';
        push @periods, [$lr->{pid}, $l->{'source.event.time'},
                        $l->{'source.event.period'}];
        # A stack that was not cut goes down to the program's entry.
        my $n = @{ $prof->{sample}[$i]{locationId} };
        my $last = $s->{frames}[-1]{function} // '';
        if (($l->{'thread.stack.truncated'} // '') eq 'true') {
            $cut++;
            $cut_bad++ unless $n == $DEPTH;
        } else {
            $whole++;
            $cut_bad++ unless $n <= $DEPTH && $last eq '_start';
        }
        for my $k (0 .. $#{ $s->{frames} }) {
            my $f = $s->{frames}[$k];
            next unless ($f->{mapping} // '') eq $NGINX
                && ($f->{function} // 'unknown') ne 'unknown';
            my ($m) = grep { $_->{file} eq $NGINX } @{ $res->{mappings} };
            # A return address names the call before it.
            my $a = vaddr($f->{address} - $m->{memory_start}
                          + $m->{file_offset} - ($k > 0 ? 1 : 0));
            $named++;
            $misnamed++, diag("$f->{function} at " . sprintf('%#x', $a // 0))
                unless defined $a && grep {
                    $_->[2] eq $f->{function} && $a >= $_->[0]
                    && $a < $_->[0] + $_->[1] } @syms;
        }
    }
}
ok($nsamples >= 20, 'samples arrived') or diag($nsamples);
is($labels_bad, 0, 'every sample: trace_id and span_id in lowercase hex of '
   . 'a span of its worker, its time within that span, the worker\'s '
   . 'thread, running');
# source.event.time is whole ms (cut), the period rounded to the ms
is(periods_bad($spans, 1.5, @periods), 0, 'every sample: source.event.period '
   . 'is the time since its worker\'s previous sample');
is($frames_bad, 0, 'profiling.data.total.frame.count is the locations of '
   . 'all samples of its record');
is($types_bad, 0, 'samples/count and cpu/nanoseconds, period type '
   . 'cpu/nanoseconds, period 1 ms');
is($cut_bad, 0, "a truncated stack has $DEPTH frames; every other one "
   . 'reaches _start');
diag("$cut cut, $whole whole");
ok($map_ok >= @recs, "$NGINX is mapped with its path and GNU build id");
ok($named > 0, "frames of $NGINX are named");
is($misnamed, 0, "each by a symbol of $NGINX that contains it");

SKIP: {
    skip 'go is not installed', 1 unless $go;
    local $ENV{HOME} = $dir;
    local $ENV{PPROF_TMPDIR} = $dir;
    local $ENV{PPROF_BINARY_PATH} = "$dir/no-binaries";
    my $failed = 0;
    for my $i (0 .. $#recs) {
        write_file("$dir/p$i.pb.gz",
                   decode_base64($recs[$i]{body}{stringValue}));
        for my $view ('-raw', '-top') {
            my $out = `go tool pprof $view $dir/p$i.pb.gz 2>&1`;
            $failed++, diag($out) if $? != 0;
        }
    }
    is($failed, 0, 'go tool pprof -raw and -top read every profile');
}

# --- the deprecated text format
($reqs, $spans) = run(SPANPROF_PROFILING_FORMAT => 'text');
%span = map { $_->{spanId} => $_ } @$spans;
my @text = records($reqs);
ok(@text >= 20, 'text: a LogRecord per stack arrived') or diag(scalar @text);
my $bad = 0;
@periods = ();
for my $lr (@text) {
    my $sp = $span{ $lr->{spanId} // '' };
    my $ms = $lr->{timeUnixNano} / 1e6;
    my $body = $lr->{body}{stringValue} // '';
    my @frames = $body =~ /^\tat /mg;
    $bad++, diag(explain $lr) unless
        attribute($lr->{attributes}, 'profiling.data.format') eq 'text'
        && $sp && $sp->{traceId} eq ($lr->{traceId} // '')
        && $ms >= $sp->{startTimeUnixNano} / 1e6 - 1
        && $ms <= $sp->{endTimeUnixNano} / 1e6 + 1
        && $body =~ /^"nginx" #$lr->{pid} /
        && @frames >= 1;
    push @periods, [$lr->{pid}, $ms,
                    attribute($lr->{attributes}, 'source.event.period')];
}
is($bad, 0, 'text: each with the TraceId and SpanId of a span, its Time '
   . 'within that span, the worker\'s thread, frames');
# Time in ns, the period rounded to the ms: 0.5 apart, and a little for the
# two clocks the sampler reads one after the other
is(periods_bad($spans, 0.75, @periods), 0, 'text: source.event.period is the '
   . 'time since its worker\'s previous sample');

done_testing();
