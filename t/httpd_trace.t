#!/usr/bin/perl
# httpd end to end, under each MPM: real apache2 with the module, a
# mod_proxy backend (a vhost of the same server with spanprof off that
# echoes the trace headers it received), the exporter started by the
# module, and the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file free_port
                        httpd_conf spawn wait_for_port stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $IN_TRACE = '0af7651916cd43dd8448eb211c80319c';
my $IN_PARENT = 'b7ad6b7169203331';
my $TP = qr/^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/;
my $mods = '/usr/lib/apache2/modules';

sub curl { my $o = `curl -s -m 10 @_ 2>&1`; return $o }

sub exporters {
    my ($parent) = @_;
    return map { (split ' ', $_)[0] }
        grep { /^\s*\d+\s+$parent\s+spanprof-exporter/ }
        split /\n/, `ps -eo pid=,ppid=,args=`;
}

# Alive and not a zombie.
sub running {
    my ($pid) = @_;
    my ($state) = read_file("/proc/$pid/stat") =~ /\) ([A-Z])/;
    return defined $state && $state ne 'Z';
}

sub run_mpm {
    my ($mpm) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $slow = Spanprof::Upstream->start(dir => $dir, proto => 'http');
    my $slow_port = $slow->port;
    my $back = free_port();
    write_file("$dir/big.txt", join('', map { "line $_ of a text httpd "
                                              . "deflates at level 9\n" } 1 .. 60000));
    chmod 0644, "$dir/big.txt";
    my $port = httpd_conf($dir, mpm => $mpm, extra => <<"EXTRA");
LoadModule proxy_module $mods/mod_proxy.so
LoadModule proxy_http_module $mods/mod_proxy_http.so
LoadModule headers_module $mods/mod_headers.so
LoadModule deflate_module $mods/mod_deflate.so
LoadModule filter_module $mods/mod_filter.so
LoadModule alias_module $mods/mod_alias.so
Listen 127.0.0.1:$back
LogFormat "%{SPANPROF_TRACE_ID}e %{SPANPROF_SPAN_ID}e %{SPANPROF_SNAPSHOT}e" sp
CustomLog $dir/access.log sp
ProxyPass /proxy http://127.0.0.1:$back/echo
ProxyPass /slow http://127.0.0.1:$slow_port/slow
<Location /slow>
    Header set X-Trace "%{SPANPROF_TRACE_ID}e"
</Location>
Alias /big $dir/big.txt
DeflateCompressionLevel 9
<Location /big>
    SetOutputFilter DEFLATE
    Header set X-Trace "%{SPANPROF_TRACE_ID}e"
</Location>
<Location /off>
    Spanprof Off
</Location>
ProxyPass /off http://127.0.0.1:$back/echo
<Directory $dir>
    Require all granted
</Directory>
<VirtualHost 127.0.0.1:$back>
    Spanprof Off
    Header always set X-Got-Traceparent "expr=%{req:traceparent}"
    Header always set X-Got-Tracestate "expr=%{req:tracestate}"
    Header always set X-Got-Baggage "expr=%{req:baggage}"
    Alias /echo $dir/htdocs/index.html
</VirtualHost>
EXTRA
    my %env = (
        $recv->snapshot_env(schedule_delay => '200'),
        OTEL_SERVICE_NAME => 'origin',
    );
    my $parent = spawn(\%env, "$dir/stderr.log", '/usr/sbin/apache2',
                       '-f', "$dir/httpd.conf", '-DFOREGROUND');
    ok(wait_for_port($port), "$mpm: httpd listens")
        or return diag(read_file("$dir/error.log") . read_file("$dir/stderr.log"));

    my $hd = curl('-D', '-', '-o', '/dev/null',
                  '-H', quotemeta("traceparent: 00-$IN_TRACE-$IN_PARENT-01"),
                  '-H', "'tracestate: rojo=1'", '-H', "'baggage: a=1'",
                  "http://127.0.0.1:$port/proxy");
    my ($got) = $hd =~ /^X-Got-Traceparent: (\S*)/mi;
    my ($t, $s, $f) = ($got // '') =~ $TP;
    is($t, $IN_TRACE, "$mpm: the backend gets the trace");
    isnt($s // $IN_PARENT, $IN_PARENT, "$mpm: with our span as parent");
    like($hd, qr/^X-Got-Tracestate: rojo=1\r?$/mi, "$mpm: and the tracestate");
    like($hd, qr/^X-Got-Baggage: a=1,splunk\.trace\.snapshot\.volume=(off|highest)\r?$/mi,
         "$mpm: and the baggage with the selection");
    my $bad = curl('-D', '-', '-o', '/dev/null', '-H', "'traceparent: 00-zz'",
                   '-H', "'tracestate: rojo=1'", "http://127.0.0.1:$port/proxy");
    ($got) = $bad =~ /^X-Got-Traceparent: (\S*)/mi;
    my ($bt) = ($got // '') =~ $TP;
    ok($bt && $bt ne $IN_TRACE, "$mpm: invalid traceparent: a new trace");
    like($bad, qr/^X-Got-Tracestate: \(null\)\r?$|^(?!.*X-Got-Tracestate: rojo)/mis,
         "$mpm: invalid traceparent: tracestate dropped");
    my $off = curl('-D', '-', '-o', '/dev/null', "http://127.0.0.1:$port/off");
    unlike($off, qr/^X-Got-Traceparent: 00-/mi, "$mpm: Spanprof Off adds nothing");

    my @heavy;
    for (1 .. 5) {
        my $h = curl('-D', '-', '-o', '/dev/null', '-H', "'Accept-Encoding: gzip'",
                     '-H', "'baggage: splunk.trace.snapshot.volume=highest'",
                     "http://127.0.0.1:$port/big");
        push @heavy, $1 if $h =~ /^X-Trace: ([0-9a-f]{32})/mi;
    }
    is(scalar @heavy, 5, "$mpm: heavy requests answered with their ids");
    # Concurrent selected and unselected requests: each selected request's
    # samples come from one thread, and no unselected one has samples.
    my (@sel, @unsel);
    {
        my @cmd;
        for my $i (1 .. 12) {
            my $v = $i % 2 ? 'highest' : 'off';
            push @cmd, "curl -s -D - -o /dev/null -H 'Accept-Encoding: gzip' "
                . "-H 'baggage: splunk.trace.snapshot.volume=$v' "
                . "http://127.0.0.1:$port/big | sed 's/^/$v /' &";
        }
        for (split /\n/, `(@cmd wait) 2>&1`) {
            push @sel, $1 if /^highest X-Trace: ([0-9a-f]{32})/i;
            push @unsel, $1 if /^off X-Trace: ([0-9a-f]{32})/i;
        }
    }
    is(scalar @sel + scalar @unsel, 12, "$mpm: concurrent requests answered");
    push @heavy, @sel;
    # A backend that answers after 3 s: the request's thread waits in
    # mod_proxy, and wall-clock sampling shows it blocked there.
    my $sh = curl('-D', '-', '-o', '/dev/null',
                  '-H', "'baggage: splunk.trace.snapshot.volume=highest'",
                  "http://127.0.0.1:$port/slow");
    my ($slow_id) = $sh =~ /^X-Trace: ([0-9a-f]{32})/mi;

    my ($spans, $samples);
    my %heavy = map { $_ => 1 } @heavy;
    my $end = time + 15;
    while (time < $end) {
        ($spans, $samples) = $recv->collect;
        my $n = grep { $heavy{ $_->{labels}{trace_id} // '' } } @$samples;
        my $w = grep { ($_->{labels}{trace_id} // '') eq ($slow_id // 'x') } @$samples;
        last if $n >= 5 && $w >= 100
            && (grep { $_->{traceId} eq $IN_TRACE } @$spans);
        sleep 0.2;
    }
    my ($span) = grep { $_->{traceId} eq $IN_TRACE && $_->{spanId} eq ($s // '') } @$spans;
    ok($span, "$mpm: the proxied request's span arrived");
    is($span && $span->{parentSpanId}, $IN_PARENT, "$mpm: with its remote parent");
    is($span && attribute($span->{attributes}, 'http.response.status_code'), 200,
       "$mpm: status code");
    is($span && attribute($span->{attributes}, 'url.path'), '/proxy', "$mpm: url.path");
    is($span && attribute($span->{resource}{attributes},
                          'process.executable.name'),
       'apache2', "$mpm: resource process.executable.name is the server's");
    my @mine = grep { $heavy{ $_->{labels}{trace_id} // '' } } @$samples;
    ok(@mine >= 5, "$mpm: samples under the heavy requests' ids")
        or diag(scalar(@$samples) . ' samples');
    ok((grep { grep { ($_->{function} // '') eq 'deflate' } @{ $_->{frames} } } @mine),
       "$mpm: zlib's deflate in their stacks");
    my %threads;
    for my $smp (@$samples) {
        my $id = $smp->{labels}{trace_id} // next;
        $threads{$id}{ $smp->{labels}{'thread.os.id'} // '' } = 1;
    }
    ok((grep { $threads{$_} } @sel) >= 3,
       "$mpm: the concurrent selected requests were sampled");
    is((grep { keys %{ $threads{$_} // {} } > 1 } @sel), 0,
       "$mpm: each concurrent selected request sampled on one thread only");
    is((grep { $threads{$_} } @unsel), 0,
       "$mpm: no sample carries an unselected request's ids");
    my @waiting = grep { ($_->{labels}{trace_id} // '') eq ($slow_id // 'x') } @$samples;
    ok(@waiting >= 100, "$mpm: the slow request was sampled while it waited")
        or diag(scalar(@waiting) . ' samples');
    my @blocked = grep { ($_->{labels}{'thread.state'} // '') eq 'blocked' } @waiting;
    ok(@blocked >= @waiting / 2, "$mpm: mostly blocked");
    ok((grep { grep { ($_->{mapping} // '') =~ /mod_proxy/ } @{ $_->{frames} } } @blocked),
       "$mpm: blocked inside mod_proxy");
    my $log = read_file("$dir/access.log");
    like($log, qr/^$IN_TRACE [0-9a-f]{16} [01]$/m,
         "$mpm: SPANPROF_* variables for LogFormat");

    my @e = exporters($parent);
    is(scalar @e, 1, "$mpm: one exporter, a child of the parent");
    kill 'USR1', $parent;                         # graceful restart
    sleep 2;
    my @after = exporters($parent);
    is(scalar @after, 1, "$mpm: graceful restart: one exporter");
    isnt($after[0] // 0, $e[0] // 0, "$mpm: graceful restart: replaced");
    kill 'KILL', $after[0] if @after;
    my @again;
    $end = time + 5;
    while (time < $end) {
        @again = grep { $_ != ($after[0] // 0) } exporters($parent);
        last if @again;
        sleep 0.1;
    }
    is(scalar @again, 1, "$mpm: kill -9: a new exporter starts");
    stop($parent);
    # It flushes first (at most the export timeout); a zombie is gone.
    my @left;
    $end = time + 15;
    while (time < $end) {
        @left = grep { running($_) } @again;
        last unless @left;
        sleep 0.1;
    }
    is(scalar @left, 0, "$mpm: stop: the exporter is gone");
    my $errors = join "\n", grep { /:(error|crit|alert|emerg)\]/ }
        split /\n/, read_file("$dir/error.log");
    is($errors, '', "$mpm: nothing above warn in the error log");
    diag(read_file("$dir/error.log")) if $ENV{SPANPROF_TEST_DEBUG};
    $recv->stop;
    $slow->stop;
}

run_mpm($_) for split /,/, ($ENV{SPANPROF_MPMS} // "event,worker,prefork");
done_testing();
