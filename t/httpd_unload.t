#!/usr/bin/perl
# httpd's parent never calls into the module after httpd unloaded it.
# The parent watches its exporter with apr_proc_other_child_register,
# whose callback is a function of the module; httpd unloads the module
# with the configuration (a graceful restart loads it again, maybe at
# another address) and destroys the process pool last, when APR tells
# every child it still watches that it is unregistered. The registration
# lived in the process pool: at a stop where the exporter outlived the
# MPM's reaping (a flush held up by a collector that does not answer),
# and after a graceful restart that loaded the module elsewhere (found by
# bench/soak/soak.pl: "seg fault or similar nasty error detected in the
# parent process" a second after a graceful restart, the server gone),
# the parent called the unloaded code and died of SIGSEGV.
#
# Each MPM, with an endpoint that takes connections and never answers
# (the exporter's flush waits for its 3 s timeout): a graceful restart,
# the parent alive once the old exporter is gone, then a stop: the parent
# exits by itself, not by a signal, and logs no fault (AH00060).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_start stop
                        http_get wait_until);
use Spanprof::Procs qw(exporters processes);

# Connections complete in the kernel's backlog; nobody ever answers.
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Proto => 'tcp', Listen => 64)
    or die "listen: $!";

for my $mpm (qw(event prefork)) {
    my $dir = new_dir();
    my $port = httpd_conf($dir, mpm => $mpm);
    my $parent = httpd_start($dir, $port,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:'
                                       . $silent->sockport,
        OTEL_EXPORTER_OTLP_TIMEOUT => '3000');
    ok($parent, "$mpm: httpd starts")
        or diag(read_file("$dir/error.log")), next;
    my ($old) = map { $_->{pid} } exporters($parent);
    http_get($port, '/') for 1 .. 3;

    kill 'USR1', $parent;
    ok(wait_until(sub { !processes()->{ $old // 0 }
                        && exporters($parent) == 1 }, 20),
       "$mpm: graceful restart: the old exporter gone, a new one runs");
    ok(kill(0, $parent), "$mpm: the parent lives on");
    http_get($port, '/') for 1 .. 3;

    stop($parent);
    my $status = $?;
    is($status & 127, 0, "$mpm: stop: the parent exits, not killed by a "
                         . 'signal') or diag("wait status $status");
    unlike(read_file("$dir/error.log"), qr/AH00060/,
           "$mpm: no fault in the parent");
}

done_testing();
