#!/usr/bin/perl
# Where the CPU goes while nginx traces every request of a 1 KiB file:
# user and system time of each nginx process, the exporter and the test's
# OTLP receiver over one wrk run, for nginx without the module and with
# tracing only (interleaved, ROUNDS times each). Run by hand after
# `make build`, from the top of the tree:
#
#   perl bench/servers/cpu_split.pl [ROUNDS]
#
# The receiver answers without decoding, as in run.pl's wrk runs;
# RECEIVER_DECODE=1 makes it decode every span in JavaScript, as the tests
# do, which takes about as much CPU as nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use POSIX ();
use Spanprof::Server qw(new_dir nginx_conf nginx_start stop write_file);
use Spanprof::Receiver;
use Spanprof::Procs qw(family);

my $ROUNDS = shift // 2;
my $SECONDS = $ENV{BENCH_SECONDS} // 5;
my $HZ = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;

# user and system CPU seconds of pid so far.
sub cpu_of {
    my ($pid) = @_;
    open my $f, '<', "/proc/$pid/stat" or return (0, 0);
    my ($rest) = <$f> =~ /\) (.*)/;
    my @f = split / /, $rest;
    return ($f[11] / $HZ, $f[12] / $HZ);
}

# Voluntary context switches of pid so far: how often it went to sleep.
sub switches_of {
    my ($pid) = @_;
    open my $f, '<', "/proc/$pid/status" or return 0;
    my ($n) = join('', <$f>) =~ /^voluntary_ctxt_switches:\s+(\d+)/m;
    return $n // 0;
}

sub name_of {
    my ($args) = @_;
    return $args =~ /spanprof-exporter/ ? 'exporter'
         : $args =~ /worker process/ ? 'nginx worker'
         : $args =~ /master process/ ? 'nginx master' : 'other';
}

# What each variant adds to bare nginx: the module with tracing, and the
# same with the exporter sending nothing (OTEL_TRACES_EXPORTER=none) or
# stopped (SIGSTOP: the ring fills and the worker drops), which tell the
# exporter's and the receiver's share from the worker's own.
my %VARIANT = (
    bare => { module => 0 },
    tracing => { module => 1 },
    'tracing-none' => { module => 1, env => { OTEL_TRACES_EXPORTER => 'none' } },
    'tracing-stopped' => { module => 1, stop_exporter => 1 },
    'tracing-idle-recv' => { module => 1, idle => ['receiver'] },
    'tracing-idle-both' => { module => 1, idle => ['receiver', 'exporter'] },
);
my @VARIANTS = split ' ', ($ENV{VARIANTS} // 'bare tracing');
for (@VARIANTS) { die "unknown variant $_\n" unless $VARIANT{$_} }

sub one_run {
    my ($variant) = @_;
    my $v = $VARIANT{$variant};
    my $module = $v->{module};
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir,
        args => $ENV{RECEIVER_DECODE} ? [] : [ '--decode', 'no' ]);
    write_file("$dir/small.html", 'x' x 1024);
    chmod 0644, "$dir/small.html";
    my $port = nginx_conf($dir, module => $module,
                          server => "location /s { alias $dir/small.html; }");
    my $nginx = nginx_start($dir, $port, OTEL_EXPORTER_OTLP_ENDPOINT =>
                            'http://127.0.0.1:' . $recv->port,
                            %{ $v->{env} // {} })
        or die "nginx did not start\n";
    sleep 1;
    my %who = (map({ $_->{pid} => name_of($_->{args}) } family($nginx)),
               $nginx => 'nginx master', $recv->{pid} => 'receiver');
    my @stopped = $v->{stop_exporter}
        ? grep { $who{$_} eq 'exporter' } keys %who : ();
    kill 'STOP', @stopped;
    for my $who (@{ $v->{idle} // [] }) {
        for my $pid (grep { $who{$_} eq $who } keys %who) {
            system("for t in /proc/$pid/task/*; do chrt -i -p 0 \${t##*/}; done");
        }
    }
    my %before = map { $_ => [ cpu_of($_) ] } keys %who;
    my %switches_before = map { $_ => switches_of($_) } keys %who;
    my $out = `/usr/bin/time -f 'wrk-cpu %U %S' wrk -t1 -c8 -d${SECONDS}s http://127.0.0.1:$port/s 2>&1`;
    my ($wrk_user, $wrk_sys) = $out =~ /wrk-cpu ([\d.]+) ([\d.]+)/;
    my %switches = map { $who{$_} => switches_of($_) - $switches_before{$_} }
                   grep { $who{$_} eq 'nginx worker' } keys %who;
    my %cpu;
    for my $pid (keys %who) {
        my @after = cpu_of($pid);
        $cpu{ $who{$pid} }[0] += $after[0] - $before{$pid}[0];
        $cpu{ $who{$pid} }[1] += $after[1] - $before{$pid}[1];
    }
    kill 'CONT', @stopped;
    stop($nginx);
    $recv->stop;
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    $cpu{wrk} = [ $wrk_user // 0, $wrk_sys // 0 ];
    return ($rps // 0, \%cpu, $switches{'nginx worker'} // 0);
}

printf "# %d s of wrk -t1 -c8 a run, CPU seconds user/system\n", $SECONDS;
for my $round (1 .. $ROUNDS) {
    for my $variant (@VARIANTS) {
        my ($rps, $cpu, $sleeps) = one_run($variant);
        printf "round %d %-15s %8.0f req/s  worker sleeps %7d  %s\n",
               $round, $variant, $rps, $sleeps,
               join '  ', map { sprintf '%s %.2f/%.2f', $_, @{ $cpu->{$_} } }
                          grep { $_ ne 'other' } sort keys %$cpu;
    }
}
