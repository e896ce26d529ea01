#!/usr/bin/perl
# Requests a server refuses while it reads them (a header line without a
# colon, headers too large, a request line too long or malformed) are
# requests all the same: each gets its entry span, continuing the
# traceparent when the server had read it and kept it, with the status the server
# answered and no method where none could be read ("_OTHER", named
# "HTTP"); the access log has its ids. Before, such requests had no span
# and nothing in the access log's id fields. Real nginx and apache2, raw
# requests, the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start stop wait_until);
use Spanprof::Receiver;
use Spanprof::Upstream;
use Spanprof::Cases qw(spans wait_spans raw_answer);

Spanprof::Receiver::skip_unless_ready();

my $serial = 0;
my $big = 'x' x 20000;

sub attr {
    my ($span, $key) = @_;
    return Spanprof::Receiver::attribute($span->{attributes}, $key) // '';
}

sub check {
    my ($server, $dir, $recv, $port) = @_;

    # The traceparent comes before what is refused: the span continues it,
    # unless the server threw away the headers it had read (httpd does,
    # for a field too large). The access log names the span either way.
    for my $c ([ 'a header line without a colon', "Bad Header Line", 1 ],
               [ 'headers too large', "X-Big: $big", $server eq 'nginx' ]) {
        my ($what, $bad, $continued) = @$c;
        $what = "$server: $what";
        my $trace = sprintf '%032x', 0x4e0000 + ++$serial;
        my $logged = () = read_file("$dir/access.log") =~ /\n/g;
        my $answer = raw_answer($port, "GET /index.html HTTP/1.1\r\n"
            . "Host: 127.0.0.1\r\n"
            . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n$bad\r\n\r\n");
        my ($code) = $answer =~ m{^HTTP/1\.\d (\d+)};
        is($code, 400, "$what: refused with 400");
        my @lines;
        for (1 .. 50) {
            @lines = split /\n/, read_file("$dir/access.log");
            last if @lines > $logged;
            sleep 0.1;
        }
        my ($id, $status) = split / /, $lines[$logged] // '';
        is($status, 400, "$what: logged with 400");
        like($id // '', qr/^[0-9a-f]{32}$/, "$what: the access log has ids");
        is($id, $trace, "$what: the client's trace") if $continued;
        my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq ($id // '') });
        ok($span, "$what: the span the access log names arrives") or next;
        is($span->{parentSpanId} // '', $continued ? '00f067aa0ba902b7' : '',
           "$what: " . ($continued ? "its parent is the client's span"
                                   : 'a root span'));
        is(attr($span, 'http.response.status_code'), 400,
           "$what: status code 400");
        is($span->{name}, 'GET', "$what: named by its method");
        is($span->{status}{code} // 0, 0, "$what: status unset (a 4xx)");
        ok($span->{startTimeUnixNano} > 0
           && $span->{startTimeUnixNano} <= $span->{endTimeUnixNano},
           "$what: it starts before it ends");
    }

    # A target the server refuses (a "%" that escapes nothing): its path
    # and query as sent all the same (nginx keeps the target it parsed
    # only once it parsed, and refuses it before reading any header).
    {
        my %seen = map { $_->{spanId} => 1 } spans($recv);
        my ($code) = raw_answer($port, "GET /%ZZ/x?a=%ZZ HTTP/1.1\r\n"
            . "Host: 127.0.0.1\r\n\r\n") =~ m{^HTTP/1\.\d (\d+)};
        is($code, 400, "$server: a target with a bad escape: refused");
        my ($span) = wait_spans($recv, sub {
            !$seen{ $_[0]->{spanId} }
            && attr($_[0], 'http.response.status_code') == 400 });
        ok($span, "$server: bad escape: its span arrives");
        is(attr($span, 'url.path'), '/%ZZ/x',
           "$server: bad escape: url.path as sent");
        is(attr($span, 'url.query'), 'a=%ZZ',
           "$server: bad escape: url.query as sent");
    }

    # A connection on which nothing is sent until the server gives up on
    # it (httpd logs it 408 "-", nginx nothing) is no request: no span.
    # One that stops in the middle of its headers is: its span, 408, with
    # the header lines that came whole (httpd keeps a line once the next
    # one has come: it might continue on it).
    {
        my %seen = map { $_->{spanId} => 1 } spans($recv);
        my $logged = () = read_file("$dir/access.log") =~ /\n/g;
        my $idle = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port");
        my $trace = sprintf '%032x', 0x4e0800 + ++$serial;
        my ($code) = raw_answer($port, "GET /index.html HTTP/1.1\r\n"
            . "Host: 127.0.0.1\r\n"
            . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n"
            . "X-Whole: 1\r\nX-Cut: sh") =~ m{^HTTP/1\.\d (\d+)};
        # nginx closes without an answer.
        is($code // 'none', $server eq 'httpd' ? 408 : 'none',
           "$server: headers cut short: " . ($server eq 'httpd'
                                              ? 'answered 408' : 'closed'));
        my $closed = IO::Select->new($idle)->can_read(10)
                     && !sysread($idle, my $buf, 1);
        ok($closed, "$server: a connection that sends nothing is closed");
        my $lines = $server eq 'httpd' ? 2 : 1;
        wait_until(sub { (() = read_file("$dir/access.log") =~ /\n/g)
                         >= $logged + $lines });
        my ($cut) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
        sleep 0.5;      # another span would be exported by now
        my @new = grep { !$seen{ $_->{spanId} } } spans($recv);
        is(scalar @new, 1, "$server: one span for the two connections");
        is($cut && attr($cut, 'http.response.status_code'), 408,
           "$server: headers cut short: its span, 408");
        is($cut && $cut->{name}, 'GET', "$server: headers cut short: GET");
        is($cut && $cut->{parentSpanId}, '00f067aa0ba902b7',
           "$server: headers cut short: the client's parent");
        if ($server eq 'httpd') {
            my @l = split /\n/, read_file("$dir/access.log");
            is(scalar(grep { $_ eq '- 408' } @l[$logged .. $#l]), 1,
               'httpd: the idle connection is logged "408" without ids');
        }
    }

    # Refused before any header: a trace of its own.
    my %before = map { $_->{spanId} => 1 } spans($recv);
    my ($long) = raw_answer($port, "GET /$big HTTP/1.1\r\nHost: x\r\n\r\n")
        =~ m{^HTTP/1\.\d (\d+)};
    is($long, 414, "$server: a request line too long: refused with 414");
    my ($bad) = raw_answer($port, "G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n")
        =~ m{^HTTP/1\.\d (\d+)};
    is($bad, 400, "$server: a malformed request line: refused with 400");
    my @new;
    for (1 .. 50) {
        @new = grep { !$before{ $_->{spanId} } } spans($recv);
        last if @new >= 2;
        sleep 0.1;
    }
    my %by_code = map { attr($_, 'http.response.status_code') => $_ } @new;
    for my $code (414, 400) {
        my $span = $by_code{$code};
        ok($span, "$server: the $code has a span") or next;
        is($span->{parentSpanId} // '', '', "$server: $code: a root span");
        is($span->{name}, 'HTTP', "$server: $code: named HTTP");
        is(attr($span, 'http.request.method'), '_OTHER',
           "$server: $code: a method that could not be read: _OTHER");
        is(attr($span, 'network.peer.address'), '127.0.0.1',
           "$server: $code: its peer");
        # httpd reads the version of a line it refuses for its method
        my $version = $server eq 'httpd' && $code == 400 ? '1.1' : '';
        is(attr($span, 'network.protocol.version'), $version,
           "$server: $code: protocol version "
           . ($version eq '' ? 'none, none was read' : $version));
    }
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir,
        http => "    log_format ids '\$spanprof_trace_id \$status';\n"
                . "    client_header_timeout 1s;",
        server => "        access_log $dir/access.log ids;",
        location => "root $dir;");
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    check('nginx', $dir, $recv, $port);
    stop($nginx);
}

# A refused request that error_page sends to an upstream: the upstream
# sees our span as its parent, as for any request, not the client's span
# it had read before what was refused, nor the client's own headers. The
# span has the method the request came with, not the GET error_page made
# it, and none where nginx could not read one.
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $up = Spanprof::Upstream->start(dir => $dir);
    my $up_port = $up->port;
    my $port = nginx_conf($dir,
        server => "        error_page 400 /refused;\n"
                  . "        location /refused { proxy_pass "
                  . "http://127.0.0.1:$up_port; }",
        location => "root $dir;");
    # With the snapshot profiler on, the selection made here is added to
    # the baggage sent on: what the client sent would not have it.
    my $nginx = nginx_start($dir, $port, %env,
        SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    my $trace = sprintf '%032x', 0x4e1000 + ++$serial;
    my ($code) = raw_answer($port, "POST /index.html HTTP/1.1\r\n"
        . "Host: 127.0.0.1\r\n"
        . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n"
        . "baggage: a=1\r\nBad Header Line\r\n\r\n")
        =~ m{^HTTP/1\.\d (\d+)};
    is($code, 400, 'nginx: refused, error_page to an upstream: 400');
    my $req = $up->wait_request(1);
    ok($req, 'nginx: refused: error_page reached the upstream');
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    ok($span, 'nginx: refused, sent upstream: its span arrives');
    my @tp = @{ $req && $req->{headers}{traceparent} || [] };
    is(scalar @tp, 1, 'nginx: refused, sent upstream: one traceparent');
    is($tp[0] // '', "00-$trace-" . ($span ? $span->{spanId} : '?') . '-01',
       'nginx: refused, sent upstream: the parent upstream is our span');
    is($span && $span->{parentSpanId}, '00f067aa0ba902b7',
       "nginx: refused, sent upstream: our span's parent is the client's");
    is(join(',', @{ $req && $req->{headers}{baggage} || [] }),
       'a=1,splunk.trace.snapshot.volume=off',
       'nginx: refused, sent upstream: the baggage with the selection');
    is(attr($span, 'http.request.method'), 'POST',
       'nginx: refused, sent upstream: the method it came with');
    is($span && $span->{name}, 'POST /refused',
       'nginx: refused, sent upstream: named by it and the location');

    my %seen = map { $_->{spanId} => 1 } spans($recv);
    ($code) = raw_answer($port, "G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n")
        =~ m{^HTTP/1\.\d (\d+)};
    is($code, 400, 'nginx: a malformed request line, error_page: 400');
    ok($up->wait_request(2), 'nginx: malformed, error_page: sent upstream');
    my ($bad) = wait_spans($recv, sub { !$seen{ $_[0]->{spanId} } });
    is(attr($bad, 'http.request.method'), '_OTHER',
       'nginx: malformed, sent upstream: no method could be read');
    is($bad && $bad->{name}, 'HTTP /refused',
       'nginx: malformed, sent upstream: named HTTP and the location');
    stop($nginx);
}

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    # AcceptFilter none: else the kernel hands httpd a connection that
    # sends nothing only after some 30 s (TCP_DEFER_ACCEPT).
    my $port = httpd_conf($dir, modules => ['reqtimeout'], extra => <<"EXTRA");
RequestReadTimeout header=1
AcceptFilter http none
LogFormat "%{SPANPROF_TRACE_ID}e %>s" ids
CustomLog $dir/access.log ids
EXTRA
    my $httpd = httpd_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    check('httpd', $dir, $recv, $port);
    stop($httpd);
}

done_testing();
