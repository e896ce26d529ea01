#!/usr/bin/perl
# The nginx module loads into Debian's nginx, every directive accepts its
# good values and fails "nginx -t" with a clear message for bad ones, and
# the startup line shows the effective configuration and where each value
# came from.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(new_dir write_file nginx_conf nginx_test
                        nginx_start stop wait_for_log http_get read_file);
use Spanprof::Settings qw(settings);

my $dir = new_dir();
write_file("$dir/ca.pem", "-----BEGIN CERTIFICATE-----\n");
my @settings = settings(certificate => "$dir/ca.pem");

sub env_form {
    my ($v) = @_;
    return { on => 'true', off => 'false' }->{$v} // $v;
}

# --- loads, serves

{
    my $port = nginx_conf($dir);
    my ($rc, $out) = nginx_test($dir);
    is($rc, 0, 'nginx -t passes with only load_module') or diag $out;

    my $pid = nginx_start($dir, $port);
    ok($pid, 'nginx starts with the module');
    my ($status, $body) = http_get($port, '/');
    is($status, 200, 'and serves a request');
    stop($pid);
}

# --- every directive: good values pass, bad values fail with a message
# naming the directive, the value and what is allowed

for my $s (@settings) {
    my ($env, $name, undef, $good, $bad) = @$s;

    for my $v (@$good) {
        nginx_conf($dir, http => "    $name $v;");
        my ($rc, $out) = nginx_test($dir);
        is($rc, 0, "$name $v passes") or diag $out;
    }
    for my $v (@$bad) {
        nginx_conf($dir, http => "    $name $v;");
        my ($rc, $out) = nginx_test($dir);
        isnt($rc, 0, "$name $v fails");
        my $shown = $env eq 'OTEL_EXPORTER_OTLP_HEADERS'
                    ? '(not shown: it holds secrets)' : qq{"$v"};
        $shown = '""' if $v eq '""';
        like($out, qr/\[emerg\] invalid value \Q$shown\E in "\Q$name\E" directive, allowed: \S.* in \S+nginx\.conf:\d+/,
             "$name $v: the message names directive, value, allowed");
    }
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

# --- a bad environment variable warns, names it, and keeps the default

for my $s (@settings) {
    my ($env, $name, undef, undef, $bad) = @$s;
    next if $bad->[0] eq '""';  # an empty variable counts as unset
    nginx_conf($dir);
    my ($rc, $out) = nginx_test($dir, $env => $bad->[0]);
    is($rc, 0, "bad $env does not fail nginx -t") or diag $out;
    my $shown = $env eq 'OTEL_EXPORTER_OTLP_HEADERS'
                ? '(not shown: it holds secrets)' : qq{"$bad->[0]"};
    like($out, qr/\[warn\] .*spanprof: invalid value \Q$shown\E in environment variable \Q$env\E, allowed: .*; using the default/,
         "bad $env warns");
}

# --- the startup line: environment when no directive, directive over it

{
    my %env = map { $_->[0] => env_form($_->[3][0]) } @settings;
    $env{OTEL_SDK_DISABLED} = 'false';
    $env{SPLUNK_SNAPSHOT_SAMPLING_INTERVAL} = '20';
    $env{OTEL_EXPORTER_OTLP_HEADERS} = 'X-SF-Token=topsecret';

    my $port = nginx_conf($dir);
    unlink "$dir/error.log";
    my $pid = nginx_start($dir, $port, %env);
    my $log = wait_for_log("$dir/error.log", qr/spanprof \S+ configuration:/);
    stop($pid);
    ok($log, 'startup line logged') or diag read_file("$dir/stderr.log");
    my ($line) = ($log // '') =~ /(\[notice\] .*spanprof \S+ configuration:.*)/;
    ok($line, 'at notice level');
    for my $s (@settings) {
        like($line, qr/\Q$s->[0]\E=[^()]* \(env\)/, "$s->[0] taken from env");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=20ms \(env\)/,
         'with the value of the variable');
    unlike($log, qr/topsecret/, 'header values are never logged');
    like($line, qr/OTEL_EXPORTER_OTLP_HEADERS=X-SF-Token=\*\*\* \(env\)/,
         'header names are, masked');
    is(() = $log =~ /configuration:/g, 1, 'logged once');

    my $http = join "\n", map { "    $_->[1] $_->[3][-1];" } @settings;
    $port = nginx_conf($dir, http => $http
        =~ s/spanprof_snapshot_sampling_interval \S+;/spanprof_snapshot_sampling_interval 30;/r);
    unlink "$dir/error.log";
    $pid = nginx_start($dir, $port, %env);
    $log = wait_for_log("$dir/error.log", qr/spanprof \S+ configuration:/);
    stop($pid);
    ($line) = ($log // '') =~ /(spanprof \S+ configuration:.*)/;
    for my $s (@settings) {
        like($line, qr/\Q$s->[0]\E=[^()]* \(directive\)/,
             "$s->[1] wins over $s->[0]");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=30ms \(directive\)/,
         'with the value of the directive');
}

# --- no line under nginx -t: a configuration test is not a startup

nginx_conf($dir);
($rc, $out) = nginx_test($dir);
unlike($out, qr/configuration:/, 'nginx -t prints no startup line');

done_testing();
