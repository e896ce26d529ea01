#!/usr/bin/perl
# httpd: requests that leave the straight path on their way to a mod_proxy
# backend, each with an incoming traceparent, tracestate and baggage:
#   - an ErrorDocument proxied to the backend after a 404, a 403 of
#     Require, a 413 of LimitRequestBody, mod_rewrite's [F] and [R=404],
#     and after a POST (httpd makes the ErrorDocument's request a GET);
#   - mod_rewrite's [P] and [R=302]; ProxyErrorOverride with that
#     ErrorDocument (two backend requests); mod_proxy_balancer failing
#     over from a dead member; an SSI page including a page that includes
#     a proxied path; mod_dir's DirectoryIndex of a proxied path (its fast
#     redirect takes that path's scope);
#   - a vhost that is off whose ErrorDocument is on.
# Where the final scope is on, every backend request gets exactly one
# traceparent whose parent is the exported entry span, the tracestate
# received and the baggage with the volume appended; the span has the
# client's method, the name of the route it ended in, the status of the
# access log (%>s) and the path as sent. Where the final scope is off
# (README: it decides), the same flows export no span and the backend gets
# the headers as the client sent them.
# A selected request whose first scope is off and whose ErrorDocument is
# on is sampled while that waits for its backend: the first request's
# fixups stopped the sampling, and nothing started it again (0 samples
# of an exported, selected span, 200 with an on scope).
# A request httpd refuses while reading it (400) is not here: mod_proxy
# fails to send its ErrorDocument (AH01095, reading the body).
# Real apache2 (event MPM), a recording upstream, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file free_port httpd_conf
                        httpd_start stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(log_case upstream_case spans wait_spans);
use Spanprof::HeaderMatrix qw(selected_by_id $IN_PARENT $VOLUME);

Spanprof::Receiver::skip_unless_ready(curl => 1,
    apache_modules => [qw(include rewrite proxy_balancer)]);

my $PROBABILITY = 0.1;    # the largest
my $INTERVAL = 10;        # ms, the snapshot sampling's
my $WAIT = 2;             # s, a slow ErrorDocument's backend

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir);
my $back = 'http://127.0.0.1:' . $up->port;
# Nothing listens there: each balancer's first member, tried first (lbset
# 0), fails, and the request goes on to the backend.
my $dead = 'http://127.0.0.1:' . free_port();
my $dead_off = 'http://127.0.0.1:' . free_port();

my $vhost = free_port();
my $port = httpd_conf($dir,
    modules => [qw(include rewrite proxy proxy_http proxy_balancer
                   lbmethod_byrequests slotmem_shm)],
    extra => <<"EXTRA");
LogFormat "%{x-case}i|%{SPANPROF_TRACE_ID}e|%{SPANPROF_SPAN_ID}e|%>s" sp
CustomLog $dir/sp.log sp
<Directory $dir/htdocs>
    Options +Includes
    AddOutputFilter INCLUDES .shtml
</Directory>
<Proxy balancer://pair>
    BalancerMember $dead lbset=0
    BalancerMember $back lbset=1
</Proxy>
<Proxy balancer://pair-off>
    BalancerMember $dead_off lbset=0
    BalancerMember $back lbset=1
</Proxy>
ProxyPass /offdoc $back/offdoc
ProxyPass /errdoc $back/errdoc
ProxyPass /back $back/back
ProxyPass /bal-off balancer://pair-off/bal-off
ProxyPass /bal balancer://pair/bal
ProxyPass /poe-off $back/poe-off
ProxyPass /poe $back/poe
RewriteEngine On
RewriteRule ^/rw/forbidden - [F]
RewriteRule ^/rw/gone - [R=404]
RewriteRule ^/rw/moved /index.html [R=302]
RewriteRule ^/rw/proxy/(.*) $back/p/\$1 [P]
RewriteRule ^/ozone/rw/forbidden - [F]
RewriteRule ^/ozone/rw/gone - [R=404]
RewriteRule ^/rwp-off/(.*) $back/rwp-off/\$1 [P]
ErrorDocument 404 /errdoc/status404
<Location /slowon>
    ErrorDocument 404 /errdoc/slow$WAIT
</Location>
ErrorDocument 403 /errdoc/status403
ErrorDocument 413 /errdoc/status413
<Location /denied>
    Require all denied
</Location>
<Location /small.txt>
    LimitRequestBody 4
</Location>
<Location /poe>
    ProxyErrorOverride On
</Location>
<Location /offdoc>
    Spanprof Off
</Location>
<Location /ozone>
    ErrorDocument 404 /offdoc/status404
    ErrorDocument 403 /offdoc/status403
    ErrorDocument 413 /offdoc/status413
</Location>
<Location /ozone/denied>
    Require all denied
</Location>
<Location /ozone/small.txt>
    LimitRequestBody 4
</Location>
<Location /poe-off>
    ProxyErrorOverride On
    ErrorDocument 404 /offdoc/status404
</Location>
<Location /rwp-off>
    Spanprof Off
</Location>
<Location /bal-off>
    Spanprof Off
</Location>
<Directory $dir/htdocs/dix>
    DirectoryIndex /back/dix
</Directory>
<Directory $dir/htdocs/dix-off>
    DirectoryIndex /dindex-off/x
</Directory>
<Directory $dir/htdocs/dioff>
    DirectoryIndex /back/dioff
</Directory>
<Location /dioff>
    Spanprof Off
</Location>
<Location /dindex-off>
    Spanprof Off
</Location>
ProxyPass /dindex-off $back/dindex-off
Listen 127.0.0.1:$vhost
<VirtualHost 127.0.0.1:$vhost>
    Spanprof Off
    ErrorDocument 404 /ondoc/status404
    <Location /slowoff>
        ErrorDocument 404 /ondoc/slow$WAIT
    </Location>
    <Location /ondoc>
        Spanprof On
    </Location>
    ProxyPass /offdoc $back/offdoc
    ProxyPass /ondoc $back/ondoc
</VirtualHost>
EXTRA
for (qw(ozone dix dix-off dioff)) {
    mkdir "$dir/htdocs/$_";
    chmod 0755, "$dir/htdocs/$_";
}
write_file("$dir/htdocs/$_", "small file\n") for qw(small.txt ozone/small.txt);
write_file("$dir/htdocs/outer.shtml",
           "<!--#include virtual=\"/inner.shtml\" -->\n");
write_file("$dir/htdocs/inner.shtml",
           "<!--#include virtual=\"/back/nested\" -->\n");
chmod 0644, glob("$dir/htdocs/*.* $dir/htdocs/ozone/*");

my $httpd = httpd_start($dir, $port,
    $recv->snapshot_env(interval => $INTERVAL, export_interval => '200'),
    SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY);
ok($httpd, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));

my $case = 0;

# $method $path (with $body, if any) with the trace headers of a trace of
# its own; (trace id, case, HTTP code). $o{port}: another than $port;
# $o{baggage}: another than k=v.
sub request {
    my ($method, $path, $body, %o) = @_;
    my $to = $o{port} // $port;
    my $trace;

    # Odd cases selected by their id, even ones not (SPEC 3's rule).
    $case++;
    $trace = sprintf 'e770f%019x%08x', $case,
                     $case % 2 ? $case : 0x0fffff00 + $case;
    my @cmd = ('curl', '-s', '-m', 10, '-o', '/dev/null',
               '-w', '%{http_code}', '-X', $method, '-H', "x-case: $case",
               '-H', "traceparent: 00-$trace-$IN_PARENT-01",
               '-H', 'tracestate: vendor=opaque',
               '-H', 'baggage: ' . ($o{baggage} // 'k=v'));
    my $fh;

    push @cmd, '--data-binary', $body if defined $body;
    open $fh, '-|', @cmd, "http://127.0.0.1:$to$path" or die "curl: $!";
    my $code = <$fh> // 0;
    close $fh;
    return ($trace, $case, $code);
}

# [what, method, path, body, HTTP code, span name, backend requests,
#  request's options]
my @on = (
    [ 'a vhost that is off, 404 to an ErrorDocument that is on', 'GET',
      '/missing', undef, 404, 'GET /ondoc', 1, port => $vhost ],
    [ '404 to the ErrorDocument', 'GET', '/missing', undef, 404,
      'GET proxy-server', 1 ],
    [ 'Require all denied to the ErrorDocument', 'GET', '/denied/x', undef,
      403, 'GET proxy-server', 1 ],
    [ 'LimitRequestBody to the ErrorDocument', 'POST', '/small.txt',
      'more than four bytes', 413, 'POST proxy-server', 1 ],
    [ 'a POST 404 to the ErrorDocument', 'POST', '/missing', 'a=1', 404,
      'POST proxy-server', 1 ],
    [ 'RewriteRule [F] to the ErrorDocument', 'GET', '/rw/forbidden', undef,
      403, 'GET proxy-server', 1 ],
    [ 'RewriteRule [R=404] to the ErrorDocument', 'GET', '/rw/gone', undef,
      404, 'GET proxy-server', 1 ],
    [ 'RewriteRule [P]', 'GET', '/rw/proxy/x', undef, 200,
      'GET proxy-server', 1 ],
    [ 'ProxyErrorOverride to the ErrorDocument', 'GET', '/poe/status404',
      undef, 404, 'GET proxy-server', 2 ],
    [ 'balancer failover', 'GET', '/bal/x', undef, 200, 'GET proxy-server',
      1 ],
    [ 'nested SSI includes', 'GET', '/outer.shtml', undef, 200, 'GET', 1 ],
    [ 'RewriteRule [R=302]', 'GET', '/rw/moved', undef, 302, 'GET', 0 ],
    [ 'DirectoryIndex of a proxied path', 'GET', '/dix/', undef, 200,
      'GET proxy-server', 1 ],
    [ 'DirectoryIndex of a directory that is off, to a proxied path', 'GET',
      '/dioff/', undef, 200, 'GET proxy-server', 1 ],
);

for my $c (@on) {
    my ($what, $method, $path, $body, $status, $name, $n, %o) = @$c;
    my ($trace, $cs, $code) = request($method, $path, $body, %o);
    is($code, $status, "$what: answered $status");
    my $l = log_case("$dir/sp.log", $cs, qw(trace_id span_id status));
    my @got = upstream_case($up, $cs, $n);
    is(scalar @got, $n, "$what: the backend got $n request(s)");
    my @span = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    is(scalar @span, 1, "$what: one span exported") or next;
    my $span = $span[0];
    is($l && $l->{span_id}, $span->{spanId},
       "$what: the access log has its span id");
    my $v = selected_by_id($trace, $PROBABILITY) ? 'highest' : 'off';
    for my $i (0 .. $#got) {
        my $h = $got[$i]{headers};
        is_deeply([ @$h{qw(traceparent tracestate baggage)} ],
                  [ [ "00-$trace-$span->{spanId}-01" ], [ 'vendor=opaque' ],
                    [ "k=v,$VOLUME=$v" ] ],
                  "$what: backend request $i: one traceparent, parent the "
                  . 'span; the tracestate; the baggage and volume');
    }
    is($span->{name}, $name, "$what: the span's name");
    is(attribute($span->{attributes}, 'http.request.method'), $method,
       "$what: the client's method");
    is(attribute($span->{attributes}, 'http.response.status_code'),
       $l && $l->{status}, "$what: the status logged (%>s)");
    is($l && $l->{status}, $status, "$what: the status logged is $status");
    is(attribute($span->{attributes}, 'url.path'), $path,
       "$what: url.path as sent");
}

# [what, method, path, body, HTTP code, backend requests, request's
#  options]
my @off = (

    [ '404 to an ErrorDocument that is off', 'GET', '/ozone/missing', undef,
      404, 1 ],
    [ 'Require all denied to an ErrorDocument that is off', 'GET',
      '/ozone/denied/x', undef, 403, 1 ],
    [ 'LimitRequestBody to an ErrorDocument that is off', 'POST',
      '/ozone/small.txt', 'more than four bytes', 413, 1 ],
    [ 'a POST 404 to an ErrorDocument that is off', 'POST', '/ozone/missing',
      'a=1', 404, 1 ],
    [ 'RewriteRule [F] to an ErrorDocument that is off', 'GET',
      '/ozone/rw/forbidden', undef, 403, 1 ],
    [ 'RewriteRule [R=404] to an ErrorDocument that is off', 'GET',
      '/ozone/rw/gone', undef, 404, 1 ],
    [ 'RewriteRule [P] to a scope that is off', 'GET', '/rwp-off/x', undef,
      200, 1 ],
    [ 'balancer failover in a scope that is off', 'GET', '/bal-off/x',
      undef, 200, 1 ],
    [ 'DirectoryIndex of a proxied path that is off', 'GET', '/dix-off/',
      undef, 200, 1 ],
    [ 'ProxyErrorOverride to an ErrorDocument that is off', 'GET',
      '/poe-off/status404', undef, 404, 2, first => 1 ],
);

my @off_traces;
for my $c (@off) {
    my ($what, $method, $path, $body, $status, $n, %o) = @$c;
    my ($trace, $cs, $code) = request($method, $path, $body, %o);
    my $from = $o{first} // 0;
    push @off_traces, [ $what, $trace ];
    is($code, $status, "$what: answered $status");
    my $l = log_case("$dir/sp.log", $cs, qw(trace_id span_id status));
    is($l && $l->{trace_id}, '-', "$what: no SPANPROF_TRACE_ID logged");
    my @got = upstream_case($up, $cs, $n);
    is(scalar @got, $n, "$what: the backend got $n request(s)");
    # Not covered: the first backend request of a ProxyErrorOverride whose
    # ErrorDocument ends where it is off was sent before that scope was
    # known, with ours (the parent of a span that is not exported).
    for my $i ($from .. $#got) {
        my $h = $got[$i]{headers};
        is_deeply([ @$h{qw(traceparent tracestate baggage)} ],
                  [ [ "00-$trace-$IN_PARENT-01" ], [ 'vendor=opaque' ],
                    [ 'k=v' ] ],
                  "$what: backend request $i: the headers as the client "
                  . 'sent them');
    }
}
# The spans before them have arrived; theirs would have.
sleep 1;
my %traced = map { $_->{traceId} => 1 } spans($recv);
for (@off_traces) {
    ok(!$traced{ $_->[1] }, "$_->[0]: no span exported");
}

# A selected request whose ErrorDocument waits for its backend is sampled
# meanwhile, also where the scope of its first request is off (a vhost
# that is off) and the ErrorDocument's, the final one, is on.
for my $which (qw(on off)) {
    my $what = "a selected 404 in a scope that is $which, to a slow "
               . 'ErrorDocument that is on';
    my ($trace, undef, $code) = request('GET', "/slow$which/x", undef,
        baggage => "$VOLUME=highest",
        port => $which eq 'on' ? $port : $vhost);
    is($code, 200, "$what: answered by the backend");
    my ($span) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    ok($span, "$what: its span arrives") or next;
    is(attribute($span->{attributes}, 'splunk.snapshot.profiling'), 1,
       "$what: selected");
    sleep 1;        # the samples of the last export interval
    my (undef, $samples) = $recv->collect;
    my $got = grep { ($_->{labels}{span_id} // '') eq $span->{spanId} }
              @$samples;
    cmp_ok($got, '>=', $WAIT * 1000 / $INTERVAL / 4,
           "$what: sampled while the backend waits ($got samples)");
}

stop($httpd);
my @bad = grep { /\[(?:\w+:)?(?:alert|crit|emerg)\]|exit signal/ }
          split /\n/, read_file("$dir/error.log");
is(join("\n", @bad), '', 'no alert or crash in the error log');

done_testing();
