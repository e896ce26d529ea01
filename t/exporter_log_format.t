#!/usr/bin/perl
# The exporter's lines in the server's error log have the server's own
# format, so that log parsers and people read them like the server's:
#   nginx  2026/11/24 22:28:34 [warn] 5503#5503: spanprof-exporter: ...
#   httpd  [Tue Nov 24 22:28:37.971496 2026] [spanprof:warn]
#          [pid 5671:tid 5671] spanprof-exporter: ...
# (httpd's default ErrorLogFormat), local time, the exporter's pid and
# thread. Real nginx and apache2 with the module and the exporter it
# starts; no collector listens, so "export failed" warnings come too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(strftime);
use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start http_get free_port wait_for_log stop);

plan skip_all => 'apache2 is not installed' unless -x '/usr/sbin/apache2';

my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . free_port(),
    OTEL_BSP_SCHEDULE_DELAY     => '100',
);

my %line = (
    nginx => qr{^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[(\w+)\] (\d+)#(\d+): }
           . qr{spanprof-exporter: (.*)$},
    httpd => qr{^\[(\w{3} \w{3} \d\d \d\d:\d\d:\d\d\.\d{6} \d{4})\] }
           . qr{\[spanprof:(\w+)\] \[pid (\d+):tid (\d+)\] }
           . qr{spanprof-exporter: (.*)$},
);

# The local time now as the server writes it, to the minute: the lines
# are from the last seconds.
sub now_minute {
    my ($server) = @_;
    return $server eq 'nginx' ? strftime('%Y/%m/%d %H:%M', localtime)
                              : strftime('%a %b %d %H:%M', localtime);
}

for my $server (qw(nginx httpd)) {
    my $dir = new_dir();
    my ($port, $pid);
    my $before = now_minute($server);
    if ($server eq 'nginx') {
        $port = nginx_conf($dir);
        $pid = nginx_start($dir, $port, %env);
    } else {
        $port = httpd_conf($dir);
        $pid = httpd_start($dir, $port, %env);
    }
    ok($pid, "$server starts");
    http_get($port, '/') for 1 .. 3;
    wait_for_log("$dir/error.log", qr/export failed/, 20);
    my $after = now_minute($server);
    stop($pid);
    sleep 0.5;

    my @lines = grep { /spanprof-exporter/ }
                split /\n/, read_file("$dir/error.log") // '';
    ok(@lines >= 2, "$server: the exporter wrote to the error log")
        or diag(read_file("$dir/error.log") // '(none)');
    my @odd = grep { $_ !~ $line{$server} } @lines;
    is_deeply(\@odd, [], "$server: every exporter line has its format");

    my ($started) = grep { /started for/ } @lines;
    my @f = ($started // '') =~ $line{$server};
    ok(@f, "$server: the started line") or diag($started // '(none)');
    is($f[1], 'info', "$server: its level") if @f;
    is($f[2], $f[3], "$server: the main thread's id is the pid") if @f;
    ok(@f && (index($f[0], $before) == 0 || index($f[0], $after) == 0),
       "$server: local time")
        or diag(($f[0] // '(none)') . " vs $before / $after");

    my ($failed) = grep { /export failed/ } @lines;
    @f = ($failed // '') =~ $line{$server};
    ok(@f, "$server: the export failed line") or diag($failed // '(none)');
    is($f[1], 'warn', "$server: its level") if @f;
}

done_testing();
