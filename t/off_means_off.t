#!/usr/bin/perl
# "Off means off", on nginx and on httpd: with both profilers off (tracing
# still on), and with the module loaded but turned off by its directive,
# no server process has a POSIX timer that delivers SIGPROF, none has a
# SIGPROF handler installed, and the receiver gets no profiling data. The
# same server with the profilers on is the control: there the timer, the
# handler and the profiles are present, so each check can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop nginx_conf
                        nginx_cmd httpd_conf httpd_cmd text_file wait_until
                        gzip_location);
use Spanprof::Receiver;

Spanprof::Receiver::skip_unless_ready(curl => 1);

use constant SIGPROF => 27;


# The server's processes: the master or parent and its children, without
# the exporter (a separate program, never a sampler).
sub server_pids {
    my ($master) = @_;
    my @pids = ($master);
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $text = read_file($stat) // next;
        my ($pid, $ppid) = $text =~ /^(\d+) \(.*\) \S (\d+)/s or next;
        next unless $ppid == $master;
        my $cmd = read_file("/proc/$pid/cmdline") // '';
        next if $cmd =~ /spanprof-exporter/;
        push @pids, $pid;
    }
    return @pids;
}

# How many of the process's POSIX timers signal SIGPROF.
sub sigprof_timers {
    my ($pid) = @_;
    my $text = read_file("/proc/$pid/timers") // '';
    my $n = () = $text =~ /^signal:\s+${\ SIGPROF}\//mg;
    return $n;
}

# Whether the process has a SIGPROF handler (SigCgt, a hex mask).
sub sigprof_caught {
    my ($pid) = @_;
    my ($mask) = (read_file("/proc/$pid/status") // '') =~ /^SigCgt:\s+(\S+)/m;
    return 0 unless defined $mask;
    my $low = hex substr($mask, -8);
    return ($low >> (SIGPROF - 1)) & 1;
}

sub signals {
    my ($recv) = @_;
    my %n = (traces => 0, logs => 0);
    $n{ $_->{signal} }++ for $recv->requests;
    return \%n;
}

sub heavy_requests {
    my ($port) = @_;
    for (1 .. 4) {
        system('curl', '-s', '-m', '20', '-o', '/dev/null',
               '-H', 'Accept-Encoding: gzip',
               '-H', 'baggage: splunk.trace.snapshot.volume=highest',
               "http://127.0.0.1:$port/big");
    }
}

sub nginx_server {
    my ($dir, $scope) = @_;
    my $port = nginx_conf($dir, workers => 2, http => $scope,
                          server => gzip_location($dir, lines => 60000));
    return ($port, nginx_cmd($dir));
}

sub httpd_server {
    my ($dir, $scope) = @_;
    my $port = httpd_conf($dir, modules => [qw(deflate filter)],
                          extra => <<"EXTRA");
StartServers 2
DeflateCompressionLevel 9
<Location /big>
    SetOutputFilter DEFLATE
</Location>
$scope
EXTRA
    text_file("$dir/htdocs/big", 60000);
    return ($port, httpd_cmd($dir));
}

# Runs one server in one configuration; returns what was seen.
sub observe {
    my ($make, $scope, $profilers) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my ($port, @cmd) = $make->($dir, $scope);
    my $on = $profilers ? 'true' : 'false';
    my %env = (
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        SPLUNK_SNAPSHOT_PROFILER_ENABLED => $on,
        SPLUNK_PROFILER_ENABLED => $on,
        SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '1',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL => '100',
        SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
        OTEL_BSP_SCHEDULE_DELAY => '200',
    );
    my $master = spawn(\%env, "$dir/stderr.log", @cmd);
    my %seen = (started => wait_for_port($port, 20));
    if ($seen{started}) {
        heavy_requests($port);
        # Timers and handlers are looked at while the server still runs,
        # after it has served selected requests.
        my @pids = server_pids($master);
        $seen{processes} = scalar @pids;
        $seen{timers} = 0;
        $seen{timers} += sigprof_timers($_) for @pids;
        $seen{caught} = grep { sigprof_caught($_) } @pids;
        # Spans or profiles, whichever comes, are given time to arrive.
        wait_until(sub { my $n = signals($recv);
                         $n->{logs} && $n->{traces} }, 10);
    }
    stop($master);
    $seen{signals} = signals($recv);
    $seen{log} = read_file("$dir/error.log") // '';
    $recv->stop;
    return \%seen;
}

my @servers = (
    [ 'nginx', \&nginx_server, 'spanprof off;' ],
    [ 'httpd', \&httpd_server, 'Spanprof Off' ],
);

for my $server (@servers) {
    my ($name, $make, $directive) = @$server;

    my $control = observe($make, '', 1);
    ok($control->{started}, "$name: starts with the profilers on")
        or diag($control->{log});
    cmp_ok($control->{timers}, '>', 0,
           "$name, profilers on: a timer that signals SIGPROF exists");
    cmp_ok($control->{caught}, '>', 0,
           "$name, profilers on: a SIGPROF handler is installed");
    cmp_ok($control->{signals}{logs}, '>', 0,
           "$name, profilers on: profiles reach the receiver");

    my $tracing = observe($make, '', 0);
    ok($tracing->{started}, "$name: starts with the profilers off")
        or diag($tracing->{log});
    cmp_ok($tracing->{processes}, '>', 1,
           "$name, profilers off: the master and its workers looked at");
    is($tracing->{timers}, 0,
       "$name, profilers off: no process has a SIGPROF timer");
    is($tracing->{caught}, 0,
       "$name, profilers off: no process has a SIGPROF handler");
    is($tracing->{signals}{logs}, 0,
       "$name, profilers off: no profiling data reaches the receiver");
    cmp_ok($tracing->{signals}{traces}, '>', 0,
           "$name, profilers off: spans still reach the receiver");

    my $off = observe($make, $directive, 1);
    ok($off->{started}, "$name: starts with '$directive' and the profilers on")
        or diag($off->{log});
    is($off->{timers}, 0, "$name, '$directive': no process has a SIGPROF timer");
    is($off->{caught}, 0, "$name, '$directive': no process has a SIGPROF handler");
    is($off->{signals}{logs}, 0, "$name, '$directive': no profiling data");
    is($off->{signals}{traces}, 0, "$name, '$directive': no spans");
}

done_testing();
