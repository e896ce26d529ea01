#!/usr/bin/perl
# A test upstream that records what nginx (or httpd) forwards to it.
#
#   upstream.pl --proto http|fastcgi|uwsgi|ajp --port PORT --out FILE
#               [--status N] [--delay S]
#
# Each request becomes one JSON line in FILE, written before the answer:
#   { "proto", "uri", "headers": { lowercase name: [values...] } }
# and, for an HTTP request with a body, what is said of it below.
# FastCGI and uwsgi carry headers as HTTP_* variables; they are turned back
# into header names (HTTP_TRACE_PARENT -> trace-parent); AJP13 (mod_proxy_ajp)
# names the common ones by code. The answer is 200
# with the body "upstream PROTO" (HTTP: the status N for a URI with
# "/statusN" in it; for one with "/sizeN", N bytes of numbered text lines,
# and a "Range: bytes=A-B" gets 206 with those bytes, as the slice module
# asks); a URI with "/slow" in it waits 3 s first,
# "/slowN" N s (a client can give up meanwhile). HTTP, for mod_cache: a
# URI with "/cacheN" in it is cacheable for N s (Cache-Control:
# max-age=N, ETag "v1"), and gets 304 when asked with If-None-Match:
# "v1"; with "/echo" in it, each traceparent the request came with is
# echoed in an echo-traceparent response header. Over HTTP, a URI with
# "/dripN" in it gets its body as N lines, one every 100 ms, with no
# Content-Length (a slowly streaming upstream). Over HTTP, a URI with
# "/accel" followed by a "/" or "@" gets an X-Accel-Redirect header with
# the rest of the URI ("/x/accel/in/f?a=1": "/in/f?a=1", "/accel@n":
# "@n"). With --status N, every HTTP answer has status N (an upstream
# that fails, for proxy_next_upstream); with --delay S, every HTTP
# answer comes S seconds (a fraction too) after the request was recorded
# (an upstream that times out). An HTTP request with an
# Upgrade header (a WebSocket handshake) gets 101 instead, then every byte
# back until the other side closes; with "/ticks" in its URI, a line
# "tick N" every 20 ms (for 30 s) whatever comes, until a write fails;
# "/ticksN", N lines, then the upstream closes the tunnel.
# A request body (Content-Length or chunked; "100 Continue" first to an
# "Expect: 100-continue") is read whole and recorded as body_length and
# body_md5, or body_cut where the sender stopped before its end. One
# connection at a time is enough for the tests;
# prints "listening PORT" once it accepts.

use strict;
use warnings;

use Digest::MD5 qw(md5_hex);
use Getopt::Long;
use IO::Handle;
use IO::Socket::INET;
use JSON::PP;

my ($proto, $port, $out, $answer_status, $delay) = ('http', 0, undef, 0, 0);
GetOptions('proto=s' => \$proto, 'port=i' => \$port, 'out=s' => \$out,
           'status=i' => \$answer_status, 'delay=f' => \$delay)
    or die "usage: $0 --proto http|fastcgi|uwsgi|ajp --port PORT --out FILE"
         . " [--status N] [--delay S]\n";
die "--out is required\n" unless defined $out;

my %serve = (http => \&serve_http, fastcgi => \&serve_fastcgi,
             uwsgi => \&serve_uwsgi, ajp => \&serve_ajp);
my $serve = $serve{$proto} or die "unknown protocol $proto\n";

my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $port, Proto => 'tcp',
                                   Listen => 64, ReuseAddr => 1)
    or die "listen on $port: $!\n";

# Gone with the test: SIGTERM, or the parent's end noticed on accept.
$SIG{TERM} = $SIG{INT} = sub { exit 0 };
$SIG{PIPE} = 'IGNORE';    # a client that gave up
my $parent = getppid;

open my $log, '>>', $out or die "$out: $!\n";
$log->autoflush(1);
STDOUT->autoflush(1);
print "listening ", $listen->sockport, "\n";

my $json = JSON::PP->new->canonical;
$listen->timeout(1);
while (1) {
    exit 0 if getppid != $parent;
    my $c = $listen->accept or next;
    $c->timeout(10);
    eval { $serve->($c); 1 } or warn "upstream $proto: $@";
    close $c;
}

sub record {
    my ($uri, $headers, $more) = @_;
    print $log $json->encode({ proto => $proto, uri => $uri,
                               headers => $headers, %{ $more // {} } }),
               "\n";
    sleep($1 || 3) if $uri =~ m{/slow(\d*)};
    select(undef, undef, undef, $delay) if $delay && $proto eq 'http';
}

sub read_exact {
    my ($c, $n) = @_;
    my $buf = '';
    while (length $buf < $n) {
        my $got = sysread $c, $buf, $n - length $buf, length $buf;
        die "short read\n" unless $got;
    }
    return $buf;
}

# A chunked request body, what came with the header ($$rest) first: the
# body decoded. The trailer, if any, is read and dropped.
sub read_chunked {
    my ($c, $rest) = @_;
    my ($buf, $body) = ($$rest, '');
    my $line = sub {
        while ($buf !~ /\r\n/) {
            sysread $c, $buf, 65536, length $buf
                or die "connection closed in a chunked body\n";
        }
        $buf =~ s/^(.*?)\r\n//s;
        return $1;
    };
    while (1) {
        my $size = hex(($line->() =~ /^([0-9a-fA-F]+)/)[0] // 0);
        last unless $size;
        while (length $buf < $size + 2) {
            sysread $c, $buf, 65536, length $buf
                or die "connection closed in a chunk\n";
        }
        $body .= substr $buf, 0, $size;
        substr($buf, 0, $size + 2) = '';
    }
    1 while length $line->();
    return $body;
}

sub add_variable_header {
    my ($headers, $name, $value) = @_;
    return unless $name =~ /^HTTP_(.+)$/;
    (my $h = lc $1) =~ tr/_/-/;
    push @{ $headers->{$h} }, $value;
}

sub serve_http {
    my ($c) = @_;
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        my $got = sysread $c, $head, 4096, length $head;
        die "connection closed in the header\n" unless $got;
    }
    my ($lines, $rest) = split /\r\n\r\n/, $head, 2;
    my ($request, @fields) = split /\r\n/, $lines;
    my (undef, $uri) = split / /, $request;
    my %headers;
    for (@fields) {
        my ($name, $value) = /^([^:]+):[ \t]*(.*?)[ \t]*$/ or next;
        push @{ $headers{lc $name} }, $value;
    }
    my $length = $headers{'content-length'} ? $headers{'content-length'}[0]
                                            : 0;
    my $chunked = join(',', @{ $headers{'transfer-encoding'} // [] })
                  =~ /chunked/i;
    print $c "HTTP/1.1 100 Continue\r\n\r\n"
        if join(',', @{ $headers{expect} // [] }) =~ /^100-continue$/i
           && ($length || $chunked);
    # A body the client stopped sending (httpd gave up on it) is recorded
    # too, as cut: the request's headers came.
    my ($sent, $cut) = ('', 0);
    eval {
        $sent = $chunked ? read_chunked($c, \$rest) : $length ? $rest : '';
        $sent .= read_exact($c, $length - length $rest)
            if !$chunked && $length > length $rest;
        1;
    } or $cut = 1;
    $rest = '' if $chunked || $length;
    record($uri, \%headers,
           { $cut ? (body_cut => 1) : (),
             length $sent ? (body_length => length $sent,
                             body_md5 => md5_hex($sent)) : () });
    return if $cut;
    if ($headers{upgrade}) {
        print $c "HTTP/1.1 101 Switching Protocols\r\n"
               . "Upgrade: $headers{upgrade}[0]\r\nConnection: Upgrade\r\n\r\n";
        print $c $rest if length $rest;
        if ($uri =~ m{/ticks(\d*)}) {
            $c->autoflush(1);
            for my $i (1 .. ($1 || 1500)) {
                print $c "tick $i\n" or last;
                select(undef, undef, undef, 0.02);
            }
            return;
        }
        while (sysread $c, my $buf, 65536) {
            print $c $buf or last;
        }
        return;
    }
    if ($uri =~ m{/drip(\d+)}) {
        my $n = $1;
        $c->autoflush(1);
        print $c "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
               . "Connection: close\r\n\r\n";
        for my $i (1 .. $n) {
            select(undef, undef, undef, 0.1);
            print $c "line $i of a slow upstream\n" or last;
        }
        return;
    }
    my $body = "upstream http\n";
    my $status = $answer_status || ($uri =~ m{/status(\d{3})} ? $1 : 200);
    my $range = '';
    if ($uri =~ m{/size(\d+)}) {
        my $size = $1;
        $body = sized_body($size);
        my $want = $headers{range} ? $headers{range}[0] : '';
        if ($want =~ /^bytes=(\d+)-(\d*)$/ && $1 < $size) {
            my ($from, $to) = ($1, $2 eq '' || $2 >= $size ? $size - 1 : $2);
            $body = substr $body, $from, $to - $from + 1;
            $status = 206;
            $range = "Content-Range: bytes $from-$to/$size\r\n";
        }
    }
    my $extra = $range;
    $extra .= "X-Accel-Redirect: $1\r\n" if $uri =~ m{/accel([/\@].*)$};
    if ($uri =~ m{/cache(\d+)}) {
        $extra .= "Cache-Control: max-age=$1\r\nETag: \"v1\"\r\n";
        if (($headers{'if-none-match'}[0] // '') eq '"v1"') {
            print $c "HTTP/1.1 304 Not Modified\r\n$extra"
                   . "Connection: close\r\n\r\n";
            return;
        }
    }
    $extra .= "echo-traceparent: $_\r\n" for $uri =~ m{/echo}
        ? @{ $headers{traceparent} // [] } : ();
    print $c "HTTP/1.1 $status Status\r\nContent-Type: text/plain\r\n"
           . "Content-Length: " . length($body) . "\r\n$extra"
           . "Connection: close\r\n\r\n$body";
}

# $size bytes of numbered lines, the same each time: a part asked for by
# its range is that part of the whole.
my %sized;
sub sized_body {
    my ($size) = @_;
    return $sized{$size} //= substr(join('', map { "line $_ of a text the "
                                                   . "upstream serves\n" }
                                             1 .. $size / 20 + 1),
                                    0, $size);
}

# FastCGI name-value lengths: one byte, or four with the top bit set.
sub fcgi_length {
    my ($buf, $pos) = @_;
    my $b = ord substr $$buf, $$pos, 1;
    if ($b < 128) { $$pos += 1; return $b }
    my $n = unpack 'N', substr $$buf, $$pos, 4;
    $$pos += 4;
    return $n & 0x7fffffff;
}

sub fcgi_record {
    my ($type, $id, $content) = @_;
    return pack('CCnnCx', 1, $type, $id, length $content, 0) . $content;
}

sub serve_fastcgi {
    my ($c) = @_;
    my ($id, $params, $stdin_done, $params_done) = (1, '', 0, 0);
    until ($stdin_done && $params_done) {
        my ($ver, $type, $rid, $len, $pad) =
            unpack 'CCnnC', read_exact($c, 8);
        my $content = $len ? read_exact($c, $len) : '';
        read_exact($c, $pad) if $pad;
        $id = $rid;
        if ($type == 4) {          # FCGI_PARAMS
            $len ? ($params .= $content) : ($params_done = 1);
        } elsif ($type == 5) {     # FCGI_STDIN
            $stdin_done = 1 unless $len;
        }
    }
    my (%headers, %vars);
    my $pos = 0;
    while ($pos < length $params) {
        my $nl = fcgi_length(\$params, \$pos);
        my $vl = fcgi_length(\$params, \$pos);
        my $name = substr $params, $pos, $nl;
        my $value = substr $params, $pos + $nl, $vl;
        $pos += $nl + $vl;
        $vars{$name} = $value;
        add_variable_header(\%headers, $name, $value);
    }
    record($vars{REQUEST_URI} // '', \%headers);
    my $out = "Status: 200 OK\r\nContent-Type: text/plain\r\n\r\n"
            . "upstream fastcgi\n";
    print $c fcgi_record(6, $id, $out), fcgi_record(6, $id, ''),
             fcgi_record(3, $id, pack('NCxxx', 0, 0));
}

sub serve_uwsgi {
    my ($c) = @_;
    my (undef, $size) = unpack 'Cv', read_exact($c, 4);
    my $vars = read_exact($c, $size);
    my (%headers, %vars);
    my $pos = 0;
    while ($pos + 2 <= length $vars) {
        my $kl = unpack 'v', substr $vars, $pos, 2;
        my $k = substr $vars, $pos + 2, $kl;
        my $vl = unpack 'v', substr $vars, $pos + 2 + $kl, 2;
        my $v = substr $vars, $pos + 4 + $kl, $vl;
        $pos += 4 + $kl + $vl;
        $vars{$k} = $v;
        add_variable_header(\%headers, $k, $v);
    }
    my $length = $vars{CONTENT_LENGTH} || 0;
    read_exact($c, $length) if $length;
    record($vars{REQUEST_URI} // '', \%headers);
    my $body = "upstream uwsgi\n";
    print $c "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
           . "Content-Length: " . length($body) . "\r\n\r\n$body";
}

# AJP13: the strings of a packet are a 16-bit length, the bytes and a NUL;
# length 0xFFFF is a null string.
sub ajp_string {
    my ($buf, $pos) = @_;
    my $n = unpack 'n', substr $$buf, $$pos, 2;
    $$pos += 2;
    return undef if $n == 0xFFFF;
    my $s = substr $$buf, $$pos, $n;
    $$pos += $n + 1;
    return $s;
}

sub ajp_packet { pack('a2n', 'AB', length $_[0]) . $_[0] }

sub ajp_out_string { pack('n', length $_[0]) . $_[0] . "\0" }

# One FORWARD_REQUEST (the request's headers; a GET has no body packet) and
# the answer: SEND_HEADERS, SEND_BODY_CHUNK, END_RESPONSE without reuse, so
# that mod_proxy_ajp closes this connection.
sub serve_ajp {
    my ($c) = @_;
    my ($magic, $len) = unpack 'nn', read_exact($c, 4);
    die sprintf("not an AJP request: %04x\n", $magic) unless $magic == 0x1234;
    my $p = read_exact($c, $len);
    my ($type) = unpack 'CC', $p;
    die "AJP packet type $type, not FORWARD_REQUEST\n" unless $type == 2;
    my $pos = 2;                                   # type, method
    ajp_string(\$p, \$pos);                        # protocol
    my $uri = ajp_string(\$p, \$pos);
    ajp_string(\$p, \$pos) for 1 .. 3;             # remote addr, host, server
    $pos += 3;                                     # port, is_ssl
    my $count = unpack 'n', substr $p, $pos, 2;
    $pos += 2;
    my @coded = qw(accept accept-charset accept-encoding accept-language
                   authorization connection content-type content-length
                   cookie cookie2 host pragma referer user-agent);
    my %headers;
    for (1 .. $count) {
        my $code = unpack 'n', substr $p, $pos, 2;
        my $name;
        if (($code & 0xFF00) == 0xA000) {
            $name = $coded[($code & 0xFF) - 1] // "coded-$code";
            $pos += 2;
        } else {
            $name = lc ajp_string(\$p, \$pos);
        }
        push @{ $headers{$name} }, ajp_string(\$p, \$pos);
    }
    record($uri, \%headers);
    my $body = "upstream ajp\n";
    print $c ajp_packet(pack('Cn', 4, 200) . ajp_out_string('OK')
                        . pack('nn', 1, 0xA001) . ajp_out_string('text/plain')),
             ajp_packet(pack('Cn', 3, length $body) . $body . "\0"),
             ajp_packet(pack('CC', 5, 0));
}
