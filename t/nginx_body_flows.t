#!/usr/bin/perl
# nginx: request flows with bodies, and others no test took yet, over
# HTTP/1.1 and HTTP/2. One entry span each, with the status nginx logs,
# named after the location the request ended in; every request sent
# upstream carries one traceparent whose parent is that span, our
# baggage, and the body as the client sent it:
#   - X-Accel-Redirect from an upstream to an internal location (a file
#     gzipped, a second upstream), to a named one; a POST's too;
#   - request bodies: larger than client_body_buffer_size (to a temporary
#     file), chunked, with Expect: 100-continue, streamed to the upstream
#     (proxy_request_buffering off), too large (413, also before a 100
#     Continue), too slow (client_body_timeout: 408), discarded on a
#     keep-alive connection;
#   - keepalive_requests 3: 7 requests on three connections, each its own
#     Host and User-Agent;
#   - proxy_next_upstream with a body, after a 502 and a refused
#     connection, to a backup server: every attempt the entry span's;
#   - sub_filter, add_before_body / add_after_body (subrequests), DAV PUT,
#     DELETE, MKCOL, autoindex and its directory redirect.
# Selected ones are sampled only while their span is open, and the work
# of a selected request's body is sampled under its ids: read as it comes
# in the request's client events over HTTP/1.1 (chunks parsed, a
# temporary file written, a body discarded), in its request body filters
# over HTTP/2 (it had no sample at all). Real nginx, a recording upstream,
# the module's exporter, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::MD5 qw(md5_hex);
use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file free_port nginx_conf
                        nginx_start stop text_file);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case upstream_case spans wait_spans
                       h2_requests);

Spanprof::Receiver::skip_unless_ready();

my $PARENT = 'b7ad6b7169203331';

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir);
my $bad = Spanprof::Upstream->start(dir => $dir, status => 502);
my $at = '127.0.0.1:' . $up->port;
my ($h2, $ka, $kah2, $dead) = map { free_port() } 1 .. 4;

# What the workers (nobody) serve and write.
my (undef, undef, $uid, $gid) = getpwnam('nobody');
for my $d ("$dir/files", "$dir/files/sub", "$dir/dav") {
    mkdir $d;
    chmod 0755, $d;
}
chown $uid, $gid, "$dir/dav";
text_file("$dir/files/big.txt", 60000);
write_file("$dir/files/after.txt", "after\n");
chmod 0644, "$dir/files/after.txt";

# The functions of gzip's work, in a sample.
sub gzip_frames {
    grep { ($_->{function} // '') =~ /^(deflate|ngx_http_gzip_)/ }
        @{ $_[0]{frames} };
}

my $gzip = 'gzip on; gzip_comp_level 9; gzip_types text/plain; '
         . 'gzip_min_length 0;';
my $port = nginx_conf($dir,
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_baggage|\$status|\$spanprof_snapshot|'
                  '\$connection|\$request_time';
    upstream retry {
        server 127.0.0.1:${\ $bad->port} max_fails=0;
        server $at backup;
    }
    upstream refused {
        server 127.0.0.1:$dead max_fails=0;
        server $at backup;
    }
    server {
        listen 127.0.0.1:$ka;
        listen 127.0.0.1:$kah2 http2;
        keepalive_requests 3;
        access_log $dir/sp.log sp;
        location / { proxy_pass http://$at; }
    }
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        client_body_buffer_size 1k;
        client_max_body_size 64m;
        location /xa { proxy_pass http://$at; }
        location /internal/ { internal; alias $dir/files/; $gzip }
        location /inup/ { internal; proxy_pass http://$at; }
        location \@named {
            proxy_ignore_headers X-Accel-Redirect;
            proxy_pass http://$at;
        }
        location /body { proxy_pass http://$at; }
        location /stream {
            proxy_request_buffering off;
            proxy_http_version 1.1;
            proxy_pass http://$at;
        }
        location /small {
            client_max_body_size 1k;
            proxy_pass http://$at;
        }
        location /slowbody {
            client_body_timeout 1s;
            proxy_pass http://$at;
        }
        location /retry {
            proxy_next_upstream error http_502 non_idempotent;
            proxy_pass http://retry;
        }
        location /refused {
            proxy_next_upstream error non_idempotent;
            proxy_pass http://refused;
        }
        location /sub {
            sub_filter upstream replaced;
            sub_filter_types text/plain;
            proxy_pass http://$at;
        }
        location /add {
            add_before_body /before/x;
            add_after_body /after.txt;
            addition_types text/plain;
            proxy_pass http://$at;
        }
        location /before { proxy_pass http://$at; }
        location = /after.txt { alias $dir/files/after.txt; }
        location /dav/ {
            alias $dir/dav/;
            dav_methods PUT DELETE MKCOL;
            create_full_put_path on;
        }
        location /files/ { alias $dir/files/; autoindex on; }
        location /ok { return 200 "ok\n"; }
        location /big { alias $dir/files/big.txt; $gzip }
SERVER
);

my $nginx = nginx_start($dir, $port, $recv->snapshot_env);
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my ($serial, $case) = (0, 2000);

sub new_trace { sprintf '%032x', 0xb0d000 + ++$serial }

# The trace headers of a request: its traceparent (a trace of its own),
# a baggage that selects it or not.
sub trace_headers {
    my ($trace, $selected) = @_;
    return ([ 'x-case', ++$case ],
            [ traceparent => "00-$trace-$PARENT-01" ],
            [ baggage => 'k=v,splunk.trace.snapshot.volume='
                         . ($selected ? 'highest' : 'off') ]);
}

sub head_lines { join '', map { "$_->[0]: $_->[1]\r\n" } @_ }

# A connection to nginx's HTTP/1.1 port (or $to).
sub connect_to {
    my ($to) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . ($to // $port),
                                  Timeout => 10);
    return $s || die "connect: $!";
}

# Reads from $s until $done is true of what came, EOF or 10 s.
sub read_until {
    my ($s, $done) = @_;
    my $buf = '';
    my $end = time + 10;
    while (!$done->($buf) && time < $end) {
        my $r = '';
        vec($r, fileno $s, 1) = 1;
        select($r, undef, undef, 0.1) or next;
        sysread($s, $buf, 65536, length $buf) or last;
    }
    return $buf;
}

# The body of an HTTP/1.1 answer, its chunks joined when it has them.
sub answer_body {
    my ($head, $rest) = @_;
    return $rest unless $head =~ /^Transfer-Encoding:\s*chunked/mi;
    my $body = '';
    while ($rest =~ s/\A([0-9a-f]+)\r\n//i && hex $1) {
        $body .= substr $rest, 0, hex($1), '';
        $rest =~ s/\A\r\n//;
    }
    return $body;
}

# $method $path over HTTP/1.1 (h2 => 1: HTTP/2), with a traceparent of a
# trace of its own; options: body, chunked (the body in chunks of that
# size), extra (header lines), selected, length (a Content-Length as
# given), wire (HTTP/1.1: the body as chunks already). (case, trace,
# status answered, answer body).
sub request {
    my ($method, $path, %o) = @_;
    my $trace = new_trace();
    my @h = trace_headers($trace, $o{selected});
    my $body = $o{body} // '';
    push @h, @{ $o{headers} // [] };
    if ($o{h2}) {
        push @h, [ 'content-length', length $body ]
            if length $body && !$o{chunked};
        my ($r) = h2_requests($h2, "$dir/plan.json", {
            path => $path, method => $method, headers => \@h,
            length $body ? (body => $body) : () });
        return ($h[0][1], $trace, $r ? $r->{status} : 0,
                $r ? $r->{body} : '');
    }
    my $head = "$method $path HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             . "Connection: close\r\n" . head_lines(@h);
    if ($o{wire}) {
        $head .= "Transfer-Encoding: chunked\r\n";
        $body = $o{wire};
    } elsif ($o{chunked}) {
        $head .= "Transfer-Encoding: chunked\r\n";
        $body = join('', map { sprintf("%x\r\n", length) . "$_\r\n" }
                         unpack "(a$o{chunked})*", $body) . "0\r\n\r\n";
    } elsif (length $body) {
        $head .= 'Content-Length: ' . length($body) . "\r\n";
    }
    my $s = connect_to();
    print $s "$head\r\n$body";
    my $answer = read_until($s, sub { 0 });
    close $s;
    my ($got, $code, $rest) = $answer =~ m{^(HTTP/1\.1 (\d+).*?\r\n)\r\n(.*)}s;
    return ($h[0][1], $trace, $code // 0,
            $got ? answer_body($got, $rest) : '');
}

sub log_line {
    log_case("$dir/sp.log", $_[0], qw(trace_id span_id baggage status
                                         snapshot connection
                                         request_time));
}

sub attr { attribute($_[0]{attributes}, $_[1]) // '' }

my (@traced, @selected, @busy);

# The span of a request (case, trace) and what the upstream got: options
# status (logged), method, route, path, h2, upstreams (requests of the
# case upstream, default 0), body (what each of them must have got;
# bodies: what the first, the second... got, '' none), method_original
# (when the method is _OTHER). The span, or undef.
sub check {
    my ($what, $c, $trace, %o) = @_;
    my $l = log_line($c);
    ok($l, "$what: logged") or return;
    is($l->{status}, $o{status}, "$what: nginx logs $o{status}");
    is($l->{trace_id}, $trace, "$what: continues the client's trace");
    my $tp = "00-$trace-$l->{span_id}-01";
    my @r = upstream_case($up, $c, $o{upstreams} // 0);
    is(scalar @r, $o{upstreams} // 0,
       "$what: " . ($o{upstreams} // 0) . ' requests upstream');
    for my $i (0 .. $#r) {
        is_deeply([ @{ $r[$i]{headers} }{qw(traceparent baggage)} ],
                  [ [ $tp ], [ $l->{baggage} ] ],
                  "$what: upstream request $i ($r[$i]{uri}): one "
                  . 'traceparent, the entry span its parent; our baggage');
        my $body = $o{bodies} ? $o{bodies}[$i] : $o{body};
        next unless defined $body;
        is(($r[$i]{body_length} // 0) . ' ' . ($r[$i]{body_md5} // ''),
           length($body) . ' ' . (length $body ? md5_hex($body) : ''),
           "$what: upstream request $i got the body intact");
    }
    my ($s) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    ok($s, "$what: the span arrives") or return;
    is($s->{spanId}, $l->{span_id}, "$what: the span logged");
    is($s->{parentSpanId}, $PARENT, "$what: its parent the client's");
    my $name = $o{method_original} ? 'HTTP' : $o{method};
    is($s->{name}, "$name $o{route}", "$what: named $name $o{route}");
    is(attr($s, 'http.route'), $o{route}, "$what: http.route $o{route}");
    is(attr($s, 'http.request.method'), $o{method}, "$what: the method sent");
    is(attr($s, 'http.request.method_original'), $o{method_original} // '',
       "$what: http.request.method_original");
    is(attr($s, 'http.response.status_code'), $o{status},
       "$what: http.response.status_code $o{status}");
    is($s->{status}{code} // 0, $o{status} >= 500 ? 2 : 0,
       "$what: status " . ($o{status} >= 500 ? 'Error' : 'unset'));
    is(attr($s, 'url.path'), $o{path}, "$what: url.path $o{path}");
    is(attr($s, 'network.protocol.version'), $o{h2} ? '2' : '1.1',
       "$what: network.protocol.version");
    # Not to the millisecond: $request_time is between nginx's cached
    # times, each as old as the event loop's turn (long on a busy
    # machine). What it catches: a span ended at another event, a
    # keep-alive or lingering close, a timeout (seconds).
    my $lasted = ($s->{endTimeUnixNano} - $s->{startTimeUnixNano}) / 1e9;
    ok(abs($lasted - $l->{request_time}) < 1,
       "$what: the span lasts as \$request_time ($lasted s,"
       . " $l->{request_time})");
    for my $kv (@{ $o{attrs} // [] }) {
        is(attr($s, $kv->[0]), $kv->[1], "$what: $kv->[0] $kv->[1]");
    }
    push @traced, [ $what, $trace ];
    push @selected, $s if $l->{snapshot};
    push @busy, [ $what, $s ] if $o{busy};
    return $s;
}

# A request made and checked: request's and check's options together.
sub flow {
    my ($what, $method, $path, %o) = @_;
    my $proto = $o{h2} ? 'HTTP/2' : 'HTTP/1.1';
    my ($c, $trace, $code, $body) = request($method, $path, %o);
    is($code, $o{answered} // $o{status},
       "$proto $what: answered " . ($o{answered} // $o{status}));
    like($body, $o{like}, "$proto $what: the answer") if $o{like};
    return check("$proto $what", $c, $trace, path => $path =~ s/\?.*//r,
                 %o, method => $o{method_original} ? '_OTHER' : $method);
}

my $big = join '', map { sprintf "%06d body line\n", $_ } 1 .. 20000;
my $small = "a=1&b=2\n";
# 32 MiB that take the worker a while to read and write out (no newline:
# the HTTP/2 client's plan is JSON)
my $huge = join '', map { sprintf '%07d;', $_ } 1 .. 4 << 20;
# chunks of a byte (48 MB)
my $tiny = 'x' x 8_000_000;
my $tiny_wire = "1\r\nx\r\n" x 8_000_000 . "0\r\n\r\n";

for my $h2 (0, 1) {
    # ---- X-Accel-Redirect
    flow('X-Accel-Redirect to an internal file, gzipped', 'GET',
         '/xa/accel/internal/big.txt?q=1', h2 => $h2, status => 200,
         route => '/internal/', upstreams => 1, selected => 1,
         attrs => [ [ 'url.query', 'q=1' ] ],
         headers => [ [ 'accept-encoding' => 'gzip' ] ]);
    flow('X-Accel-Redirect to an internal proxy', 'GET',
         '/xa/accel/inup/x', h2 => $h2, status => 200, route => '/inup/',
         upstreams => 2, like => qr/^upstream http/);
    flow('X-Accel-Redirect to a named location', 'GET', '/xa/accel@named',
         h2 => $h2, status => 200, route => '@named', upstreams => 2,
         like => qr/^upstream http/);
    # nginx makes it a GET, which the span does not say (it came a POST);
    # the body goes on to the internal location's upstream too
    flow('X-Accel-Redirect of a POST to an internal proxy', 'POST',
         '/xa/accel/inup/p', h2 => $h2, status => 200, route => '/inup/',
         upstreams => 2, body => $small);

    # ---- bodies
    flow('a body to a temporary file', 'POST', '/body/file', h2 => $h2,
         status => 200, route => '/body', upstreams => 1, body => $big);
    # its body read as it comes (over HTTP/2, in the connection's read
    # handler) is its work: sampled, under its ids
    flow('a body to a temporary file, selected', 'POST', '/body/huge',
         h2 => $h2, status => 200, route => '/body', upstreams => 1,
         body => $huge, selected => 1, busy => 1);
    flow('a body without a length', 'PUT', '/body/chunked', h2 => $h2,
         status => 200, route => '/body', upstreams => 1, body => $big,
         chunked => 7000);
    unless ($h2) {
        # chunks of a byte, which nginx parses as they come, in the
        # request's read events: its work, sampled under its ids
        flow('a body of tiny chunks, selected', 'POST', '/body/tiny',
             status => 200, route => '/body', upstreams => 1,
             body => $tiny, wire => $tiny_wire, selected => 1,
             busy => 1);
        flow('a body of tiny chunks discarded, selected', 'POST',
             '/ok/tiny', status => 200, route => '/ok',
             wire => $tiny_wire, selected => 1, busy => 1);
    }
    flow('a body streamed upstream', 'POST', '/stream/x', h2 => $h2,
         status => 200, route => '/stream', upstreams => 1, body => $big,
         chunked => 5000);
    flow('a body too large', 'POST', '/small/x', h2 => $h2, status => 413,
         route => '/small', body => $big);
    flow('a body too large, without a length', 'POST', '/small/c',
         h2 => $h2, status => 413, route => '/small', body => $big,
         chunked => 3000);

    # ---- proxy_next_upstream with a body
    flow('proxy_next_upstream after a 502', 'POST', '/retry/x', h2 => $h2,
         status => 200, route => '/retry', upstreams => 1, body => $big);
    my $l = log_line($case);
    my ($first) = upstream_case($bad, $case);
    is_deeply($first && [ $first->{headers}{traceparent},
                          $first->{body_md5} ],
              [ [ "00-$l->{trace_id}-$l->{span_id}-01" ],
                md5_hex($big) ],
              'proxy_next_upstream: the attempt that failed had the entry '
              . 'span as parent and the body');
    flow('proxy_next_upstream after a refused connection', 'POST',
         '/refused/x', h2 => $h2, status => 200, route => '/refused',
         upstreams => 1, body => $big);

    # ---- filters, subrequests, DAV, autoindex
    flow('sub_filter', 'GET', '/sub/x', h2 => $h2, status => 200,
         route => '/sub', upstreams => 1, like => qr/^replaced http/);
    flow('add_before_body, add_after_body', 'GET', '/add/x', h2 => $h2,
         status => 200, route => '/add', upstreams => 2,
         like => qr/^upstream http\nupstream http\nafter\n$/);
    my $file = "/dav/h$h2/new.txt";
    flow('DAV PUT, new', 'PUT', $file, h2 => $h2, status => 201,
         route => '/dav/', body => $huge, selected => 1, busy => 1);
    flow('DAV PUT again', 'PUT', $file, h2 => $h2, status => 204,
         route => '/dav/', body => $small);
    is(read_file("$dir/dav/h$h2/new.txt"), $small,
       'DAV PUT: the file has the body');
    flow('DAV MKCOL', 'MKCOL', "/dav/h$h2/col/", h2 => $h2, status => 201,
         route => '/dav/', method_original => 'MKCOL');
    flow('DAV DELETE', 'DELETE', $file, h2 => $h2, status => 204,
         route => '/dav/');
    flow('DAV DELETE, gone', 'DELETE', $file, h2 => $h2, status => 404,
         route => '/dav/');
    flow('autoindex', 'GET', '/files/', h2 => $h2, status => 200,
         route => '/files/', like => qr{Index of /files/});
    flow('autoindex, a directory without its slash', 'GET', '/files/sub',
         h2 => $h2, status => 301, route => '/files/');
}

# ---- Expect: 100-continue

{
    my $trace = new_trace();
    my @h = trace_headers($trace);
    my $s = connect_to();
    print $s "POST /body/expect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           . "Connection: close\r\nExpect: 100-continue\r\n"
           . 'Content-Length: ' . length($big) . "\r\n" . head_lines(@h)
           . "\r\n";
    my $first = read_until($s, sub { $_[0] =~ /\r\n\r\n/ });
    like($first, qr{^HTTP/1\.1 100 Continue\r\n\r\n\z},
         'Expect: 100-continue: nginx asks for the body');
    print $s $big;
    like(read_until($s, sub { 0 }), qr{^HTTP/1\.1 200 },
         'Expect: 100-continue: then answers 200');
    close $s;
    check('Expect: 100-continue', $h[0][1], $trace, method => 'POST',
          path => '/body/expect', route => '/body', status => 200,
          upstreams => 1, body => $big);

    # too large: refused before the body is sent
    $trace = new_trace();
    @h = trace_headers($trace);
    $s = connect_to();
    print $s "POST /small/expect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           . "Expect: 100-continue\r\n"
           . 'Content-Length: ' . length($big) . "\r\n" . head_lines(@h)
           . "\r\n";
    like(read_until($s, sub { $_[0] =~ /\r\n\r\n/ }), qr{^HTTP/1\.1 413 },
         'Expect: 100-continue, too large: 413 at once');
    close $s;
    check('Expect: 100-continue, too large', $h[0][1], $trace,
          method => 'POST', path => '/small/expect', route => '/small',
          status => 413);
}

# ---- client_body_timeout: a body that stops coming (408, no answer)

{
    my $trace = new_trace();
    my @h = trace_headers($trace, 1);
    my $s = connect_to();
    print $s "POST /slowbody/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           . "Content-Length: 1000\r\n" . head_lines(@h) . "\r\n"
           . ('x' x 100);
    my $t0 = time;
    is(read_until($s, sub { 0 }), '',
       'HTTP/1.1 client_body_timeout: the connection closes, unanswered');
    close $s;
    cmp_ok(time - $t0, '<', 5, 'HTTP/1.1 client_body_timeout: in time');
    check('HTTP/1.1 client_body_timeout', $h[0][1], $trace,
          method => 'POST', path => '/slowbody/x', route => '/slowbody',
          status => 408);

    $trace = new_trace();
    @h = trace_headers($trace, 1);
    my ($r) = h2_requests($h2, "$dir/plan.json", {
        path => '/slowbody/y', method => 'POST', body => 'x' x 100,
        more_body => JSON::PP::true(),
        headers => [ @h, [ 'content-length', 1000 ] ] });
    ok($r && !$r->{status}, 'HTTP/2 client_body_timeout: unanswered')
        or diag explain $r;
    check('HTTP/2 client_body_timeout', $h[0][1], $trace, method => 'POST',
          path => '/slowbody/y', route => '/slowbody', status => 408,
          h2 => 1);
}

# ---- keepalive_requests 3: seven requests, three connections; each
# its own Host and User-Agent (of the same lengths, which the
# connection's cache of attributes compares)

{
    my (@cases, @traces, @codes, @attrs);
    my ($s, $conns) = (undef, 0);
    for my $i (1 .. 7) {
        my $trace = new_trace();
        my @h = trace_headers($trace);
        my ($host, $ua) = ('host-' . ($i % 2) . '.test',
                           'agent/1.0 test-' . (int($i / 2) % 2));
        push @cases, $h[0][1];
        push @traces, $trace;
        push @attrs, [ [ 'server.address', $host ],
                       [ 'server.port', 8000 + $i % 2 ],
                       [ 'user_agent.original', $ua ],
                       [ 'client.address', '127.0.0.1' ] ];
        $s //= do { $conns++; connect_to($ka) };
        print $s "GET /ka/$i HTTP/1.1\r\nHost: $host:" . (8000 + $i % 2)
               . "\r\nUser-Agent: $ua\r\n" . head_lines(@h) . "\r\n";
        my $answer = read_until($s, sub {
            my ($head) = $_[0] =~ /\A(.*?\r\n\r\n)/s or return 0;
            my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
            return length($_[0]) >= length($head) + ($len // 0) });
        my ($code) = $answer =~ m{^HTTP/1\.1 (\d+)};
        push @codes, $code // 0;
        if ($answer =~ /^Connection: close/mi) {
            close $s;
            undef $s;
        }
    }
    is("@codes", '200 200 200 200 200 200 200',
       'keepalive_requests 3: seven answered');
    is($conns, 3, 'keepalive_requests 3: on three connections');
    my %ids;
    for my $i (0 .. 6) {
        my $span = check('keepalive_requests 3: request ' . ($i + 1),
                         $cases[$i], $traces[$i], method => 'GET',
                         path => '/ka/' . ($i + 1), route => '/',
                         status => 200, upstreams => 1,
                         attrs => $attrs[$i]);
        $ids{ $span->{spanId} } = 1 if $span;
    }
    is(scalar keys %ids, 7, 'keepalive_requests 3: seven span ids');
    my %conn = map { (log_line($_) // {})->{connection} // '' => 1 } @cases;
    is(scalar keys %conn, 3, 'keepalive_requests 3: three connections logged');

    # HTTP/2: streams 3, 3 and 1 of three connections
    my @plan;
    (@cases, @traces) = ();
    for my $i (1 .. 7) {
        my $trace = new_trace();
        my @h = trace_headers($trace);
        push @cases, $h[0][1];
        push @traces, $trace;
        push @plan, { path => "/ka/h$i", headers => \@h,
                      connection => int(($i - 1) / 3) };
    }
    my @r = h2_requests($kah2, "$dir/plan.json", @plan);
    is(join(' ', map { $_->{status} } @r), '200 200 200 200 200 200 200',
       'HTTP/2 keepalive_requests 3: seven answered');
    %ids = ();
    for my $i (0 .. 6) {
        my $span = check('HTTP/2 keepalive_requests 3: stream ' . ($i + 1),
                         $cases[$i], $traces[$i], method => 'GET',
                         path => '/ka/h' . ($i + 1), route => '/',
                         status => 200, upstreams => 1, h2 => 1);
        $ids{ $span->{spanId} } = 1 if $span;
    }
    is(scalar keys %ids, 7, 'HTTP/2 keepalive_requests 3: seven span ids');
}

# ---- a body nginx discards (return 200) on a keep-alive connection:
# answered before the body came, the request ends once it has; then the
# next request on the connection

{
    my @traces = (new_trace(), new_trace());
    my @h = map { [ trace_headers($_) ] } @traces;
    my @cases = map { $_->[0][1] } @h;
    my $s = connect_to();
    print $s "POST /ok/discard HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           . 'Content-Length: ' . length($big) . "\r\n"
           . head_lines(@{ $h[0] }) . "\r\n" . substr($big, 0, 1000);
    my $answer = read_until($s, sub { $_[0] =~ /\r\n\r\nok\n/ });
    like($answer, qr{^HTTP/1\.1 200 },
         'a body discarded: answered before it came');
    sleep 0.3;
    print $s substr($big, 1000);
    print $s "GET /ok/next HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           . "Connection: close\r\n" . head_lines(@{ $h[1] }) . "\r\n";
    like(read_until($s, sub { 0 }), qr{^HTTP/1\.1 200 },
         'a body discarded: the next request on the connection answered');
    close $s;
    my $span = check('a body discarded', $cases[0], $traces[0],
                     method => 'POST', path => '/ok/discard', route => '/ok',
                     status => 200);
    check('a body discarded, the next request', $cases[1], $traces[1],
          method => 'GET', path => '/ok/next', route => '/ok',
          status => 200);
    ok($span && ($span->{endTimeUnixNano} - $span->{startTimeUnixNano})
                / 1e9 >= 0.3,
       'a body discarded: its span lasts until the body came');
}

# ---- one span each; sampling of the selected ones within their spans

sleep 1;    # a profile export interval and more
for my $t (@traced) {
    my ($what, $trace) = @$t;
    is(scalar(grep { $_->{traceId} eq $trace } spans($recv)), 1,
       "$what: one span");
}
my (undef, $samples) = $recv->collect;
my ($in, $out) = (0, 0);
my %sel = map { $_->{spanId} => $_ } @selected;
for my $s (@$samples) {
    my $span = $sel{ $s->{labels}{span_id} // '' } or next;
    my $ms = $s->{labels}{'source.event.time'} // -1;
    $ms >= int($span->{startTimeUnixNano} / 1e6) - 1
        && $ms <= int($span->{endTimeUnixNano} / 1e6) + 1 ? $in++ : $out++;
}
for my $b (@busy) {
    my ($what, $span) = @$b;
    cmp_ok(scalar(grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
                  @$samples), '>', 0, "$what: samples under its ids");
}
is(scalar @selected, 10, 'selected requests traced');
cmp_ok($in, '>', 0, 'samples under the selected spans\' ids');
is($out, 0, "every one ($in) taken while its span was open");

system("cp $dir/error.log /tmp/h97-error.log");
stop($nginx);
my $log = read_file("$dir/error.log");
unlike($log, qr/\[(?:alert|emerg|crit)\]/, 'no alert in the error log');
unlike($log, qr/\[(?:error|warn)\][^\n]*spanprof/,
       'no spanprof error or warning');
unlike($log, qr/exited on signal/, 'no worker crashed');
done_testing();
