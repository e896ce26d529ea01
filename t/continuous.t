#!/usr/bin/perl
# Continuous profiling (SPLUNK_PROFILER_ENABLED) in real servers with
# several worker processes: nginx with worker_processes 3, httpd's worker
# and event MPMs with three children of four threads, and prefork.
# CPU-heavy requests (gzip, deflate) keep them busy. Every worker or child
# that served requests must have continuous samples of its own, in a
# ResourceLogs with its process.pid, from the threads that did the work,
# never from spanprof's own thread (SPEC 4, 5).
#
# httpd's threaded MPMs block every signal in the threads they make, after
# child_init, where the sampler starts: the sampler's SIGPROF stayed
# pending in every one of them, and continuous profiling of a worker or
# event child sent nothing at all (threads that served a selected request,
# whose snapshot timer unblocked the signal, were the only exception).
#
# A sample taken while a thread works for a recorded span carries its ids
# (SPEC 4), selected or not: every continuous sample of the compression
# work carries the ids of a span of its process, taken while that span
# lived; snapshot samples only ever carry a selected span's. Continuous
# samples of the requests that were recorded but not selected carried no
# ids in either server: only selected spans were told to the sampler.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop
                        httpd_conf httpd_cmd nginx_conf nginx_cmd text_file
                        gzip_location deflate_location);
use Spanprof::Receiver qw(attribute);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $INTERVAL = 20;      # ms, the continuous interval

sub env_for {
    my ($recv) = @_;
    return {
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        SPLUNK_PROFILER_ENABLED => 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL => $INTERVAL,
        SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
        OTEL_BSP_SCHEDULE_DELAY => '200',
    };
}

# $n requests at a time, $rounds times; every $every-th selected (none
# when 0): the answers' codes.
sub load {
    my ($url, $n, $rounds, $every) = @_;
    my @codes;
    for (1 .. $rounds) {
        my @cmd = map { my $v = $every && $_ % $every == 0 ? 'highest' : 'off';
                        "curl -s -o /dev/null -w '%{http_code}\\n' -m 30 "
                        . "-H 'Accept-Encoding: gzip' "
                        . "-H 'baggage: splunk.trace.snapshot.volume=$v' "
                        . "$url &" } 1 .. $n;
        push @codes, split /\n/, `(@cmd wait) 2>&1`;
    }
    return @codes;
}

# The samples, each with the process.pid of its ResourceLogs, its
# record's source and period; the spans, each with its resource's
# process.pid; how often a request had two ResourceLogs of one pid.
sub gather {
    my ($recv) = @_;
    my (@samples, @spans, $repeated);
    for my $req ($recv->requests) {
        if ($req->{signal} eq 'traces') {
            for my $rs (@{ $req->{request}{resourceSpans} // [] }) {
                my $pid = attribute($rs->{resource}{attributes},
                                    'process.pid');
                for my $ss (@{ $rs->{scopeSpans} // [] }) {
                    push @spans, map { { %$_, pid => $pid } }
                        @{ $ss->{spans} // [] };
                }
            }
            next;
        }
        my %pids;
        for my $rl (@{ $req->{request}{resourceLogs} // [] }) {
            my $pid = attribute($rl->{resource}{attributes}, 'process.pid');
            $repeated++ if $pids{$pid}++;
            for my $sl (@{ $rl->{scopeLogs} // [] }) {
                for my $lr (@{ $sl->{logRecords} // [] }) {
                    my $src = attribute($lr->{attributes},
                        'profiling.instrumentation.source') // '';
                    my $p = $lr->{pprof}{resolved} or next;
                    push @samples, map { { %$_, pid => $pid, source => $src,
                                           period => $p->{period} } }
                        @{ $p->{samples} };
                }
            }
        }
    }
    return (\@samples, \@spans, $repeated // 0);
}

sub heavy {
    my ($s) = @_;
    return grep { ($_->{function} // '') eq 'deflate' } @{ $s->{frames} };
}

# Waits for $n spans and a continuous deflate sample of every process that
# sent spans; then checks what arrived. $what names the server.
sub check {
    my ($what, $recv, $n, $stop) = @_;
    my ($all, $spans, $repeated) = ([], [], 0);
    my %served;
    my $end = time + 15;
    while (time < $end) {
        ($all, $spans, $repeated) = gather($recv);
        %served = map { $_->{pid} => 1 } @$spans;
        my %seen = map { $_->{pid} => 1 }
                   grep { $_->{source} eq 'continuous' && heavy($_) } @$all;
        last if @$spans >= $n && !grep { !$seen{$_} } keys %served;
        sleep 0.3;
    }
    $stop->();
    my @samples = grep { $_->{source} eq 'continuous' } @$all;
    my @snapshot = grep { $_->{source} eq 'snapshot' } @$all;
    is(scalar @$spans, $n, "$what: $n spans");
    ok(keys %served >= 2, "$what: more than one process served them")
        or diag(join ' ', keys %served);
    my %heavy_by_pid;
    $heavy_by_pid{ $_->{pid} }++ for grep { heavy($_) } @samples;
    is_deeply([ sort grep { !$heavy_by_pid{$_} } keys %served ], [],
              "$what: every process that served requests has continuous "
              . 'samples of its compression work')
        or diag('samples by pid: '
                . join(' ', map { "$_=$heavy_by_pid{$_}" }
                            sort keys %heavy_by_pid));
    is((grep { !$served{ $_->{pid} // '' } && heavy($_) } @samples), 0,
       "$what: no compression sample in the ResourceLogs of a process that "
       . 'served nothing');
    is($repeated, 0, "$what: one ResourceLogs per process in a request");
    is((grep { ($_->{labels}{'thread.name'} // '') =~ /^spanprof/ }
        @$all), 0, "$what: spanprof's own threads are never sampled");
    is((grep { $_->{period} != $INTERVAL * 1e6 } @samples), 0,
       "$what: every continuous profile's period is the interval");

    # Attribution.
    my %span = map { $_->{spanId} => $_ } @$spans;
    my @wrong = grep {
        my $sp = $span{ $_->{labels}{span_id} // '' };
        my $t = $_->{labels}{'source.event.time'};
        !$sp || $sp->{traceId} ne $_->{labels}{trace_id}
            || $sp->{pid} ne $_->{pid}
            || $t < int($sp->{startTimeUnixNano} / 1e6)
            || $t > $sp->{endTimeUnixNano} / 1e6 + 1
    } grep { heavy($_) } @samples;
    is(scalar @wrong, 0, "$what: every continuous sample of the compression "
       . 'work carries the ids of a span of its process, while it lived')
        or diag(scalar(@wrong) . ' of '
                . scalar(grep { heavy($_) } @samples) . ' do not');
    my %carried;
    $carried{ $_->{labels}{span_id} }++
        for grep { $_->{labels}{span_id} } @samples;
    my @unselected = grep {
        !attribute($_->{attributes}, 'splunk.snapshot.profiling')
    } @$spans;
    my $with = grep { $carried{ $_->{spanId} } } @unselected;
    ok(@unselected && $with * 2 >= @unselected,
       "$what: most unselected spans have continuous samples with their ids")
        or diag("$with of " . scalar(@unselected));
    my %selected = map { $_->{spanId} => 1 }
        grep { attribute($_->{attributes}, 'splunk.snapshot.profiling') }
        @$spans;
    is((grep { !$selected{ $_->{labels}{span_id} // '' } } @snapshot), 0,
       "$what: snapshot samples carry only selected spans' ids");
    return \@samples;
}

# --- nginx, three workers; a third of the requests selected, sampled at
# 10 ms by the snapshot profiler too
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir, workers => 3, connections => 256,
        server => gzip_location($dir, lines => 120000));
    my $master = spawn({ %{ env_for($recv) },
                         SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
                         SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '10' },
                       "$dir/stderr.log", nginx_cmd($dir));
    ok(wait_for_port($port), 'nginx listens')
        or diag(read_file("$dir/error.log"));
    my @codes = load("http://127.0.0.1:$port/big", 12, 3, 3);
    is(scalar(grep { $_ eq '200' } @codes), 36,
       'nginx: 36 requests answered 200');
    my $samples = check('nginx', $recv, 36, sub { stop($master) });
    is((grep { $_->{labels}{'thread.os.id'} != $_->{pid}
               || $_->{labels}{'thread.id'} != $_->{pid} } @$samples), 0,
       'nginx: every sample is of its worker\'s one thread');
    $recv->stop;
}

for my $mpm (qw(worker event prefork)) {
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    text_file("$dir/big.txt", 120000);
    my $mods = '/usr/lib/apache2/modules';
    my $threads = $mpm eq 'prefork' ? <<'PREFORK' : <<'THREADS';
MinSpareServers 3
MaxSpareServers 10
PREFORK
ThreadsPerChild 4
ThreadLimit 4
MinSpareThreads 4
MaxSpareThreads 64
THREADS
    my $port = httpd_conf($dir, mpm => $mpm, extra => <<"EXTRA");
LoadModule deflate_module $mods/mod_deflate.so
LoadModule filter_module $mods/mod_filter.so
LoadModule alias_module $mods/mod_alias.so
StartServers 3
ServerLimit 16
MaxRequestWorkers 48
$threads
${\ deflate_location($dir) }
EXTRA
    my $parent = spawn(env_for($recv), "$dir/stderr.log", httpd_cmd($dir));
    ok(wait_for_port($port), "$mpm: httpd listens")
        or diag(read_file("$dir/error.log"));
    sleep 0.5;
    my @codes = load("http://127.0.0.1:$port/big", 12, 3, 0);
    is(scalar(grep { $_ eq '200' } @codes), 36, "$mpm: 36 requests answered 200");

    my $samples = check($mpm, $recv, 36, sub { stop($parent) });
    if ($mpm eq 'prefork') {
        is((grep { $_->{labels}{'thread.os.id'} != $_->{pid} } @$samples), 0,
           'prefork: every sample is of the child\'s one thread');
    } else {
        ok((grep { $_->{labels}{'thread.os.id'} != $_->{pid} } @$samples),
           "$mpm: samples of the children's worker threads");
    }
    $recv->stop;
}

done_testing();
