#!/usr/bin/perl
# nginx run as an unprivileged user, the way the nginx-unprivileged image
# and many containers run it: `nginx -g 'daemon off;'` in the foreground,
# the master started as nobody with no "user" directive, its configuration
# and prefix in a directory it cannot write (root's), its temp paths, pid
# file and error log in a /tmp-like directory (mode 1777). nginx alone
# starts so; with the module it stopped at "[emerg] mkdir()
# "<prefix>/spanprof" failed (13: Permission denied)", nginx -t too: the
# exporter path's directory went under the prefix when the temp paths'
# directory was one others may write, which matters only to a master that
# chowns (root). Now: nginx -t and the start succeed, the directory is
# made beside the temp paths, nothing in the prefix, the exporter runs as
# nobody and every request's span arrives. Real nginx, the module's
# exporter, the independent receiver. Root only (setpriv starts nginx as
# nobody).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf spawn stop
                        wait_for_port http_get wait_until);
use Spanprof::Receiver qw(attribute);
use Spanprof::Procs qw(family);

plan skip_all => 'needs root (starts nginx as nobody)' if $> != 0;
plan skip_all => 'needs setpriv' if system('setpriv --version >/dev/null 2>&1');
Spanprof::Receiver::skip_unless_ready();

my $nobody = getpwnam('nobody');
my $nogroup = getgrnam('nogroup') // getgrnam('nobody');
plan skip_all => 'no user nobody' unless defined $nobody && defined $nogroup;

# $dir: root's, 0755 (new_dir): the prefix and the configuration. $tmp:
# what /tmp is to the container.
my $dir = new_dir();
my $tmp = "$dir/tmp";
mkdir $tmp or die "$tmp: $!";
chmod 01777, $tmp;

my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = nginx_conf($dir, workers => 2);
my $conf = read_file("$dir/nginx.conf");
$conf =~ s/daemon off;\n//;
$conf =~ s{error_log \S+ }{error_log $tmp/error.log };
$conf =~ s{pid \S+;}{pid $tmp/nginx.pid;};
$conf =~ s{_temp_path $dir/(\w+);}{_temp_path $tmp/${1}_temp;}g;
write_file("$dir/nginx.conf", $conf);

my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_SERVICE_NAME           => 'unprivileged-test',
    OTEL_BSP_SCHEDULE_DELAY     => '100',
);
my @as_nobody = ('setpriv', "--reuid=$nobody", "--regid=$nogroup",
                 '--clear-groups');
my @nginx = ('/usr/sbin/nginx', '-p', "$dir/", '-c', "$dir/nginx.conf");


my $test = `@as_nobody @nginx -t 2>&1`;
is($?, 0, 'nginx -t as nobody passes') or diag($test);

my $pid = spawn(\%env, "$dir/stderr.log", @as_nobody, @nginx,
                '-g', 'daemon off;');
my $up = wait_for_port($port);
ok($up, "nginx -g 'daemon off;' as nobody starts")
    or diag(read_file("$dir/stderr.log"));

SKIP: {
    skip 'nginx did not start', 7 unless $up;

    my @family;
    ok(wait_until(sub {
            @family = family($pid);
            grep { $_->{args} =~ /^spanprof-exporter/ } @family;
        }), 'an exporter runs');
    my @exporters = grep { $_->{args} =~ /^spanprof-exporter/ } @family;
    is(scalar @exporters, 1, 'one exporter');
    is_deeply([ map { $_->{uid} } @exporters ], [ $nobody ],
              'as nobody, the master\'s user');

    ok(-d "$tmp/spanprof", 'its directory is beside the temp paths');
    ok(!-e "$dir/spanprof", 'nothing is made in the prefix');

    my $ok = 0;
    for (1 .. 10) {
        my ($status) = http_get($port, '/');
        $ok++ if $status == 200;
    }
    my @spans;
    wait_until(sub { (@spans) = @{ ($recv->collect)[0] }; @spans >= 10 });
    is(scalar @spans, 10, "$ok requests answered, as many spans arrive");
    is_deeply([ sort { $a cmp $b } keys %{ { map {
                  (attribute($_->{resource}{attributes}, 'service.name')
                   // '') => 1 } @spans } } ],
              [ 'unprivileged-test' ],
              'with the service name of the environment');
}

my @family = map { $_->{pid} } family($pid);
stop($pid);
ok(wait_until(sub { !grep { kill 0, $_ } @family }),
   'stop: no process left');

my $log = read_file("$tmp/error.log") . read_file("$dir/stderr.log");
my @bad = $log =~ /^(.*\[(?:alert|crit|emerg)\].*)$/mg;
is_deeply(\@bad, [], 'no alert, crit or emerg');

done_testing();
