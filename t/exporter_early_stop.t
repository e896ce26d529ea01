#!/usr/bin/perl
# An exporter stopped as early as can be: real nginx and real apache2
# (event MPM) with the module and the independent receiver, each
#   - started and stopped at once (TERM), ten times;
#   - started, then reloaded (nginx: HUP; httpd: USR1, what `apachectl
#     -k graceful` sends) as soon as each new exporter is spawned, 20
#     times, then stopped as soon as the last one is spawned.
# The stop reaches an exporter while it still loads its libraries, before
# its SIGTERM handler exists (some 15 ms; nginx's master waits 100 ms
# after a reload before it stops the old helper, so there only the stop
# comes that early; httpd's graceful restart stops the exporter at once).
# Checked: every exporter the server started says it stopped (it exits 0
# right after that line; killed by the signal it wrote nothing), none is
# left running, the log has no alert, no spanprof warning or error and
# no exporter "exited on signal", and the span of every request arrives.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_cmd httpd_conf
                        httpd_cmd spawn stop wait_until http_get);
use Spanprof::Receiver;
use Spanprof::Cases qw(arrived);

Spanprof::Receiver::skip_unless_ready(apache2 => 1);

my $PARENT = 'e4c1a7d2b9f03816';
my $recv = Spanprof::Receiver->start(dir => new_dir());
my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY     => '100',
    # bounds a stop that reads on while workers live
    OTEL_EXPORTER_OTLP_TIMEOUT  => '4000',
);

my %server = (
    nginx => { conf => \&nginx_conf, cmd => \&nginx_cmd,
               reload => 'HUP',
               line => qr/\] (\d+)#\d+: spanprof-exporter: (.*)$/ },
    httpd => { conf => \&httpd_conf, cmd => \&httpd_cmd,
               reload => 'USR1',
               line => qr/\[pid (\d+):tid \d+\] spanprof-exporter: (.*)$/ },
);

# The exporters the server started (their count in scalar context).
sub spawned {
    my @pids = read_file("$_[0]/error.log")
        =~ /spanprof: exporter process (\d+) started/g;
    return @pids;
}

# Until the server has spawned $n exporters, for at most 10 s: polled
# every 2 ms, since the point is to be early.
sub spawned_at_least {
    my ($dir, $n) = @_;
    my $end = time + 10;
    while (time < $end) {
        return 1 if spawned($dir) >= $n;
        sleep 0.002;
    }
    return spawned($dir) >= $n;
}

# Whether pid is a live exporter (not a zombie: its parent may be gone).
sub running_exporter {
    my ($pid) = @_;
    my $stat = read_file("/proc/$pid/stat");
    return 0 if $stat eq '' || $stat =~ /^\d+ \(.*\) Z/s;
    return read_file("/proc/$pid/cmdline") =~ /^spanprof-exporter/;
}

# One GET in a trace of its own, sampled, sent again every 2 ms while the
# port refuses it (the server is still starting), for at most 10 s: its
# trace id if answered 200.
my $traced = 0;
sub traced_get {
    my ($port) = @_;
    my $trace = sprintf '%032x', 0xea41e000 + ++$traced;
    my ($status, $end) = (0, time + 10);
    while (!$status && time < $end) {
        ($status) = http_get($port, '/', "traceparent: 00-$trace-$PARENT-01");
        sleep 0.002 unless $status;
    }
    return $status == 200 ? ($trace) : ();
}

# Starts a server and sends one traced request; $reloads times, reloads
# it as soon as its newest exporter is spawned; sends another traced
# request, and stops it as soon as its newest exporter is spawned. Then
# checks what is said above.
sub early_stop {
    my ($name, $what, $reloads) = @_;
    my $s = $server{$name};
    my $dir = new_dir();
    my $port = $s->{conf}->($dir);
    # Not waiting for the port, which is polled every 50 ms: the first
    # exporter is well started by then.
    my $pid = spawn(\%env, "$dir/stderr.log", $s->{cmd}->($dir));
    ok(spawned_at_least($dir, 1), "$what: $name starts")
        or do { stop($pid); return };
    my @ids = traced_get($port);
    for my $i (1 .. $reloads) {
        spawned_at_least($dir, $i);
        kill $s->{reload}, $pid;
    }
    push @ids, traced_get($port);
    spawned_at_least($dir, $reloads + 1);
    stop($pid);

    my @started = spawned($dir);
    my %exporter = map { $_ => 1 } @started;
    my (%stopped, @bad);
    for (split /\n/, read_file("$dir/error.log")) {
        my ($exporter, $msg) = $_ =~ $s->{line};
        $stopped{$exporter} = 1 if defined $msg && $msg eq 'stopped';
        # An MPM child of httpd stopped while it starts may crash in
        # mod_mpm_event, without spanprof too: only the exporter's end.
        my ($signalled) = /(?:process|pid) (\d+) exit(?:ed on)? signal/;
        push @bad, $_ if /\[(alert|emerg|crit)\]/
            || ($signalled && $exporter{$signalled})
            || (/\[(warn|error)\]/ && /spanprof/)
            || /\[spanprof:(warn|error|crit|alert|emerg)\]/;
    }
    my @killed = grep { !$stopped{$_} } @started;
    is(scalar @started, $reloads + 1,
       "$what: $name started an exporter at its start and each reload");
    my %silent = map { $_ => 1 } @killed;
    is(scalar @killed, 0, "$what: every exporter stopped and said so")
        or diag("no 'stopped' line from @killed of @started (running: ",
                join(' ', grep { running_exporter($_) } @killed),
                "); their lines:\n",
                join "\n", grep { my ($e) = $_ =~ $s->{line};
                                  defined $e && $silent{$e} }
                           split /\n/, read_file("$dir/error.log"));
    my @left;
    wait_until(sub { !(@left = grep { running_exporter($_) } @started) });
    is(scalar @left, 0, "$what: no exporter left running")
        or diag("@left");
    is(scalar @bad, 0, "$what: nothing alarming in the log")
        or diag(join "\n", @bad);
    is(scalar @ids, 2, "$what: both requests answered 200");
    is(arrived($recv, 10, @ids), scalar @ids,
       "$what: the spans of both requests arrived");
}

for my $name (qw(nginx httpd)) {
    early_stop($name, "stop at once, $_ of 10", 0) for 1 .. 10;
    early_stop($name, "20 reloads at once, then a stop, $_ of 2", 20)
        for 1 .. 2;
}

done_testing();
