#!/usr/bin/perl
# The httpd module loads into Debian's apache2, every directive accepts its
# good values and fails "apache2 -t" with a clear message for bad ones, and
# the startup line shows the effective configuration and where each value
# came from.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(new_dir write_file httpd_conf httpd_test
                        httpd_start stop wait_for_log http_get read_file);
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
    my $port = httpd_conf($dir);
    my ($rc, $out) = httpd_test($dir);
    is($rc, 0, 'apache2 -t passes with only LoadModule') or diag $out;

    my $pid = httpd_start($dir, $port);
    ok($pid, 'apache2 starts with the module');
    my ($status, $body) = http_get($port, '/');
    is($status, 200, 'and serves a request');
    stop($pid);
}

# --- every directive: good values pass, bad values fail with a message
# naming the directive, the value and what is allowed

for my $s (@settings) {
    my ($env, undef, $name, $good, $bad) = @$s;

    for my $v (@$good) {
        httpd_conf($dir, extra => "$name $v");
        my ($rc, $out) = httpd_test($dir);
        is($rc, 0, "$name $v passes") or diag $out;
    }
    for my $v (@$bad) {
        httpd_conf($dir, extra => "$name $v");
        my ($rc, $out) = httpd_test($dir);
        isnt($rc, 0, "$name $v fails");
        my $shown = $env eq 'OTEL_EXPORTER_OTLP_HEADERS'
                    ? '(not shown: it holds secrets)' : qq{"$v"};
        if ($v eq '""') {
            # httpd itself refuses an empty argument, in its own words.
            like($out, qr/\Q$name\E takes one argument/,
                 "$name \"\": httpd says an argument is needed");
            next;
        }
        like($out, qr/Syntax error on line \d+ of \S+httpd\.conf:\ninvalid value \Q$shown\E in "\Q$name\E" directive, allowed: \S/,
             "$name $v: the message names directive, value, allowed");
    }
}

# --- where directives may appear

my ($rc, $out);
httpd_conf($dir, extra => "<VirtualHost 127.0.0.1:*>\n"
                          . "    SpanprofOtlpEndpoint http://x:1\n"
                          . "</VirtualHost>");
($rc, $out) = httpd_test($dir);
isnt($rc, 0, 'a server-wide setting inside <VirtualHost> fails');
like($out, qr/SpanprofOtlpEndpoint cannot occur within <VirtualHost>/,
     '... saying where it may not occur');

httpd_conf($dir, extra => "Spanprof On\n<VirtualHost 127.0.0.1:*>\n"
                          . "    Spanprof Off\n</VirtualHost>\n"
                          . "<Location /private>\n    Spanprof Off\n"
                          . "</Location>\n<Directory /tmp>\n    Spanprof On\n"
                          . "</Directory>");
($rc, $out) = httpd_test($dir);
is($rc, 0, 'Spanprof On|Off in server, virtual host, location, directory')
    or diag $out;

# --- a bad environment variable warns, names it, and keeps the default

for my $s (@settings) {
    my ($env, undef, undef, undef, $bad) = @$s;
    next if $bad->[0] eq '""';  # an empty variable counts as unset
    httpd_conf($dir);
    my ($rc, $out) = httpd_test($dir, $env => $bad->[0]);
    is($rc, 0, "bad $env does not fail apache2 -t") or diag $out;
    my $shown = $env eq 'OTEL_EXPORTER_OTLP_HEADERS'
                ? '(not shown: it holds secrets)' : qq{"$bad->[0]"};
    like($out, qr/spanprof: invalid value \Q$shown\E in environment variable \Q$env\E, allowed: .*; using the default/,
         "bad $env warns");
}

# --- the startup line: environment when no directive, directive over it

{
    my %env = map { $_->[0] => env_form($_->[3][0]) } @settings;
    $env{OTEL_SDK_DISABLED} = 'false';
    $env{SPLUNK_SNAPSHOT_SAMPLING_INTERVAL} = '20';
    $env{OTEL_EXPORTER_OTLP_HEADERS} = 'X-SF-Token=topsecret';
    $env{SPLUNK_PROFILER_ENABLED} = 'maybe';

    my $port = httpd_conf($dir);
    unlink "$dir/error.log";
    my $pid = httpd_start($dir, $port, %env);
    my $log = wait_for_log("$dir/error.log", qr/spanprof \S+ configuration:/);
    stop($pid);
    ok($log, 'startup line logged') or diag read_file("$dir/stderr.log");
    my ($line) = ($log // '') =~ /(\[spanprof:notice\] .*spanprof \S+ configuration:.*)/;
    ok($line, 'at notice level');
    for my $s (@settings) {
        next if $s->[0] eq 'SPLUNK_PROFILER_ENABLED';
        like($line, qr/\Q$s->[0]\E=[^()]* \(env\)/, "$s->[0] taken from env");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=20ms \(env\)/,
         'with the value of the variable');
    like($line, qr/SPLUNK_PROFILER_ENABLED=false,/,
         'a bad variable leaves the default');
    is(() = $log =~ /invalid value "maybe" in environment variable/g, 1,
       'and is warned about once, not once per configuration pass');
    like($line, qr/SPLUNK_PROFILER_CALL_STACK_INTERVAL=1000ms \(env\)/,
         'httpd reads the call stack interval like the rest');
    unlike($log, qr/topsecret/, 'header values are never logged');
    is(() = $log =~ /configuration:/g, 1, 'logged once');

    my $extra = join "\n", map { "$_->[2] $_->[3][-1]" } @settings;
    $extra =~ s/SpanprofSnapshotSamplingInterval \S+/SpanprofSnapshotSamplingInterval 30/;
    $port = httpd_conf($dir, extra => $extra);
    unlink "$dir/error.log";
    $pid = httpd_start($dir, $port, %env);
    $log = wait_for_log("$dir/error.log", qr/spanprof \S+ configuration:/);
    stop($pid);
    ($line) = ($log // '') =~ /(spanprof \S+ configuration:.*)/;
    for my $s (@settings) {
        like($line, qr/\Q$s->[0]\E=[^()]* \(directive\)/,
             "$s->[2] wins over $s->[0]");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=30ms \(directive\)/,
         'with the value of the directive');
}

# --- no line under apache2 -t: a configuration test is not a startup

httpd_conf($dir);
($rc, $out) = httpd_test($dir);
unlike($out, qr/configuration:/, 'apache2 -t prints no startup line');

done_testing();
