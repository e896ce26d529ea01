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
use Spanprof::Cases qw(curl_case log_case upstream_case wait_spans);
use Spanprof::HeaderMatrix qw(cases check_case check_unexported
                               check_selection
                               check_samples_in_spans);

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;
plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

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

# One request through curl; returns its case id (to find its access log
# line and what the upstream got) and HTTP code.
sub request {
    my (%o) = @_;
    my ($case, $code) = curl_case(%o,
        url => sprintf('http://127.0.0.1:%d%s', $o{h2} ? $h2 : $port,
                       $o{path} // '/proxy'));
    return ($case, $code);
}

sub log_line {
    log_case("$dir/sp.log", $_[0],
             qw(trace_id span_id snapshot traceparent baggage status));
}

sub upstream_got {
    my ($r) = upstream_case($up, $_[0]);
    return $r && $r->{headers};
}

sub span_of {
    my ($span_id) = @_;
    my ($s) = wait_spans($recv, sub { $_[0]{spanId} eq $span_id });
    return $s;
}

# ---- the matrix of incoming headers (Spanprof::HeaderMatrix)

my @check;
for my $h2 (0, 1) {
    my $proto = $h2 ? 'HTTP/2' : 'HTTP/1.1';
    for my $c (cases()) {
        my ($case, $code) = request(h2 => $h2, headers => $c->{headers},
                                    path => $c->{path});
        push @check, { %$c, case => $case, code => $code, h2 => $h2,
                       what => "$proto, $c->{name}" };
    }
}

for my $c (@check) {
    my $proxied = ($c->{path} // '/proxy') =~ m{^/proxy};
    check_case($c, log => log_line($c->{case}), proxied => $proxied,
               upstream => $proxied ? upstream_got($c->{case}) : undef,
               span => \&span_of, route => $proxied ? '/proxy' : '/fail',
               port => $c->{h2} ? $h2 : $port, probability => $PROBABILITY);
}
check_unexported($recv, @check);

# ---- selection through nginx: highest, off, and random trace ids

check_selection(probability => $PROBABILITY, log_of => sub {
    my ($case) = request(headers => $_[0]);
    return log_line($case);
});

stop($nginx);
check_samples_in_spans($recv);
my $log = read_file("$dir/error.log");
unlike($log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error log');

done_testing();
