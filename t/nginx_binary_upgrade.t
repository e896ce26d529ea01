#!/usr/bin/perl
# nginx's online upgrade of its executable (USR2, then QUIT to the old
# master): what Debian's nginx package does on every upgrade while nginx
# runs (its postinst calls "invoke-rc.d nginx upgrade"). The new master is
# the old one's child, started by nginx with an environment of only TZ and
# the names of env directives; it must read the same configuration as the
# old one (the OTLP endpoint of the environment, not the default), start
# an exporter of its own, and take over when the old master quits: every
# request answered and traced before, during and after, one exporter left
# at the end, nothing left once the new master stops. Real nginx (as a
# daemon: nginx refuses USR2 when its parent did not change), the module's
# exporter and the independent receiver.
# With OTEL_SDK_DISABLED=true in the environment the new master must
# find it too: before, the module kept the environment only when it was
# on, and the new binary turned spanprof on (an exporter sending to
# localhost:4317).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_cmd
                        wait_until http_get);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);
use Spanprof::Procs qw(processes family shm_of);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $endpoint = 'http://127.0.0.1:' . $recv->port;

my $port = nginx_conf($dir);
my $conf = read_file("$dir/nginx.conf");
$conf =~ s/daemon off;/daemon on;/;
write_file("$dir/nginx.conf", $conf);

# The masters this test started, for the END block.
my @masters;

sub pid_file {
    my ($name) = @_;
    my $pid = read_file("$dir/$name") // return undef;
    return $pid =~ /^(\d+)/ ? $1 : undef;
}


# The processes of a master's own generation: the new master is the old
# one's child, and its processes are not the old master's.
sub generation {
    my ($master, $other) = @_;
    my %skip = map { $_->{pid} => 1 } $other ? family($other) : ();
    $skip{$other} = 1 if $other;
    return grep { !$skip{ $_->{pid} } } family($master);
}

sub exporters_of {
    my ($master, $other) = @_;
    return grep { $_->{args} =~ /^spanprof-exporter/ }
        generation($master, $other);
}

sub alive { kill 0, $_[0] }

# A GET with a traceparent of trace $trace; 1 when answered 200.
sub traced_get {
    my ($trace) = @_;
    my ($status) = http_get($port, '/',
        "traceparent: 00-$trace-00f067aa0ba902b7-01");
    return $status == 200 ? 1 : 0;
}

# How many spans of trace $trace arrived, once $n did or after 10 s.
sub spans_of {
    my ($trace, $n) = @_;
    return scalar wait_spans($recv, sub { $_[0]{traceId} eq $trace }, $n);
}

{
    local %ENV = (%ENV,
        OTEL_EXPORTER_OTLP_ENDPOINT => $endpoint,
        OTEL_SERVICE_NAME           => 'upgrade-test',
        OTEL_BSP_SCHEDULE_DELAY     => '100',
    );
    system(nginx_cmd($dir)) == 0 or BAIL_OUT(read_file("$dir/error.log"));
}
my $old = pid_file('nginx.pid');
ok($old, 'nginx starts as a daemon') or BAIL_OUT(read_file("$dir/error.log"));
push @masters, $old;
ok(wait_until(sub { exporters_of($old) == 1 }), 'one exporter');

my $before = 'a1' x 16;
my $during = 'a2' x 16;
my $after = 'a3' x 16;

ok(traced_get($before), 'a request before the upgrade');
is(spans_of($before, 1), 1, 'its span arrives');

# The upgrade: a new master, its own workers and exporter, beside the old.
# A new master execs nginx and reads the configuration: on a loaded
# machine (CI shares it) that once took over the 10 s wait_until gives.
my $USR2_WAIT = 30;
kill 'USR2', $old;
my $new;
ok(wait_until(sub {
        $new = pid_file('nginx.pid');
        defined $new && $new != $old
            && (pid_file('nginx.pid.oldbin') // 0) == $old;
    }, $USR2_WAIT), 'USR2: a new master, the old one in nginx.pid.oldbin');
push @masters, $new if $new;
ok(wait_until(sub { exporters_of($new) == 1 }),
   'the new master starts an exporter of its own');
is(scalar exporters_of($old, $new), 1,
   'the old master keeps its exporter');

# The new master read the old one's configuration: a new binary that lost
# OTEL_EXPORTER_OTLP_ENDPOINT sends to localhost:4317.
sub started_endpoints {
    return (read_file("$dir/error.log") // '')
        =~ /spanprof-exporter: started for nginx[^\n]*traces otlp ([^\s,]+)/g;
}
ok(wait_until(sub { my @e = started_endpoints(); @e == 2 }),
   'both exporters logged their start');
my @endpoints = started_endpoints();
is_deeply(\@endpoints, [ $endpoint, $endpoint ],
          'the new exporter sends where the old one did');

# Both generations accept on the inherited socket: every request is
# answered and traced whichever serves it.
my $ok = 0;
$ok += traced_get($during) for 1 .. 20;
is($ok, 20, '20 requests while both masters run, all answered');
is(spans_of($during, 20), 20, 'and all 20 spans arrive');

# The old master quits: it and everything of it goes.
my @old_family = map { $_->{pid} } generation($old, $new);
kill 'QUIT', $old;
ok(wait_until(sub { !alive($old) && !grep { alive($_) } @old_family }, 20),
   'QUIT: the old master, its workers and its exporter exit');
is(scalar exporters_of($new), 1, 'one exporter left, the new master\'s');
my ($inodes) = shm_of($new);
is(scalar keys %$inodes, 1, 'the new master holds one shared memory');

ok(traced_get($after), 'a request after the upgrade');
is(spans_of($after, 1), 1, 'its span arrives');
my ($span) = grep { $_->{traceId} eq $after } @{ ($recv->collect)[0] };
is(Spanprof::Receiver::attribute($span->{resource}{attributes},
                                    'service.name'),
   'upgrade-test', 'with the service name of the environment');

my @new_family = map { $_->{pid} } family($new);
kill 'QUIT', $new;
ok(wait_until(sub { !alive($new) && !grep { alive($_) } @new_family }, 20),
   'QUIT: the new master and everything of it exit');

# ---- turned off by the environment: it stays off after the upgrade

my $off = new_dir();
my $offport = nginx_conf($off);
my $offconf = read_file("$off/nginx.conf");
$offconf =~ s/daemon off;/daemon on;/;
write_file("$off/nginx.conf", $offconf);
{
    local %ENV = (%ENV, OTEL_SDK_DISABLED => 'true',
                  OTEL_EXPORTER_OTLP_ENDPOINT => $endpoint);
    system(nginx_cmd($off)) == 0 or BAIL_OUT(read_file("$off/error.log"));
}
my $off_old = read_file("$off/nginx.pid") =~ /^(\d+)/ ? $1 : undef;
ok($off_old, 'OTEL_SDK_DISABLED: nginx starts');
push @masters, $off_old if $off_old;
my $off_new;
kill 'USR2', $off_old;
ok(wait_until(sub {
        $off_new = read_file("$off/nginx.pid") =~ /^(\d+)/ ? $1 : undef;
        defined $off_new && $off_new != $off_old
            && grep { $_->{args} =~ /worker process/ } family($off_new);
    }, $USR2_WAIT), 'OTEL_SDK_DISABLED: USR2 starts a new master and its '
    . 'workers');
push @masters, $off_new if $off_new;
sleep 1.5;    # the manager would have started an exporter by now
is_deeply([ map { $_->{args} } grep { $_->{args} =~ /cache manager|^spanprof/ }
            family($off_old) ], [],
          'OTEL_SDK_DISABLED: no exporter nor its manager, old or new');
my ($off_shm) = shm_of($off_new);
is(scalar keys %$off_shm, 0,
   'OTEL_SDK_DISABLED: the new master made no shared memory');
kill 'QUIT', $off_old;
ok(wait_until(sub { !alive($off_old) }, 20), 'OTEL_SDK_DISABLED: the old '
   . 'master quits');
kill 'QUIT', $off_new;
ok(wait_until(sub { !alive($off_new) }, 20), 'OTEL_SDK_DISABLED: the new '
   . 'master quits');

my $log = read_file("$dir/error.log") // '';
my @bad = $log =~ /^(.*\[(?:alert|crit|emerg)\].*)$/mg;
is_deeply(\@bad, [], 'no alert, crit or emerg in the error log');

END {
    for my $m (@masters) {
        kill 'TERM', $m if $m && kill 0, $m;
    }
}

done_testing();
