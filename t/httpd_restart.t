#!/usr/bin/perl
# httpd's `-k restart` (SIGHUP to the parent), under each MPM: the
# exporter of the old generation flushes what it holds and leaves, as on
# stop. prefork's parent passes a restart on to its whole process group
# (killpg SIGHUP), and the exporter is in that group: it died of the
# SIGHUP at once, so the spans it held (here behind a 60 s batch delay,
# 5 s by default) were lost without a count, the parent warned
# "exporter process N exited (status 1), starting another" and started
# an exporter for the generation that was ending, killed a moment later.
# Checks, per MPM: the spans of requests answered just before the restart
# arrive; the old exporter ends with its "counters: ... (at exit)" line;
# no warning about its exit; one exporter started for the new generation
# and nothing else; spans after the restart arrive too.
# (t/httpd_lifecycle.t checks that -k restart replaces the exporter and
# re-reads the settings, and that stop flushes.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop
                        wait_until);
use Spanprof::Receiver;
use Spanprof::Procs qw(exporters);
use Spanprof::Cases qw(arrived traced_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';

sub count { my ($text, $re) = @_; return scalar(() = $text =~ /$re/g) }

sub run_mpm {
    my ($mpm) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir, mpm => $mpm,
                          extra => "SpanprofBspScheduleDelay 60000\n");
    my $parent = httpd_start($dir, $port,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($parent, "$mpm: httpd starts")
        or return diag(read_file("$dir/error.log"));
    my $end = time + 10;
    my @old;
    until (@old = exporters($parent) or time > $end) { sleep 0.1 }
    my @ids = traced_requests($port, 5, $PARENT);
    is(scalar @ids, 5, "$mpm: requests answered before the restart");
    is(arrived($recv, 1, @ids), 0,
       "$mpm: their spans wait for the 60 s batch delay");

    kill 'HUP', $parent;
    $end = time + 15;
    sleep 0.1 until count(read_file("$dir/error.log"),
                          qr/resuming normal operations/) >= 2
                    || time > $end;
    is(arrived($recv, 15, @ids), 5,
       "$mpm: -k restart: the old exporter flushed them on its way out");
    # The receiver has the spans before the exporter has its answer and
    # logs its counters: wait for the line.
    my $old = @old ? $old[0]{pid} : 0;
    my $at_exit =
        qr/\[pid $old:tid \d+\] spanprof-exporter: counters: .*\(at exit\)$/m;
    wait_until(sub { read_file("$dir/error.log") =~ $at_exit }, 15);
    my $log = read_file("$dir/error.log");
    like($log, $at_exit,
         "$mpm: -k restart: the old exporter stopped, counting what it sent");
    unlike($log, qr/spanprof: exporter process \d+ exited/,
           "$mpm: -k restart: no warning about the old exporter's exit");
    is(count($log, qr/spanprof: exporter process \d+ started/), 2,
       "$mpm: -k restart: one exporter started for the new generation");
    # The old one goes right after its last line.
    my @new;
    wait_until(sub { (@new = exporters($parent)) == 1 }, 15);
    is(scalar @new, 1, "$mpm: -k restart: one exporter runs")
        or diag(join "\n", map { "$_->{pid} $_->{args}" } @new);

    # the new generation's exporter has the same 60 s delay: stop flushes
    @ids = traced_requests($port, 3, $PARENT);
    stop($parent);
    is(arrived($recv, 15, @ids), 3, "$mpm: spans after the restart arrive");
    $recv->stop;
}

run_mpm($_) for split /,/, ($ENV{SPANPROF_MPMS} // 'prefork,event,worker');
done_testing();
