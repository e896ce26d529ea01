#!/usr/bin/perl
# An exporter that cannot run (here a program in its place that exits at
# once, as a missing library would make it) is started again by its
# supervisor: the first two times at once, then after 2 s, 4 s, 8 s... up
# to a minute (sp_exporter_launch.h), each put-off start announced at
# warn. Real nginx and real apache2 (event MPM) with the module; requests
# are answered all along. (A kill -9 of an exporter that ran is followed by
# a new one at once: t/nginx_trace.t, t/httpd_lifecycle.t.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_start
                        httpd_conf httpd_start http_get stop);

plan skip_all => 'apache2 is not installed' unless -x '/usr/sbin/apache2';

# Watches the error log for $seconds while asking for / each half second.
sub watch {
    my ($dir, $port, $seconds) = @_;
    my ($asked, $answered) = (0, 0);
    my $end = time + $seconds;
    while (time < $end) {
        my ($status) = http_get($port, '/');
        $asked++;
        $answered++ if defined $status && $status == 200;
        sleep 0.5;
    }
    my $log = read_file("$dir/error.log");
    my @starts = $log =~ /spanprof: exporter process \d+ started/g;
    return ($asked, $answered, scalar @starts, $log);
}

sub quitting_exporter {
    my ($dir) = @_;
    my $path = "$dir/quits";
    write_file($path, "#!/bin/sh\nexit 3\n");
    chmod 0755, $path;
    chmod 0755, $dir;
    return $path;
}

# nginx: its manager looks at the exporter once a second. Starts at about
# 0, 1, 2, 5 and 10 s: five in 12 s (once a second: twelve).
{
    my $dir = new_dir();
    my $port = nginx_conf($dir);
    # nginx keeps only the variables `env` names for its processes.
    write_file("$dir/nginx.conf", "env SPANPROF_EXPORTER_PATH;\n"
                                  . read_file("$dir/nginx.conf"));
    my $nginx = nginx_start($dir, $port,
                            SPANPROF_EXPORTER_PATH => quitting_exporter($dir));
    ok($nginx, 'nginx starts with an exporter that quits');
    my ($asked, $answered, $starts, $log) = watch($dir, $port, 12);
    stop($nginx);
    is($answered, $asked, 'nginx: every request answered');
    cmp_ok($starts, '>=', 3, "nginx: the exporter is started again ($starts)");
    cmp_ok($starts, '<=', 6, 'nginx: less and less often');
    like($log, qr/\[warn\].*spanprof: exporter process \d+ exited soon after it started, 3 times in a row, the next starts in 2 s/,
         'nginx: the first put-off start is announced at warn');
    like($log, qr/in a row, the next starts in 4 s/,
         'nginx: the next delay is twice as long');
}

# httpd: its parent sees the exporter die within a second, and starts a
# put-off one from its monitor hook (every ten seconds or so). Starts at
# about 0, 1, 2 and one more within 15 s (once a second: fifteen).
{
    my $dir = new_dir();
    my $port = httpd_conf($dir, mpm => 'event');
    my $httpd = httpd_start($dir, $port,
                            SPANPROF_EXPORTER_PATH => quitting_exporter($dir));
    ok($httpd, 'httpd starts with an exporter that quits');
    my ($asked, $answered, $starts, $log) = watch($dir, $port, 15);
    stop($httpd);
    is($answered, $asked, 'httpd: every request answered');
    cmp_ok($starts, '>=', 3, "httpd: the exporter is started again ($starts)");
    cmp_ok($starts, '<=', 5, 'httpd: less and less often');
    like($log, qr/\[\w*:warn\].*spanprof: exporter process \d+ exited \(status \d+\) soon after it started, 3 times in a row, the next starts in 2 s/,
         'httpd: the first put-off start is announced at warn');
}

# An exporter that is not there: the error log says so, in each server,
# instead of showing only an exit status of 127.
{
    my $dir = new_dir();
    my $port = nginx_conf($dir);
    write_file("$dir/nginx.conf", "env SPANPROF_EXPORTER_PATH;\n"
                                  . read_file("$dir/nginx.conf"));
    my $nginx = nginx_start($dir, $port,
                            SPANPROF_EXPORTER_PATH => "$dir/not-there");
    ok($nginx, 'nginx starts with no exporter where it is told to be');
    my (undef, undef, undef, $log) = watch($dir, $port, 1.5);
    stop($nginx);
    # In nginx's format, the child's pid as its thread's.
    my $head = qr{\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[error\] (\d+)#\g{-1}: };
    my $text = qr{cannot run \Q$dir\E/not-there: no such file};
    like($log, qr{^${head}spanprof-exporter: $text$}m,
         'nginx: the error log names the path and why it cannot run');

    my $hdir = new_dir();
    my $hport = httpd_conf($hdir, mpm => 'event');
    chmod 0755, $hdir;
    write_file("$hdir/not-executable", "#!/bin/sh\n");
    chmod 0644, "$hdir/not-executable";
    my $httpd = httpd_start($hdir, $hport,
                            SPANPROF_EXPORTER_PATH => "$hdir/not-executable");
    ok($httpd, 'httpd starts with an exporter it may not execute');
    ($log) = (watch($hdir, $hport, 1.5))[3];
    stop($httpd);
    # In httpd's default ErrorLogFormat.
    my $time = qr{\[\w{3} \w{3} \d\d \d\d:\d\d:\d\d\.\d{6} \d{4}\]};
    my $ids = qr{\[pid (\d+):tid \g{-1}\]};
    $text = qr{cannot run \Q$hdir\E/not-executable: permission denied};
    like($log, qr{^$time \[spanprof:error\] $ids spanprof-exporter: $text}m,
         'httpd: the error log names the path and why it cannot run');
}

done_testing();
