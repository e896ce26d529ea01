#!/usr/bin/perl
# nginx: log rotation. logrotate renames the error log and sends USR1 to
# the master (`nginx -s reopen`); nginx's processes reopen it by name, and
# so must the exporter's output, which it writes into the same log. Real
# nginx with the module, the exporter it starts and the independent
# receiver, with a 60 s batch delay so that spans wait in the exporter:
#   - a reopen of the same file leaves the exporter as it is;
#   - after a rename and a reopen, the exporter writes into the new file:
#     the old one flushed what it held (the spans of requests served before
#     the rotation arrive well before the 60 s), a new one runs, exactly
#     one, and requests after it are exported too (on quit).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start stop);
use Spanprof::Receiver;
use Spanprof::Procs qw(exporters get_ok);
use Spanprof::Cases qw(arrived);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = nginx_conf($dir,
    http => "    log_format sp '\$spanprof_trace_id';\n",
    server => "        access_log $dir/sp.log sp;\n");
my $master = nginx_start($dir, $port,
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY     => '60000');
ok($master, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));


# The one exporter once there is exactly one, within $timeout s.
sub one_exporter {
    my ($timeout) = @_;
    my $end = time + $timeout;
    my @e;
    while (time < $end) {
        @e = exporters($master);
        return $e[0] if @e == 1;
        sleep 0.1;
    }
    return undef;
}

# Trace ids of the requests logged so far.
sub logged_ids {
    my $log = read_file("$dir/sp.log") // '';
    return grep { /^[0-9a-f]{32}$/ } split /\n/, $log;
}


my $first = one_exporter(10);
ok($first, 'one exporter');
is(readlink("/proc/$first->{pid}/fd/2"), "$dir/error.log",
   'its output is the error log');

# A reopen of the same file.
kill 'USR1', $master;
sleep 2.5;
my @e = exporters($master);
is_deeply([map { $_->{pid} } @e], [$first->{pid}],
          'reopen of the same file: the same exporter');

# Requests whose spans wait in the exporter, then the rotation.
get_ok($port) for 1 .. 5;
sleep 0.3;
my @before = logged_ids();
is(scalar @before, 5, 'five requests logged with their trace ids');
is(arrived($recv, 0.5, @before), 0, 'their spans wait in the exporter (60 s delay)');

rename "$dir/error.log", "$dir/error.log.1" or die "rename: $!";
kill 'USR1', $master;

is(arrived($recv, 20, @before), 5,
   'after the rotation, the old exporter flushes what it held, long '
   . 'before the batch delay');
my $second = one_exporter(10);
ok($second && $second->{pid} != $first->{pid},
   'one exporter, a new one');
is($second && readlink("/proc/$second->{pid}/fd/2"), "$dir/error.log",
   'its output is the new error log');
my $new_log = read_file("$dir/error.log") // '';
like($new_log, qr/spanprof: the error log was reopened, exporter process $first->{pid} is replaced/,
     'the replacement is logged in the new error log');
like($new_log, qr/\[info\] $second->{pid}#\d+: spanprof-exporter: started/,
     'the new exporter writes into the new error log');

# Data flows through the new one: flushed on quit.
get_ok($port) for 1 .. 3;
sleep 0.3;
my %seen = map { $_ => 1 } @before;
my @after = grep { !$seen{$_} } logged_ids();
is(scalar @after, 3, 'three more requests logged');
kill 'QUIT', $master;
is(arrived($recv, 20, @after), 3, 'their spans arrive through the new exporter');
stop($master);

my $errors = join "\n", grep { /\[(error|crit|alert|emerg)\]/ }
    split /\n/, read_file("$dir/error.log") . read_file("$dir/error.log.1");
is($errors, '', 'nothing above warn in either log');

done_testing();
