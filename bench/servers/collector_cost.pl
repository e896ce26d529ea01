#!/usr/bin/perl
# How much of nginx's tracing-only drop under wrk is the collector's: nginx
# serving the 1 KiB file with tracing only (both profilers off), its
# exporter sending to the OTLP receiver (t/receiver, not decoding) pinned
# to wrk's CPU, to the receiver pinned to the server's CPU, or to a port
# nobody listens on (the exporter reads, encodes and drops), against bare
# nginx; interleaved in rounds, as run.pl does. Run by hand after
# `make build`, from the top of the tree, on a quiet machine:
#
#   perl bench/servers/collector_cost.pl [ROUNDS]
#
# The server (all its processes) runs on CPU 0, wrk (-t1 -c8, keep-alive,
# BENCH_SECONDS, default 5) on CPU 1. Reported per configuration: each
# round's requests/s and p99, then the median requests/s and its ratio to
# bare.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir write_file free_port spawn wait_for_port
                        stop nginx_conf nginx_cmd);
use Spanprof::Receiver;

my $ROUNDS = shift // 3;
my $DURATION = $ENV{BENCH_SECONDS} // 5;
my @MODES = ('bare', 'receiver on wrk\'s CPU', 'no collector',
             'receiver on the server\'s CPU');

sub pin {
    my ($cpu, $pid) = @_;
    system("taskset -a -p -c $cpu $pid >/dev/null 2>&1");
}

sub wrk {
    my ($port) = @_;
    my $cmd = "taskset -c 1 wrk -t1 -c8 -d${DURATION}s --latency "
        . "http://127.0.0.1:$port/small.html 2>&1";
    my $out = `$cmd`;
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($v, $unit) = $out =~ /^\s+99%\s+([\d.]+)(us|ms|s)\b/m;
    die "wrk failed: $out" unless defined $rps && defined $v;
    return ($rps, $unit eq 'us' ? $v / 1000 : $unit eq 's' ? $v * 1000 : $v);
}

my $dir = new_dir();
mkdir "$dir/r1";
mkdir "$dir/r0";
my $on_wrk = Spanprof::Receiver->start(dir => "$dir/r1",
                                       args => [ '--decode', 'no' ]);
pin(1, $on_wrk->pid);
my $on_server = Spanprof::Receiver->start(dir => "$dir/r0",
                                          args => [ '--decode', 'no' ]);
pin(0, $on_server->pid);
my %endpoint = (
    'receiver on wrk\'s CPU'        => $on_wrk->port,
    'receiver on the server\'s CPU' => $on_server->port,
    'no collector'                  => free_port(),
);

my %rps;
for my $round (1 .. $ROUNDS) {
    for my $mode (@MODES) {
        my $sdir = "$dir/$round-" . scalar(keys %rps) . '-' . int(rand 1e6);
        mkdir $sdir;
        mkdir "$sdir/www";
        chmod 0755, "$sdir/www";
        write_file("$sdir/www/small.html", ('x' x 1023) . "\n");
        chmod 0644, "$sdir/www/small.html";
        my $port = nginx_conf($sdir, module => $mode ne 'bare',
                              log_level => 'warn', connections => 1024,
                              location => '', server => "root $sdir/www;");
        my %env = (OTEL_SERVICE_NAME => 'bench',
                   SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'false',
                   SPLUNK_PROFILER_ENABLED => 'false');
        $env{OTEL_EXPORTER_OTLP_ENDPOINT} = "http://127.0.0.1:$endpoint{$mode}"
            if $endpoint{$mode};
        my $pid = spawn(\%env, "$sdir/stderr.log", 'taskset', '-c', '0',
                        nginx_cmd($sdir));
        wait_for_port($port, 20) or die "nginx ($mode) did not start";
        sleep 0.5;
        my ($r, $p99) = wrk($port);
        push @{ $rps{$mode} }, $r;
        printf "round %d %-30s %8.0f req/s  p99 %6.2f ms\n",
            $round, $mode, $r, $p99;
        stop($pid);
    }
}
$on_wrk->stop;
$on_server->stop;

sub median {
    my @s = sort { $a <=> $b } @_;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

my $bare = median(@{ $rps{bare} });
for my $mode (@MODES) {
    my $m = median(@{ $rps{$mode} });
    printf "%-30s median %8.0f req/s (%.2f)\n", $mode, $m, $m / $bare;
}
