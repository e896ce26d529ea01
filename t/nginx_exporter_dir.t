#!/usr/bin/perl
# The directory nginx creates for the module's exporter path (a path with
# a manager: nginx's one supervised helper for a module) is beside the
# client body temp path, where nginx keeps its state (Debian:
# /var/lib/nginx/spanprof), not under its prefix (Debian: /usr/share/nginx,
# read-only on a hardened host, where nginx would fail to start). Not when
# that directory is one others may write (a name there could be a link
# nginx would follow to chown): then the prefix, as before. Real nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_start
                        stop);

sub started {
    my ($dir) = @_;
    for (1 .. 50) {
        return 1 if read_file("$dir/error.log")
                    =~ /spanprof: exporter process \d+ started/;
        sleep 0.1;
    }
    return 0;
}

for my $c ([ 'a directory only root may write', 0755, 'state' ],
           [ 'a directory anyone may write', 01777, 'prefix' ]) {
    my ($what, $mode, $expect) = @$c;
    my $dir = new_dir();
    my $port = nginx_conf($dir);
    mkdir "$dir/var";
    chmod $mode, "$dir/var";
    my $conf = read_file("$dir/nginx.conf");
    $conf =~ s{client_body_temp_path \S+;}{client_body_temp_path $dir/var/body;}
        or die 'no client_body_temp_path in the test configuration';
    write_file("$dir/nginx.conf", $conf);
    my $nginx = nginx_start($dir, $port);
    ok($nginx, "$what: nginx starts") or diag(read_file("$dir/error.log"));
    ok(started($dir), "$what: the exporter is started");
    stop($nginx);
    if ($expect eq 'state') {
        ok(-d "$dir/var/spanprof", "$what: the path is beside the body temp path");
        ok(!-e "$dir/spanprof", "$what: nothing under the prefix");
    } else {
        ok(-d "$dir/spanprof", "$what: the path is under the prefix");
        ok(!-e "$dir/var/spanprof", "$what: nothing in the open directory");
    }
}

done_testing();
