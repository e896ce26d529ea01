#!/usr/bin/perl
# nginx: a request still in flight when the server stops or reloads
# gracefully is traced. On QUIT nginx's workers finish what they serve,
# while the exporter's manager quits at once: the exporter reads on while
# a worker lives (within half the export timeout), so the span of a
# request that ends after the stop began arrives. On a reload it does not
# wait: the new exporter waits for the region, the old one hands it over at
# once, and the new one reads the old worker's ring. Real nginx, a slow
# upstream, the module's exporter and the independent receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start free_port
                        stop wait_until);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);
use Spanprof::Procs qw(exporters);

Spanprof::Receiver::skip_unless_ready();

my $SLOW = 2;    # seconds the upstream takes to answer

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);

# The upstream: answers each request after $SLOW seconds.
my $up = free_port();
my $listen = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$up",
                                   Listen => 8, ReuseAddr => 1)
    or die "listen: $!";
my $upstream = fork // die "fork: $!";
if ($upstream == 0) {
    while (my $c = $listen->accept) {
        my $buf = '';
        sysread $c, $buf, 4096;
        sleep $SLOW;
        print $c "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nslow\n";
        close $c;
    }
    POSIX::_exit(0);
}
close $listen;


# A slow traced request in a child; its pipe gives the answer's first line.
sub slow_request {
    my ($port, $trace) = @_;
    pipe my $rd, my $wr or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                      Timeout => 10);
        my $line = '';
        if ($s) {
            print $s "GET /slow HTTP/1.0\r\nHost: localhost\r\n"
                . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n\r\n";
            $line = <$s> // '';
        }
        print $wr $line;
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    return ($pid, $rd);
}

sub answer {
    my ($pid, $rd) = @_;
    local $/;
    my $line = <$rd> // '';
    waitpid $pid, 0;
    return $line;
}

# How many spans of trace $trace arrived, once one did or after 10 s.
sub spans_of {
    my ($trace) = @_;
    return scalar wait_spans($recv, sub { $_[0]{traceId} eq $trace });
}

sub start_nginx {
    my ($d) = @_;
    my $port = nginx_conf($d, location => "proxy_pass http://127.0.0.1:$up;");
    my $master = nginx_start($d, $port,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        OTEL_BSP_SCHEDULE_DELAY     => '100');
    ok($master, 'nginx starts') or BAIL_OUT(read_file("$d/error.log"));
    ok(wait_until(sub { exporters($master) == 1 }, 10), 'an exporter runs');
    return ($master, $port);
}

# --- a graceful stop (QUIT) while a request waits for the upstream

{
    my $d = new_dir();
    my ($master, $port) = start_nginx($d);
    my $trace = 'c1' x 16;
    my @req = slow_request($port, $trace);
    sleep 0.5;
    kill 'QUIT', $master;
    like(answer(@req), qr{^HTTP/1\.[01] 200 },
         'QUIT: the request in flight is answered');
    ok(wait_until(sub { waitpid($master, POSIX::WNOHANG()) == $master }, 20),
       'QUIT: nginx exits');
    is(spans_of($trace), 1,
       'QUIT: the span of the request that ended after the stop began');
    like(read_file("$d/error.log") // '',
         qr/spanprof-exporter: counters: received=1 .*exported=1 .*\(at exit\)/,
         'QUIT: the exporter\'s last counters count it exported');
}

# --- a reload while a request waits for the upstream: no wait for the old
# worker, the new exporter reads its ring

{
    my $d = new_dir();
    my ($master, $port) = start_nginx($d);
    my ($old) = map { $_->{pid} } exporters($master);
    my $trace = 'c2' x 16;
    my $t0 = time;
    my @req = slow_request($port, $trace);
    sleep 0.5;
    kill 'HUP', $master;
    ok(wait_until(sub { !kill 0, $old }, 10), 'reload: the old exporter exits');
    my $handover = time - $t0;
    cmp_ok($handover, '<', $SLOW,
           'reload: before the old worker\'s request ends (a new exporter '
           . 'waits for the region)');
    like(answer(@req), qr{^HTTP/1\.[01] 200 },
         'reload: the request in flight is answered');
    is(spans_of($trace), 1,
       'reload: its span arrives, read by the new exporter');
    is(scalar exporters($master), 1, 'reload: one exporter');
    stop($master);
}

kill 'TERM', $upstream;
waitpid $upstream, 0;

done_testing();
