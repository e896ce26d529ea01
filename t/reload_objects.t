#!/usr/bin/perl
# Profiles after a reload still name their frames. A worker tells its
# table of loaded objects (path, build id, address ranges) once, into its
# ring; the exporter maps every sample's addresses with it. An nginx
# reload or an httpd graceful restart replaces the exporter, and the one
# leaving read, in its last drain, the tables of the new workers too (and
# long before, the old ones'): the new exporter knew no worker's objects,
# and every profile it sent until the server stopped had no mapping and
# no function (found by bench/soak/soak.pl: its exporters after the first
# counted objects=0). Now every exporter asks the workers for their tables
# again when it takes the region, and the leaving one once it has read its
# last record (sp_region_want_objects); a worker writes its table before
# its next sample.
#
# nginx (two workers) and httpd's event MPM, continuous profiling of
# gzip/deflate work, then a reload/graceful restart and more of it: the
# new generation's continuous samples have their frames in mappings and
# name deflate.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start stop text_file wait_until
                        gzip_location);
use Spanprof::Receiver qw(attribute);
use Spanprof::Procs qw(family);

Spanprof::Receiver::skip_unless_ready(curl => 1);

# Continuous samples as { pid, frames }, from the profiles received.
sub samples {
    my ($recv) = @_;
    my @out;
    for my $req ($recv->requests) {
        next unless $req->{signal} eq 'logs';
        for my $rl (@{ $req->{request}{resourceLogs} // [] }) {
            my $pid = attribute($rl->{resource}{attributes}, 'process.pid');
            for my $sl (@{ $rl->{scopeLogs} // [] }) {
                for my $lr (@{ $sl->{logRecords} // [] }) {
                    next unless (attribute($lr->{attributes},
                        'profiling.instrumentation.source') // '')
                        eq 'continuous';
                    my $p = $lr->{pprof}{resolved} or next;
                    push @out, map { { pid => $pid, frames => $_->{frames} } }
                        @{ $p->{samples} };
                }
            }
        }
    }
    return @out;
}

sub deflate { grep { ($_->{function} // '') eq 'deflate' } @{ $_[0]{frames} } }

sub load {
    my ($port) = @_;
    system("for i in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null -m 30 "
           . "-H 'Accept-Encoding: gzip' http://127.0.0.1:$port/big.txt & "
           . "done; wait");
}

# Load until a continuous deflate sample of a process not in %old arrives
# (at most 30 s); then the checks on the samples of such processes.
sub check_after {
    my ($what, $recv, $port, $old) = @_;
    my $end = time + 30;
    my @new;
    while (time < $end) {
        load($port);
        @new = grep { !$old->{ $_->{pid} } } samples($recv);
        last if grep { deflate($_) } @new;
    }
    # what came with the last one's profile
    sleep 1;
    @new = grep { !$old->{ $_->{pid} } } samples($recv);
    ok(@new > 0, "$what: the new generation sent continuous samples");
    my @bare = grep { !grep { $_->{mapping} } @{ $_->{frames} } } @new;
    is(scalar @bare, 0, "$what: each of them has frames in a mapping")
        or diag(scalar(@bare) . ' of ' . scalar(@new) . ' have none');
    ok((grep { deflate($_) } @new),
       "$what: and they name the compression work (deflate)");
}

sub env_for {
    my ($recv) = @_;
    return (OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
            SPLUNK_PROFILER_ENABLED => 'true',
            SPLUNK_PROFILER_CALL_STACK_INTERVAL => '20',
            SPLUNK_PROFILER_EXPORT_INTERVAL => '300');
}

# --- nginx, two workers, a reload
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir, workers => 2,
        server => gzip_location($dir, path => '/big.txt', lines => 20000));
    my $master = nginx_start($dir, $port, env_for($recv));
    ok($master, 'nginx starts') or diag(read_file("$dir/error.log"));
    my %old = map { $_->{pid} => 1 } family($master);
    ok(wait_until(sub { load($port); grep { deflate($_) } samples($recv) },
                  30),
       'nginx: continuous deflate samples before the reload');
    kill 'HUP', $master;
    ok(wait_until(sub { grep { $_->{args} =~ /worker process$/
                               && !$old{ $_->{pid} } } family($master) },
                  15), 'nginx: new workers after the reload');
    check_after('nginx', $recv, $port, \%old);
    stop($master);
}

# --- httpd, event MPM, a graceful restart
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir, modules => [qw(deflate filter)],
                          extra => <<'CONF');
StartServers 2
ThreadsPerChild 4
MinSpareThreads 4
MaxSpareThreads 8
DeflateCompressionLevel 9
<Location /big.txt>
    SetOutputFilter DEFLATE
</Location>
CONF
    text_file("$dir/htdocs/big.txt", 20000);
    my $parent = httpd_start($dir, $port, env_for($recv));
    ok($parent, 'httpd starts') or diag(read_file("$dir/error.log"));
    my %old = map { $_->{pid} => 1 } family($parent);
    ok(wait_until(sub { load($port); grep { deflate($_) } samples($recv) },
                  30),
       'httpd: continuous deflate samples before the graceful restart');
    kill 'USR1', $parent;
    ok(wait_until(sub { (() = read_file("$dir/error.log")
                         =~ /resuming normal operations/g) >= 2 }, 15),
       'httpd: restarted');
    check_after('httpd', $recv, $port, \%old);
    stop($parent);
}

done_testing();
