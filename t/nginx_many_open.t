#!/usr/bin/perl
# nginx: more requests open at once than the worker keeps free contexts
# for (256). When they end together, the free list is trimmed while
# nginx's pool cleanup walk is still on the context of the request that
# just ended; that context must not be the one freed. glibc runs without
# its thread cache and fills freed memory with a pattern, so a cleanup
# read from freed memory crashes the worker instead of reading stale
# bytes that still look right. Every request gets its span, and the
# worker keeps serving.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file text_file nginx_conf nginx_start
                        wait_until stop http_get);
use Spanprof::Receiver qw(attribute);
use Spanprof::Procs qw(family);

Spanprof::Receiver::skip_unless_ready();

my $OPEN = 300;

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
text_file("$dir/slow.txt", 2000);

# Slow enough that every request is still sending when the last begins.
my $port = nginx_conf($dir, connections => 1024,
    server => "        location /slow { alias $dir/slow.txt; "
              . "limit_rate 1k; }\n");

my $master = nginx_start($dir, $port,
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY     => '100',
    GLIBC_TUNABLES              => 'glibc.malloc.tcache_count=0',
    MALLOC_PERTURB_             => '165');
ok($master, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my ($worker) = grep { $_->{args} =~ /worker process/ } family($master);
ok($worker, 'one worker');

my (@socks, %answered);
for my $i (1 .. $OPEN) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $port, Proto => 'tcp')
        or BAIL_OUT("connect: $!");
    print $s "GET /slow?$i HTTP/1.1\r\nHost: localhost\r\n\r\n";
    push @socks, $s;
}

# Begun, every one: its response started.
my $sel = IO::Select->new(@socks);
wait_until(sub {
    for my $s ($sel->can_read(0.05)) {
        $answered{$s} = 1 if sysread($s, my $buf, 4096);
        $sel->remove($s);
    }
    return keys %answered == $OPEN;
}, 30);
is(scalar keys %answered, $OPEN, "$OPEN requests open at once");

# Unread bytes: closing resets, and nginx ends all of them together.
close $_ for @socks;

my @slow;
wait_until(sub {
    my ($spans) = $recv->collect;
    @slow = grep { (attribute($_->{attributes}, 'url.path') // '')
                   eq '/slow' } @$spans;
    return @slow >= $OPEN;
}, 30);
is(scalar @slow, $OPEN, 'a span for every request');

my ($status) = http_get($port, '/');
is($status, 200, 'the worker still serves');

my ($now) = grep { $_->{args} =~ /worker process/ } family($master);
is($now && $now->{pid}, $worker && $worker->{pid}, 'the same worker');
unlike(read_file("$dir/error.log"), qr/exited on signal/,
       'no worker crashed');

stop($master);
done_testing;
