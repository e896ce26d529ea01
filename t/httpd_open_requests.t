#!/usr/bin/perl
# httpd: more requests open at once in a child than spanprof once had room
# for. With continuous profiling on, every recorded request's span is
# opened in the sampler (so that whichever thread ends it closes it), not
# only the selected ones; a child had room for 256. An event child of 300
# threads holds 280 unselected requests, then 20 selected ones, each
# waiting for its request body: every request is answered and exported,
# and every selected one has snapshot samples with its ids. Before, the
# 20 selected requests found no room and were not profiled at all.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop
                        httpd_conf httpd_cmd wait_until);
use Spanprof::Receiver qw(attribute);
use Spanprof::Procs qw(family);

Spanprof::Receiver::skip_unless_ready();

my ($UNSELECTED, $SELECTED) = (280, 20);
my $ALL = $UNSELECTED + $SELECTED;

# How many threads of the MPM child of $parent wait in poll (7) or ppoll
# (271): a worker reading a request body it has not got yet.
sub waiting_for_bodies {
    my ($parent) = @_;
    my ($child) = grep { $_->{args} =~ m{^/usr/sbin/apache2 } }
                  family($parent);
    return 0 unless $child;
    my $n = 0;
    opendir my $d, "/proc/$child->{pid}/task" or return 0;
    for my $tid (grep { /^\d+$/ } readdir $d) {
        my ($sc) = read_file("/proc/$child->{pid}/task/$tid/syscall")
                   =~ /^(\d+)/ or next;
        $n++ if $sc == 7 || $sc == 271;
    }
    return $n;
}

# A GET whose one-byte body is not sent yet; the connection.
sub open_request {
    my ($port, $volume) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $port, Proto => 'tcp',
                                  Timeout => 30) or return undef;
    print $s "GET /index.html HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Length: 1\r\n"
        . "baggage: splunk.trace.snapshot.volume=$volume\r\n\r\n";
    return $s;
}

sub source_of {
    attribute($_[0]{record}{attributes}, 'profiling.instrumentation.source')
        // '';
}

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, mpm => 'event', one_child => $ALL,
                      extra => <<"EXTRA");
Timeout 60
EXTRA
my $parent = spawn({
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        SPLUNK_PROFILER_ENABLED => 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL => '100',
        SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
        SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '100',
        SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
        OTEL_BSP_SCHEDULE_DELAY => '200',
    }, "$dir/stderr.log", httpd_cmd($dir));
ok(wait_for_port($port), 'httpd listens')
    or diag(read_file("$dir/error.log"));

my @conns = map { open_request($port, 'off') } 1 .. $UNSELECTED;
ok(wait_until(sub { waiting_for_bodies($parent) >= $UNSELECTED }, 30),
   "$UNSELECTED unselected requests wait for their bodies")
    or diag(waiting_for_bodies($parent));
push @conns, map { open_request($port, 'highest') } 1 .. $SELECTED;
ok(wait_until(sub { waiting_for_bodies($parent) >= $ALL }, 30),
   "then $SELECTED selected ones too");

# Polls $cond every second (it reads all the receiver got) until it is
# true or $timeout seconds pass.
sub poll_slowly {
    my ($cond, $timeout) = @_;
    my $end = time + $timeout;
    until ($cond->()) {
        return 0 if time > $end;
        sleep 1;
    }
    return 1;
}

# Snapshot samples of each selected request while it waits.
my $sampled = sub {
    my (undef, $samples) = $recv->collect;
    my %ids = map { $_->{labels}{span_id} => 1 }
              grep { source_of($_) eq 'snapshot' && $_->{labels}{span_id} }
              @$samples;
    return scalar keys %ids;
};
poll_slowly(sub { $sampled->() >= $SELECTED }, 20);

my $answered = 0;
for my $s (@conns) {
    next unless $s;
    print $s 'x';
    local $/;
    my $resp = <$s> // '';
    $answered++ if $resp =~ m{^HTTP/1\.1 200 };
    close $s;
}
is($answered, $ALL, "all $ALL requests answered 200");

my ($spans, $samples) = ([], []);
poll_slowly(sub {
    ($spans, $samples) = $recv->collect;
    my %ids = map { $_->{labels}{span_id} => 1 }
              grep { $_->{labels}{span_id} } @$samples;
    @$spans >= $ALL
        && !grep { attribute($_->{attributes}, 'splunk.snapshot.profiling')
                   && !$ids{ $_->{spanId} } } @$spans;
}, 30);
stop($parent);
($spans, $samples) = $recv->collect;
is(scalar @$spans, $ALL, "$ALL spans");
my @selected = grep { attribute($_->{attributes}, 'splunk.snapshot.profiling') }
               @$spans;
is(scalar @selected, $SELECTED, "$SELECTED of them selected");
my %snapshot_of;
$snapshot_of{ $_->{labels}{span_id} }++
    for grep { source_of($_) eq 'snapshot' } @$samples;
is((grep { !$snapshot_of{ $_->{spanId} } } @selected), 0,
   'every selected request has snapshot samples with its ids')
    or diag(scalar(grep { !$snapshot_of{ $_->{spanId} } } @selected)
            . " of $SELECTED have none");

my %span = map { $_->{spanId} => $_ } @$spans;
my @with = grep { $_->{labels}{span_id} } @$samples;
is((grep {
        my $sp = $span{ $_->{labels}{span_id} };
        my $t = $_->{labels}{'source.event.time'};
        !$sp || $sp->{traceId} ne $_->{labels}{trace_id}
            || $t < int($sp->{startTimeUnixNano} / 1e6)
            || $t > $sp->{endTimeUnixNano} / 1e6 + 1
    } @with), 0, 'every sample with ids is of a span, taken while it lived')
    or diag(scalar(@with) . ' samples with ids');
my @errors = grep { /\[spanprof:(?:error|alert|crit|emerg|warn)\]/ }
             split /\n/, read_file("$dir/error.log");
is_deeply(\@errors, [], 'no spanprof warning or error in the log');
$recv->stop;

done_testing();
