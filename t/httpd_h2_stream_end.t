#!/usr/bin/perl
# An HTTP/2 stream's span ends when its response is done, on the worker
# thread that served it, also while another stream of the session runs
# on. mod_http2 logs a stream's request and frees its pool (where the
# span ended) only when the main connection next purges finished streams:
# if the fast stream's worker finished after the main connection had
# sent its answer, that was when the slow stream ended, seconds later.
# The fast span then lasted the slow one's seconds, and its worker, idle
# in mod_http2 waiting for work, was sampled under it at the snapshot
# interval all that time. A race: each of many connections (one
# t/bin/h2_client.js) has a fast selected stream and a slow one (a backend
# that never answers, for ProxyTimeout's seconds) in flight at once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans wait_spans h2_requests);
use Spanprof::Procs qw(family);

Spanprof::Receiver::skip_unless_ready(apache_modules => ['http2']);

my $CONNECTIONS = 24;
my $ROUNDS = 4;
my $SLOW = 3;                   # ProxyTimeout, s
my $PARENT = '5e5e5e5e5e5e5e5e';

# Accepts (the kernel does, into its backlog) and never answers.
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 128, Proto => 'tcp')
    or die "listen: $!";
my $silent_port = $silent->sockport;

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, mpm => 'event', log_level => 'info',
                      modules => [qw(http2 proxy proxy_http)],
                      extra => <<"EXTRA");
Protocols h2c http/1.1
ThreadsPerChild 64
MaxRequestWorkers 128
H2MaxWorkers 128
ProxyTimeout $SLOW
ProxyPass /never http://127.0.0.1:$silent_port/never
EXTRA
my $httpd = httpd_start($dir, $port,
    $recv->snapshot_env(export_interval => '200'),
);
ok($httpd, 'httpd started') or BAIL_OUT(read_file("$dir/error.log"));
# On one CPU, the main connection's thread, woken as the fast stream's
# answer comes, runs before its worker is done with it.
system("taskset -a -p 1 $_->{pid} >/dev/null") for family($httpd);

# Each connection: the fast stream selected, in a trace of its own; the
# slow one not selected. Rounds of them, one after the other: a round
# catches the race in about half the runs.
my (@fast, @answers);
for my $round (1 .. $ROUNDS) {
    my @requests;
    for my $c (1 .. $CONNECTIONS) {
        my $tid = sprintf '%016x%016x', $round, $c;
        push @fast, $tid;
        push @requests,
            { connection => $c, path => '/index.html',
              headers => [ [ traceparent => "00-$tid-$PARENT-01" ],
                           [ baggage => 'splunk.trace.snapshot.volume='
                                        . 'highest' ] ] },
            { connection => $c, path => "/never/$c",
              headers => [ [ baggage => 'splunk.trace.snapshot.volume='
                                        . 'off' ] ] };
    }
    push @answers, map { $_->{status} }
                   h2_requests($port, "$dir/plan.json", @requests);
}
is(join(' ', @answers), join(' ', ('200 502') x ($ROUNDS * $CONNECTIONS)),
   'every fast stream answered 200, every slow one 502 (its backend\'s '
   . 'timeout)');

my %fast = map { $_ => 1 } @fast;
my @spans = wait_spans($recv, sub { $fast{ $_[0]{traceId} } }, scalar @fast);
is(scalar @spans, scalar @fast, 'a span for every fast stream');
sleep 1;        # the samples of the last export interval
my (undef, $samples) = $recv->collect;
my %per_span;
$per_span{ $_->{labels}{span_id} // '' }++ for @$samples;

# A static file at the server: far under ProxyTimeout's seconds, which
# the slow stream's span lasts in any case.
my @long = grep { $_->{endTimeUnixNano} - $_->{startTimeUnixNano}
                  >= $SLOW * 1e9 / 2 } @spans;
is(scalar @long, 0, 'no fast stream\'s span lasts the slow one\'s seconds')
    or diag(join ', ', map { sprintf '%s: %.0f ms', $_->{traceId},
        ($_->{endTimeUnixNano} - $_->{startTimeUnixNano}) / 1e6 } @long);
# At 1 ms, a few samples a fast stream; its worker, idle after it for
# seconds, gave a thousand.
my @oversampled = grep { ($per_span{ $_->{spanId} } // 0) >= 500 } @spans;
is(scalar @oversampled, 0, 'no fast stream\'s worker is sampled under it '
                           . 'after its response')
    or diag(join ', ', map { "$_->{traceId}: $per_span{ $_->{spanId} }" }
                       @oversampled);

stop($httpd);
my @alerts = grep { /[[:](alert|crit|emerg)\]|exit signal/ }
             split /\n/, read_file("$dir/error.log");
is(join("\n", @alerts), '', 'no alert or crash logged');

done_testing();
