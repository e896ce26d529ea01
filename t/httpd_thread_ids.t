#!/usr/bin/perl
# Trace and span ids of requests served at once by the threads of one
# httpd child. The id generator is not thread-safe (core/include/sp_ids.h):
# each thread draws from its own. The child's one generator, shared by its
# threads, gave two requests begun at the same instant the same trace id
# and span id (both threads read the state before either wrote it back).
# Real apache2 (event MPM, one child of 16 threads), ab with 16 clients at
# once, the real receiver: every span that arrives has ids no other has.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop);
use Spanprof::Receiver;

Spanprof::Receiver::skip_unless_ready(apache2 => 1);
plan skip_all => 'ab is not installed' unless -x '/usr/bin/ab';

my $REQUESTS = 40000;

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, one_child => 16);
my $pid = httpd_start($dir, $port,
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY => '100',
    OTEL_BSP_MAX_QUEUE_SIZE => '100000');
ok($pid, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));

my $out = `ab -c 16 -n $REQUESTS http://127.0.0.1:$port/index.html 2>&1`;
my ($done) = $out =~ /Complete requests:\s+(\d+)/;
my ($failed) = $out =~ /Failed requests:\s+(\d+)/;
is($done, $REQUESTS, 'ab: every request answered') or diag($out);
is($failed, 0, 'ab: none failed');

my $spans = [];
my $end = time + 60;
while (time < $end) {
    ($spans) = $recv->collect;
    last if @$spans >= $REQUESTS;
    sleep 0.5;
}
stop($pid);
# Some may be dropped (a full queue is counted, not an error here); the
# check is on those that came.
ok(@$spans >= $REQUESTS * 0.9, 'most spans arrived')
    or diag(scalar(@$spans) . " of $REQUESTS");
my (%trace, %span);
$trace{ $_->{traceId} }++ for @$spans;
$span{ $_->{spanId} }++ for @$spans;
my @twice = grep { $trace{$_} > 1 } keys %trace;
is(scalar @twice, 0, 'no two requests got one trace id')
    or diag(scalar(@twice) . ' trace ids twice or more, e.g. ' . $twice[0]);
is(scalar(grep { $span{$_} > 1 } keys %span), 0,
   'no two requests got one span id');

$recv->stop;
done_testing();
