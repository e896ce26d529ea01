#!/usr/bin/perl
# httpd: the shared memory and the exporter daemon over the server's life,
# under each MPM. Real apache2 with the module, the exporter it starts and
# the independent OTLP receiver:
#   - 20 graceful restarts (SIGUSR1, what `apachectl -k graceful` sends)
#     under concurrent load: every request answered 200, the same one
#     shared memory in the parent mapped as often as before, the parent's
#     descriptors not growing, exactly one exporter (as the children's
#     user) and the MPM's children, nothing else; spans of requests after
#     the restarts arrive;
#   - kill -9 of the exporter: a new one, and spans flow again;
#   - `-k restart` (SIGHUP) replaces the exporter and re-reads the settings
#     (here a 60 s batch delay);
#   - stop (SIGTERM): the spans of the requests served just before it, held
#     back by that delay, arrive; no process is left; the parent exits
#     without a fault (it called the exporters' callback in the unloaded
#     module: SIGSEGV at every stop, and after a graceful restart that
#     loaded the module elsewhere).
# t/httpd_trace.t checks one graceful restart, kill -9 and stop on a
# server that also profiles.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file httpd_conf httpd_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Procs qw(processes family exporters shm_of fd_count
                       load_start load_stop);
use Spanprof::Cases qw(arrived traced_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';

# At most two children of 25 threads once idle (prefork: two processes):
# the family settles to one exporter and one or two children.
my %mpm_conf = (
    event => <<'CONF',
StartServers 2
ServerLimit 16
ThreadsPerChild 25
MaxRequestWorkers 50
MinSpareThreads 25
MaxSpareThreads 50
CONF
    prefork => <<'CONF',
StartServers 2
MinSpareServers 2
MaxSpareServers 2
MaxRequestWorkers 8
CONF
);
$mpm_conf{worker} = $mpm_conf{event};

# The family once it is one or two MPM children and one exporter, or as it
# is after 20 s.
sub settled_ok {
    my @c = grep { $_->{args} =~ m{^/usr/sbin/apache2 } } @_;
    my @e = grep { $_->{args} =~ /^spanprof-exporter/ } @_;
    return @c >= 1 && @c <= 2 && @e == 1 && @_ == @c + 1;
}

sub settled {
    my ($parent) = @_;
    my $end = time + 20;
    my @f;
    while (time < $end) {
        @f = family($parent);
        return @f if settled_ok(@f);
        sleep 0.2;
    }
    return @f;
}

sub show { join "\n", map { "$_->{pid} $_->{ppid} $_->{args}" } @_ }

# Waits until the error log says "resuming normal operations" $n times.
sub resumed {
    my ($dir, $n) = @_;
    my $end = time + 15;
    while (time < $end) {
        return 1 if (() = read_file("$dir/error.log")
                     =~ /resuming normal operations/g) >= $n;
        sleep 0.05;
    }
    return 0;
}

sub run_mpm {
    my ($mpm) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    # The load's own requests are mostly not recorded: the receiver has
    # the traced requests' spans to look through, not thousands.
    my $settings = <<'CONF';
SpanprofTracesSampler parentbased_traceidratio
SpanprofTracesSamplerArg 0.02
CONF
    my $port = httpd_conf($dir, mpm => $mpm,
                          extra => $mpm_conf{$mpm} . $settings);
    my %env = (
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        OTEL_BSP_SCHEDULE_DELAY     => '100',
    );
    my $parent = httpd_start($dir, $port, %env);
    ok($parent, "$mpm: httpd starts")
        or return diag(read_file("$dir/error.log"));

    my @f = settled($parent);
    ok(settled_ok(@f), "$mpm: one or two children and the exporter")
        or diag(show(@f));
    my ($exp) = exporters($parent);
    my ($child) = grep { $_->{args} =~ m{^/usr/sbin/apache2 } } @f;
    ok($exp && $child && $exp->{uid} == $child->{uid} && $exp->{uid} != 0,
       "$mpm: the exporter runs as the children's user");
    my ($shm, $maps) = shm_of($parent);
    is(scalar keys %$shm, 1, "$mpm: the parent holds one shared memory");
    my @ino = keys %$shm;
    my $fds = fd_count($parent);

    # ---- 20 graceful restarts under load
    # An event child told to stop gracefully may exit holding a connection
    # its listener queued but no worker began: httpd's own race, see
    # t/httpd_recycle.t. Such a request (reset before any byte) is sent
    # once more and counted.

    my $load = load_start($port, 3, undef, $mpm eq 'event');
    my %seen = ($exp ? ($exp->{pid} => 1) : ());
    for my $i (1 .. 20) {
        kill 'USR1', $parent;
        resumed($dir, $i + 1) or last;
        sleep 0.2;
        $seen{ $_->{pid} } = 1 for exporters($parent);
    }
    sleep 0.5;
    my ($n, $bad, $resets) = load_stop($load);
    ok($n > 100, "$mpm: load ran during the restarts ($n requests)");
    is($bad, 0, "$mpm: every request during 20 graceful restarts answered 200"
                . " ($resets sent again)");
    cmp_ok($resets, '<=', $n / 100,
           "$mpm: few connections reset by an ending child")
        if $mpm eq 'event';
    is((() = read_file("$dir/error.log") =~ /resuming normal operations/g),
       21, "$mpm: httpd took all 20 graceful restarts");
    ok(keys %seen >= 10, "$mpm: the exporter was replaced on graceful "
                         . 'restarts (' . scalar(keys %seen) . ' seen)');
    # each old exporter is reaped as the module's own child
    unlike(read_file("$dir/error.log"), qr/long lost child came home/,
           "$mpm: no \"long lost child\" warning for the old exporters");
    @f = settled($parent);
    ok(settled_ok(@f), "$mpm: after 20 graceful restarts: one or two "
                       . 'children, one exporter, nothing else')
        or diag(show(@f));
    my ($shm2, $maps2) = shm_of($parent);
    is_deeply([ keys %$shm2 ], \@ino,
              "$mpm: the same shared memory, not a new one");
    is($maps2, $maps, "$mpm: mapped as often as before");
    is(fd_count($parent), $fds, "$mpm: the parent's descriptors did not grow");
    my @ids = traced_requests($port, 5, $PARENT);
    is(arrived($recv, 10, @ids), 5,
       "$mpm: spans of requests after the restarts are exported");

    # ---- kill -9 of the exporter

    ($exp) = exporters($parent);
    kill 'KILL', $exp->{pid} if $exp;
    my @new;
    my $end = time + 10;
    while (time < $end) {
        @new = grep { $_->{pid} != ($exp ? $exp->{pid} : 0) } exporters($parent);
        last if @new;
        sleep 0.1;
    }
    is(scalar @new, 1, "$mpm: kill -9: a new exporter starts");
    my $why = $exp ? qr/\[spanprof:warn\].*exporter process $exp->{pid} exited \(status 9\), starting another$/m
                   : qr/^\z/;
    like(read_file("$dir/error.log"), $why,
         "$mpm: kill -9: its end is logged at warn, with the signal");
    @ids = traced_requests($port, 5, $PARENT);
    is(arrived($recv, 10, @ids), 5, "$mpm: kill -9: spans flow again");

    # ---- -k restart (SIGHUP) with a 60 s batch delay

    write_file("$dir/httpd.conf", read_file("$dir/httpd.conf")
               . "SpanprofBspScheduleDelay 60000\n");
    my %before = map { $_->{pid} => 1 } exporters($parent);
    kill 'HUP', $parent;
    ok(resumed($dir, 22), "$mpm: -k restart taken");
    @f = settled($parent);
    my @after = exporters($parent);
    is(scalar @after, 1, "$mpm: -k restart: one exporter") or diag(show(@f));
    ok(@after && !$before{ $after[0]{pid} }, "$mpm: -k restart: a new one");
    my $p = processes();
    is(scalar(grep { $p->{$_} } keys %before), 0,
       "$mpm: -k restart: the old one is gone");
    my ($shm3) = shm_of($parent);
    is_deeply([ keys %$shm3 ], \@ino, "$mpm: -k restart: the same shared memory");

    # ---- stop flushes

    @ids = traced_requests($port, 5, $PARENT);
    is(scalar @ids, 5, "$mpm: requests answered before stop");
    is(arrived($recv, 1.5, @ids), 0,
       "$mpm: their spans wait for the 60 s batch delay");
    my @all = (family($parent), { pid => $parent });
    my $started = () = read_file("$dir/error.log")
                       =~ /spanprof: exporter process \d+ started/g;
    stop($parent);
    my $status = $?;
    is(arrived($recv, 15, @ids), 5,
       "$mpm: stop: the exporter flushed them");
    # APR tells what it still watches, when the process pool goes after
    # the modules were unloaded: the parent called into the unloaded
    # module and died of SIGSEGV (AH00060 in the log) at every stop.
    is($status & 127, 0, "$mpm: stop: the parent exits, not killed by a "
                         . 'signal') or diag("wait status $status");
    unlike(read_file("$dir/error.log"), qr/AH00060/,
           "$mpm: stop: no fault in the parent");
    my @left;
    $end = time + 15;
    while (time < $end) {
        $p = processes();
        @left = grep { $p->{ $_->{pid} } } @all;
        last unless @left;
        sleep 0.1;
    }
    is(scalar @left, 0, "$mpm: stop: no httpd or exporter process left")
        or diag(show(@left));
    my $after = () = read_file("$dir/error.log")
                     =~ /spanprof: exporter process \d+ started/g;
    is($after, $started, "$mpm: stop: no exporter started on the way out");
    my $errors = join "\n", grep { /:(error|crit|alert|emerg)\]/ }
        split /\n/, read_file("$dir/error.log");
    is($errors, '', "$mpm: nothing above warn in the error log");
    $recv->stop;
}

run_mpm($_) for split /,/, ($ENV{SPANPROF_MPMS} // 'event,worker,prefork');
done_testing();
