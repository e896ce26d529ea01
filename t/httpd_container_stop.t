#!/usr/bin/perl
# httpd stopped the way a container stops it: Docker's official image runs
# `httpd -DFOREGROUND` as the first process of its PID namespace and
# `docker stop` sends it WINCH (the image's STOPSIGNAL: a graceful stop;
# Kubernetes and `apachectl -k stop` send TERM). When that process exits,
# the kernel kills every other process of the namespace (systemd's
# KillMode=mixed, Debian's apache2.service, does the same to the unit's).
# The parent asked its exporter to go and exited without waiting for it:
# the spans the exporter held (OTEL_BSP_SCHEDULE_DELAY, 5 s by default)
# were lost on every stop. Now the parent waits for its exporter when it
# exits (not on a restart). Real apache2 (event MPM) as PID 1 of a new PID
# namespace (unshare), the module's exporter, the independent receiver, a
# 60 s batch delay so that every span is held when the stop comes:
#   - WINCH and TERM: every span arrives, the exporter's counters at exit;
#   - WINCH with no collector: httpd is gone within a few seconds (not the
#     10 s export timeout) and the spans are counted as dropped.
# Root only (a PID namespace).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_cmd spawn
                        wait_for_port free_port);
use Spanprof::Receiver;
use Spanprof::Procs qw(family);

plan skip_all => 'needs root (a PID namespace)' if $> != 0;
plan skip_all => 'unshare --pid does not work here'
    if system('unshare --pid --fork true >/dev/null 2>&1');
my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;

my $N = 30;

sub wait_until {
    my ($cond, $seconds) = @_;
    my $end = time + ($seconds // 10);
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.05;
    }
    return $cond->();
}

sub traced_get {
    my ($port, $trace) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5) or return 0;
    print $s "GET / HTTP/1.0\r\nHost: localhost\r\n"
        . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n\r\n";
    local $/;
    my $resp = <$s> // '';
    return $resp =~ m{^HTTP/1\.[01] 200 } ? 1 : 0;
}

# httpd as PID 1 of a new PID namespace, $N traced requests, $signal to
# it; returns what happened.
sub run_stop {
    my ($what, $endpoint, $signal, $trace) = @_;
    my $dir = new_dir();
    my $port = httpd_conf($dir, extra => "SpanprofOtlpEndpoint $endpoint\n"
                                       . "SpanprofBspScheduleDelay 60s\n");
    my $ns = spawn({}, "$dir/stderr.log", 'unshare', '--pid', '--fork',
                   httpd_cmd($dir));
    my %r = (dir => $dir);
    if (!wait_for_port($port)
        || !wait_until(sub { grep { $_->{args} =~ /^spanprof-exporter/ }
                                 family($ns) }))
    {
        diag("$what: " . read_file("$dir/stderr.log")
             . read_file("$dir/error.log"));
        kill 'KILL', $ns;
        waitpid $ns, 0;
        return \%r;
    }
    my ($parent) = grep { $_->{args} =~ m{^/usr/sbin/apache2}
                          && $_->{ppid} == $ns } family($ns);

    $r{answered} = 0;
    $r{answered} += traced_get($port, $trace) for 1 .. $N;

    my $t = time;
    kill $signal, $parent->{pid};
    $r{exited} = wait_until(sub { waitpid($ns, WNOHANG) == $ns }, 20);
    $r{seconds} = time - $t;
    if (!$r{exited}) {
        kill 'KILL', $ns;
        waitpid $ns, 0;
    }
    $r{log} = read_file("$dir/error.log");
    ($r{counters}) = $r{log} =~ /spanprof-exporter: counters: (.*) \(at exit\)/;
    return \%r;
}

sub counter {
    my ($r, $name) = @_;
    return undef unless defined $r->{counters};
    return $r->{counters} =~ /(?:^| )\Q$name\E=(\d+)/ ? $1 : undef;
}

sub bad_lines {
    my ($r) = @_;
    my $level = qr/\[[a-z_]*:(?:alert|crit|emerg)\]/;
    return [ ($r->{log} // '') =~ /^(.*$level.*)$/mg ];
}

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $endpoint = 'http://127.0.0.1:' . $recv->port;

my %traces = (WINCH => 'd1' x 16, TERM => 'd2' x 16);
for my $signal (qw(WINCH TERM)) {
    my $trace = $traces{$signal};
    my $r = run_stop($signal, $endpoint, $signal, $trace);
    is($r->{answered}, $N, "$signal: $N requests answered");
    ok($r->{exited}, "$signal: httpd, PID 1 of its namespace, exits");
    my $spans = sub {
        scalar grep { ($_->{traceId} // '') eq $trace }
            @{ ($recv->collect)[0] };
    };
    wait_until(sub { $spans->() >= $N }, 3);
    is($spans->(), $N, "$signal: the $N spans the exporter held arrive");
    is(counter($r, 'exported'), $N,
       "$signal: its counters at exit say $N exported")
        or diag($r->{log});
    is_deeply(bad_lines($r), [], "$signal: no alert, crit or emerg");
}

# No collector: nothing to wait for. The default export timeout is 10 s.
my $r = run_stop('absent', 'http://127.0.0.1:' . free_port(), 'WINCH',
                 'd3' x 16);
is($r->{answered}, $N, "no collector: $N requests answered");
ok($r->{exited} && $r->{seconds} < 5,
   'no collector: httpd exits within 5 s')
    or diag("exited: " . ($r->{exited} // 0) . " after $r->{seconds} s");
is(counter($r, 'received'), $N, "no collector: the exporter received $N");
is(counter($r, 'dropped.shutdown'), $N,
   "no collector: and counts them dropped at the stop")
    or diag($r->{log});
is(counter($r, 'held'), 0, 'no collector: none held at exit');
is_deeply(bad_lines($r), [], 'no collector: no alert, crit or emerg');

done_testing();
