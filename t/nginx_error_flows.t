#!/usr/bin/perl
# nginx: requests refused in the phases, or that fall back, and that
# error_page, try_files or a named location then send to an upstream. The
# upstream gets the entry span as its parent, once, with the tracestate
# received and our baggage (with the snapshot profiler's selection); the
# span has the method the client sent (a POST stays POST, though
# error_page makes it a GET), is named after the location the request
# ended in, has the status nginx logs and the path as sent. spanprof off
# in the location the request ends in: no span, the client's headers as
# sent; off only where it was refused: traced as any other. Flows: deny,
# limit_req, client_max_body_size (a length, a chunked body), return 404,
# auth_request 401/403, each to a proxied and to a named location; a bad
# chunk, an upstream down (502), try_files, to a named location;
# recursive_error_pages chains through locations on and off; HTTP/1.1
# and HTTP/2; requests nginx refused while reading
# them (bad header line, headers too large). A refused request that the
# client's baggage selects and error_page sends to work is sampled (it
# had no samples). Real nginx, a recording upstream, the module's
# exporter, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop gzip_location);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case upstream_case spans wait_spans raw_answer
                       h2_requests);

Spanprof::Receiver::skip_unless_ready();

my $PARENT = 'b7ad6b7169203331';

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir);
my $at = '127.0.0.1:' . $up->port;
my ($offport, $h2, $bigport, $dead) = map { free_port() } 1 .. 4;
my $big = gzip_location($dir, lines => 60000);

my $port = nginx_conf($dir,
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_baggage|\$status|\$spanprof_snapshot';
    limit_req_zone \$request_method zone=one:1m rate=1r/m;
    server {
        listen 127.0.0.1:$offport;
        spanprof off;
        access_log $dir/sp.log sp;
        error_page 400 /up/refused;
        location /up { spanprof on; proxy_pass http://$at; }
        location /deny { deny all; error_page 403 /up/deny; }
    }
    server {
        listen 127.0.0.1:$bigport;
        access_log $dir/sp.log sp;
        error_page 400 =200 /big;
        $big
    }
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        error_page 400 = \@up;
        error_page 494 /offup/refused;
        location /up { proxy_pass http://$at; }
        location \@up { proxy_pass http://$at; }
        location /offup { spanprof off; proxy_pass http://$at; }
        location = /auth401 { internal; return 401; }
        location = /auth403 { internal; return 403; }

        location /deny { deny all; error_page 403 /up/deny; }
        location /denyn { deny all; error_page 403 = \@up; }
        location /limited {
            limit_req zone=one nodelay;
            error_page 503 /up/limited;
            proxy_pass http://$at;
        }
        location /limitedn {
            limit_req zone=one nodelay;
            error_page 503 = \@up;
            proxy_pass http://$at;
        }
        location /big {
            client_max_body_size 4;
            error_page 413 /up/big;
            proxy_pass http://$at;
        }
        location /bign {
            client_max_body_size 4;
            error_page 413 = \@up;
            proxy_pass http://$at;
        }
        location /gone { return 404; error_page 404 /up/gone; }
        location /gonen { return 404; error_page 404 = \@up; }
        location /a401 {
            auth_request /auth401;
            error_page 401 /up/a401;
            proxy_pass http://$at;
        }
        location /a403 {
            auth_request /auth403;
            error_page 403 = \@up;
            proxy_pass http://$at;
        }
        location /tried { try_files /nothing/here \@up; }
        location /chain {
            recursive_error_pages on;
            error_page 404 /chained;
            return 404;
        }
        location /chained { deny all; error_page 403 /up/chain; }
        location /offdeny {
            spanprof off;
            deny all;
            error_page 403 /up/offdeny;
        }
        location /denyoff { deny all; error_page 403 /offup/denied; }
        location /denyoffn { deny all; error_page 403 = \@offup; }
        location \@offup { spanprof off; proxy_pass http://$at; }
        location /offdenyn {
            spanprof off;
            deny all;
            error_page 403 = \@up;
        }
        location /quietdeny {
            spanprof_propagate off;
            deny all;
            error_page 403 /up/quiet;
        }
        location /denyquiet { deny all; error_page 403 /quietup/x; }
        location /chainoff {
            recursive_error_pages on;
            return 404;
            error_page 404 /offhop;
        }
        location /offhop {
            spanprof off;
            deny all;
            error_page 403 /up/back;
        }
        location /chainon {
            recursive_error_pages on;
            return 404;
            error_page 404 /onhop;
        }
        location /onhop { deny all; error_page 403 /offup/end; }
        location /dead {
            proxy_pass http://127.0.0.1:$dead;
            error_page 502 = \@up;
        }
        location /chunked { proxy_pass http://$at; }
        location /quietup { spanprof_propagate off; proxy_pass http://$at; }
SERVER
);

my $nginx = nginx_start($dir, $port, $recv->snapshot_env);
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my ($serial, $case) = (0, 1000);

# Sends $method $path with a traceparent of a trace of its own, a
# tracestate, a baggage, header lines extra and a body (a POST's 'a=1'
# unless told); (case, trace id, status answered).
sub request {
    my ($method, $path, %o) = @_;
    my $trace = sprintf '%032x', 0xe44000 + ++$serial;
    my $to = $o{port} // $port;
    my $body = $o{body} // ($method eq 'POST' ? 'a=1' : '');
    my $extra = $o{extra};
    $case++;
    if ($o{h2}) {
        my ($r) = h2_requests($h2, "$dir/plan.json", {
            path => $path, method => $method, body => $body,
            headers => [ [ 'x-case', $case ],
                         [ traceparent => "00-$trace-$PARENT-01" ],
                         [ tracestate => 'ts=1' ], [ baggage => 'k=v' ] ] });
        return ($case, $trace, $r ? $r->{status} : 0);
    }
    my $answer = raw_answer($to, "$method $path HTTP/1.1\r\n"
        . "Host: 127.0.0.1\r\nConnection: close\r\nx-case: $case\r\n"
        . "traceparent: 00-$trace-$PARENT-01\r\n"
        . "tracestate: ts=1\r\nbaggage: k=v\r\n"
        . ($extra // '')
        . ($body ne '' && !$o{chunked}
           ? 'Content-Length: ' . length($body) . "\r\n" : '')
        . "\r\n$body");
    my ($code) = $answer =~ m{^HTTP/1\.\d (\d+)};
    return ($case, $trace, $code // 0);
}

sub log_line {
    log_case("$dir/sp.log", $_[0], qw(trace_id span_id baggage status
                                         snapshot));
}

# The headers of ours the upstream got for that case.
sub upstream_headers {
    my ($case) = @_;
    my ($r) = upstream_case($up, $case);
    return undef unless $r;
    return { map { $_ => join(',', @{ $r->{headers}{$_} // [] }) . '#'
                        . scalar(@{ $r->{headers}{$_} // [] }) }
             qw(traceparent tracestate baggage) };
}

sub attr { attribute($_[0]{attributes}, $_[1]) // '' }

# The request (method, path and request's options) made and its access
# log line read: ("what (METHOD)", case, trace, the code answered, the
# line, undef when none came).
sub logged {
    my ($what, $method, $path, %o) = @_;
    my ($case, $trace, $code) = request($method, $path, %o);
    $what = "$what ($method)";
    my $l = log_line($case);
    ok($l, "$what: logged");
    return ($what, $case, $trace, $code, $l);
}

# A request traced and sent upstream.
my @traced;
sub traced {
    my ($what, $method, $path, $route, $status, %o) = @_;
    my ($case, $trace, $code, $l);
    ($what, $case, $trace, $code, $l) = logged($what, $method, $path, %o);
    $l or return;
    is($code, $l->{status}, "$what: answered with the status logged");
    is($l->{status}, $status, "$what: status $status");
    is($l->{trace_id}, $trace, "$what: continues the client's trace");
    my $h = upstream_headers($case);
    ok($h, "$what: reached the upstream") or return;
    is($h->{traceparent}, "00-$trace-$l->{span_id}-01#1",
       "$what: one traceparent upstream, the entry span its parent");
    is($h->{tracestate}, 'ts=1#1', "$what: the tracestate received");
    like($l->{baggage}, qr/^k=v,(?:j=w,)?splunk\.trace\.snapshot\.volume=\w+$/,
         "$what: our baggage has the selection");
    is($h->{baggage}, "$l->{baggage}#1", "$what: upstream got our baggage");
    my ($s) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    ok($s, "$what: the span arrives") or return;
    is($s->{spanId}, $l->{span_id}, "$what: the span logged");
    is($s->{parentSpanId}, $PARENT, "$what: its parent the client's");
    is(attr($s, 'http.request.method'), $method,
       "$what: the method the client sent");
    is($s->{name}, "$method $route", "$what: named $method $route");
    is(attr($s, 'http.response.status_code'), $status,
       "$what: the status logged");
    is(attr($s, 'url.path'), $path =~ s/\?.*//r, "$what: url.path as sent");
    push @traced, [ $what, $trace ];
}

# A request traced whose final location does not propagate: the
# client's headers upstream.
sub quiet {
    my ($what, $method, $path, $route, $status, %o) = @_;
    my ($case, $trace, $code, $l);
    ($what, $case, $trace, $code, $l) = logged($what, $method, $path, %o);
    $l or return;
    is($l->{status}, $status, "$what: status $status");
    is_deeply(upstream_headers($case),
              { traceparent => "00-$trace-$PARENT-01#1",
                tracestate => 'ts=1#1', baggage => 'k=v#1' },
              "$what: the upstream got the client's headers as sent");
    my ($s) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    is($s && $s->{spanId}, $l->{span_id}, "$what: its span arrives");
    is($s && $s->{name}, "$method $route", "$what: named $method $route");
    push @traced, [ $what, $trace ];
}

# A request whose final location is off: nothing of ours.
my @off;
sub untraced {
    my ($what, $method, $path, %o) = @_;
    my ($case, $trace, $code, $l);
    ($what, $case, $trace, $code, $l) = logged($what, $method, $path, %o);
    $l or return;
    is_deeply([ @$l{qw(trace_id span_id baggage)} ], [ '-', '-', '-' ],
              "$what: variables empty");
    is_deeply(upstream_headers($case),
              { traceparent => "00-$trace-$PARENT-01#1",
                tracestate => 'ts=1#1', baggage => $o{baggage} // 'k=v#1' },
              "$what: the upstream got the client's headers as sent");
    push @off, [ $what, $trace ];
}

for my $method (qw(GET POST)) {
    traced('deny, error_page to a proxy', $method, '/deny/x?q=1', '/up',
           403);
    traced('deny, error_page to a named location', $method, '/denyn/x',
           '@up', 200);
    # the first of the minute with its method passes, the next are
    # refused
    traced('limit_req passes', $method, '/limited/p', '/limited', 200);
    traced('limit_req, error_page to a proxy', $method, '/limited/x',
           '/up', 503);
    traced('limit_req, error_page to a named location', $method,
           '/limitedn/x', '@up', 200);
    traced('return 404, error_page to a proxy', $method, '/gone/x', '/up',
           404);
    traced('return 404, error_page to a named location', $method,
           '/gonen/x', '@up', 200);
    traced('auth_request 401, error_page to a proxy', $method, '/a401/x',
           '/up', 401);
    traced('auth_request 403, error_page to a named location', $method,
           '/a403/x', '@up', 200);
    traced('try_files to a named location', $method, '/tried/x', '@up',
           200);
    traced('an upstream down (502), error_page to a named location',
           $method, '/dead/x', '@up', 200);
    traced('recursive_error_pages: 404, then 403, to a proxy', $method,
           '/chain/x', '/up', 403);
    traced('off where denied, error_page to a proxy', $method,
           '/offdeny/x', '/up', 403);
    untraced('deny, error_page to a proxy that is off', $method,
             '/denyoff/x');
    untraced('deny, error_page to a named location that is off', $method,
             '/denyoffn/x');
    traced('off where denied, error_page to a named location', $method,
           '/offdenyn/x', '@up', 200);
    traced('not propagating where denied, error_page to a proxy', $method,
           '/quietdeny/x', '/up', 403);
    quiet('deny, error_page to a proxy that does not propagate', $method,
          '/denyquiet/x', '/quietup', 403);
    traced('server off, deny, error_page to a location on', $method,
           '/deny/x', '/up', 403, port => $offport);
}

# recursive_error_pages through a location that is off and back, and
# through one that is on to one that is off; a baggage sent twice too
# (our headers then go in a copy of the list).
for my $extra ('', "baggage: j=w\r\n") {
    my $what = $extra ? ', a baggage repeated' : '';
    traced("recursive_error_pages: on, off, on$what", 'POST', '/chainoff/x',
           '/up', 403, extra => $extra);
    untraced("recursive_error_pages: on, on, off$what", 'POST',
             '/chainon/x', extra => $extra,
             baggage => $extra ? 'k=v,j=w#2' : 'k=v#1');
}

# Over HTTP/2.
for my $method (qw(GET POST)) {
    traced('HTTP/2: deny, error_page to a proxy', $method, '/deny/x',
           '/up', 403, h2 => 1);
    traced('HTTP/2: return 404, error_page to a named location', $method,
           '/gonen/x', '@up', 200, h2 => 1);
    untraced('HTTP/2: deny, error_page to a proxy that is off', $method,
             '/denyoff/x', h2 => 1);
    traced('HTTP/2: a body larger than the location takes', $method,
           '/big/x', '/up', 413, h2 => 1, body => '0123456789');
}

# A chunked body nginx refuses as it reads it for the upstream (400),
# then the server's error_page to a named location; one too large (413).
traced('a bad chunk, error_page to a named location', 'POST', '/chunked/x',
       '@up', 200, chunked => 1, extra => "Transfer-Encoding: chunked\r\n",
       body => "zz\r\nxx\r\n0\r\n\r\n");
traced('a chunked body too large, error_page to a proxy', 'POST', '/big/c',
       '/up', 413, chunked => 1, extra => "Transfer-Encoding: chunked\r\n",
       body => "a\r\n0123456789\r\n0\r\n\r\n");

# a body larger than the location takes
for my $method (qw(POST PUT)) {
    traced('client_max_body_size, error_page to a proxy', $method,
           '/big/x', '/up', 413, body => '0123456789');
    traced('client_max_body_size, error_page to a named location',
           $method, '/bign/x', '@up', 200, body => '0123456789');
}

# Refused while nginx read it: a header line without a colon (400) sent
# to a named location, headers too large (494) to one that is off.
traced('a bad header line, error_page to a named location', 'POST',
       '/index.html', '@up', 200, extra => "Bad Header Line\r\n");
traced('server off, a bad header line, error_page to a location on',
       'POST', '/index.html', '/up', 400, port => $offport,
       extra => "Bad Header Line\r\n");
untraced('headers too large, error_page to a proxy that is off', 'POST',
         '/index.html', extra => 'X-Big: ' . ('x' x 20000) . "\r\n");

# A refused request that the client's baggage selects, which error_page
# sends to a location with work to do (gzip at level 9): sampled as any
# selected request, its samples under its span's ids, taken while it was
# open.
{
    my ($case, $trace, $code) = request('GET', '/index.html',
        port => $bigport,
        extra => "Accept-Encoding: gzip\r\n"
                 . "baggage: splunk.trace.snapshot.volume=highest\r\n"
                 . "Bad Header Line\r\n");
    is($code, 200, 'refused, selected, error_page =200 to gzip: 200');
    my $l = log_line($case);
    is($l && $l->{snapshot}, 1, 'refused, selected: $spanprof_snapshot 1');
    my ($span) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    ok($span, 'refused, selected: its span arrives');
    sleep 1;    # a profile export interval and more
    my (undef, $samples) = $recv->collect;
    my ($in, $out) = (0, 0);
    for my $s (grep { ($_->{labels}{span_id} // '') eq
                      ($span ? $span->{spanId} : '-') } @$samples)
    {
        my $ms = $s->{labels}{'source.event.time'} // -1;
        $ms >= int($span->{startTimeUnixNano} / 1e6) - 1
            && $ms <= int($span->{endTimeUnixNano} / 1e6) + 1 ? $in++ : $out++;
    }
    cmp_ok($in, '>', 0, 'refused, selected: samples under its span\'s ids');
    is($out, 0, "refused, selected: every one ($in) taken while it was open");
}

# One span each for those traced, none for those that ended off, once
# the others have arrived.
for my $t (@traced) {
    my ($what, $trace) = @$t;
    is(scalar(grep { $_->{traceId} eq $trace } spans($recv)), 1,
       "$what: one span");
}
for my $o (@off) {
    my ($what, $trace) = @$o;
    is(scalar(grep { $_->{traceId} eq $trace } spans($recv)), 0,
       "$what: no span exported");
}

stop($nginx);
done_testing();
