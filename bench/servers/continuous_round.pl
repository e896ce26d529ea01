#!/usr/bin/perl
# What httpd's continuous-profiling round costs a child: its sampler
# thread lists the child's threads and reads /proc/self/task/TID/stat of
# each (open, read, close) to signal only the running ones, every
# interval. One event child with THREADS worker threads, idle, continuous
# profiling at INTERVAL ms, exporters none; prints the CPU time of the
# child's spanprof-sample thread over SECONDS (its schedstat, ns), per
# interval and per thread. Run by hand after `make build`, from the top of
# the tree:
#
#   perl bench/servers/continuous_round.pl THREADS INTERVAL_MS SECONDS
#
# (default 150 10000 60: ThreadsPerChild 150 at httpd's default
# interval, six rounds). When a round takes longer than the interval the
# rounds run back to back: then read the share of one CPU, not the
# per-round figures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use Time::HiRes qw(sleep time);
use Spanprof::Server qw(new_dir httpd_conf httpd_start stop wait_until
                        read_file);
use Spanprof::Procs qw(family);

my $THREADS = shift // 150;
my $MS = shift // 10000;
my $SECONDS = shift // 60;

my $dir = new_dir();
my $port = httpd_conf($dir, one_child => $THREADS, extra => <<"CONF");
SpanprofProfiler On
SpanprofProfilerCallStackInterval ${MS}ms
SpanprofTracesExporter none
SpanprofLogsExporter none
CONF
my $pid = httpd_start($dir, $port) or die "httpd did not start\n";

# The child and its sampler thread.
my ($child, $tid);
wait_until(sub {
    for my $p (family($pid)) {
        for my $task (glob "/proc/$p->{pid}/task/*") {
            next unless (read_file("$task/comm") // '') =~ /^spanprof-sample/;
            $child = $p->{pid};
            ($tid) = $task =~ m{(\d+)$};
        }
    }
    return $tid;
}, 20) or do { stop($pid); die "no spanprof-sample thread\n" };
my $tasks = () = glob "/proc/$child/task/*";

sub cpu_ns { (split ' ', read_file("/proc/$child/task/$tid/schedstat"))[0] }

sleep 2 * $MS / 1000 + 1;    # past the first rounds
my ($c0, $t0) = (cpu_ns(), time);
sleep $SECONDS;
my ($c1, $t1) = (cpu_ns(), time);
stop($pid);

my $us = ($c1 - $c0) / 1000;
my $intervals = ($t1 - $t0) * 1000 / $MS;
printf "ThreadsPerChild %d (%d threads in the child), interval %d ms, "
    . "%.1f s: sampler thread %.0f us of CPU, %.1f us per interval, "
    . "%.2f us per thread per interval, %.4f %% of one CPU\n",
    $THREADS, $tasks, $MS, $t1 - $t0, $us, $us / $intervals,
    $us / $intervals / $tasks, $us / 1e4 / ($t1 - $t0);
