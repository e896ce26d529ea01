#!/usr/bin/perl
# Continuous profiling (SPLUNK_PROFILER_ENABLED) in real servers with
# several worker processes: httpd's worker and event MPMs with three
# children of four threads, and prefork. Unselected (but recorded) CPU-heavy
# requests keep the children busy; every child that served them must have
# continuous samples of its own, in a ResourceLogs with its process.pid,
# from the threads that did the work, never from spanprof's own thread.
#
# httpd's threaded MPMs block every signal in the threads they make, after
# child_init, where the sampler starts: the sampler's SIGPROF stayed
# pending in every one of them, and continuous profiling of a worker or
# event child sent nothing at all (threads that served a selected request,
# whose snapshot timer unblocked the signal, were the only exception).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop
                        httpd_conf httpd_cmd text_file);
use Spanprof::Receiver qw(attribute);

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;
plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

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

# $n requests at a time, $rounds times, none selected: the answers' codes.
sub load {
    my ($url, $n, $rounds) = @_;
    my @codes;
    for (1 .. $rounds) {
        my @cmd = map { "curl -s -o /dev/null -w '%{http_code}\\n' -m 30 "
                        . "-H 'Accept-Encoding: gzip' "
                        . "-H 'baggage: splunk.trace.snapshot.volume=off' "
                        . "$url &" } 1 .. $n;
        push @codes, split /\n/, `(@cmd wait) 2>&1`;
    }
    return @codes;
}

# The continuous LogRecords' samples, each with the process.pid of its
# ResourceLogs; the spans, each with its resource's process.pid.
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
                    next unless (attribute($lr->{attributes},
                        'profiling.instrumentation.source') // '')
                        eq 'continuous';
                    my $p = $lr->{pprof}{resolved} or next;
                    push @samples, map { { %$_, pid => $pid,
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
Alias /big $dir/big.txt
<Location /big>
    SetOutputFilter DEFLATE
</Location>
<Directory $dir>
    Require all granted
</Directory>
EXTRA
    my $parent = spawn(env_for($recv), "$dir/stderr.log", httpd_cmd($dir));
    ok(wait_for_port($port), "$mpm: httpd listens")
        or diag(read_file("$dir/error.log"));
    sleep 0.5;
    my @codes = load("http://127.0.0.1:$port/big", 12, 3);
    is(scalar(grep { $_ eq '200' } @codes), 36, "$mpm: 36 requests answered 200");

    my ($samples, $spans, $repeated) = ([], [], 0);
    my %served;
    my $end = time + 15;
    while (time < $end) {
        ($samples, $spans, $repeated) = gather($recv);
        %served = map { $_->{pid} => 1 } @$spans;
        my %seen = map { $_->{pid} => 1 } grep { heavy($_) } @$samples;
        last if @$spans >= 36 && !grep { !$seen{$_} } keys %served;
        sleep 0.3;
    }
    stop($parent);
    is(scalar @$spans, 36, "$mpm: 36 spans");
    ok(keys %served >= 2, "$mpm: more than one child served them")
        or diag(join ' ', keys %served);
    my %heavy_by_pid;
    $heavy_by_pid{ $_->{pid} }++ for grep { heavy($_) } @$samples;
    is_deeply([ sort grep { !$heavy_by_pid{$_} } keys %served ], [],
              "$mpm: every child that served requests has continuous "
              . 'samples of its deflate work')
        or diag('samples by pid: '
                . join(' ', map { "$_=$heavy_by_pid{$_}" }
                            sort keys %heavy_by_pid));
    is((grep { !$served{ $_->{pid} // '' } && heavy($_) } @$samples), 0,
       "$mpm: no deflate sample in the ResourceLogs of a process that "
       . 'served nothing');
    is($repeated, 0, "$mpm: one ResourceLogs per process in a request");
    is((grep { ($_->{labels}{'thread.name'} // '') =~ /^spanprof/ }
        @$samples), 0, "$mpm: spanprof's own threads are never sampled");
    is((grep { $_->{period} != $INTERVAL * 1e6 } @$samples), 0,
       "$mpm: every continuous profile's period is the interval");
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
