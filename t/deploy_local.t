#!/usr/bin/perl
# The reference deployment's topology on this machine (deploy/local.sh:
# the same nginx and httpd templates as the compose images, the demo
# backend): nginx -> httpd -> backend with both modules exporting to the
# console. Requests through nginx reach the backend carrying the trace;
# httpd's entry span is the child of nginx's; a selected CPU-heavy request
# is profiled in nginx with the frames of its gzip work; spanprof-dump
# shows the trace as nginx's span over httpd's; stop leaves nothing
# running.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use IO::Socket::INET;

use Spanprof::Server qw(top_dir new_dir free_port read_file);

my $top = top_dir();
my $build = $ENV{SPANPROF_BUILD} // "$top/build";
plan skip_all => 'not built (make build)'
    unless -x "$build/spanprof-dump" && -f "$build/mod_spanprof.so"
        && -f "$build/ngx_http_spanprof_module.so";

my $dir = new_dir();
my %port = (NGINX_PORT => free_port(), HTTPD_PORT => free_port(),
            BACKEND_PORT => free_port());
my %env = (%port,
           SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
           SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '1',
           OTEL_TRACES_EXPORTER => 'console',
           OTEL_LOGS_EXPORTER => 'console',
           OTEL_BSP_SCHEDULE_DELAY => '200',
           SPLUNK_PROFILER_EXPORT_INTERVAL => '200');

sub local_sh {
    my ($cmd) = @_;
    local %ENV = (%ENV, %env);
    my $out = `$top/deploy/local.sh $cmd $dir 2>&1`;
    return ($? >> 8, $out);
}

# A GET through nginx (HTTP/1.1: nginx compresses for 1.1 only); returns
# (status, body, head).
sub get {
    my ($path, @headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $port{NGINX_PORT},
                                  Proto => 'tcp', Timeout => 30)
        or return (0, '', '');
    print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n"
             . "Connection: close\r\n", map({ "$_\r\n" } @headers), "\r\n";
    local $/;
    my $resp = <$s> // '';
    close $s;
    my ($status) = $resp =~ m{^HTTP/1\.\d (\d+)};
    my ($head, $body) = split /\r\n\r\n/, $resp, 2;
    return ($status // 0, $body // '', $head // '');
}

my ($rc, $out) = local_sh('start');
is($rc, 0, 'deploy/local.sh start') or diag($out);
like($out, qr/nginx 127\.0\.0\.1:$port{NGINX_PORT} -> httpd/,
     'says what runs where');

my $selected = 'baggage: splunk.trace.snapshot.volume=highest';
my ($st, $body) = get('/', $selected);
is($st, 200, 'GET / through nginx and httpd');
my ($trace, $parent) = $body =~ /^traceparent: 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/m;
ok($trace, 'the backend got a traceparent') or diag($body);
like($body, qr/^baggage: splunk\.trace\.snapshot\.volume=highest$/m,
     'and the baggage, unchanged');
($st, $body) = get('/slow?ms=50', $selected);
is($st, 200, 'GET /slow');
is($body, "slept 50 ms\n", 'the backend slept');
my $gzipped = 0;
for (1 .. 3) {
    my $head;
    ($st, $body, $head) = get('/cpu?kb=2048', $selected,
                              'Accept-Encoding: gzip');
    $gzipped++ if $st == 200 && $head =~ /^Content-Encoding: gzip/mi;
}
is($gzipped, 3, 'GET /cpu, compressed by nginx');

($rc, $out) = local_sh('stop');
is($rc, 0, 'deploy/local.sh stop') or diag($out);
ok(!glob("$dir/run/*.pid"), 'no pid file left');
my @left;
for my $cmdline (glob '/proc/[0-9]*/cmdline') {
    my ($pid) = $cmdline =~ m{/proc/(\d+)/};
    next if $pid == $$;
    open my $fh, '<', $cmdline or next;
    my $cmd = do { local $/; <$fh> } // '';
    push @left, "$pid: $cmd" if index($cmd, "$dir/run") >= 0
                              || index($cmd, ":$port{BACKEND_PORT}") >= 0;
}
is_deeply(\@left, [], 'no process of the deployment is left');

my $nginx = "$dir/out/nginx.jsonl";
my $httpd = "$dir/out/httpd.jsonl";
ok(-s $nginx && -s $httpd, 'both exporters wrote OTLP/JSON lines')
    or diag(read_file("$dir/log/nginx-error.log"),
            read_file("$dir/log/httpd-error.log"));

# The trace of GET /: nginx's span, httpd's under it, which is the parent
# the backend was given.
my $dump = "$build/spanprof-dump";
my %tree;
for my $svc (qw(nginx httpd)) {
    my $json = read_file($svc eq 'nginx' ? $nginx : $httpd);
    my ($span) = $json =~ /"traceId":"$trace","spanId":"([0-9a-f]{16})"/;
    my ($p) = $json =~ /"traceId":"$trace","spanId":"[0-9a-f]{16}","parentSpanId":"([0-9a-f]{16})"/;
    $tree{$svc} = { span => $span, parent => $p };
}
ok($tree{nginx}{span}, 'nginx exported the span of GET /');
ok(!$tree{nginx}{parent}, 'a root span');
is($tree{httpd}{parent}, $tree{nginx}{span},
   'httpd\'s span is the child of nginx\'s');
is($parent, $tree{httpd}{span}, 'and the parent the backend was given');

# spanprof-dump over both files: every selected request is a trace with
# samples; the /cpu ones show nginx's gzip work.
my @traces = `$dump --list $nginx $httpd` =~ /^trace ([0-9a-f]{32})/mg;
ok(@traces >= 3, 'spanprof-dump lists the profiled traces')
    or diag(scalar `$dump --list $nginx $httpd 2>&1`);
my $deflate = 0;
for my $t (@traces) {
    my $f = `$dump --folded --service=spanprof-demo-nginx --trace=$t $nginx`;
    $deflate++ if $f =~ /(^|;)deflate(;| )/m;
}
ok($deflate >= 1, "nginx's profile of a /cpu trace holds deflate "
                  . "($deflate of " . @traces . ' traces)');
my $tree_out = `$dump --list --spans --trace=$traces[0] $nginx $httpd`;
like($tree_out, qr/^  spanprof-demo-nginx  GET [^\n]*\n    spanprof-demo-httpd  GET /m,
     '--spans shows httpd\'s span under nginx\'s') or diag($tree_out);
my $svg = "$dir/trace.svg";
system($dump, '--by-service', "--svg=$svg", "--trace=$traces[0]",
       $nginx, $httpd);
like(read_file($svg), qr/<title>spanprof-demo-nginx \(\d+ samples/,
     'a flame graph of the trace, nginx\'s stacks under its service');

done_testing();
