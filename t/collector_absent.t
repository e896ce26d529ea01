#!/usr/bin/perl
# The collector absent for the whole run, on nginx and on httpd, under
# load with every request selected, sampling at 1 ms and the continuous
# profiler on: every request succeeds, the exporter's peak memory stays
# under its documented bound (64 MiB), the failed exports are logged, and
# what could not be sent is counted (received = dropped + held, nothing
# exported). Latency goes to a diagnostic only; it is measured in bench/.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use POSIX qw(WNOHANG);

use Spanprof::Server qw(top_dir new_dir read_file free_port spawn
                        wait_for_port stop nginx_conf nginx_cmd httpd_conf
                        httpd_cmd text_file gzip_location);
use Spanprof::Exporter qw(counters balanced);

plan skip_all => 'not built (make build)'
    unless -x top_dir() . '/build/spanprof-exporter';

my $BOUND_KB = 64 * 1024;
my $LOAD_SECONDS = 20;
my $CLIENTS = 4;

sub nginx_server {
    my ($dir) = @_;
    my $port = nginx_conf($dir, workers => 2, log_level => 'info',
                          connections => 256,
                          server => gzip_location($dir, lines => 20000));
    return ($port, nginx_cmd($dir));
}

sub httpd_server {
    my ($dir) = @_;
    my $port = httpd_conf($dir, modules => [qw(deflate filter)],
                          log_level => 'info', extra => <<"EXTRA");
DeflateCompressionLevel 9
<Location /big>
    SetOutputFilter DEFLATE
</Location>
EXTRA
    text_file("$dir/htdocs/big", 20000);
    return ($port, httpd_cmd($dir));
}

# One client: requests for $LOAD_SECONDS, every one selected; writes
# "status seconds" per request to $out.
sub client {
    my ($port, $out, $n) = @_;
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    return $pid if $pid;
    open my $fh, '>', $out or exit 1;
    my $end = time + $LOAD_SECONDS;
    my $i = 0;
    while (time < $end) {
        my $path = ($i++ + $n) % 3 ? '/index.html' : '/big';
        my $t0 = time;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port, Timeout => 10);
        my $status = 0;
        if ($s) {
            print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n"
                . "Accept-Encoding: gzip\r\n"
                . "baggage: splunk.trace.snapshot.volume=highest\r\n\r\n";
            local $/;
            my $resp = <$s> // '';
            ($status) = $resp =~ m{^HTTP/\S+ (\d+)};
            close $s;
        }
        printf $fh "%d %.6f\n", $status // 0, time - $t0;
    }
    close $fh;
    exit 0;
}

sub exporter_pids {
    my ($group) = @_;
    my @pids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $text = read_file($stat) // next;
        my ($pid, $pgrp) = $text =~ /^(\d+) \(.*\) \S \d+ (\d+)/s or next;
        my $cmd = read_file("/proc/$pid/cmdline") // '';
        push @pids, $pid if $pgrp == $group && $cmd =~ /^spanprof-exporter/;
    }
    return @pids;
}

sub hwm_kb {
    my ($pid) = @_;
    my ($kb) = (read_file("/proc/$pid/status") // '') =~ /^VmHWM:\s+(\d+)/m;
    return $kb // 0;
}

sub percentile {
    my ($p, @sorted) = @_;
    return 0 unless @sorted;
    return $sorted[int($p * $#sorted)];
}

for my $server ([ 'nginx', \&nginx_server ], [ 'httpd', \&httpd_server ]) {
    my ($name, $make) = @$server;
    my $dir = new_dir();
    my ($port, @cmd) = $make->($dir);
    my %env = (
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . free_port(),
        SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
        SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '1',
        SPLUNK_PROFILER_ENABLED => 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL => '100',
        SPLUNK_PROFILER_EXPORT_INTERVAL => '1000',
        OTEL_BSP_SCHEDULE_DELAY => '500',
        SPANPROF_COUNTERS_INTERVAL_MS => '5000',
    );
    my $master = spawn(\%env, "$dir/stderr.log", @cmd);
    ok(wait_for_port($port, 20), "$name: starts with no collector")
        or do { diag(read_file("$dir/error.log")); stop($master); next };

    my @clients = map { client($port, "$dir/client.$_", $_) } 1 .. $CLIENTS;
    waitpid($_, 0) for @clients;

    my (@status, @seconds);
    for my $n (1 .. $CLIENTS) {
        for (split /\n/, read_file("$dir/client.$n") // '') {
            my ($st, $sec) = split / /;
            push @status, $st;
            push @seconds, $sec;
        }
    }
    cmp_ok(scalar @status, '>', 50, "$name: requests were made under load");
    is(scalar(grep { $_ != 200 } @status), 0,
       "$name: every request succeeded with the collector absent")
        or do { my %n; $n{$_}++ for grep { $_ != 200 } @status;
                diag(join ' ', map { "status $_: $n{$_}" } sort keys %n) };
    my @sorted = sort { $a <=> $b } @seconds;
    diag(sprintf "%s: %d requests, p50 %.1f ms, p99 %.1f ms (not asserted)",
         $name, scalar @sorted, 1000 * percentile(0.5, @sorted),
         1000 * percentile(0.99, @sorted));

    my @exporters = exporter_pids($master);
    is(scalar @exporters, 1, "$name: one exporter runs");
    my $hwm = @exporters ? hwm_kb($exporters[0]) : 0;
    ok($hwm > 0 && $hwm < $BOUND_KB,
       "$name: exporter's peak RSS $hwm kB is under 64 MiB");

    stop($master);
    diag("$name error log, above info:\n",
         join "\n", grep { /\[(warn|error|crit|alert|emerg)\]|:(warn|error|crit|alert|emerg)\]/ }
         split /\n/, read_file("$dir/error.log") // '') if $ENV{SPANPROF_DEBUG};
    my $end = time + 15;
    sleep 0.2 while time < $end && exporter_pids($master);
    is(scalar(exporter_pids($master)), 0, "$name: the exporter is gone");

    my $log = read_file("$dir/error.log") . (read_file("$dir/stderr.log") // '');
    my $failed = qr/\[(?:spanprof:)?warn\] .*spanprof-exporter: export failed/;
    like($log, qr/$failed: .*UNAVAILABLE/,
         "$name: the failed export is logged with its status");
    my $c = counters($log, 'at exit');
    ok($c, "$name: counters logged at exit") or next;
    my %c = %$c;
    cmp_ok($c{received} // 0, '>', 0, "$name: records were received");
    is($c{exported}, 0, "$name: nothing was exported");
    cmp_ok($c{'failures.UNAVAILABLE'} // 0, '>', 0,
           "$name: the failed calls are counted by status");
    my $dropped = 0;
    $dropped += $c{$_} for grep { /^dropped\./ } keys %c;
    cmp_ok($dropped, '>', 0, "$name: what could not be sent is counted dropped");
    ok(balanced(\%c), "$name: received = exported + dropped + held")
        or diag(join ' ', map { "$_=$c{$_}" } sort keys %c);
}

done_testing();
