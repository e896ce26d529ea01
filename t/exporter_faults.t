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

use Spanprof::Server qw(new_dir free_port read_file wait_until);
use Spanprof::Receiver;
use Spanprof::Exporter qw(build_driver start_drive finish_drive_when
                          counters check_end failed_with);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $driver = build_driver($dir);
my $INTERVAL = 1000;

sub env_for {
    my ($port, %more) = @_;
    return { OTEL_EXPORTER_OTLP_ENDPOINT => "http://127.0.0.1:$port",
             SPLUNK_PROFILER_EXPORT_INTERVAL => $INTERVAL,
             OTEL_BSP_SCHEDULE_DELAY => 500, %more };
}

# 100 samples and 10 spans a second, so data keeps coming through the
# fault, until the test has what it checks (finish_drive_when), for 60 s
# at most: a busy machine may take seconds to start the exporter and
# export.
my @STEADY = qw(--samples 6000 --spans 600 --for-ms 60000 --every-ms 100
                --hold-ms 60000);

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
    wait_until(sub { failed_with($h, 'UNAVAILABLE') }, 60);
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
    finish_drive_when($h, sub { logs_requests($rcv) });
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
    wait_until(sub { logs_requests($rcv) }, 60);
    $rcv->stop('KILL');
    wait_until(sub { failed_with($h, 'UNAVAILABLE') }, 60);
    my $again = Spanprof::Receiver->start(dir => $dir, port => $port);
    finish_drive_when($h, sub { logs_requests($again) });
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
    wait_until(sub { failed_with($h, 'DEADLINE_EXCEEDED') }, 60);
    $rcv->control();
    finish_drive_when($h, sub {
        grep { $_->{answer}{code} == 0 && !$_->{answer}{stall_ms} }
            $rcv->requests });
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
    # The three refusals, then one accepted: what is left is accepted at
    # the stop.
    my $h = finish_drive_when(start_drive(dir => $dir, driver => $driver,
        env => env_for($rcv->port), args => \@STEADY), sub {
            my @answers = map { $_->{answer}{code} } $rcv->requests;
            return 3 == grep({ $_ == 8 } @answers)
                && grep { $_ == 0 } @answers;
        });
    my $c = check_end($h, 'exhausted');
    is($c->{'failures.RESOURCE_EXHAUSTED'}, 3,
       'exhausted: the three refusals counted');
    is($c->{exported}, $c->{received}, 'exhausted: retried, nothing lost');
    my @refused = grep { $_->{answer}{code} == 8 } $rcv->requests;
    is(scalar @refused, 3, 'exhausted: the receiver refused three');
}

# --- a flood with the collector down: bounded, counted

{
    # Until the exporter's counters (every 200 ms) show both.
    my $h = start_drive(dir => $dir, driver => $driver,
        env => env_for(free_port(), SPANPROF_COUNTERS_INTERVAL_MS => 200),
        args => [qw(--flood-ms 60000 --hold-ms 60000
                    --ring-bytes 4194304)]);
    finish_drive_when($h, sub {
        my $c = counters(read_file($h->{log})) // {};
        return $c->{'ring.full'} && $c->{'dropped.queue_full'};
    });
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
