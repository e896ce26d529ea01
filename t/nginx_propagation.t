#!/usr/bin/perl
# nginx: the entry span reaches every kind of upstream, and one client
# request is one entry span whatever nginx does with it. Real nginx with
# the module, recording HTTP, FastCGI, uwsgi and gRPC upstreams, the
# exporter the module starts and the independent OTLP receiver:
#   - proxy_pass, fastcgi_pass, uwsgi_pass, grpc_pass carry traceparent
#     (parent = the entry span), tracestate and baggage with no directive,
#     over HTTP/1.1 and HTTP/2;
#   - auth_request, mirror and SSI subrequests, try_files, error_page
#     and rewrite stay inside the entry span (one exported span each);
#   - spanprof_propagate off sends what the client sent; spanprof off
#     sends it too, exports nothing and leaves the variables empty; a
#     location can turn it on inside a server that is off;
#   - a client that goes away ends the span once (499).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir write_file read_file free_port nginx_conf
                        nginx_start stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case log_case upstream_case spans wait_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';
my $TP_RE = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my %up = map { $_ => Spanprof::Upstream->start(dir => $dir, proto => $_) }
         qw(http fastcgi uwsgi grpc);
my %at = map { $_ => '127.0.0.1:' . $up{$_}->port } keys %up;
my ($h2, $offport) = (free_port(), free_port());

mkdir "$dir/html";
chmod 0755, "$dir/html";
write_file("$dir/html/page.shtml",
           qq{before <!--# include virtual="/proxy/ssi" --> after\n});
chmod 0644, "$dir/html/page.shtml";

my $port = nginx_conf($dir,
    http => <<"HTTP",
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_traceparent|\$status';
    server {
        listen 127.0.0.1:$offport;
        spanprof off;
        access_log $dir/sp.log sp;
        location /proxy { proxy_pass http://$at{http}; }
        location /on { spanprof on; proxy_pass http://$at{http}; }
        location /onauth {
            spanprof on;
            auth_request /proxy/auth;
            proxy_pass http://$at{http};
        }
    }
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        location /proxy { proxy_pass http://$at{http}; }
        location /fcgi {
            include /etc/nginx/fastcgi_params;
            fastcgi_pass $at{fastcgi};
        }
        location /uwsgi {
            include /etc/nginx/uwsgi_params;
            uwsgi_pass $at{uwsgi};
        }
        location /grpc { grpc_pass grpc://$at{grpc}; }
        location /auth {
            auth_request /proxy/auth;
            proxy_pass http://$at{http};
        }
        location /mirror {
            mirror /proxy/mirror;
            proxy_pass http://$at{http};
        }
        location /page.shtml { root $dir/html; default_type text/html; ssi on; }
        location /tried { try_files /nothing/here \@named; }
        location \@named { proxy_pass http://$at{http}; }
        location /missing {
            error_page 404 = /proxy/from-error;
            return 404;
        }
        location /moved { rewrite ^ /proxy/rewritten last; }
        location /quiet {
            spanprof_propagate off;
            proxy_pass http://$at{http};
        }
        location /off { spanprof off; proxy_pass http://$at{http}; }
        location /offauth {
            spanprof off;
            auth_request /proxy/auth;
            proxy_pass http://$at{http};
        }
        location /slow { proxy_pass http://$at{http}; }
SERVER
);

my $nginx = nginx_start($dir, $port,
    SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
    OTEL_EXPORTER_OTLP_ENDPOINT      => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY          => '100');
ok($nginx, 'nginx starts') or BAIL_OUT(read_file("$dir/error.log"));

my $traces = 0;

# A request with its own incoming trace id; returns (case, trace id, body,
# HTTP code).
sub request {
    my (%o) = @_;
    my $trace = sprintf '%032x', 0xabc000 + ++$traces;
    my ($case, $code, $body) = curl_case(%o,
        headers => [ [ traceparent => "00-$trace-$PARENT-01" ],
                     @{ $o{headers} // [] } ],
        url => sprintf('http://127.0.0.1:%d%s',
                       $o{port} // ($o{h2} ? $h2 : $port), $o{path}));
    return ($case, $trace, $body, $code);
}

sub log_line {
    log_case("$dir/sp.log", $_[0], qw(trace_id span_id traceparent status));
}

# What the upstream of $proto received for case $case, in arrival order.
sub received { upstream_case($up{ $_[0] }, $_[1], $_[2]) }

# Every exported span of a trace, once the exporter had time to send it.
sub spans_of {
    my ($trace, $n) = @_;
    return wait_spans($recv, sub { $_[0]{traceId} eq $trace }, $n);
}

# ---- every upstream kind, HTTP/1.1 and HTTP/2

my @kinds = (
    [ http    => '/proxy/x' ],
    [ fastcgi => '/fcgi/x' ],
    [ uwsgi   => '/uwsgi/x' ],
    [ grpc    => '/grpc/x' ],
);
my @tracked;
for my $h2 (0, 1) {
    for my $k (@kinds) {
        my ($proto, $path) = @$k;
        my $what = ($h2 ? 'HTTP/2' : 'HTTP/1.1') . " $proto";
        my @extra = $proto eq 'grpc'
                  ? ([ 'content-type' => 'application/grpc' ]) : ();
        my ($case, $trace, undef, $code) = request(
            h2 => $h2, path => $path,
            headers => [ [ tracestate => 'vendor=opaque' ],
                         [ baggage => 'user=alice' ], @extra ]);
        is($code, 200, "$what: answered");
        my $l = log_line($case);
        my ($r) = received($proto, $case);
        ok($r, "$what: the upstream got the request") or next;
        is_deeply($r->{headers}{traceparent}, [ $l->{traceparent} ],
                  "$what: traceparent is the entry span's");
        my ($t, $s) = $l->{traceparent} =~ $TP_RE;
        is($t, $trace, "$what: same trace");
        isnt($s, $PARENT, "$what: parent is the entry span");
        is_deeply($r->{headers}{tracestate}, [ 'vendor=opaque' ],
                  "$what: tracestate");
        like($r->{headers}{baggage}[0] // '',
             qr/^user=alice,splunk\.trace\.snapshot\.volume=(highest|off)$/,
             "$what: baggage with the volume");
        push @tracked, [ $what, $trace, $s ];
    }
}

# ---- subrequests and redirects stay inside the entry span

# auth_request: the subrequest runs in the access phase, before the
# content handler; it must already send the entry span as parent.
{
    my ($case, $trace) = request(path => '/auth/x');
    my $l = log_line($case);
    my @r = received('http', $case, 2);
    is(scalar @r, 2, 'auth_request: the auth subrequest and the request');
    is_deeply([ sort map { $_->{uri} } @r ], [ '/auth/x', '/proxy/auth' ],
              'auth_request: both went upstream');
    is_deeply([ map { $_->{headers}{traceparent}[0] } @r ],
              [ ($l->{traceparent}) x 2 ],
              'auth_request: both carry the entry span');
    push @tracked, [ 'auth_request', $trace ];
}
{
    my ($case, $trace) = request(path => '/mirror/x');
    my $l = log_line($case);
    my @r = received('http', $case, 2);
    is_deeply([ sort map { $_->{uri} } @r ], [ '/mirror/x', '/proxy/mirror' ],
              'mirror: the mirror subrequest and the request went upstream');
    is_deeply([ map { $_->{headers}{traceparent}[0] } @r ],
              [ ($l->{traceparent}) x 2 ],
              'mirror: both carry the entry span');
    push @tracked, [ 'mirror', $trace ];
}
{
    my ($case, $trace, $body) = request(path => '/page.shtml');
    like($body, qr/^before upstream http\n after/, 'SSI: the include ran');
    my $l = log_line($case);
    my ($r) = received('http', $case);
    is($r && $r->{uri}, '/proxy/ssi', 'SSI: the subrequest went upstream');
    is($r && $r->{headers}{traceparent}[0], $l->{traceparent},
       'SSI: it carries the entry span');
    push @tracked, [ 'SSI', $trace ];
}
for my $c ([ 'try_files' => '/tried/x', '/tried/x', '@named' ],
           [ 'error_page' => '/missing/x', '/proxy/from-error', '/proxy' ],
           [ 'rewrite' => '/moved/x', '/proxy/rewritten', '/proxy' ])
{
    my ($what, $path, $uri, $route) = @$c;
    my ($case, $trace, undef, $code) = request(path => $path);
    is($code, 200, "$what: answered");
    my $l = log_line($case);
    my ($r) = received('http', $case);
    is($r && $r->{uri}, $uri, "$what: went upstream as $uri");
    is($r && $r->{headers}{traceparent}[0], $l->{traceparent},
       "$what: carries the entry span");
    my ($s) = spans_of($trace);
    is($s && $s->{name}, "GET $route", "$what: the span is named after "
                                       . 'the location that answered');
    is($s && attribute($s->{attributes}, 'url.path'), $path,
       "$what: url.path is the path the client asked for");
    push @tracked, [ $what, $trace ];
}

# ---- off and not propagating

{
    my ($case, $trace) = request(path => '/quiet/x',
        headers => [ [ tracestate => 'a=1' ], [ baggage => 'k=v' ],
                     [ baggage => 'j=w' ] ]);
    my ($r) = received('http', $case);
    is_deeply([ @{ $r->{headers} }{qw(traceparent tracestate baggage)} ],
              [ [ "00-$trace-$PARENT-01" ], [ 'a=1' ], [ 'k=v', 'j=w' ] ],
              'spanprof_propagate off: the headers as the client sent them');
    is(scalar spans_of($trace), 1, 'spanprof_propagate off: still traced');
}
my @off;
{
    my ($case, $trace) = request(path => '/off/x',
                                 headers => [ [ tracestate => 'a=1' ] ]);
    my ($r) = received('http', $case);
    is_deeply([ @{ $r->{headers} }{qw(traceparent tracestate baggage)} ],
              [ [ "00-$trace-$PARENT-01" ], [ 'a=1' ], undef ],
              'spanprof off in a location: the headers as sent');
    my $l = log_line($case);
    is_deeply([ @$l{qw(trace_id span_id traceparent)} ], [ '-', '-', '-' ],
              'spanprof off in a location: variables empty');
    push @off, [ 'spanprof off in a location', $trace ];

    # its access phase already has the headers as sent
    ($case, $trace) = request(path => '/offauth/x');
    my @r = received('http', $case, 2);
    is_deeply([ map { $_->{headers}{traceparent}[0] } @r ],
              [ ("00-$trace-$PARENT-01") x 2 ],
              'spanprof off in a location: its auth_request subrequest '
              . 'and the request carry the traceparent as sent');
    push @off, [ 'spanprof off in a location with auth_request', $trace ];
}
{
    my ($case, $trace) = request(port => $offport, path => '/proxy/x');
    my ($r) = received('http', $case);
    is($r && $r->{headers}{traceparent}[0], "00-$trace-$PARENT-01",
       'spanprof off in a server: the traceparent as sent');
    push @off, [ 'spanprof off in a server', $trace ];

    ($case, $trace) = request(port => $offport, path => '/on/x');
    my $l = log_line($case);
    ($r) = received('http', $case);
    ok($r && $r->{headers}{traceparent}[0] eq $l->{traceparent}
       && $l->{trace_id} eq $trace,
       'spanprof on in a location of a server that is off: propagates');
    push @tracked, [ 'spanprof on inside an off server', $trace ];

    # before the access phase: the auth_request subrequest has the entry
    # span as parent too
    ($case, $trace) = request(port => $offport, path => '/onauth/x');
    $l = log_line($case);
    my @r = received('http', $case, 2);
    is(scalar @r, 2, 'spanprof on inside an off server, auth_request: '
                     . 'the subrequest and the request went upstream');
    is_deeply([ map { $_->{headers}{traceparent}[0] } @r ],
              [ ($l->{traceparent}) x 2 ],
              'spanprof on inside an off server, auth_request: both carry '
              . 'the entry span');
    push @tracked, [ 'spanprof on inside an off server, auth_request',
                     $trace ];
}

# ---- a client that goes away

my ($gone_case, $gone_trace) = request(path => '/slow/x', timeout => 1);
ok(received('http', $gone_case), 'the slow request reached the upstream');

# ---- one exported span per client request

for my $t (@tracked) {
    my ($what, $trace, $span) = @$t;
    my @s = spans_of($trace);
    is(scalar @s, 1, "$what: one entry span exported");
    is($s[0]{spanId}, $span, "$what: the span upstreams saw as parent")
        if $span && @s;
    is($s[0]{parentSpanId}, $PARENT, "$what: child of the client's span")
        if @s;
}
my ($gone) = spans_of($gone_trace);
is($gone && attribute($gone->{attributes}, 'http.response.status_code'), 499,
   'client gone: the span ends with 499');
sleep 1;    # a second end would have been exported by now
is(scalar(grep { $_->{traceId} eq $gone_trace } spans($recv)), 1,
   'client gone: the span ends once');
for my $o (@off) {
    is(scalar(grep { $_->{traceId} eq $o->[1] } spans($recv)), 0,
       "$o->[0]: nothing exported");
}

stop($nginx);
unlike(read_file("$dir/error.log"), qr/\[(alert|emerg|crit)\]/,
       'no alert in the error log');

done_testing();
