#!/usr/bin/perl
# The demo's backend: the application behind nginx and httpd, so that a
# trace has work to show. Plain Debian perl, no modules from elsewhere.
#
#   backend.pl [--listen ADDR:PORT]      (default 127.0.0.1:8082)
#
#   GET /           200, names the trace context it was sent (traceparent,
#                   baggage): propagation through nginx and httpd made visible
#   GET /slow       sleeps ?ms= milliseconds (default 200, at most 5000)
#   GET /cpu        ?rounds= SHA-256 rounds (default 100000, at most 10^7),
#                   answers ?kb= KiB (default 256, at most 4096) of hex
#                   digests: text nginx compresses, work for the server too
#   GET /health     200 "ok"
#   anything else   404
#
# One process per connection (fork), HTTP/1.1 keep-alive, so slow
# requests do not hold up others. Prints "listening PORT" when it accepts;
# exits on SIGTERM/SIGINT; its children notice within a second and exit.

use strict;
use warnings;

use Digest::SHA qw(sha256);
use Getopt::Long;
use IO::Handle;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes ();

my $listen_at = '127.0.0.1:8082';
GetOptions('listen=s' => \$listen_at)
    or die "usage: $0 [--listen ADDR:PORT]\n";
my ($addr, $port) = $listen_at =~ /^(.*):(\d+)$/
    or die "--listen wants ADDR:PORT, not $listen_at\n";

my $server = IO::Socket::INET->new(LocalAddr => $addr, LocalPort => $port,
                                   Proto => 'tcp', Listen => 128,
                                   ReuseAddr => 1)
    or die "backend: listen on $listen_at: $!\n";

$SIG{CHLD} = 'IGNORE';    # children are reaped by the kernel
$SIG{PIPE} = 'IGNORE';    # a client that went away
my $parent = $$;
$SIG{TERM} = $SIG{INT} = sub {
    POSIX::_exit(0);
};
STDOUT->autoflush(1);
print "listening ", $server->sockport, "\n";

while (1) {
    my $c = $server->accept or next;
    my $pid = fork;
    if (!defined $pid) { close $c; next }
    if ($pid == 0) {
        close $server;
        eval { serve($c); 1 } or warn "backend: $@";
        POSIX::_exit(0);
    }
    close $c;
}

# Requests of one connection until it closes or idles for 30 s.
sub serve {
    my ($c) = @_;
    while (1) {
        my $line = read_line($c) // return;
        next if $line eq '';    # stray CRLF between requests
        my ($method, $target, $version) = split ' ', $line;
        return unless $version && $version =~ m{^HTTP/1\.[01]$};
        my %h;
        while (defined(my $hl = read_line($c))) {
            last if $hl eq '';
            my ($k, $v) = $hl =~ /^([^:]+):\s*(.*)$/ or next;
            $h{lc $k} = exists $h{lc $k} ? "$h{lc $k}, $v" : $v;
        }
        # A body is read and ignored: this backend only answers GETs.
        my $left = $h{'content-length'} // 0;
        while ($left > 0) {
            my $n = sysread($c, my $buf, $left > 65536 ? 65536 : $left);
            return unless $n;
            $left -= $n;
        }
        my ($status, $type, $body) = answer($method, $target, \%h);
        my $keep = $version eq 'HTTP/1.1'
            && lc($h{connection} // '') ne 'close';
        my $head = "HTTP/1.1 $status\r\nContent-Type: $type\r\n"
            . "Content-Length: " . length($body) . "\r\n"
            . ($keep ? '' : "Connection: close\r\n") . "\r\n";
        print {$c} $head, ($method eq 'HEAD' ? '' : $body);
        $c->flush;
        return unless $keep;
    }
}

sub read_line {
    my ($c) = @_;
    my $line = '';
    my $deadline = time + 30;
    while (1) {
        my $rin = '';
        vec($rin, fileno($c), 1) = 1;
        # Children go with the server: checked every second while idle.
        my $ready = select(my $r = $rin, undef, undef, 1);
        return undef if getppid != $parent || time > $deadline;
        next unless $ready;
        my $n = sysread($c, my $ch, 1);
        return undef unless $n;
        return $line =~ s/\r$//r if $ch eq "\n";
        $line .= $ch;
        return undef if length $line > 16384;
    }
}

sub query_int {
    my ($query, $name, $default, $max) = @_;
    my ($v) = ($query // '') =~ /(?:^|&)\Q$name\E=(\d+)/;
    $v //= $default;
    return $v > $max ? $max : $v;
}

sub answer {
    my ($method, $target, $h) = @_;
    return ('405 Method Not Allowed', 'text/plain', "GET only\n")
        unless $method eq 'GET' || $method eq 'HEAD';
    my ($path, $query) = split /\?/, $target, 2;
    if ($path eq '/' || $path eq '/index.html') {
        my $text = "spanprof demo backend\n";
        for my $k (qw(traceparent tracestate baggage)) {
            $text .= "$k: " . ($h->{$k} // '-') . "\n";
        }
        return ('200 OK', 'text/plain', $text);
    }
    if ($path eq '/slow') {
        my $ms = query_int($query, 'ms', 200, 5000);
        Time::HiRes::sleep($ms / 1000);
        return ('200 OK', 'text/plain', "slept $ms ms\n");
    }
    if ($path eq '/cpu') {
        my $rounds = query_int($query, 'rounds', 100000, 10_000_000);
        my $d = 'spanprof';
        $d = sha256($d) for 1 .. $rounds;
        my $hex = unpack('H*', $d);
        my $body = "sha256 x $rounds = $hex\n";
        # Derived digests: compressible work for the servers.
        my $bytes = query_int($query, 'kb', 256, 4096) * 1024;
        my $x = $d;
        while (length $body < $bytes) {
            $x = sha256($x);
            $body .= unpack('H*', $x) . "\n";
        }
        return ('200 OK', 'text/plain', $body);
    }
    return ('200 OK', 'text/plain', "ok\n") if $path eq '/health';
    return ('404 Not Found', 'text/plain', "not found\n");
}
