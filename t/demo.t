#!/usr/bin/perl
# make demo end to end, minus deps and build (tools/demo.sh --no-build):
# the reference topology of deploy/local.sh (nginx -> httpd -> backend,
# the compose deployment's templates) exporting over OTLP/gRPC to the
# independent receiver, mixed traffic, stop, and the report.
#
# What the receiver decoded (grpc-js, otlp-transformer, pprof-format: none
# of it ours) is the reference: every trace with samples there got a
# flame graph whose path was printed and which holds exactly that trace's
# samples; a /cpu trace's graph shows nginx's gzip work (deflate), a /slow
# one httpd waiting inside mod_proxy; the trace context reached the
# backend with httpd's span under nginx's; nothing is left running.
# (This replaces t/deploy_local.t, which ran the same topology.)

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use JSON::PP ();

use Spanprof::Server qw(top_dir new_dir free_port read_file);
use Spanprof::Receiver;

my $top = top_dir();
my $build = $ENV{SPANPROF_BUILD} // "$top/build";
plan skip_all => 'not built (make build)'
    unless -x "$build/spanprof-dump" && -x "$build/spanprof-exporter"
        && -f "$build/mod_spanprof.so"
        && -f "$build/ngx_http_spanprof_module.so";
Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir() . '/demo';
my %port = map { $_ => free_port() }
    qw(NGINX_PORT HTTPD_PORT BACKEND_PORT RECEIVER_PORT);

my $out = do {
    local %ENV = (%ENV, %port);
    `$top/tools/demo.sh --no-build --dir $dir --seconds 6 2>&1`;
};
is($?, 0, 'tools/demo.sh --no-build runs to the end') or diag($out);
like($out, qr/^sent (\d+) requests, 0 failed$/m, 'no request failed');
like($out, qr/^nothing left running/m, 'it says nothing is left');

# --- nothing left: checked here, not only by the demo itself
my @left;
for my $line (split /\n/, read_file("$dir/run/started.pids")) {
    my ($pid, $start, $args) = split ' ', $line, 3;
    my $stat = read_file("/proc/$pid/stat");
    $stat =~ s/^.*\)\s+//s;
    my @f = split ' ', $stat;
    push @left, "$pid $args" if @f && $f[19] eq $start && $f[0] ne 'Z';
}
ok(read_file("$dir/run/started.pids") =~ /nginx: worker process/
   && read_file("$dir/run/started.pids") =~ /spanprof-exporter: httpd/,
   'the demo recorded the servers\' processes, exporters included');
for my $line (`ps -eo pid=,stat=,args=`) {
    my ($pid, $stat, $args) = $line =~ /^\s*(\d+)\s+(\S+)\s+(.*)$/ or next;
    next if $pid == $$ || $stat =~ /^Z/;
    push @left, "$pid $args"
        if index($args, "$dir/") >= 0
        || index($args, ":$port{BACKEND_PORT}") >= 0;
    my $env = read_file("/proc/$pid/environ");
    push @left, "$pid $args (environment)" if index($env, "$dir/") >= 0;
}
is_deeply(\@left, [], 'ps: no process of the demo is left');

# --- what the receiver decoded
my $json = JSON::PP->new;
my (%samples, %spans, %nginx_samples);
for my $line (split /\n/, read_file("$dir/out/receiver.jsonl")) {
    my $r = $json->decode($line);
    for my $rl (@{ $r->{request}{resourceLogs} // [] }) {
        my $svc = Spanprof::Receiver::attribute(
            $rl->{resource}{attributes}, 'service.name');
        for my $rec (map { @{ $_->{logRecords} } } @{ $rl->{scopeLogs} }) {
            for my $s (@{ $rec->{pprof}{resolved}{samples} // [] }) {
                my $t = $s->{labels}{trace_id} // next;
                $samples{$t} += $s->{values}[0];
                $nginx_samples{$t} += $s->{values}[0]
                    if $svc eq 'spanprof-demo-nginx';
            }
        }
    }
    for my $rs (@{ $r->{request}{resourceSpans} // [] }) {
        my $svc = Spanprof::Receiver::attribute(
            $rs->{resource}{attributes}, 'service.name');
        for my $span (map { @{ $_->{spans} } } @{ $rs->{scopeSpans} }) {
            my %a = map { $_ => Spanprof::Receiver::attribute(
                              $span->{attributes}, $_) }
                    qw(url.path user_agent.original
                       splunk.snapshot.profiling);
            $spans{ $span->{traceId} }{$svc} = { %$span, attr => \%a };
        }
    }
}
my @profiled = sort keys %samples;
ok(@profiled >= 4, scalar(@profiled) . ' traces profiled') or diag($out);
my @unselected = grep {
    !grep { my $v = $_->{attr}{'splunk.snapshot.profiling'};
            $v && $v ne 'false' } values %{ $spans{$_} // {} }
} @profiled;
is_deeply(\@unselected, [], 'only selected traces have samples');

sub path_of {
    my ($t) = @_;
    return ($spans{$t}{'spanprof-demo-nginx'}{attr}{'url.path'} // '?',
            $spans{$t}{'spanprof-demo-nginx'}{attr}{'user_agent.original'}
                // '');
}

# Baggage-selected /cpu and /slow requests take long enough to be sampled.
my %by_path;
for my $t (keys %spans) {
    my ($path, $ua) = path_of($t);
    push @{ $by_path{$path} }, $t;
    next unless $ua =~ /baggage/ && $path =~ m{^/(cpu|slow)$};
    ok($samples{$t}, "the baggage-selected $path trace $t was profiled");
}
ok(grep({ (path_of($_))[0] eq '/cpu' } @profiled), 'a /cpu trace profiled');
ok(grep({ (path_of($_))[0] eq '/slow' } @profiled),
   'a /slow trace profiled');

# --- the printed flame graphs: one per profiled trace, with its samples
my %svg = $out =~ m{^  flame graph: (\S+/\d\d-([0-9a-f]{32})\.svg)$}mg;
%svg = reverse %svg;
is_deeply([sort keys %svg], \@profiled,
          'a flame graph path printed for each profiled trace');
for my $t (@profiled) {
    my ($path) = path_of($t);
    my $svg = read_file($svg{$t} // '');
    my ($all) = $svg =~ /<title>all \((\d+) samples/;
    is($all, $samples{$t}, "$path $t: the flame graph holds the trace's "
                           . "$samples{$t} samples");
    my @frames = $svg =~ /<title>([^<(]+?) \(\d+ samples/g;
    my %has = map { $_ => 1 } @frames;
    if ($path eq '/cpu') {
        ok($nginx_samples{$t} && $has{deflate},
           "$path $t: nginx's gzip work (deflate, "
           . ($nginx_samples{$t} // 0) . ' nginx samples)');
    } elsif ($path eq '/slow') {
        ok($has{proxy_run_scheme_handler} && $has{apr_wait_for_io_or_timeout},
           "$path $t: httpd waiting inside mod_proxy");
    } else {
        ok(grep({ /^(ngx_|ap_)/ } @frames),
           "$path $t: the servers' request work");
    }
}

# --- every other path it printed exists
my @printed = $out =~ m{(/\S+\.(?:svg|jsonl))}g;
ok(@printed > @profiled, 'it prints the paths of its files');
ok(!grep({ !-s $_ } @printed), 'and they exist') or diag(
    join "\n", grep { !-s $_ } @printed);

# --- the trace context through both servers to the backend
my ($trace, $parent) = $out =~
    /the backend received traceparent: 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/m;
like($out, qr/the backend received baggage: splunk\.trace\.snapshot\.volume=highest$/m,
     'the backend got the baggage unchanged');
my $nginx = $spans{$trace // ''}{'spanprof-demo-nginx'} // {};
my $httpd = $spans{$trace // ''}{'spanprof-demo-httpd'} // {};
ok($nginx->{spanId} && !$nginx->{parentSpanId}, "nginx's span is the root");
is($httpd->{parentSpanId}, $nginx->{spanId}, "httpd's is its child");
is($parent, $httpd->{spanId}, 'and the parent the backend was given');
like($out, qr/^ +spanprof-demo-nginx  GET [^\n]*\n +spanprof-demo-httpd  GET /m,
     'the report shows httpd\'s span under nginx\'s');

done_testing();
