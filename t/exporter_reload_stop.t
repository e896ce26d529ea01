#!/usr/bin/perl
# A stop soon after a reload, while the previous exporter still goes. On a
# reload (nginx: HUP; httpd: USR1, `apachectl -k graceful`) the new
# exporter waits for the old one to give the region up; the old one, seeing
# that, reads the rings a last time and goes without reading on, and its
# last export may take up to its OTLP timeout. A stop that reached the new
# one meanwhile made it give up at once: the spans the workers wrote after
# the old one's last read (every request the new workers served) were never
# read. Then the stopped one waited for the region, within half of its own
# timeout; but the old one held it to the end of its last export, longer
# than a fast stop's half second. Now the old one gives it up after its
# last read, and the new one reads on from there.
# Real nginx and apache2 (event MPM) with the module and two independent
# receivers: the first generation exports to one that stops answering
# before the reload (its exporter's last export then lasts its 4 s
# timeout), the second to another. Checked, for nginx's graceful and fast
# stops and httpd's stop: the request served after the reload, while the
# old exporter still exports, before the stop, arrives at the second;
# every exporter is gone after the stop.
# Then httpd, reloaded twice in a row and stopped: the second exporter,
# stopped by the second reload, waits to read after the first; the third,
# stopped before it ran, leaves the region to the second and goes at once.
# httpd's exit waited for the third alone: the first two still ran when it
# was gone (a container's stop kills them with what they hold), and
# t/exporter_early_stop.t, reading the log then, missed their "stopped"
# (1 in 168 runs on a busy machine). The exporter is started through a
# wrapper that waits 1 s, so that the stop reaches the third before it
# runs. Checked: no exporter is left when httpd is gone, each said it
# stopped, and the span of a request served after the first reload
# arrives.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(WNOHANG);
use Test::More;

use Spanprof::Server qw(top_dir new_dir read_file write_file free_port
                        nginx_conf nginx_cmd httpd_conf httpd_cmd spawn
                        wait_for_port wait_until wait_for_log http_get);
use Spanprof::Receiver;
use Spanprof::Cases qw(arrived);
use Spanprof::Exporter qw(build_driver run_drive);

Spanprof::Receiver::skip_unless_ready(apache2 => 1);

my $PARENT = '00f067aa0ba902b7';

# Each server's configuration of a generation: its endpoint, the spans
# held until a flush (the first generation's are sent at its exporter's
# stop), its OTLP timeout.
my %SERVERS = (
    nginx => {
        conf => sub {
            my ($dir, $port, $url, $delay, $timeout) = @_;
            nginx_conf($dir, port => $port,
                http => "spanprof_otlp_endpoint $url;\n"
                      . "    spanprof_bsp_schedule_delay $delay;\n"
                      . "    spanprof_otlp_timeout $timeout;");
        },
        cmd => \&nginx_cmd,
        reload => 'HUP',
        stop => 'QUIT',
    },
    httpd => {
        conf => sub {
            my ($dir, $port, $url, $delay, $timeout) = @_;
            httpd_conf($dir, port => $port,
                extra => "SpanprofOtlpEndpoint $url\n"
                       . "SpanprofBspScheduleDelay $delay\n"
                       . "SpanprofOtlpTimeout $timeout\n");
        },
        cmd => \&httpd_cmd,
        reload => 'USR1',
        stop => 'TERM',
    },
);

# A GET of / in a sampled trace of its own; its trace id if answered 200.
my $traced = 0;
sub traced_get {
    my ($port) = @_;
    my $trace = sprintf '%032x', 0x5e10ad00 + ++$traced;
    my ($status) = http_get($port, '/', "traceparent: 00-$trace-$PARENT-01");
    return $status == 200 ? $trace : undef;
}

# Stops the server ($signal, default TERM); its exit waited for (30 s at
# most: nginx's manager and httpd wait for the exporter's flush).
sub stop_server {
    my ($pid, $signal) = @_;
    kill $signal // 'TERM', $pid;
    wait_until(sub { waitpid($pid, WNOHANG) == $pid }, 30)
        or do { kill 'KILL', $pid; waitpid($pid, 0) };
}

# The exporters the log says were started (their count in scalar context).
sub started {
    my @pids = read_file("$_[0]/error.log")
        =~ /exporter process (\d+) started/g;
    return @pids;
}

# Those of the pids that are live exporters (a zombie's cmdline is empty).
sub running {
    return grep { read_file("/proc/$_/cmdline") =~ /^spanprof-exporter/ } @_;
}

# Starts $name (its exporter's last export lasting $timeout) with the
# environment $env, sends a traced request, stalls the first receiver and
# reloads it towards the second. Returns the directory, both receivers,
# the port and the server's pid.
sub start_and_reload {
    my ($name, $what, $timeout, $env) = @_;
    my $s = $SERVERS{$name};
    my $dir = new_dir();
    my $old = Spanprof::Receiver->start(dir => $dir);
    my $new = Spanprof::Receiver->start(dir => $dir);
    my $port = free_port();
    $s->{conf}->($dir, $port, 'http://127.0.0.1:' . $old->port, '60s',
                 $timeout);
    my $pid = spawn($env, "$dir/stderr.log", $s->{cmd}->($dir));
    # The exporter's own line, not the server's: on a busy machine the
    # first exporter, still loading, came after the reload's, which took
    # the region (1 of 10 runs); that is no stop soon after a reload.
    ok(wait_for_port($port) && wait_for_log("$dir/error.log",
           qr/spanprof-exporter: started for/), "$what: the server starts")
        or diag(read_file("$dir/error.log"));

    # A span the first exporter holds, and sends at its stop, to a
    # receiver that no longer answers: its last export lasts $timeout.
    ok(traced_get($port), "$what: a request before the reload");
    $old->control(stall_ms => -1);
    # (its exporter, stopped, waits up to 10 s for the old one)
    $s->{conf}->($dir, $port, 'http://127.0.0.1:' . $new->port, '5s',
                 '20s');
    kill $s->{reload}, $pid;
    return ($dir, $old, $new, $port, $pid);
}

# nginx's graceful stop (QUIT) and its fast stop (TERM: the exporters get
# SIGINT, half a second to send what they hold). The old exporter gives
# the region up after its last read, not at the end of its last export:
# held through that export (4 s to a receiver that stalls), the new one,
# stopped fast, waited a quarter of a second for the region, gave up and
# the request's span was never read.
for my $case (['nginx'], ['nginx', 'TERM', 'nginx, fast stop'], ['httpd']) {
    my ($name, $signal, $what) = @$case;
    $signal //= $SERVERS{$name}{stop};
    $what //= $name;
    my ($dir, $old, $new, $port, $pid) =
        start_and_reload($name, $what, '4s', {});
    # Its last export arrived (stalled), so its last read is done; the
    # request and the stop come while that export lasts (4 s).
    ok(wait_until(sub { $old->requests }, 30),
       "$what: the old exporter sends what it held at its stop");
    my ($first) = started($dir);
    ok(wait_until(sub { started($dir) == 2 }, 30) && running($first),
       "$what: the new exporter started while the old one still exports");
    my $id = traced_get($port);
    ok($id, "$what: a request after the reload");
    stop_server($pid, $signal);

    my $arrived = arrived($new, 20, grep { defined } $id);
    my $log = read_file("$dir/error.log");
    is($arrived, 1,
       "$what: its span arrives, though the stop came before the old "
       . 'exporter left') or diag(join "\n", grep { /spanprof/ }
                                   split /\n/, $log);
    ok($log !~ /another exporter still reads the region: waiting/
       || $log =~ /previous exporter gone: reading/,
       "$what: the new exporter read, at once or after waiting for the "
       . 'region');
    unlike($log, qr/still reads the region: what the workers wrote/,
           "$what: it did not give up");
    my @started = started($dir);
    my @left;
    wait_until(sub { !(@left = running(@started)) }, 30);
    is(scalar @started, 2, "$what: an exporter at the start and the reload");
    is(scalar @left, 0, "$what: no exporter left running") or diag("@left");
}

{
    my $wrapper = new_dir() . '/slow-exporter';
    my $exporter = top_dir() . '/build/spanprof-exporter';
    # SIGTERM stays blocked through the wait and the exec
    # (sp_exporter_launch.h): the exporter takes it as a stop. Its title
    # is the one the module gave.
    write_file($wrapper, "#!/usr/bin/perl\n"
        . "select(undef, undef, undef, 1);\n"
        . "exec { '$exporter' } 'spanprof-exporter: httpd'\n"
        . "    or die \"exec $exporter: \$!\";\n");
    chmod 0755, $wrapper;
    my ($dir, $old, $new, $port, $pid) = start_and_reload('httpd', 'twice',
        '6s', { SPANPROF_EXPORTER_PATH => $wrapper });
    ok(wait_until(sub { $old->requests }, 30)
       && wait_until(sub { started($dir) == 2 }, 30),
       'twice: the first exporter sends, a second one started');
    my $id = traced_get($port);
    ok($id, 'twice: a request after the first reload');
    kill 'USR1', $pid;
    ok(wait_until(sub { started($dir) == 3 }, 30),
       'twice: the second reload starts a third exporter');
    stop_server($pid);

    # At once: what httpd's exit left running, and what the log says.
    my @started = started($dir);
    my @left = running(@started);
    my $log = read_file("$dir/error.log");
    my %stopped = map { $_ => 1 }
        $log =~ /\[pid (\d+):tid \d+\] spanprof-exporter: stopped$/mg;
    is(scalar @left, 0, 'twice: no exporter outlives httpd')
        or diag("@left of @started");
    is_deeply([ grep { !$stopped{$_} } @started ], [],
              'twice: every exporter said it stopped')
        or diag(join "\n", grep { /spanprof/ } split /\n/, $log);
    is(arrived($new, 20, grep { defined } $id), 1,
       'twice: the span served after the first reload arrives');
    wait_until(sub { !running(@started) }, 30);
}

# --- stopped while another exporter holds the region and reads on

# The second exporter (t/bin/exporter_drive.c --second) is stopped at its
# start while the first one, live, holds the region. It used to wait half
# its timeout and warn that what the workers wrote after the other's
# last read was not exported, though the first one reads on and exports
# it. Now it says so at info; the warning is left for a holder that
# reads nothing (frozen with SIGSTOP, a span unread in its ring).
{
    my $dir = new_dir();
    my $driver = build_driver($dir);
    for my $mode (qw(live frozen)) {
        my $rcv = Spanprof::Receiver->start(dir => $dir);
        my $h = run_drive(dir => $dir, driver => $driver,
            env => { OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:'
                                                    . $rcv->port,
                     OTEL_EXPORTER_OTLP_TIMEOUT => 2000,
                     OTEL_BSP_SCHEDULE_DELAY => 200 },
            args => ['--second', $mode, '--spans', 5]);
        my ($second) = $h->{stdout} =~ /^second (\d+)$/m;
        my ($exit) = $h->{stdout} =~ /^second_exit (-?\d+)$/m;
        is($exit, 0, "second exporter, first $mode: it exits 0");
        my $said = join "\n", grep { /\s\Q$second\E#\d+: spanprof-exporter/ }
            split /\n/, $h->{stderr};
        if ($mode eq 'live') {
            unlike($said, qr/\[warn\]/, 'first live: no warning')
                or diag($said);
            like($said, qr/\[info\] .*exporter holds the region and reads/,
                 'first live: it says the other reads on');
        } else {
            like($said, qr/\[warn\] .*the region but has read nothing/,
                 'first frozen: it warns that nobody reads')
                or diag($said);
        }
        my $c = $h->{counters} // {};
        is($c->{exported}, $h->{written_spans},
           "second exporter, first $mode: the first exports every span");
    }
}

done_testing();
