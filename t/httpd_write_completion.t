#!/usr/bin/perl
# httpd, event MPM: a worker thread that hands a response's last bytes to
# write completion is sampled under its span no longer. The event MPM
# lets go of a connection whose response is still being written once the
# handler is done (the last ~64 KiB, for a slow client), and the thread
# goes back to wait for work while the span lives on until the last byte
# is written and the request logged. The thread kept the span's ids: at
# the wall-clock interval it was sampled idle in ap_queue_pop_something
# under the span (219 of the span's 388 samples here), and whatever it
# served meanwhile (another connection's TLS handshake, a lingering close)
# carried the span's ids too. The thread now leaves the span as the MPM
# suspends the connection (suspend_connection).
# A client with a small receive buffer that reads slowly; the server's
# SendBufferSize small too, so that the kernel does not take it all.
# Real apache2, the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_RCVBUF pack_sockaddr_in inet_aton);
use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file httpd_conf httpd_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, mpm => 'event', one_child => 4,
                      extra => "SendBufferSize 4096\n");
my $httpd = httpd_start($dir, $port,
    $recv->snapshot_env(interval => '10', export_interval => '200'));
ok($httpd, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));
write_file("$dir/htdocs/big.bin", 'z' x (128 << 10));
chmod 0644, "$dir/htdocs/big.bin";

# 4 KiB every 100 ms: about 3 s for the file.
my $trace = sprintf '%032x', 0x3c0de001;
my $c = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
setsockopt($c, SOL_SOCKET, SO_RCVBUF, pack('i', 4096)) or die "SO_RCVBUF: $!";
$c->connect(pack_sockaddr_in($port, inet_aton('127.0.0.1')))
    or die "connect: $!";
print $c "GET /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
    . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n"
    . "baggage: splunk.trace.snapshot.volume=highest\r\n\r\n";
my ($buf, $total) = ('', 0);
while (my $n = sysread($c, $buf, 4096)) {
    $total += $n;
    sleep 0.1;
}
close $c;
cmp_ok($total, '>', 128 << 10, 'the whole file read');

my ($span) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
ok($span, 'its span arrives') or BAIL_OUT('no span');
sleep 1;        # the samples of the last export interval
my (undef, $samples) = $recv->collect;
my @mine = grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
           @$samples;
sub has { my ($s, $f) = @_; grep { ($_->{function} // '') eq $f } @{ $s->{frames} } }
my @writing = grep { has($_, 'ap_core_output_filter') } @mine;
my @idle = grep { has($_, 'ap_queue_pop_something') } @mine;
cmp_ok(scalar @writing, '>', 0, 'the handler\'s writes are sampled under '
                                . 'the span (' . @writing . ')');
is(scalar @idle, 0, 'no sample under the span of its thread waiting for '
                    . 'work (of ' . @mine . ')');

stop($httpd);
my @bad = grep { /\[(?:\w+:)?(?:alert|crit|emerg)\]|exit signal/ }
          split /\n/, read_file("$dir/error.log");
is(join("\n", @bad), '', 'no alert or crash in the error log');

done_testing();
