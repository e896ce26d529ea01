#!/usr/bin/perl
# url.scheme, server.address and server.port are where the client sent
# the request, as the HTTP conventions say: the scheme and host a reverse
# proxy passed on (Forwarded proto= and host=, else X-Forwarded-Proto and
# X-Forwarded-Host), else the request's own (its connection's scheme; an
# absolute-form target, Host, HTTP/2's :authority), each host with its
# port, or the scheme's when it is the request's own or the proxy named
# the scheme. A value that is no scheme or authority is passed over; a
# request without any authority has no server.address and the port it
# came in on. Before, the port was always the listening socket's and the
# scheme the connection's. Real nginx and apache2 (HTTP/1.1 and
# prior-knowledge HTTP/2), curl, raw sockets, the independent OTLP
# receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::IP;
use Test::More;

use Spanprof::Server qw(new_dir read_file write_file free_port nginx_conf
                        nginx_start httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans raw_answer keepalive_answers);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $serial = 0;

sub curl_request {
    my ($port, $trace, $h2, @headers) = @_;
    my $h = join ' ', map { "-H '$_'" } @headers;
    my $version = $h2 ? '--http2-prior-knowledge' : '--http1.1';
    return `curl -s -o /dev/null -w '%{http_code}' $version $h -H 'traceparent: 00-$trace-00f067aa0ba902b7-01' http://127.0.0.1:$port/index.html`;
}

# A request line and headers as given: its status.
sub raw_request {
    my ($port, $trace, $line, @headers) = @_;
    my $answer = raw_answer($port, join("\r\n", $line, @headers,
        "traceparent: 00-$trace-00f067aa0ba902b7-01", 'Connection: close',
        '', ''));
    return $answer =~ m{^HTTP/1\.\d (\d+)} ? $1 : '';
}

# @cases: [what, h2 (1) / raw request line / undef, headers, address,
# port ('' for an attribute left out), url.scheme (http when not given)].
sub check {
    my ($server, $recv, $port, @cases) = @_;
    for my $c (@cases) {
        my ($what, $how, $headers, $address, $want_port, $scheme) = @$c;
        $scheme //= 'http';
        my $trace = sprintf '%032x', 0x5e7ae0 + ++$serial;
        $what = "$server: $what";
        my $code = defined $how && $how ne '1'
            ? raw_request($port, $trace, $how, @$headers)
            : curl_request($port, $trace, $how, @$headers);
        is($code, 200, "$what: answered 200");
        my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
        ok($span, "$what: the span arrives") or next;
        my $attr = sub {
            Spanprof::Receiver::attribute($span->{attributes}, $_[0]) // '' };
        is($attr->('server.address'), $address,
           "$what: server.address " . ($address eq '' ? 'left out' : $address));
        is($attr->('server.port'), $want_port, "$what: server.port $want_port");
        is($attr->('url.scheme'), $scheme, "$what: url.scheme $scheme");
    }
}

# What both servers must do.
sub cases {
    my ($port) = @_;
    return (
        [ 'Host with a port', undef, [ 'Host: shop.example:8443' ],
          'shop.example', 8443 ],
        [ 'Host without one: http\'s', undef, [ 'Host: shop.example' ],
          'shop.example', 80 ],
        [ 'Host of an IPv6 literal', undef, [ 'Host: [::1]:9000' ],
          '::1', 9000 ],
        [ 'HTTP/2 :authority', 1, [ 'Host: h2.example:8444' ],
          'h2.example', 8444 ],
        [ 'X-Forwarded-Host, its first element', undef,
          [ 'X-Forwarded-Host: public.example:9443, inner.example',
            'Host: inner.example:81' ], 'public.example', 9443 ],
        [ 'X-Forwarded-Host without a port: none known', undef,
          [ 'X-Forwarded-Host: public.example', 'Host: inner.example:81' ],
          'public.example', '' ],
        [ 'Forwarded before X-Forwarded-Host', undef,
          [ 'Forwarded: for=192.0.2.60;host="fwd.example:444";proto=https',
            'X-Forwarded-Host: xfh.example', 'Host: inner.example:81' ],
          'fwd.example', 444, 'https' ],
        [ 'Forwarded without host: X-Forwarded-Host', undef,
          [ 'Forwarded: for=192.0.2.60', 'X-Forwarded-Host: xfh.example:82',
            'Host: inner.example:81' ], 'xfh.example', 82 ],
        [ 'X-Forwarded-Proto: the client\'s scheme and its port', undef,
          [ 'X-Forwarded-Proto: https, http', 'Host: shop.example' ],
          'shop.example', 443, 'https' ],
        [ 'Forwarded proto= and host= without a port', undef,
          [ 'Forwarded: for=192.0.2.60;proto=https;host=fwd.example',
            'X-Forwarded-Proto: http', 'Host: inner.example:81' ],
          'fwd.example', 443, 'https' ],
        [ 'Forwarded: only its first element, the client\'s', undef,
          [ 'Forwarded: for=192.0.2.1, for=10.0.0.2;host="lb.internal:8080"'
            . ';proto=http', 'X-Forwarded-Proto: https',
            'Host: shop.example' ], 'shop.example', 443, 'https' ],
        [ 'a scheme that is none is passed over', undef,
          [ 'X-Forwarded-Proto: <b>', 'Host: shop.example' ],
          'shop.example', 80, 'http' ],
        [ 'what is no authority is passed over', undef,
          [ 'Forwarded: host="bad host"', 'X-Forwarded-Host: <script>',
            'Host: inner.example:81' ], 'inner.example', 81 ],
        [ 'absolute-form target', 'GET http://abs.example:8081/index.html '
          . 'HTTP/1.1', [ 'Host: other.example:82' ], 'abs.example', 8081 ],
        [ 'names in any case', 'GET /index.html HTTP/1.1',
          [ 'x-FORWARDED-pRoTo: https', 'X-FORWARDED-HOST: case.example',
            'hOST: inner.example:81' ], 'case.example', 443, 'https' ],
        [ 'a longer name that starts as one is none', undef,
          [ 'X-Forwarded-Hostname: long.example', 'Host: inner.example:81' ],
          'inner.example', 81 ],
        [ 'HTTP/1.0 without Host: the port it came in on',
          'GET /index.html HTTP/1.0', [], '', $port ],
    );
}

# A request without any authority to an IPv6 listener: the port it came
# in on, from the listening socket's IPv6 address (nginx reads it from
# the sockaddr itself, ngx_http_spanprof_port()).
sub check_ipv6_port {
    my ($server, $recv, $port) = @_;
    my $what = "$server: HTTP/1.0 without Host over IPv6";
    my $trace = sprintf '%032x', 0x5e7ae0 + ++$serial;
    my $s = IO::Socket::IP->new(PeerHost => '::1', PeerPort => $port,
                                Timeout => 10);
    ok($s, "$what: connects") or return;
    print $s "GET /index.html HTTP/1.0\r\n"
        . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n\r\n";
    my $answer = do { local $/; <$s> } // '';
    close $s;
    like($answer, qr{^HTTP/1\.\d 200}, "$what: answered 200");
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    ok($span, "$what: the span arrives") or return;
    is(Spanprof::Receiver::attribute($span->{attributes}, 'server.port'),
       $port, "$what: server.port $port");
}

# Requests on one keep-alive connection, most repeating the one before
# (a span then copies the attributes the connection's previous one wrote,
# sp_entry_cache) and some changing Host, User-Agent or a proxy's header,
# also to a value of the same length: each span has its own request's
# server.address, server.port and user_agent.original. Pipelined: all
# sent in one write, so that a request begins while the one before it has
# not ended (its answer not yet written).
sub check_keepalive {
    my ($server, $recv, $port, $pipelined) = @_;
    my $how = $pipelined ? 'pipelined' : 'keep-alive';
    my @plan = (
        [ 'a.example:8001', 'agent-one' ], [ 'a.example:8001', 'agent-one' ],
        [ 'a.example:8001', 'agent-one' ], [ 'b.example:8002', 'agent-two' ],
        [ 'b.example:8002', 'agent-Two' ], [ 'c.example:8002', 'agent-Two' ],
        [ 'c.example:8002', 'agent-Two', 'X-Forwarded-Host: fwd.example:9' ],
        [ 'c.example:8002', 'agent-Two' ], [ 'c.example', 'agent-Two' ],
    );
    my (@traces, @requests);
    for my $p (@plan) {
        my ($host, $agent, @more) = @$p;
        my $trace = sprintf '%032x', 0xca7e00 + ++$serial;
        push @traces, $trace;
        push @requests, join("\r\n", 'GET /index.html HTTP/1.1',
            "Host: $host", "User-Agent: $agent", @more,
            "traceparent: 00-$trace-00f067aa0ba902b7-01", '', '');
    }
    $requests[-1] =~ s/\r\n\r\n\z/\r\nConnection: close\r\n\r\n/
        if $pipelined;
    my @codes = $pipelined
        ? raw_answer($port, join '', @requests) =~ m{^HTTP/1\.1 (\d+)}mg
        : keepalive_answers($port, @requests);
    is(join(',', @codes), join(',', (200) x @plan),
       "$server: $how requests on one connection answered 200");
    for my $i (0 .. $#plan) {
        my ($host, $agent, @more) = @{ $plan[$i] };
        my ($want_host, $want_port) = $host =~ /^([^:]+)(?::(\d+))?$/;
        ($want_host, $want_port) = ('fwd.example', 9) if @more;
        $want_port //= 80;
        my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $traces[$i] });
        my $what = "$server: $how request " . ($i + 1);
        ok($span, "$what: the span arrives") or next;
        my $attr = sub {
            Spanprof::Receiver::attribute($span->{attributes}, $_[0]) // '' };
        is(join('|', map { $attr->($_) } qw(server.address server.port
                                           user_agent.original)),
           "$want_host|$want_port|$agent",
           "$what: its own server.address, server.port and User-Agent");
    }
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $h2 = free_port();
    my $v6 = free_port();
    my $port = nginx_conf($dir, server => "        listen 127.0.0.1:$h2 http2;"
                                          . "\n        listen [::1]:$v6;",
                          location => "root $dir;");
    write_file("$dir/index.html", "hello\n");
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    my @cases = cases($port);
    check('nginx', $recv, $port, grep { !defined $_->[1] || $_->[1] ne '1' }
                                      @cases);
    check('nginx', $recv, $h2, grep { defined $_->[1] && $_->[1] eq '1' }
                                    @cases);
    check_keepalive('nginx', $recv, $port);
    check_ipv6_port('nginx', $recv, $v6);
    stop($nginx);
}

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    # What a module makes of the headers later (mod_headers, in fixups)
    # is not what the client sent: the span has the client's.
    my $port = httpd_conf($dir, modules => ['http2', 'headers'],
                          extra => <<'EXTRA');
Protocols h2c http/1.1
RequestHeader set X-Forwarded-Host rewritten.example:99 \
    "expr=%{HTTP:X-Test-Rewrite} == '1'"
EXTRA
    my $httpd = httpd_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    check('httpd', $recv, $port, cases($port),
          [ 'a header mod_headers sets later: the client\'s', undef,
            [ 'X-Test-Rewrite: 1', 'X-Forwarded-Host: client.example:7000',
              'Host: inner.example:81' ], 'client.example', 7000 ]);
    check_keepalive('httpd', $recv, $port);
    check_keepalive('httpd', $recv, $port, 'pipelined');
    stop($httpd);
}

done_testing();
