#!/usr/bin/perl
# The exporter writes into the server's error log at the server's level:
# nginx's `error_log ... LEVEL`, httpd's `LogLevel` (spanprof's own when
# set). At notice or more its info lines (started, counters, stopped) are
# there; at warn they are not, and its warnings are (here "export failed":
# no collector listens). Real nginx and apache2 with the module and the
# exporter it starts.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start http_get free_port wait_for_log stop);

plan skip_all => 'apache2 is not installed' unless -x '/usr/sbin/apache2';

# A port nobody listens on: every export fails.
my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . free_port(),
    OTEL_BSP_SCHEDULE_DELAY     => '100',
);

# An exporter line at $level in either server's format, as far as its
# text: "[warn] PID#TID: spanprof-exporter: ", "[spanprof:warn] [pid ...]
# spanprof-exporter: ".
sub line {
    my ($level, $text) = @_;
    return qr/\[(?:spanprof:)?$level\] .*spanprof-exporter: $text/;
}

sub run_server {
    my ($server, $level) = @_;
    my $dir = new_dir();
    my ($port, $pid);
    if ($server eq 'nginx') {
        $port = nginx_conf($dir, log_level => $level);
        $pid = nginx_start($dir, $port, %env);
    } else {
        $port = httpd_conf($dir, log_level => $level);
        $pid = httpd_start($dir, $port, %env);
    }
    ok($pid, "$server ($level) starts");
    http_get($port, '/') for 1 .. 3;
    my $failed = wait_for_log("$dir/error.log",
                              line('warn', 'export failed'),
                              20);
    stop($pid);
    sleep 0.5;
    return (read_file("$dir/error.log") // '') . (read_file("$dir/stderr.log") // '');
}

for my $server (qw(nginx httpd)) {
    my $log = run_server($server, 'notice');
    like($log, line('info', 'started'),
         "$server at notice: the exporter's info lines");
    like($log, line('warn', 'export failed'),
         "$server at notice: its warnings");

    $log = run_server($server, 'warn');
    unlike($log, line('info', ''),
           "$server at warn: none of the exporter's info lines");
    like($log, line('warn', 'export failed'),
         "$server at warn: its warnings");
}

done_testing();
