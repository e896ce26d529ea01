#!/usr/bin/perl
# nginx: the shared memory and the exporter over the server's life. Real
# nginx with two workers, the exporter the module starts and the
# independent receiver. 20 reloads under load: every request answered,
# one shared memory (the same one) in the master, its descriptors not
# growing, exactly one exporter running as the workers' user, no worker or
# helper left behind, and spans still exported after the last reload (the
# new workers found rings). Stop leaves no process behind. With
# "spanprof off;" at http level, or OTEL_SDK_DISABLED=true, there is no
# shared memory and no exporter.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Procs qw(processes family exporters shm_of fd_count get_ok
                       load_start load_stop);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);

my $port = nginx_conf($dir,
    http => "    log_format sp '\$spanprof_trace_id';\n",
    server => "        access_log $dir/sp.log sp;\n");
# Two workers: reloads overlap old and new generations on the rings.
my $conf = read_file("$dir/nginx.conf");
$conf =~ s/worker_processes 1;/worker_processes 2;/;
write_file("$dir/nginx.conf", $conf);

my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY     => '100',
);
my $master = nginx_start($dir, $port, %env);
ok($master, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

sub workers { grep { $_->{args} =~ /worker process/ } family($master) }

# Settles to the state a reload converges to: 2 workers, 1 cache manager,
# 1 exporter, nothing else.
sub settled {
    my $end = time + 15;
    my @f;
    while (time < $end) {
        @f = family($master);
        my @w = grep { $_->{args} =~ /worker process$/ } @f;
        my @m = grep { $_->{args} =~ /cache manager process$/ } @f;
        my @e = grep { $_->{args} =~ /^spanprof-exporter/ } @f;
        return @f if @w == 2 && @m == 1 && @e == 1 && @f == 4;
        sleep 0.1;
    }
    return @f;
}

sub get { get_ok($port) }

my @f = settled();
is(scalar @f, 4, 'two workers, the cache manager and the exporter');
my ($exp) = exporters($master);
my ($w) = workers();
ok($exp && $exp->{args} =~ /^spanprof-exporter: nginx/,
   'the exporter says what it is in ps');
ok($exp && $w && $exp->{uid} == $w->{uid} && $w->{uid} != 0,
   'the exporter runs as the workers\' user');
my ($shm, $maps) = shm_of($master);
is(scalar keys %$shm, 1, 'the master holds one shared memory');
my @ino = keys %$shm;
my $fds = fd_count($master);

# Load while reloading.
my $load = load_start($port);

for my $i (1 .. 20) {
    kill 'HUP', $master;
    # The next one once the master took this one.
    my $end = time + 10;
    sleep 0.05 until time > $end
        || (() = read_file("$dir/error.log") =~ /reconfiguring/g) >= $i;
    sleep 0.2;
}
@f = settled();
my ($n, $bad) = load_stop($load);
ok($n > 0, "load ran during the reloads ($n requests)");
is($bad, 0, 'every request under reload answered 200');

is(scalar @f, 4, 'after 20 reloads: two workers, one cache manager, '
                 . 'one exporter, nothing else')
    or diag(join "\n", map { "$_->{pid} $_->{ppid} $_->{args}" } @f);
my ($shm2, $maps2) = shm_of($master);
is_deeply([ keys %$shm2 ], \@ino, 'the same shared memory, not a new one');
is($maps2, $maps, 'mapped as often as before');
is(fd_count($master), $fds, 'the master\'s descriptors did not grow');

# The new workers write spans: they found rings.
unlink "$dir/sp.log";
kill 'USR1', $master;    # reopen the access log
sleep 0.5;
get() for 1 .. 5;
my $end = time + 10;
my @ids;
while (time < $end) {
    @ids = grep { /^[0-9a-f]{32}$/ } split /\n/, read_file("$dir/sp.log");
    last if @ids >= 5;
    sleep 0.05;
}
my %want = map { $_ => 1 } @ids;
my %got;
$end = time + 10;
while (time < $end && keys %got < keys %want) {
    for my $req ($recv->requests) {
        next unless $req->{signal} eq 'traces';
        for my $rs (@{ $req->{request}{resourceSpans} // [] }) {
            for my $ss (@{ $rs->{scopeSpans} }) {
                $want{$_->{traceId}} and $got{$_->{traceId}} = 1
                    for @{ $ss->{spans} // [] };
            }
        }
    }
    sleep 0.1;
}
ok(@ids >= 5 && keys %got == keys %want,
   'spans of requests after the reloads are exported')
    or diag(scalar(@ids) . ' ids, ' . scalar(keys %got) . " exported:\n"
            . join "\n", grep { /spanprof/ } split /\n/,
                          read_file("$dir/error.log"));

my @all = (family($master), { pid => $master });
stop($master);
$end = time + 10;
my @left;
while (time < $end) {
    my $p = processes();
    @left = grep { $p->{ $_->{pid} } } @all;
    last unless @left;
    sleep 0.1;
}
is(scalar @left, 0, 'stop: no nginx or exporter process left')
    or diag(join "\n", map { "$_->{pid} " . ($_->{args} // '') } @left);
unlike(read_file("$dir/error.log"), qr/\[(alert|emerg|crit)\]/,
       'no alert in the error log');

# ---- spanprof off, or OTEL_SDK_DISABLED: nothing of it runs

for my $c ([ 'spanprof off' => '    spanprof off;', {} ],
           [ 'OTEL_SDK_DISABLED' => '', { OTEL_SDK_DISABLED => 'true' } ]) {
    my ($what, $http, $extra) = @$c;
    my $off = new_dir();
    my $offport = nginx_conf($off, http => $http);
    $master = nginx_start($off, $offport, %env, %$extra);
    ok($master, "nginx starts with $what");
    sleep 1;
    my ($offshm) = shm_of($master);
    is(scalar keys %$offshm, 0, "$what: no shared memory");
    is(scalar(exporters($master)), 0, "$what: no exporter");
    is(scalar(grep { $_->{args} =~ /cache manager/ } family($master)), 0,
       "$what: no helper process");
    stop($master);
}

done_testing();
