#!/usr/bin/perl
# "Off means off", on nginx and on httpd: with both profilers off (tracing
# still on), and with the module loaded but turned off by its directive,
# no server process has a POSIX timer that delivers SIGPROF, none has a
# SIGPROF handler installed, and the receiver gets no profiling data. The
# same server with the profilers on is the control: there the timer, the
# handler and the profiles are present, so each check can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file free_port
                        spawn wait_for_port stop);
use Spanprof::Receiver;

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;
plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

use constant SIGPROF => 27;

my $mods = '/usr/lib/apache2/modules';

# The server's processes: the master or parent and its children, without
# the exporter (a separate program, never a sampler).
sub server_pids {
    my ($master) = @_;
    my @pids = ($master);
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $text = read_file($stat) // next;
        my ($pid, $ppid) = $text =~ /^(\d+) \(.*\) \S (\d+)/s or next;
        next unless $ppid == $master;
        my $cmd = read_file("/proc/$pid/cmdline") // '';
        next if $cmd =~ /spanprof-exporter/;
        push @pids, $pid;
    }
    return @pids;
}

# How many of the process's POSIX timers signal SIGPROF.
sub sigprof_timers {
    my ($pid) = @_;
    my $text = read_file("/proc/$pid/timers") // '';
    my $n = () = $text =~ /^signal:\s+${\ SIGPROF}\//mg;
    return $n;
}

# Whether the process has a SIGPROF handler (SigCgt, a hex mask).
sub sigprof_caught {
    my ($pid) = @_;
    my ($mask) = (read_file("/proc/$pid/status") // '') =~ /^SigCgt:\s+(\S+)/m;
    return 0 unless defined $mask;
    my $low = hex substr($mask, -8);
    return ($low >> (SIGPROF - 1)) & 1;
}

sub signals {
    my ($recv) = @_;
    my %n = (traces => 0, logs => 0);
    $n{ $_->{signal} }++ for $recv->requests;
    return \%n;
}

sub wait_until {
    my ($cond, $timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.1;
    }
    return $cond->();
}

sub heavy_requests {
    my ($port) = @_;
    for (1 .. 4) {
        system('curl', '-s', '-m', '20', '-o', '/dev/null',
               '-H', 'Accept-Encoding: gzip',
               '-H', 'baggage: splunk.trace.snapshot.volume=highest',
               "http://127.0.0.1:$port/big");
    }
}

sub big_file {
    my ($path) = @_;
    write_file($path, join('', map { "line $_ of a text compressed at "
                                     . "level 9\n" } 1 .. 60000));
    chmod 0644, $path;
}

sub nginx_server {
    my ($dir, $scope) = @_;
    my $port = free_port();
    my $module = top_dir() . '/build/ngx_http_spanprof_module.so';
    big_file("$dir/big.txt");
    write_file("$dir/nginx.conf", <<"CONF");
load_module $module;
daemon off;
worker_processes 2;
error_log $dir/error.log notice;
pid $dir/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    $scope
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$port;
        location /big {
            alias $dir/big.txt;
            gzip on; gzip_comp_level 9; gzip_types text/plain;
            gzip_min_length 0;
        }
    }
}
CONF
    return ($port, '/usr/sbin/nginx', '-p', $dir, '-c', "$dir/nginx.conf",
            '-e', "$dir/error.log");
}

sub httpd_server {
    my ($dir, $scope) = @_;
    my $port = free_port();
    my $module = top_dir() . '/build/mod_spanprof.so';
    mkdir "$dir/htdocs";
    chmod 0755, "$dir/htdocs";
    big_file("$dir/htdocs/big");
    write_file("$dir/httpd.conf", <<"CONF");
ServerRoot $dir
DefaultRuntimeDir $dir
PidFile $dir/httpd.pid
Listen 127.0.0.1:$port
ServerName localhost
User nobody
Group nogroup
ErrorLog $dir/error.log
LogLevel notice
LoadModule mpm_event_module $mods/mod_mpm_event.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule mime_module $mods/mod_mime.so
LoadModule deflate_module $mods/mod_deflate.so
LoadModule filter_module $mods/mod_filter.so
LoadModule spanprof_module $module
StartServers 2
TypesConfig /dev/null
DocumentRoot $dir/htdocs
DeflateCompressionLevel 9
<Directory $dir/htdocs>
    Require all granted
    SetOutputFilter DEFLATE
</Directory>
$scope
CONF
    return ($port, '/usr/sbin/apache2', '-f', "$dir/httpd.conf",
            '-DFOREGROUND');
}

# Runs one server in one configuration; returns what was seen.
sub observe {
    my ($make, $scope, $profilers) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my ($port, @cmd) = $make->($dir, $scope);
    my $on = $profilers ? 'true' : 'false';
    my %env = (
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        SPLUNK_SNAPSHOT_PROFILER_ENABLED => $on,
        SPLUNK_PROFILER_ENABLED => $on,
        SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '1',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL => '100',
        SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
        OTEL_BSP_SCHEDULE_DELAY => '200',
    );
    my $master = spawn(\%env, "$dir/stderr.log", @cmd);
    my %seen = (started => wait_for_port($port, 20));
    if ($seen{started}) {
        heavy_requests($port);
        # Timers and handlers are looked at while the server still runs,
        # after it has served selected requests.
        my @pids = server_pids($master);
        $seen{processes} = scalar @pids;
        $seen{timers} = 0;
        $seen{timers} += sigprof_timers($_) for @pids;
        $seen{caught} = grep { sigprof_caught($_) } @pids;
        # Spans or profiles, whichever comes, are given time to arrive.
        wait_until(sub { my $n = signals($recv);
                         $n->{logs} && $n->{traces} }, 10);
    }
    stop($master);
    $seen{signals} = signals($recv);
    $seen{log} = read_file("$dir/error.log") // '';
    $recv->stop;
    return \%seen;
}

my @servers = (
    [ 'nginx', \&nginx_server, 'spanprof off;' ],
    [ 'httpd', \&httpd_server, 'Spanprof Off' ],
);

for my $server (@servers) {
    my ($name, $make, $directive) = @$server;

    my $control = observe($make, '', 1);
    ok($control->{started}, "$name: starts with the profilers on")
        or diag($control->{log});
    cmp_ok($control->{timers}, '>', 0,
           "$name, profilers on: a timer that signals SIGPROF exists");
    cmp_ok($control->{caught}, '>', 0,
           "$name, profilers on: a SIGPROF handler is installed");
    cmp_ok($control->{signals}{logs}, '>', 0,
           "$name, profilers on: profiles reach the receiver");

    my $tracing = observe($make, '', 0);
    ok($tracing->{started}, "$name: starts with the profilers off")
        or diag($tracing->{log});
    cmp_ok($tracing->{processes}, '>', 1,
           "$name, profilers off: the master and its workers looked at");
    is($tracing->{timers}, 0,
       "$name, profilers off: no process has a SIGPROF timer");
    is($tracing->{caught}, 0,
       "$name, profilers off: no process has a SIGPROF handler");
    is($tracing->{signals}{logs}, 0,
       "$name, profilers off: no profiling data reaches the receiver");
    cmp_ok($tracing->{signals}{traces}, '>', 0,
           "$name, profilers off: spans still reach the receiver");

    my $off = observe($make, $directive, 1);
    ok($off->{started}, "$name: starts with '$directive' and the profilers on")
        or diag($off->{log});
    is($off->{timers}, 0, "$name, '$directive': no process has a SIGPROF timer");
    is($off->{caught}, 0, "$name, '$directive': no process has a SIGPROF handler");
    is($off->{signals}{logs}, 0, "$name, '$directive': no profiling data");
    is($off->{signals}{traces}, 0, "$name, '$directive': no spans");
}

done_testing();
