#!/usr/bin/perl
# nginx stopped the way a container stops it: Docker's official image runs
# `nginx -g 'daemon off;'` as the first process of its PID namespace and
# `docker stop` sends it QUIT (the image's STOPSIGNAL; Kubernetes and
# `nginx -s stop` send TERM). When that process exits, the kernel kills
# every other process of the namespace (systemd's KillMode=mixed, Debian's
# nginx.service, does the same to the unit's). nginx waits for its workers
# and its manager, not for the exporter the manager started: the spans the
# exporter held (OTEL_BSP_SCHEDULE_DELAY, 5 s by default) were lost on
# every stop, without even its counters line. Now the manager waits for
# its exporter at exit, and the exporter does not wait out a collector
# that refuses during the stop. Real nginx as PID 1 of a new PID namespace
# (unshare), the module's exporter, the independent receiver, a 60 s
# batch delay so that every span is held when the stop comes:
#   - QUIT and TERM: every span arrives, the exporter's counters at exit;
#   - QUIT with no collector: nginx is gone within a few seconds (not the
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

use Spanprof::Server qw(new_dir read_file write_file nginx_conf spawn
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

# nginx as PID 1 of a new PID namespace, $N traced requests, $signal to
# its master; returns what happened.
sub run_stop {
    my ($what, $endpoint, $signal, $trace) = @_;
    my $dir = new_dir();
    my $port = nginx_conf($dir, workers => 2,
                          http => "spanprof_otlp_endpoint $endpoint;\n"
                                . "    spanprof_bsp_schedule_delay 60s;");
    my $conf = read_file("$dir/nginx.conf");
    $conf =~ s/daemon off;\n//;
    write_file("$dir/nginx.conf", $conf);

    my $ns = spawn({}, "$dir/stderr.log", 'unshare', '--pid', '--fork',
                   '/usr/sbin/nginx', '-p', "$dir/", '-c', "$dir/nginx.conf",
                   '-e', "$dir/error.log", '-g', 'daemon off;');
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
    my ($master) = grep { $_->{args} =~ /^nginx: master/ } family($ns);

    $r{answered} = 0;
    $r{answered} += traced_get($port, $trace) for 1 .. $N;

    my $t = time;
    kill $signal, $master->{pid};
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
    return [ ($r->{log} // '') =~ /^(.*\[(?:alert|crit|emerg)\].*)$/mg ];
}

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $endpoint = 'http://127.0.0.1:' . $recv->port;

my %traces = (QUIT => 'c1' x 16, TERM => 'c2' x 16);
for my $signal (qw(QUIT TERM)) {
    my $trace = $traces{$signal};
    my $r = run_stop($signal, $endpoint, $signal, $trace);
    is($r->{answered}, $N, "$signal: $N requests answered");
    ok($r->{exited}, "$signal: nginx, PID 1 of its namespace, exits");
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
my $r = run_stop('absent', 'http://127.0.0.1:' . free_port(), 'QUIT',
                 'c3' x 16);
is($r->{answered}, $N, "no collector: $N requests answered");
ok($r->{exited} && $r->{seconds} < 5,
   'no collector: nginx exits within 5 s')
    or diag("exited: " . ($r->{exited} // 0) . " after $r->{seconds} s");
is(counter($r, 'received'), $N, "no collector: the exporter received $N");
is(counter($r, 'dropped.shutdown'), $N,
   "no collector: and counts them dropped at the stop")
    or diag($r->{log});
is(counter($r, 'held'), 0, 'no collector: none held at exit');
is_deeply(bad_lines($r), [], 'no collector: no alert, crit or emerg');

done_testing();
