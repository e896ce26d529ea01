#!/usr/bin/perl
# Sampling at a 1 ms interval inside real servers under load, both
# profilers on: no request fails and nothing is logged at warn or above
# (README, "Sampling and EINTR": nginx treats an interrupted epoll_wait as
# a wakeup and logs it at info only; APR retries its socket waits).
# Continuous samples arrive from the workers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file free_port
                        httpd_conf spawn wait_for_port stop text_file
                        gzip_location deflate_location);
use Spanprof::Receiver;

Spanprof::Receiver::skip_unless_ready(curl => 1);

my %ENVS = (
    SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
    SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '1',
    SPLUNK_PROFILER_ENABLED => 'true',
    SPLUNK_PROFILER_CALL_STACK_INTERVAL => '1',
    SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
    OTEL_BSP_SCHEDULE_DELAY => '200',
);

# 40 requests at a time, half selected: returns the failures.
sub load {
    my ($url) = @_;
    my @cmd;
    for my $i (1 .. 40) {
        my $b = $i % 2 ? 'highest' : 'off';
        push @cmd, "curl -s -o /dev/null -w '%{http_code}\\n' -m 20 "
            . "-H 'Accept-Encoding: gzip' "
            . "-H 'baggage: splunk.trace.snapshot.volume=$b' $url &";
    }
    my $out = `(@cmd wait) 2>&1`;
    my @codes = split /\n/, $out;
    return (scalar(@codes), scalar(grep { $_ ne '200' } @codes));
}

sub sources {
    my ($recv) = @_;
    my %src;
    for my $req ($recv->requests) {
        next unless $req->{signal} eq 'logs';
        for my $rl (@{ $req->{request}{resourceLogs} // [] }) {
            for my $sl (@{ $rl->{scopeLogs} // [] }) {
                for my $lr (@{ $sl->{logRecords} // [] }) {
                    for my $a (@{ $lr->{attributes} // [] }) {
                        $src{ $a->{value}{stringValue} }++
                            if $a->{key} eq 'profiling.instrumentation.source';
                    }
                }
            }
        }
    }
    return \%src;
}

sub above_info {
    my ($log, $re) = @_;
    return join "\n", grep { $_ =~ $re } split /\n/, $log;
}

# --- nginx
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = free_port();
    my $big = gzip_location($dir, lines => 25000);
    my $module = top_dir() . '/build/ngx_http_spanprof_module.so';
    write_file("$dir/nginx.conf", <<"CONF");
load_module $module;
daemon off;
worker_processes 2;
error_log $dir/error.log info;
pid $dir/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$port;
        $big
    }
}
CONF
    my $master = spawn({ %ENVS, OTEL_EXPORTER_OTLP_ENDPOINT =>
                             'http://127.0.0.1:' . $recv->port },
                       "$dir/stderr.log", '/usr/sbin/nginx', '-p', $dir,
                       '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
    ok(wait_for_port($port), 'nginx listens');
    my ($n, $failed) = (0, 0);
    for (1 .. 5) {
        my ($a, $b) = load("http://127.0.0.1:$port/big");
        $n += $a; $failed += $b;
    }
    is($n, 200, 'nginx: 200 requests answered');
    is($failed, 0, 'nginx: none failed');
    my $end = time + 10;
    my $src = {};
    while (time < $end) {
        $src = sources($recv);
        last if $src->{continuous} && $src->{snapshot};
        sleep 0.2;
    }
    ok($src->{continuous}, 'nginx: continuous profiles arrived');
    ok($src->{snapshot}, 'nginx: snapshot profiles arrived');
    stop($master);
    my $log = read_file("$dir/error.log");
    is(above_info($log, qr/\[(warn|error|crit|alert|emerg)\]/), '',
       'nginx: nothing logged at warn or above');
    my $eintr = () = $log =~ /Interrupted system call/g;
    diag("nginx: $eintr interrupted epoll_wait logged at info");
    $recv->stop;
}

# --- httpd, worker MPM
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $mods = '/usr/lib/apache2/modules';
    text_file("$dir/htdocs.big", 25000);
    my $port = httpd_conf($dir, mpm => 'worker', extra => <<"EXTRA");
LoadModule deflate_module $mods/mod_deflate.so
LoadModule filter_module $mods/mod_filter.so
LoadModule alias_module $mods/mod_alias.so
LogLevel info
${\ deflate_location($dir, file => "$dir/htdocs.big") }
EXTRA
    my $parent = spawn({ %ENVS, OTEL_EXPORTER_OTLP_ENDPOINT =>
                             'http://127.0.0.1:' . $recv->port },
                       "$dir/stderr.log", '/usr/sbin/apache2', '-f',
                       "$dir/httpd.conf", '-DFOREGROUND');
    ok(wait_for_port($port), 'httpd listens');
    my ($n, $failed) = (0, 0);
    for (1 .. 5) {
        my ($a, $b) = load("http://127.0.0.1:$port/big");
        $n += $a; $failed += $b;
    }
    is($n, 200, 'httpd: 200 requests answered');
    is($failed, 0, 'httpd: none failed');
    my $end = time + 10;
    my $src = {};
    while (time < $end) {
        $src = sources($recv);
        last if $src->{snapshot};
        sleep 0.2;
    }
    ok($src->{snapshot}, 'httpd: snapshot profiles arrived');
    stop($parent);
    my $log = read_file("$dir/error.log");
    is(above_info($log, qr/:(warn|error|crit|alert|emerg)\]/), '',
       'httpd: nothing logged at warn or above');
    $recv->stop;
}

done_testing();
