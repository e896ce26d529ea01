#!/usr/bin/perl
# nginx entry spans, header by header: real nginx with the module over HTTP/1.1
# and HTTP/2 (h2c), a recording HTTP upstream behind proxy_pass, the
# exporter the module starts, and the independent OTLP receiver. For each
# case of incoming trace headers: what the upstream receives, what the
# $spanprof_* variables log, and the exported span (ids, parent, name,
# attributes, status). Then snapshot selection through nginx: highest,
# off, and the trace-id rule on random ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Upstream;
use Spanprof::HeaderMatrix qw(run_matrix check_samples_in_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PROBABILITY = 0.1;    # the highest SPEC 1 allows

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $h2 = free_port();
my $upstream = '127.0.0.1:' . $up->port;

my $port = nginx_conf($dir,
    http => <<"HTTP",
    large_client_header_buffers 4 32k;
    log_format sp '\$http_x_case|\$spanprof_trace_id|\$spanprof_span_id|'
                  '\$spanprof_snapshot|\$spanprof_traceparent|'
                  '\$spanprof_baggage|\$status';
HTTP
    server => <<"SERVER",
        listen 127.0.0.1:$h2 http2;
        access_log $dir/sp.log sp;
        location /proxy { proxy_pass http://$upstream; }
        location /fail { return 503; }
SERVER
);

my %env = (
    SPLUNK_SNAPSHOT_PROFILER_ENABLED      => 'true',
    SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY,
    OTEL_EXPORTER_OTLP_ENDPOINT           => 'http://127.0.0.1:' . $recv->port,
    OTEL_BSP_SCHEDULE_DELAY               => '100',
    SPLUNK_PROFILER_EXPORT_INTERVAL       => '200',
);
my $nginx = nginx_start($dir, $port, %env);
ok($nginx, 'nginx starts with the module') or BAIL_OUT(read_file("$dir/error.log"));

run_matrix(recv => $recv, up => $up, log => "$dir/sp.log", server => 'nginx',
           port_of => sub { $_[0] ? $h2 : $port },
           route_of => sub { $_[0] ? '/proxy' : '/fail' },
           probability => $PROBABILITY);

stop($nginx);
check_samples_in_spans($recv);
my $log = read_file("$dir/error.log");
unlike($log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error log');

done_testing();
