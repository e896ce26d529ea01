#!/usr/bin/perl
# A collector that hangs for real: its process frozen (SIGSTOP), as a
# collector stuck in a pause or behind a network black hole is. The
# connection stays open and nothing answers, so only the exporter's own
# deadline (OTEL_EXPORTER_OTLP_TIMEOUT, the gRPC call's deadline) ends an
# export; the receiver's stall of t/exporter_faults.t ends the call
# itself. Frozen after it took the connection and before the first call:
#   - each export ends with DEADLINE_EXCEEDED at the deadline, counted,
#     logged once per signal; the exporter reads the rings on; after
#     SIGCONT exports succeed again;
#   - a stop while it is frozen ends within the timeout and the second the
#     servers wait for it (README, "The exporter"), counters balanced,
#     what was held counted as dropped.shutdown, also when a batch comes
#     due while it stops;
#   - nginx and httpd reloaded, then stopped, with it frozen: each old
#     exporter exits, the server is gone in time and so is its exporter,
#     without "did not stop within" and without an alert; what they held
#     is counted.
# The exporter through t/bin/exporter_drive.c, then real nginx and httpd.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file wait_until wait_for_log
                        nginx_conf nginx_start httpd_conf httpd_start);
use Spanprof::Receiver;
use Spanprof::Exporter qw(build_driver start_drive finish_drive_when
                          counters balanced check_end failed_with);
use Spanprof::Cases qw(traced_requests arrived);
use Spanprof::Procs qw(exporters);

Spanprof::Receiver::skip_unless_ready();

my $T = 1000;            # OTEL_EXPORTER_OTLP_TIMEOUT, ms
my $SLACK = 1000;        # what the servers wait for the exporter beyond it
my $WAIT = 30;           # s: the limit of every polling wait
my $PARENT = '00f067aa0ba902b7';

my $dir = new_dir();
my $driver = build_driver($dir);
my (@servers, @exporters);    # what END must not leave behind

sub env_for {
    my ($port) = @_;
    return { OTEL_EXPORTER_OTLP_ENDPOINT => "http://127.0.0.1:$port",
             OTEL_EXPORTER_OTLP_TIMEOUT => $T,
             SPLUNK_PROFILER_EXPORT_INTERVAL => 1000,
             OTEL_BSP_SCHEDULE_DELAY => 500,
             SPANPROF_COUNTERS_INTERVAL_MS => 200 };
}

# 100 samples and 10 spans a second until the test has what it checks.
my @STEADY = qw(--samples 6000 --spans 600 --for-ms 60000 --every-ms 100
                --hold-ms 60000);

# The exporter's latest counters (every 200 ms), {} before the first.
sub now_counters { counters(read_file($_[0]{log})) // {} }

sub deadlines { now_counters($_[0])->{'failures.DEADLINE_EXCEEDED'} // 0 }

# The warnings that an export of $signal failed with DEADLINE_EXCEEDED, and
# how long each call took.
sub deadline_lines {
    my ($log, $signal) = @_;
    my $failed = qr/\[warn\] .*export failed: OTLP export of $signal /;
    return $log =~ /${failed}.*DEADLINE_EXCEEDED.* attempt in (\d+) ms/g;
}

# A collector frozen for the exporter of $h: its calls end at their
# deadline, again and again, while it reads the rings on; each signal's
# failure is logged once (one a minute at most). False when not even one
# call ended.
sub check_frozen {
    my ($h, $what) = @_;
    my $c = now_counters($h);
    ok(wait_until(sub { failed_with($h, 'DEADLINE_EXCEEDED') }, $WAIT),
       "$what: an export ends with DEADLINE_EXCEEDED") or return 0;
    my $first = time;
    my $n = deadlines($h);
    ok(wait_until(sub { deadlines($h) >= $n + 3 }, $WAIT),
       "$what: the next exports end at their deadline too");
    ok(now_counters($h)->{received} > ($c->{received} // 0),
       "$what: the exporter reads the rings on");
    my $log = read_file($h->{log});
    my $minutes = 1 + int((time - $first) / 60);
    for my $signal (qw(logs traces)) {
        my @ms = deadline_lines($log, $signal);
        ok(@ms >= 1 && @ms <= $minutes, "$what: logged once for $signal")
            or diag(scalar @ms . ' lines');
        # The call started before its deadline, and gRPC ended it there.
        ok(!grep({ $_ < $T || $_ > $T + $SLACK } @ms),
           "$what: the $signal call took the timeout") or diag("@ms ms");
    }
    return 1;
}

sub recovered {
    my ($h) = @_;
    return read_file($h->{log}) =~ /export recovered: logs accepted again/;
}

# --- frozen after it took the connection, then let go

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = start_drive(dir => $dir, driver => $driver,
                        env => env_for($rcv->port), args => \@STEADY);
    ok(wait_until(sub { now_counters($h)->{requests} }, 2 * $WAIT),
       'after accept: data flows first');
    $rcv->freeze;
    check_frozen($h, 'after accept');
    my $before = now_counters($h)->{exported};
    $rcv->thaw;
    $h = finish_drive_when($h, sub {
        recovered($h) && now_counters($h)->{exported} > $before }, $WAIT);
    my $c = check_end($h, 'after accept');
    ok(recovered($h), 'after accept: exports succeed after SIGCONT');
    ok($c->{exported} > $before, 'after accept: exported after SIGCONT');
}

# --- frozen before the first call; let go; frozen again, and stopped

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    $rcv->freeze;
    my $h = start_drive(dir => $dir, driver => $driver,
                        env => env_for($rcv->port), args => \@STEADY);
    check_frozen($h, 'before the first call');
    $rcv->thaw;
    ok(wait_until(sub { recovered($h) }, $WAIT),
       'before the first call: exports succeed after SIGCONT');
    $rcv->freeze;
    my $n = deadlines($h);
    # Stopped while an export waits for its deadline, or soon before.
    $h = finish_drive_when($h, sub { deadlines($h) > $n }, $WAIT);
    my $c = check_end($h, 'stopped frozen');
    diag('stopped frozen: the exporter exited '
         . ($h->{stop_ms} // '?') . ' ms after SIGTERM');
    ok(defined $h->{stop_ms} && $h->{stop_ms} <= $T + $SLACK,
       'stopped frozen: the exporter exits within the timeout and a second');
    ok(($c->{'dropped.shutdown'} // 0) > 0,
       'stopped frozen: what it held is counted dropped.shutdown');
}

# --- a batch that comes due while it stops

# After a stop the exporter reads on while a worker lives, for half the
# timeout, and sends what comes due meanwhile: that call too must end by
# the stop's deadline, not a whole timeout after it started. One span,
# read at once; stopped as soon as it is, so that its batch comes due
# (OTEL_BSP_SCHEDULE_DELAY) while it reads on, well after the second the
# servers allow beyond the timeout.

{
    my $t = 6000;
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    $rcv->freeze;
    my $h = start_drive(dir => $dir, driver => $driver,
        env => { %{ env_for($rcv->port) }, OTEL_EXPORTER_OTLP_TIMEOUT => $t,
                 OTEL_BSP_SCHEDULE_DELAY => 2500 },
        args => [qw(--spans 1 --hold-ms 60000)]);
    $h = finish_drive_when($h, sub { now_counters($h)->{received} }, $WAIT);
    my $c = check_end($h, 'due while stopping');
    diag('due while stopping: the exporter exited '
         . ($h->{stop_ms} // '?') . ' ms after SIGTERM');
    ok(defined $h->{stop_ms} && $h->{stop_ms} <= $t + $SLACK,
       'due while stopping: the exporter exits within the timeout and a '
       . 'second');
    is($c->{'dropped.shutdown'}, 1,
       'due while stopping: the span counted dropped.shutdown');
}

# --- the servers: reloaded, then stopped, while the collector is frozen

# Each server: its start, its reload (nginx -s reload, apachectl -k
# graceful) and its stop (nginx -s quit; httpd's graceful stop, which
# docker stop sends).
my %SERVERS = (
    nginx => { conf => \&nginx_conf, start => \&nginx_start,
               reload => 'HUP', stop => 'QUIT' },
    httpd => { conf => \&httpd_conf, start => \&httpd_start,
               reload => 'USR1', stop => 'WINCH' },
);

# pid => how many times the exporter of that pid logged that an export of
# traces failed with DEADLINE_EXCEEDED (nginx's "PID#TID: " or httpd's
# "[pid PID:tid TID] ").
sub deadline_logs {
    my ($log) = @_;
    my $failed = qr/spanprof-exporter: export failed: OTLP export of traces /;
    my %n;
    for (grep { /${failed}.*DEADLINE_EXCEEDED/ } split /\n/, $log) {
        my ($pid) = grep { defined } /\[pid (\d+):tid |\s(\d+)#\d+: /;
        $n{$pid}++;
    }
    return \%n;
}

for my $server (sort keys %SERVERS) {
    my $s = $SERVERS{$server};
    my $d = new_dir();
    my $rcv = Spanprof::Receiver->start(dir => $d);
    my $port = $s->{conf}->($d);
    my $main = $s->{start}->($d, $port, %{ env_for($rcv->port) });
    ok($main, "$server: starts") or diag(read_file("$d/error.log"));
    next unless $main;
    push @servers, $main;
    ok(wait_until(sub { @exporters = map { $_->{pid} } exporters($main) },
                  2 * $WAIT),
       "$server: an exporter runs");
    my $old = $exporters[0];
    my @ids = traced_requests($port, 3, $PARENT);
    is(arrived($rcv, $WAIT, @ids), 3, "$server: spans arrive");

    $rcv->freeze;
    traced_requests($port, 3, $PARENT);
    ok(wait_for_log("$d/error.log", qr/export failed: .*DEADLINE_EXCEEDED/,
                    $WAIT),
       "$server: an export ends with DEADLINE_EXCEEDED");

    # The old exporter sends what it holds with the time it has left; the
    # new one reads the workers' rings.
    kill $s->{reload}, $main;
    ok(wait_until(sub { !kill 0, $old }, $WAIT),
       "$server: reloaded, the old exporter exits");
    ok(wait_until(sub { @exporters = grep { $_ != $old }
                            map({ $_->{pid} } exporters($main)) }, $WAIT),
       "$server: reloaded, a new exporter runs");
    # Held by the new one when the stop comes: a batch in flight or
    # queued.
    traced_requests($port, 3, $PARENT);
    ok(wait_until(sub { keys %{ deadline_logs(read_file("$d/error.log")) }
                            >= 2 }, $WAIT),
       "$server: the new exporter's exports end at the deadline too")
        or diag(grep { /spanprof/ } split /^/, read_file("$d/error.log"));

    kill $s->{stop}, $main;
    my $t = time;
    ok(wait_until(sub { waitpid($main, WNOHANG) == $main }, $WAIT),
       "$server: stopped");
    my $took = time - $t;
    @servers = grep { $_ != $main } @servers;
    # The server waits for its exporter at most the timeout and a second.
    diag(sprintf '%s: gone %.1f s after %s', $server, $took, $s->{stop});
    ok($took < ($T + $SLACK) / 1000 + 5, "$server: stopped in time");
    ok(wait_until(sub { !grep { kill 0, $_ } @exporters }, 10),
       "$server: its exporter is gone too");
    my $log = read_file("$d/error.log");
    unlike($log, qr/did not stop within/,
           "$server: each exporter stopped within the time it is waited "
           . 'for');
    unlike($log, qr/\[(?:[a-z_]+:)?(?:alert|crit|emerg)\]/,
           "$server: no alert");
    my @exits = map { counters($_) }
        grep { /counters: .*\(at exit\)/ } split /\n/, $log;
    is(scalar @exits, 2, "$server: both exporters' counters at exit");
    ok(!grep({ !balanced($_) } @exits), "$server: each balanced")
        or diag($log);
    my %sum;
    for my $c (@exits) {
        $sum{$_} += $c->{$_} for qw(received exported dropped.shutdown);
    }
    is($sum{received}, 9, "$server: every span received");
    is($sum{exported}, 3, "$server: the spans before the freeze exported");
    is($sum{'dropped.shutdown'}, 6,
       "$server: the others, held when they stopped, dropped.shutdown");
    my $logged = deadline_logs($log);
    ok(%$logged && !grep({ $_ != 1 } values %$logged),
       "$server: each exporter logged the failure once")
        or diag(explain $logged);
}

# --- a fast stop while the collector is frozen

# On TERM (nginx -s stop) nginx's master re-sends TERM to its children and
# SIGKILLs them about 1.5 s later; with a timeout longer than that the
# exporter's flush used to outlast it: the manager was killed ("exited on
# signal 9", an alert) and the exporter, orphaned, flushed on after the
# master had gone. Now the exporter stops fast (SIGINT): whatever the
# frozen collector did not take by then is dropped, and said so. Also
# when the fast stop comes during a graceful stop's flush (nginx -s quit,
# then nginx -s stop). httpd's stop (apachectl -k stop, TERM) kills only
# its children that serve requests: its parent waits for the exporter's
# whole flush, as for a graceful stop.
for my $case (['nginx', 'TERM'], ['nginx', 'QUIT', 'TERM'],
              ['httpd', 'TERM']) {
    my ($server, @how) = @$case;
    my $s = $SERVERS{$server};
    my $fast = $server eq 'nginx';
    my $what = "$server stop (@how)";
    my $d = new_dir();
    my $rcv = Spanprof::Receiver->start(dir => $d);
    my $port = $s->{conf}->($d);
    # longer than nginx gives its children after TERM
    my $main = $s->{start}->($d, $port, %{ env_for($rcv->port) },
                             OTEL_EXPORTER_OTLP_TIMEOUT => 5000);
    ok($main, "$what: starts") or diag(read_file("$d/error.log"));
    next unless $main;
    push @servers, $main;
    ok(wait_until(sub { @exporters = map { $_->{pid} } exporters($main) },
                  2 * $WAIT),
       "$what: an exporter runs");
    my @ids = traced_requests($port, 3, $PARENT);
    is(arrived($rcv, $WAIT, @ids), 3, "$what: spans arrive");

    $rcv->freeze;
    traced_requests($port, 3, $PARENT);
    # queue_bytes counts a call in flight: sent, and never answered.
    ok(wait_until(sub {
            my $c = counters(read_file("$d/error.log")) // {};
            ($c->{spans} // 0) == 6 && $c->{queue_bytes} }, $WAIT),
       "$what: the last spans are sent to the frozen collector");

    if (@how > 1) {
        kill $how[0], $main;
        ok(wait_for_log("$d/error.log", qr/\[notice\] .*: exiting/, $WAIT),
           "$what: a graceful stop began");
    }
    kill $how[-1], $main;
    my $start = time;
    ok(wait_until(sub { waitpid($main, WNOHANG) == $main }, $WAIT),
       "$what: stops");
    diag(sprintf '%s: gone %.1f s after TERM', $what, time - $start);
    @servers = grep { $_ != $main } @servers;
    ok(!grep({ kill 0, $_ } @exporters),
       "$what: its exporter is gone before the master");
    my $log = read_file("$d/error.log");
    unlike($log, qr/exited on signal 9/, "$what: nothing SIGKILLed");
    unlike($log, qr/\[(?:[a-z_]+:)?(?:alert|crit|emerg)\]/,
           "$what: no alert");
    my $c = counters($log, 'at exit') // {};
    ok($c->{received} && balanced($c), "$what: counters at exit balanced")
        or diag($log);
    is($c->{'dropped.shutdown'}, 3,
       "$what: the spans the collector did not take are dropped.shutdown");
    my $said = qr/spanprof-exporter: fast stop: 3 spans or samples not sent/;
    if ($fast) {
        like($log, qr/\[warn\] .*$said/,
             "$what: the exporter says what it dropped");
    } else {
        unlike($log, qr/$said/, "$what: the exporter's whole flush");
    }
}

# Whatever failed above: no server, no exporter left (the receivers are let
# go and stopped by Spanprof::Receiver).
END {
    local $?;
    # spawn's process group: the master/parent and its children
    kill 'KILL', -$_ for @servers;
    waitpid $_, 0 for @servers;
    kill 'KILL', $_ for @exporters;
}

done_testing;
