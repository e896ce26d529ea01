#!/usr/bin/perl
# httpd's Spanprof On|Off by scope, where a request ends: a <VirtualHost>
# that is off with a <Location> inside it that is on traces that location
# only (before, the vhost's Off was taken at the request's start and
# nothing inside could turn it on); a <Location> that is off in a server
# that is on is not traced. And the route of a request that ends in a
# handler named by a content type (mod_dir's "httpd/unix-directory"):
# none. Real apache2, curl, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file free_port httpd_conf httpd_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans wait_spans);

my $why = Spanprof::Receiver::unavailable();
plan skip_all => $why if $why;
plan skip_all => 'curl is not installed' if system('curl --version >/dev/null');

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $vhost = free_port();
my $port = httpd_conf($dir, extra => <<"EXTRA");
<Location /quiet>
    Spanprof Off
</Location>
Listen 127.0.0.1:$vhost
<VirtualHost 127.0.0.1:$vhost>
    Spanprof Off
    <Location /traced>
        Spanprof On
    </Location>
</VirtualHost>
EXTRA
my $httpd = httpd_start($dir, $port, OTEL_BSP_SCHEDULE_DELAY => '100',
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));

my $serial = 0;
my %trace;
for my $c ([ $port, '/index.html', 1 ], [ $port, '/quiet/x', 0 ],
           [ $vhost, '/traced/x', 1 ], [ $vhost, '/index.html', 0 ]) {
    my ($p, $path, $traced) = @$c;
    my $t = sprintf '%032x', 0x5c0e00 + ++$serial;
    `curl -s -o /dev/null -H 'traceparent: 00-$t-00f067aa0ba902b7-01' http://127.0.0.1:$p$path`;
    $trace{"$p$path"} = [ $t, $traced ];
}
wait_spans($recv, sub { $_[0]->{traceId} eq $trace{"$vhost/traced/x"}[0] });
sleep 0.5;      # any span not wanted would be exported by now
my %got = map { $_->{traceId} => 1 } spans($recv);
for my $c (["main server, /index.html", "$port/index.html"],
           ["main server, Off <Location> /quiet", "$port/quiet/x"],
           ["Off vhost, On <Location> /traced", "$vhost/traced/x"],
           ["Off vhost, /index.html", "$vhost/index.html"]) {
    my ($what, $key) = @$c;
    my ($t, $traced) = @{ $trace{$key} };
    is(!!$got{$t}, !!$traced, "$what: " . ($traced ? 'traced' : 'not traced'));
}

# /sub, a directory: mod_dir answers 301 from its "httpd/unix-directory"
# handler, a content type, not a route.
mkdir "$dir/htdocs/sub";
chmod 0755, "$dir/htdocs/sub";
{
    my $t = sprintf '%032x', 0x5c0eff;
    my $code = `curl -s -o /dev/null -w '%{http_code}' -H 'traceparent: 00-$t-00f067aa0ba902b7-01' http://127.0.0.1:$port/sub`;
    is($code, 301, 'a directory without its slash: 301');
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $t });
    is($span ? $span->{name} : undef, 'GET',
       'a directory without its slash: named GET');
    is($span ? Spanprof::Receiver::attribute($span->{attributes},
                                             'http.route') : 'none',
       undef, 'a directory without its slash: no http.route');
}
stop($httpd);
done_testing();
