#!/usr/bin/perl
# url.path and url.query are the request target's path and query as the
# client sent them (RFC 3986's components, still percent-encoded): not the
# server's decoded, normalized path ("%3F" was a "?" there, "/a/../b" was
# "/b"), and not what a rewrite or an internal redirect made of them. An
# absolute-form target's path follows its authority. Real nginx and
# apache2 (mod_rewrite), raw requests, curl and node over HTTP/2, the
# independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file write_file free_port nginx_conf
                        nginx_start httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans wait_spans raw_answer h2_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $serial = 0;

# [request target, url.path, url.query ('' when left out), server only]
my @cases = (
    [ '/index.html?q=1%202&x', '/index.html', 'q=1%202&x' ],
    [ '/a%3Fb%20c', '/a%3Fb%20c', '' ],
    [ '/sub/../index.html', '/sub/../index.html', '' ],
    [ '/%69ndex.html', '/%69ndex.html', '' ],
    [ '/index.html?', '/index.html', '' ],
    # the path ends at the first '?', after slashes httpd parses past
    [ '//index.html?a?b', '//index.html', 'a?b' ],
    [ '/index.html??', '/index.html', '?' ],
    [ 'http://h.example/p%20q?x=%2F', '/p%20q', 'x=%2F' ],
    [ 'http://h.example?x=/y', '', 'x=/y' ],
    [ '/old/x%41?orig=1', '/old/x%41', 'orig=1' ],   # rewritten
    # a '?' after what nginx's parser marks complex (a dot segment) or
    # quoted, and after an authority's port: nginx looks for it there
    [ '/./index.html?dot=1', '/./index.html', 'dot=1' ],
    [ '/index%2Ehtml?q=%3F', '/index%2Ehtml', 'q=%3F' ],
    [ 'http://h.example:80?x=1', '', 'x=1' ],
    # a fragment, which clients should not send, is no part of either
    # (nginx answers such a request; httpd refuses it, before the headers)
    [ '/index.html#top', '/index.html', '', 'nginx' ],
    [ '/index.html?q=1#top', '/index.html', 'q=1', 'nginx' ],
    [ '/index.html#top?q=1', '/index.html', '', 'nginx' ],
);

sub attr {
    my ($span, $key) = @_;
    return Spanprof::Receiver::attribute($span->{attributes}, $key) // '';
}

sub span_of {
    my ($recv, $trace) = @_;
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    return $span;
}

sub check {
    my ($server, $dir, $recv, $port, $h2) = @_;
    for my $c (@cases) {
        my ($target, $path, $query, $only) = @$c;
        next if $only && $only ne $server;
        my $trace = sprintf '%032x', 0x0a7e00 + ++$serial;
        my $answer = raw_answer($port, "GET $target HTTP/1.1\r\n"
            . "Host: 127.0.0.1\r\nConnection: close\r\n"
            . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n\r\n");
        like($answer, qr{^HTTP/1\.1 \d+}, "$server: $target answered");
        my $span = span_of($recv, $trace);
        ok($span, "$server: $target: the span arrives") or next;
        is(attr($span, 'url.path'), $path,
           "$server: $target: url.path '$path'");
        is(attr($span, 'url.query'), $query,
           "$server: $target: url.query '$query'");
    }

    my $trace = sprintf '%032x', 0x0a7e00 + ++$serial;
    `curl -s -o /dev/null --path-as-is --http2-prior-knowledge -H 'traceparent: 00-$trace-00f067aa0ba902b7-01' 'http://127.0.0.1:$h2/sub/../%69ndex.html?a=%20'`;
    my $span = span_of($recv, $trace);
    ok($span, "$server: HTTP/2: the span arrives") or return;
    is(Spanprof::Receiver::attribute($span->{attributes}, 'url.path'),
       '/sub/../%69ndex.html', "$server: HTTP/2: url.path as sent");
    is(Spanprof::Receiver::attribute($span->{attributes}, 'url.query'),
       'a=%20', "$server: HTTP/2: url.query as sent");

    # A :path nginx refuses at a byte before its '#' or '?' (400, before
    # the traceparent is read): its path and query as sent all the same,
    # though nginx's parser stopped before noting either. (httpd's mod_http2
    # answers no such stream: there is no request to see.)
    return if $server ne 'nginx';
    for my $c ([ '/a b?x=1', '/a b', 'x=1' ], [ '/a b#f?x=1', '/a b', '' ]) {
        my ($target, $want_path, $want_query) = @$c;
        my %seen = map { $_->{spanId} => 1 } spans($recv);
        my ($got) = h2_requests($h2, "$dir/h2plan.json", { path => $target });
        is($got && $got->{status}, 400, "$server: HTTP/2 '$target': 400");
        ($span) = wait_spans($recv, sub { !$seen{ $_[0]->{spanId} } });
        ok($span, "$server: HTTP/2 '$target': the span arrives") or next;
        is(attr($span, 'url.path'), $want_path,
           "$server: HTTP/2 '$target': url.path as sent");
        is(attr($span, 'url.query'), $want_query,
           "$server: HTTP/2 '$target': url.query as sent");
    }
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $h2 = free_port();
    mkdir "$dir/sub";
    my $port = nginx_conf($dir, server => <<"SERVER", location => "root $dir;");
        listen 127.0.0.1:$h2 http2;
        location /old { rewrite ^ /index.html?new=1 last; }
SERVER
    write_file("$dir/index.html", "hello\n");
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    check('nginx', $dir, $recv, $port, $h2);
    stop($nginx);
}

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir, modules => [qw(http2 rewrite)], extra => <<"EXTRA");
Protocols h2c http/1.1
RewriteEngine On
RewriteRule ^/old /index.html?new=1 [PT]
EXTRA
    mkdir "$dir/htdocs/sub";
    chmod 0755, "$dir/htdocs/sub";
    my $httpd = httpd_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    check('httpd', $dir, $recv, $port, $port);
    stop($httpd);
}

done_testing();
