#!/usr/bin/perl
# httpd's rings are as many as its MPM may run children at once: prefork
# with a ServerLimit past 256 (common with mod_php) runs that many
# children, each of which claims a ring of its own and traces its
# requests; with 256 rings the children past them logged "no ring left"
# and recorded nothing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file httpd_conf httpd_cmd spawn
                        wait_for_port wait_until stop);
use Spanprof::Procs qw(family);

my $CHILDREN = 300;

my $dir = new_dir();
my $port = httpd_conf($dir, mpm => 'prefork', extra => <<"EXTRA");
ServerLimit $CHILDREN
MaxRequestWorkers $CHILDREN
StartServers $CHILDREN
MinSpareServers $CHILDREN
MaxSpareServers $CHILDREN
EXTRA

my $pid = spawn({ OTEL_TRACES_EXPORTER => 'none',
                  OTEL_LOGS_EXPORTER => 'none' },
                "$dir/stderr.log", httpd_cmd($dir));
ok(wait_for_port($port), 'httpd started');

sub children {
    return grep { $_->{args} !~ /spanprof-exporter/ } family($pid);
}

ok(wait_until(sub { children() >= $CHILDREN }, 60),
   "$CHILDREN prefork children run") or diag(scalar(children()) . ' run');
# Each claims its ring as it starts (child_init).
sleep 2;
my $log = read_file("$dir/error.log") // '';
my @none = $log =~ /spanprof: no ring left/g;
is(scalar @none, 0, 'every child has a ring of its own')
    or diag(scalar(@none) . ' children without one');
unlike($log, qr/\[(?:\w+:)?(?:alert|emerg|crit)\]/,
       'no alert in the error log');

stop($pid);
done_testing();
