#!/usr/bin/perl
# nginx with "master_process off" (a developer's mode): there is no helper
# process, so no exporter runs and nothing would read what the module
# records. It says so once at start, at warn, records nothing (no trace
# id for the request's variables) and serves every request, with no
# alert. (A reload in this mode leaves nginx 1.22 itself serving nothing,
# with or without the module: not tried here.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_cmd
                        spawn wait_for_port wait_until stop http_get);
use Spanprof::Procs qw(exporters);

my $dir = new_dir();
my $port = nginx_conf($dir,
    location => 'return 200 "id=[$spanprof_trace_id]\n";');
my $conf = read_file("$dir/nginx.conf");
$conf =~ s/^daemon off;$/daemon off;\nmaster_process off;/m
    or die "no daemon line";
write_file("$dir/nginx.conf", $conf);

my $pid = spawn({}, "$dir/stderr.log", nginx_cmd($dir));
ok(wait_for_port($port), 'nginx serves without a master process');

my $warning = qr/\[warn\][ ].*spanprof:[ ]no[ ]exporter[ ]runs[ ]with[ ]
                 "master_process[ ]off",[ ]so[ ]nothing[ ]is[ ]traced[ ]or[ ]
                 profiled/x;
ok(wait_until(sub { (read_file("$dir/error.log") // '') =~ $warning }, 5),
   'it says at warn that nothing is traced or profiled');

my ($status, $body) = http_get($port, '/');
is($status, 200, 'the request is served');
is($body, "id=[]\n", 'no trace id is made for it');
is(scalar exporters($pid), 0, 'no exporter runs');

stop($pid);
my $log = read_file("$dir/error.log") // '';
my @warnings = $log =~ /$warning/g;
is(scalar @warnings, 1, 'the warning is logged once');
unlike($log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error log');

done_testing();
