#!/usr/bin/perl
# Collectors that answer, but refuse, with the real servers and the
# independent receiver (t/receiver):
# - one that implements traces only (LogsService/Export is UNIMPLEMENTED,
#   as Jaeger's OTLP receiver answers), nginx with both profilers on:
#   spans keep arriving, profiling logs are dropped and counted, and the
#   error log says so once, naming what to change, not once per export;
# - one that refuses every export (UNAUTHENTICATED for a wrong X-SF-Token,
#   then PERMISSION_DENIED, then INVALID_ARGUMENT), httpd: each status is
#   said once per signal, naming the signal and, for the first two,
#   OTEL_EXPORTER_OTLP_HEADERS; nothing is retried; the token never shows
#   in the error log.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start stop http_get);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans);
use Spanprof::Exporter qw(counters balanced);

Spanprof::Receiver::skip_unless_ready();

# Both profilers on, exports often, so that a few seconds make many
# exports of each signal; counters logged often, for the test to poll.
my %PROFILING = (
    SPLUNK_PROFILER_ENABLED             => 'true',
    SPLUNK_PROFILER_CALL_STACK_INTERVAL => '10ms',
    SPLUNK_SNAPSHOT_PROFILER_ENABLED    => 'true',
    SPLUNK_SNAPSHOT_SAMPLING_INTERVAL   => '1ms',
    SPLUNK_PROFILER_EXPORT_INTERVAL     => '200ms',
    OTEL_BSP_SCHEDULE_DELAY             => '100ms',
    SPANPROF_COUNTERS_INTERVAL_MS       => '200',
);

sub exporter_lines {
    my ($log, $what) = @_;
    return grep { /spanprof-exporter: \Q$what\E/ } split /\n/, $log;
}

# Selected requests until $done->() is true, once more than 20 were
# answered, or for 60 s at most (a busy machine may take seconds to export
# what the checks need); how many were answered 200.
sub load_until {
    my ($port, $done) = @_;
    my $end = time + 60;
    my $n = 0;
    while (time < $end) {
        my ($status) = http_get($port, '/',
            'baggage: splunk.trace.snapshot.volume=highest');
        $n++ if $status == 200;
        last if $n > 20 && $done->();
        sleep 0.02;
    }
    return $n;
}

# True once the exporter in $dir said that the export of each signal
# failed with $status.
sub refused_both {
    my ($dir, $status) = @_;
    my @failed = exporter_lines(read_file("$dir/error.log"), 'export failed');
    return 2 == grep { my $signal = $_;
                       grep { /OTLP export of $signal to .* $status \(/ }
                           @failed } qw(logs traces);
}

# --- a collector of traces only

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir,
                                         args => [qw(--services traces)]);
    my $port = nginx_conf($dir, log_level => 'info');
    my $nginx = nginx_start($dir, $port, %PROFILING,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    my $served = load_until($port, sub {
        my $c = counters(read_file("$dir/error.log")) // {};
        return spans($recv) && ($c->{'failures.UNIMPLEMENTED'} // 0) >= 3;
    });
    my $spans = () = spans($recv);
    stop($nginx);
    my $log = read_file("$dir/error.log");

    ok($served > 20, "traces only: $served requests served");
    ok($spans > 0, "traces only: spans keep arriving ($spans)");
    my @failed = exporter_lines($log, 'export failed');
    is(scalar @failed, 1, 'traces only: one warning, not one per export')
        or diag(join "\n", @failed[0 .. ($#failed < 5 ? $#failed : 5)]);
    like($failed[0] // '', qr/\[warn\] .*OTLP export of logs to \S+ failed: (?x)
        UNIMPLEMENTED \s \(12\) .* not \s retryable; \s the \s collector \s
        does \s not \s take \s OTLP \s logs .* profiling \s data \s is \s
        dropped .* SPLUNK_PROFILER_LOGS_ENDPOINT .* OTEL_LOGS_EXPORTER=none/,
        'traces only: it names the signal, the status and what to change');
    is(scalar(exporter_lines($log, 'export recovered')), 0,
       'traces only: no "recovered" for the spans that always went through');
    my $c = counters($log, 'at exit') // {};
    ok(($c->{'failures.UNIMPLEMENTED'} // 0) >= 3,
       "traces only: every refused export counted "
       . "(failures.UNIMPLEMENTED=" . ($c->{'failures.UNIMPLEMENTED'} // 0)
       . ')');
    ok(($c->{'dropped.export_failed'} // 0) > 0,
       'traces only: the profiling records counted as dropped');
    ok(($c->{exported} // 0) >= $spans && %$c && balanced($c),
       'traces only: the spans counted as exported, the counters add up')
        or diag(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
}

# --- refused: a wrong token, then no permission, then a bad request

{
    my $dir = new_dir();
    my $SECRET = 'wr0ng-t0ken-4711';
    my $recv = Spanprof::Receiver->start(dir => $dir,
        control => { status => 'UNAUTHENTICATED',
                     message => 'invalid access token' });
    my $port = httpd_conf($dir, log_level => 'info');
    my $httpd = httpd_start($dir, $port, %PROFILING,
        OTEL_EXPORTER_OTLP_HEADERS => "X-SF-Token=$SECRET",
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    load_until($port, sub { refused_both($dir, 'UNAUTHENTICATED') });
    $recv->control(status => 'PERMISSION_DENIED', message => 'no ingest');
    load_until($port, sub { refused_both($dir, 'PERMISSION_DENIED') });
    $recv->control(status => 'INVALID_ARGUMENT', message => 'bad batch');
    load_until($port, sub { refused_both($dir, 'INVALID_ARGUMENT') });
    stop($httpd);
    my $log = read_file("$dir/error.log");
    my @got = $recv->requests;

    is($got[0]{metadata}{'x-sf-token'}, $SECRET,
       'refused: the token was sent');
    unlike($log, qr/\Q$SECRET\E/, 'refused: the token is never logged');
    my @failed = exporter_lines($log, 'export failed');
    for my $status (qw(UNAUTHENTICATED PERMISSION_DENIED INVALID_ARGUMENT)) {
        for my $signal (qw(logs traces)) {
            my @lines = grep { /OTLP export of $signal to .* $status \(/ }
                @failed;
            is(scalar @lines, 1, "refused: $status of $signal said once");
            like($lines[0] // '', $status eq 'INVALID_ARGUMENT'
                 ? qr/not retryable; (spans|profiling data) (is|are) dropped$/
                 : qr/not retryable; .* dropped: check the token in (?x)
                      OTEL_EXPORTER_OTLP_HEADERS \s \(values \s are \s never
                      \s logged\)$/,
                 "refused: $status of $signal says what to do");
        }
    }
    is(scalar @failed, 6, 'refused: nothing else said')
        or diag(join "\n", @failed);
    my $c = counters($log, 'at exit') // {};
    my $calls = 0;
    $calls += $c->{"failures.$_"} // 0
        for qw(UNAUTHENTICATED PERMISSION_DENIED INVALID_ARGUMENT);
    is($calls, scalar @got, "refused: no retries ($calls calls, each once)");
    ok(%$c && balanced($c) && $c->{exported} == 0
       && $c->{'dropped.export_failed'} > 0,
       'refused: everything counted as dropped')
        or diag(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
}

done_testing();
