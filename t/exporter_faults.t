#!/usr/bin/perl
# The exporter when the collector misbehaves: absent at start, killed
# mid-run, stalling past the deadline, answering RESOURCE_EXHAUSTED, and
# absent under a flood. In each the exporter's peak RSS stays under the
# documented 64 MiB and its counters (logged at exit) add up:
# received = exported + dropped + held.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir free_port);
use Spanprof::Receiver;
use Spanprof::Exporter qw(build_driver start_drive finish_drive run_drive
                          balanced);

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;

my $dir = new_dir();
my $driver = build_driver($dir);
my $BOUND_KB = 64 * 1024;
my $INTERVAL = 1000;

sub env_for {
    my ($port, %more) = @_;
    return { OTEL_EXPORTER_OTLP_ENDPOINT => "http://127.0.0.1:$port",
             SPLUNK_PROFILER_EXPORT_INTERVAL => $INTERVAL,
             OTEL_BSP_SCHEDULE_DELAY => 500, %more };
}

# Samples and spans spread over 6 s, so data keeps coming through the
# fault.
my @STEADY = qw(--samples 600 --spans 60 --for-ms 6000 --every-ms 100
                --hold-ms 2500);

sub check_end {
    my ($h, $what) = @_;
    ok(!$h->{timed_out}, "$what: the driver finished");
    is($h->{exit}, 0, "$what: the exporter exits 0") or diag($h->{stderr});
    my $c = $h->{counters};
    ok($c, "$what: counters at exit") or return {};
    ok(balanced($c), "$what: received = exported + dropped + held")
        or diag(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
    is($c->{received}, $h->{written_samples} + $h->{written_spans},
       "$what: every record written was received");
    ok($h->{hwm_kb} > 0 && $h->{hwm_kb} < $BOUND_KB,
       "$what: peak RSS $h->{hwm_kb} kB under 64 MiB");
    return $c;
}

sub logs_requests {
    my ($rcv) = @_;
    return grep { $_->{signal} eq 'logs' && $_->{answer}{code} == 0 }
        $rcv->requests;
}

# --- absent at start, then started

{
    my $port = free_port();
    my $h = start_drive(dir => $dir, driver => $driver,
                        env => env_for($port), args => \@STEADY);
    sleep 2;
    my $rcv = Spanprof::Receiver->start(dir => $dir, port => $port);
    my $up = time;
    my @r = $rcv->wait_requests(1, 10);
    my ($first) = sort { $a <=> $b } map { $_->{time_ms} } @r;
    ok(@r, 'absent: data flows once the receiver appears');
    my $delay = defined $first ? $first - $up * 1000 : 1e9;
    diag(sprintf 'absent: first request %.0f ms after the receiver '
         . 'listened', $delay);
    ok($delay <= 2 * $INTERVAL,
       'absent: within two export intervals of its appearance');
    finish_drive($h);
    my $c = check_end($h, 'absent');
    ok($c->{'failures.UNAVAILABLE'}, 'absent: UNAVAILABLE counted');
    ok($c->{exported} > 0, 'absent: exported after it appeared');
}

# --- killed mid-run, started again

{
    my $port = free_port();
    my $rcv = Spanprof::Receiver->start(dir => $dir, port => $port);
    my $h = start_drive(dir => $dir, driver => $driver,
                        env => env_for($port), args => \@STEADY);
    sleep 2;
    $rcv->stop('KILL');
    sleep 1.5;
    my $again = Spanprof::Receiver->start(dir => $dir, port => $port);
    finish_drive($h);
    my $c = check_end($h, 'killed');
    ok(scalar logs_requests($again), 'killed: the new receiver gets data');
    ok($c->{exported} > 0, 'killed: exported');
}

# --- stalls past the deadline, then answers

{
    my $rcv = Spanprof::Receiver->start(dir => $dir,
                                        control => { stall_ms => 3000 });
    my $h = start_drive(dir => $dir, driver => $driver,
        env => env_for($rcv->port, OTEL_EXPORTER_OTLP_TIMEOUT => 500),
        args => \@STEADY);
    sleep 3;
    $rcv->control();
    finish_drive($h);
    my $c = check_end($h, 'stall');
    ok($c->{'failures.DEADLINE_EXCEEDED'}, 'stall: DEADLINE_EXCEEDED counted');
    ok($c->{exported} > 0, 'stall: exported once it answers');
    my $failed = qr/\[warn\] .*spanprof-exporter: export failed: /;
    like($h->{stderr}, qr/$failed.*DEADLINE_EXCEEDED/,
         'stall: the failure is logged');
}

# --- RESOURCE_EXHAUSTED, retried

{
    my $rcv = Spanprof::Receiver->start(dir => $dir,
        control => { status => 'RESOURCE_EXHAUSTED', times => 3 });
    my $h = run_drive(dir => $dir, driver => $driver,
                      env => env_for($rcv->port), args => \@STEADY);
    my $c = check_end($h, 'exhausted');
    is($c->{'failures.RESOURCE_EXHAUSTED'}, 3,
       'exhausted: the three refusals counted');
    is($c->{exported}, $c->{received}, 'exhausted: retried, nothing lost');
    my @refused = grep { $_->{answer}{code} == 8 } $rcv->requests;
    is(scalar @refused, 3, 'exhausted: the receiver refused three');
}

# --- a flood with the collector down: bounded, counted

{
    my $h = run_drive(dir => $dir, driver => $driver,
        env => env_for(free_port()),
        args => [qw(--flood-ms 4000 --hold-ms 1000 --ring-bytes 4194304)]);
    my $c = check_end($h, 'flood');
    # The exporter's last reading of the rings' counters comes at its own
    # exit; a writer still flooding after that adds drops it cannot see.
    ok($c->{'ring.full'} > 0 && $c->{'ring.full'} <= $h->{ring_full},
       'flood: what the rings refused is reported')
        or diag("exporter $c->{'ring.full'}, driver $h->{ring_full}");
    ok($c->{'dropped.queue_full'} > 0, 'flood: the oldest dropped, counted');
    is($c->{exported}, 0, 'flood: nothing exported');
}

done_testing;
