#!/usr/bin/perl
# Threads an httpd child makes while it serves (mod_http2's workers, made
# as streams come) take the sampler's signal from their first selected
# request on. libunwind (the unwinder before libgcc's), loaded with our
# module by dlopen, kept its thread-local caches in dynamic TLS, which
# glibc allocates with malloc at a thread's first unwind: a first sample
# that had interrupted malloc waited forever for the arena lock its own
# thread held, and so did every thread that needed that arena after it.
# The child hung: streams never answered, later connections never
# served, the stuck threads sampled at 1 kHz each. Here every stream is
# selected at a 1 ms interval, and each of a few fresh servers gets two
# connections of 100 streams: up to 200 new workers at once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use Spanprof::Server qw(new_dir read_file write_file httpd_conf httpd_start
                        stop text_file top_dir wait_until
                        deflate_location);
use Spanprof::Receiver;
use Spanprof::Procs qw(family get_ok thread_stacks);

Spanprof::Receiver::skip_unless_ready(apache_modules => ['http2']);

my $SERVERS = 3;
# One malloc arena for every thread, no per-thread cache, and the 64 and
# 128 KiB of gzip's state in mappings of their own: a thread holds the
# arena lock over a system call at its first request, and more often,
# which made the hang seen once under heavy load come in most runs.
my $MALLOC = 'glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0'
             . ':glibc.malloc.mmap_threshold=32768';
my $STREAMS = 100;    # mod_http2's default H2MaxSessionStreams
my $PARENT = 'b7ad6b7169203331';

my $top = new_dir();
my $recv = Spanprof::Receiver->start(dir => $top);
text_file("$top/big.txt", 10000);

# A server whose mod_http2 starts one worker and makes the others as
# streams come; (pid, port, dir).
sub server {
    my $dir = new_dir();
    my $port = httpd_conf($dir, log_level => 'info', one_child => 64,
        modules => [qw(http2 deflate filter alias)], extra => <<"EXTRA");
Protocols h2c http/1.1
H2MinWorkers 1
H2MaxWorkers 200
${\ deflate_location($top) }
EXTRA
    my $pid = httpd_start($dir, $port,
        $recv->snapshot_env(export_interval => '200'),
        GLIBC_TUNABLES => $MALLOC,
    );
    ok($pid, 'httpd started') or BAIL_OUT(read_file("$dir/error.log"));
    wait_until(sub { grep { $_->{args} =~ /spanprof-exporter/ }
                          family($pid) });
    return ($pid, $port, $dir);
}

sub child_of {
    return join ' ', map { $_->{pid} }
                     grep { $_->{args} !~ /spanprof-exporter/ } family($_[0]);
}

# Each connection its own client (t/bin/h2_client.js), every stream a
# selected request of its own trace; the results of all, in order.
my $serial = 0;
sub streams {
    my ($port, $dir) = @_;
    my @clients;
    for my $c (1, 2) {
        my @requests = map {
            my $n = ++$serial;
            { path => "/big?case=$n",
              headers => [ [ traceparent => sprintf('00-%032x-%s-01', $n,
                                                    $PARENT) ],
                           [ 'accept-encoding' => 'gzip' ],
                           [ baggage => 'splunk.trace.snapshot.volume='
                                        . 'highest' ] ] } } 1 .. $STREAMS;
        write_file("$dir/plan$c.json", JSON::PP->new->encode(
            { port => $port, requests => \@requests }));
        open my $fh, '-|', "node ${\ top_dir()}/t/bin/h2_client.js"
                           . " < $dir/plan$c.json" or die "node: $!";
        push @clients, $fh;
    }
    return map { local $/; my $out = <$_>; close $_;
                 my $r = eval { JSON::PP->new->decode($out) } // [];
                 @$r } @clients;
}

my $hung;
for my $try (1 .. $SERVERS) {
    my ($pid, $port, $dir) = server();
    my $child = child_of($pid);
    my @got = streams($port, $dir);
    my @bad = grep { ($_->{status} // 0) != 200 || $_->{error} } @got;
    is(scalar(@got) - scalar(@bad), 2 * $STREAMS,
       "server $try: every stream answered 200")
        or do {
            diag(JSON::PP->new->canonical->encode([ @bad[0 .. 2] ]),
                 thread_stacks($pid));
            $hung = 1;
        };
    ok(get_ok($port), "server $try: a new connection is served after them");
    is(child_of($pid), $child, "server $try: the same child as at its start");
    stop($pid);
    my @alerts = grep { /[[:](alert|crit|emerg)\]|exit signal/ }
                 split /\n/, read_file("$dir/error.log");
    is(join("\n", @alerts), '', "server $try: no alert or crash logged");
    last if $hung;
}
SKIP: {
    # Threads that hung in a span were sampled at 1 kHz each: millions.
    skip 'a child hung', 1 if $hung;
    my @samples = @{ ($recv->collect)[1] };
    my $mine = grep { ($_->{labels}{trace_id} // '') =~ /^0{16}/ } @samples;
    cmp_ok($mine, '>', 0, "the streams' threads were sampled ($mine)");
}

done_testing();
