#!/usr/bin/perl
# httpd: the entry span reaches mod_proxy's FastCGI (mod_proxy_fcgi) and
# AJP (mod_proxy_ajp) backends, with no directive (SPEC 2 and 3). Real
# apache2 (event MPM) with the module, recording FastCGI and AJP13 backends
# (t/bin/upstream.pl), the exporter the module starts and the independent
# OTLP receiver. For each backend kind:
#   - traceparent with the exported entry span as parent, the received
#     tracestate, the received baggage plus splunk.trace.snapshot.volume
#     decided by SPEC 3's trace-id rule;
#   - a received volume goes on unchanged, and selects the span;
#   - no incoming context: a new trace, the volume by the rule, no
#     tracestate;
#   - `Spanprof Off` in the <Location>: the headers as the client sent them,
#     no span; also where an internal redirect (ErrorDocument) from a
#     scope that is on ends there (before, the backend got the entry
#     span's traceparent, the parent of a span never exported).
# HTTP backends (mod_proxy_http) are t/httpd_trace.t's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case log_case upstream_case spans wait_spans);
use Spanprof::HeaderMatrix qw(selected_by_id volume_of $IN_TRACE $IN_PARENT
                               $VOLUME);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PROBABILITY = 0.1;
my $TP_RE = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/;
my $mods = '/usr/lib/apache2/modules';

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my %up = map { $_ => Spanprof::Upstream->start(dir => $dir, proto => $_) }
         qw(fastcgi ajp);
my %url = (fastcgi => 'fcgi://127.0.0.1:' . $up{fastcgi}->port . '/',
           ajp     => 'ajp://127.0.0.1:' . $up{ajp}->port . '/');

my $port = httpd_conf($dir, modules => [qw(proxy proxy_fcgi proxy_ajp)],
                      extra => <<"EXTRA");
LogFormat "%{x-case}i|%{SPANPROF_TRACE_ID}e|%{SPANPROF_SPAN_ID}e|%{SPANPROF_TRACEPARENT}e|%{SPANPROF_BAGGAGE}e|%s" sp
CustomLog $dir/sp.log sp
ProxyPass /fcgi/off $url{fastcgi}
ProxyPass /ajp/off $url{ajp}
ProxyPass /fcgi $url{fastcgi}
ProxyPass /ajp $url{ajp}
<Location /fcgi/off>
    Spanprof Off
</Location>
<Location /ajp/off>
    Spanprof Off
</Location>
<Location /gone-fastcgi>
    ErrorDocument 404 /fcgi/off/gone
</Location>
<Location /gone-ajp>
    ErrorDocument 404 /ajp/off/gone
</Location>
EXTRA

my $httpd = httpd_start($dir, $port,
    SPLUNK_SNAPSHOT_PROFILER_ENABLED      => 'true',
    SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY,
    OTEL_EXPORTER_OTLP_ENDPOINT           => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY               => '100');
ok($httpd, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));

# One request; returns its code, its access log line and what the backend
# got (headers, or undef).
sub request {
    my ($kind, $path, @headers) = @_;
    my ($case, $code) = curl_case(url => "http://127.0.0.1:$port$path",
                                  headers => \@headers);
    my $l = log_case("$dir/sp.log", $case,
                     qw(trace_id span_id traceparent baggage status));
    my ($r) = upstream_case($up{$kind}, $case);
    return ($code, $l, $r && $r->{headers});
}

my $what;

# The backend's traceparent is the entry span's; the span is exported with
# that id; returns the span.
sub check_parent {
    my ($l, $got, $trace) = @_;
    is_deeply($got->{traceparent}, [ $l->{traceparent} ],
              "$what: the backend's traceparent is the entry span's");
    my ($t, $s) = ($got->{traceparent}[0] // '') =~ $TP_RE;
    if (defined $trace) {
        is($t, $trace, "$what: the same trace");
    } else {
        ok($t && $t ne $IN_TRACE, "$what: a new trace");
    }
    is($s, $l->{span_id}, "$what: parent = the entry span");
    my ($span) = wait_spans($recv, sub { $_[0]{spanId} eq ($s // '') });
    ok($span, "$what: the entry span with that id is exported") or return;
    is($span->{traceId}, $t, "$what: in that trace");
    is($span->{parentSpanId} // '', defined $trace ? $IN_PARENT : '',
       "$what: the span's own parent");
    return $span;
}

for my $kind (qw(fastcgi ajp)) {
    my $path = $kind eq 'fastcgi' ? '/fcgi' : '/ajp';

    $what = "$kind: traceparent, tracestate, baggage";
    my ($code, $l, $got) = request($kind, "$path/x",
        [ traceparent => "00-$IN_TRACE-$IN_PARENT-01" ],
        [ tracestate => 'vendor=opaque' ], [ baggage => 'user=alice' ]);
    is($code, 200, "$what: answered by the backend");
    ok($got, "$what: the backend got the request") or next;
    check_parent($l, $got, $IN_TRACE);
    is_deeply($got->{tracestate}, [ 'vendor=opaque' ],
              "$what: the tracestate as received");
    my $v = selected_by_id($IN_TRACE, $PROBABILITY) ? 'highest' : 'off';
    is_deeply($got->{baggage}, [ "user=alice,$VOLUME=$v" ],
              "$what: the baggage with the volume by the trace id ($v)");

    $what = "$kind: a received volume";
    ($code, $l, $got) = request($kind, "$path/x",
        [ baggage => "$VOLUME=highest,k=v" ]);
    ok($got, "$what: the backend got the request") or next;
    is_deeply($got->{baggage}, [ "$VOLUME=highest,k=v" ],
              "$what: the baggage goes on unchanged");
    my $span = check_parent($l, $got, undef);
    is($span && attribute($span->{attributes}, 'splunk.snapshot.profiling'),
       1, "$what: selects the span");

    $what = "$kind: no incoming context";
    ($code, $l, $got) = request($kind, "$path/x");
    ok($got, "$what: the backend got the request") or next;
    $span = check_parent($l, $got, undef);
    my ($t) = ($got->{traceparent}[0] // '') =~ $TP_RE;
    $v = $t && selected_by_id($t, $PROBABILITY) ? 'highest' : 'off';
    is_deeply($got->{baggage}, [ "$VOLUME=$v" ],
              "$what: the volume by the new trace id ($v)");
    ok(!exists $got->{tracestate}, "$what: no tracestate");
    is($span && attribute($span->{attributes}, 'http.response.status_code'),
       200, "$what: the span's status code");

    $what = "$kind: Spanprof Off";
    my $off = sprintf '%032x', 0xbad0 + length $kind;
    ($code, $l, $got) = request($kind, "$path/off/x",
        [ traceparent => "00-$off-$IN_PARENT-01" ], [ tracestate => 'a=1' ]);
    ok($got, "$what: the backend got the request") or next;
    is_deeply([ @$got{qw(traceparent tracestate baggage)} ],
              [ [ "00-$off-$IN_PARENT-01" ], [ 'a=1' ], undef ],
              "$what: the headers as the client sent them");
    is($l && $l->{trace_id}, '-', "$what: no SPANPROF_TRACE_ID");
    sleep 0.5;    # the spans before it have arrived; this one would have
    is(scalar(grep { $_->{traceId} eq $off } spans($recv)), 0,
       "$what: no span exported");

    $what = "$kind: Spanprof Off after an ErrorDocument redirect";
    my $gone = sprintf '%032x', 0x90e0 + length $kind;
    ($code, $l, $got) = request($kind, "/gone-$kind/x",
        [ traceparent => "00-$gone-$IN_PARENT-01" ], [ tracestate => 'a=1' ],
        [ baggage => 'k=v' ]);
    ok($got, "$what: the backend got the ErrorDocument's request") or next;
    is_deeply([ @$got{qw(traceparent tracestate baggage)} ],
              [ [ "00-$gone-$IN_PARENT-01" ], [ 'a=1' ], [ 'k=v' ] ],
              "$what: the headers as the client sent them");
    is($l && $l->{trace_id}, '-', "$what: no SPANPROF_TRACE_ID");
    sleep 0.5;
    is(scalar(grep { $_->{traceId} eq $gone } spans($recv)), 0,
       "$what: no span exported");
}

stop($httpd);
my $errors = join "\n", grep { /:(error|crit|alert|emerg)\]/ }
    split /\n/, read_file("$dir/error.log");
is($errors, '', 'nothing above warn in the error log');

done_testing();
