#!/usr/bin/perl
# The nginx module loads into Debian's nginx, every directive accepts its
# good values and fails "nginx -t" with a clear message for bad ones, a bad
# environment variable warns, and the startup line shows the effective
# configuration and where each value came from.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_test
                        nginx_start spawn stop wait_for_log wait_for_port);
use Spanprof::Settings qw(settings);
use Spanprof::ConfigChecks qw(check_loads check_directives
                              check_bad_environment check_clamp
                              check_switches check_startup_line
                              startup_log);

my $dir = new_dir();
write_file("$dir/ca.pem", "-----BEGIN CERTIFICATE-----\n");
# Readable, PEM, but no certificate: the exporter could not use it.
write_file("$dir/key.pem", "-----BEGIN PRIVATE KEY-----\n");
my @settings = settings(certificate => "$dir/ca.pem",
                        no_certificate => "$dir/key.pem");

my %nginx = (
    name   => 'nginx',
    column => 1,
    conf   => sub {
        my ($dir, $directives) = @_;
        my $http = join '', map { "    $_;\n" } grep { length }
                   split /\n/, $directives;
        return nginx_conf($dir, http => $http);
    },
    check  => \&nginx_test,
    start  => \&nginx_start,
    emerg  => sub {
        my ($name, $shown) = @_;
        return qr/\[emerg\] invalid value \Q$shown\E in "\Q$name\E" directive, allowed: \S.* in \S+nginx\.conf:\d+/;
    },
);

check_loads(\%nginx, $dir);
check_directives(\%nginx, $dir, @settings);
check_bad_environment(\%nginx, $dir, @settings);
check_clamp(\%nginx, $dir, @settings);
check_switches(\%nginx, $dir, sub {
    my ($dir, $top) = @_;
    nginx_conf($dir, http => $top ? "    $top;" : '',
               location => 'spanprof on; return 200;');
}, @settings);
check_startup_line(\%nginx, $dir, @settings);

# --- "env NAME=value;" lines: nginx sets them only in the processes it
# starts, but the module reads them as the environment, the first line of a
# name first, over the master's own environment.

my %env_lines = (%nginx, conf => sub {
    my ($dir, $directives) = @_;
    my $port = $nginx{conf}->($dir, $directives);
    my $conf = read_file("$dir/nginx.conf");
    write_file("$dir/nginx.conf",
               "env OTEL_SERVICE_NAME=from-env-line;\n"
               . "env OTEL_SERVICE_NAME=second-line;\n"
               . "env SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=25;\n"
               . "env SPLUNK_PROFILER_ENABLED=maybe;\n$conf");
    return $port;
});
my $log = startup_log(\%env_lines, $dir, '',
                      OTEL_SERVICE_NAME => 'from-environment');
like($log, qr/OTEL_SERVICE_NAME=from-env-line \(env\)/,
     'env NAME=value: its value, over the environment\'s');
like($log, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=25ms \(env\)/,
     'env NAME=value: each line');
like($log,
     qr/invalid value "maybe" in environment variable SPLUNK_PROFILER_ENABLED/,
     'env NAME=value: a bad value warns as a bad variable does');
$log = startup_log(\%env_lines, $dir, 'spanprof_service_name from-directive');
like($log, qr/OTEL_SERVICE_NAME=from-directive \(directive\)/,
     'env NAME=value: a directive wins over it');

# --- Debian's nginx logs to stderr until it opens the error_log
# (--error-log-path=stderr, as "-e stderr" here): what the environment
# calls for is still said in the error log, with the startup line, once
# per start and once per reload (the service's environment is not the
# one an operator runs "nginx -t" with).

{
    my $port = nginx_conf($dir, http => '    spanprof on;');
    unlink "$dir/error.log", "$dir/stderr.log";
    my $pid = spawn({ SPLUNK_PROFILER_ENABLED => 'maybe',
                      OTEL_SDK_DISABLED => 'true' }, "$dir/stderr.log",
                    '/usr/sbin/nginx', '-p', $dir, '-c', "$dir/nginx.conf",
                    '-e', 'stderr');
    my $startup = qr/spanprof \S+ configuration:/;
    my $bad = qr/\[warn\] [^\n]*spanprof: invalid value "maybe" in(?x)
                 \s environment \s variable \s SPLUNK_PROFILER_ENABLED/;
    my $wins = qr/\[warn\] [^\n]*spanprof: "spanprof on" at http level(?x)
                  \s overrides \s the \s environment \s variable
                  \s OTEL_SDK_DISABLED=true/;
    my $log = wait_port_and_log($port, "$dir/error.log", $startup);
    is(() = $log =~ /$bad/g, 1, 'nginx -e stderr: a bad variable is warned '
       . 'about in the error log') or diag $log, read_file("$dir/stderr.log");
    is(() = $log =~ /$wins/g, 1, '... and a switch the directive overrides');
    like($log, qr/$bad(?s:.*)$startup/, '... before the startup line');
    kill 'HUP', $pid;
    $log = wait_for_log("$dir/error.log", qr/$startup(?s:.*)$startup/) // '';
    is(() = $log =~ /$bad/g, 2, '... and again, once, at a reload')
        or diag $log;
    stop($pid);
}

sub wait_port_and_log {
    my ($port, $file, $pattern) = @_;
    wait_for_port($port);
    return wait_for_log($file, $pattern) // '';
}

# --- where directives may appear

nginx_conf($dir, http => "    spanprof_snapshot on;\n    spanprof_snapshot off;");
my ($rc, $out) = nginx_test($dir);
isnt($rc, 0, 'a repeated directive fails');
like($out, qr/"spanprof_snapshot" directive is duplicate/, '... as duplicate');

nginx_conf($dir, server => '        spanprof_otlp_endpoint http://x:1;');
($rc, $out) = nginx_test($dir);
isnt($rc, 0, 'a server-wide setting inside server {} fails');
like($out, qr/"spanprof_otlp_endpoint" directive is not allowed here/,
     '... as not allowed here');

nginx_conf($dir, http => '    spanprof on;',
           server => '        spanprof off;',
           location => 'spanprof on; return 200;');
($rc, $out) = nginx_test($dir);
is($rc, 0, 'spanprof on|off at http, server and location') or diag $out;

# Blanks around a value are dropped, for the switch as for every setting.
nginx_conf($dir, http => '    spanprof " on ";',
           location => 'spanprof "off "; return 200;');
($rc, $out) = nginx_test($dir);
is($rc, 0, 'spanprof " on ": blanks around the value are dropped')
    or diag $out;

done_testing();
