#!/usr/bin/perl
# The variables of the server's environment the exporter takes as they are
# (README "The exporter": SPANPROF_CONSOLE_PATH, SPANPROF_PROFILING_FORMAT,
# SPANPROF_DEBUG_DIRS, SSL_CERT_FILE...) reach it under both servers with
# no more configuration than the variable. nginx clears the environment
# of the processes it starts but for TZ and its env directives: before,
# they reached the exporter only with an "env NAME;" the README did not
# ask for, so SPEC 5's text format could not be had with nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_start
                        httpd_conf httpd_start stop text_file);

plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

sub check {
    my ($server, $dir, $start) = @_;
    my $file = "$dir/console.jsonl";
    # The exporter runs as the workers' user.
    write_file($file, '');
    chmod 0666, $file;
    my ($pid, $port) = $start->(
        OTEL_TRACES_EXPORTER                => 'none',
        OTEL_LOGS_EXPORTER                  => 'console',
        SPANPROF_CONSOLE_PATH               => $file,
        SPANPROF_PROFILING_FORMAT           => 'text',
        SPLUNK_SNAPSHOT_PROFILER_ENABLED    => 'true',
        SPLUNK_SNAPSHOT_SAMPLING_INTERVAL   => '1',
        SPLUNK_PROFILER_EXPORT_INTERVAL     => '200',
    );
    ok($pid, "$server starts") or return;
    my $log = '';
    for (1 .. 100) {
        system('curl', '-s', '-o', '/dev/null', '-H',
               'baggage: splunk.trace.snapshot.volume=highest',
               "http://127.0.0.1:$port/big.txt");
        $log = read_file("$dir/error.log");
        last if $log =~ /started for/ && -s $file;
        select(undef, undef, undef, 0.05);
    }
    sleep 1;
    stop($pid);
    $log = read_file("$dir/error.log");
    like($log, qr/started for .*, text profiling format/,
         "$server: the exporter got SPANPROF_PROFILING_FORMAT");
    my $out = read_file($file);
    ok(length $out, "$server: it wrote to SPANPROF_CONSOLE_PATH");
    like($out, qr/"profiling\.data\.format","value":\{"stringValue":"text"\}/,
         "$server: profiling logs in the text format");
}

{
    my $dir = new_dir();
    my $port = nginx_conf($dir, location => "root $dir;");
    text_file("$dir/big.txt", 100000);
    check('nginx', $dir, sub { (nginx_start($dir, $port, @_), $port) });
}

{
    my $dir = new_dir();
    my $port = httpd_conf($dir);
    text_file("$dir/htdocs/big.txt", 100000);
    check('httpd', $dir, sub { (httpd_start($dir, $port, @_), $port) });
}

done_testing();
