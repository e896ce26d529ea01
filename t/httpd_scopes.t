#!/usr/bin/perl
# httpd's Spanprof On|Off by scope, where a request ends: a <VirtualHost>
# that is off with a <Location> inside it that is on traces that location
# only (before, the vhost's Off was taken at the request's start and
# nothing inside could turn it on); a <Location> that is off in a server
# that is on is not traced, and its SPANPROF_* variables are empty also
# for a request refused before fixups (a 403 of Require), as they are for
# one the Off vhost refuses while reading it (a 400). And the route of a
# request that ends in a handler named by a content type (mod_dir's
# "httpd/unix-directory"): none. Spanprof in .htaccess under
# AllowOverride is refused as httpd refuses any directive out of place
# (500, the error log names it), the request still traced; under
# "AllowOverrideList Spanprof" it works, On in a vhost that is off from a
# child's first request on. Real apache2, curl, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file free_port httpd_conf
                        httpd_start stop wait_until);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans wait_spans raw_answer);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $vhost = free_port();
my $port = httpd_conf($dir, extra => <<"EXTRA");
LogFormat "%U|%>s|%{SPANPROF_TRACE_ID}e|%{SPANPROF_TRACEPARENT}e" ids
CustomLog $dir/access.log ids
<Location /quiet>
    Spanprof Off
</Location>
<Directory $dir/htdocs/htall>
    AllowOverride All
</Directory>
<Directory $dir/htdocs/htnone>
    AllowOverride None
</Directory>
<Location /denied>
    Spanprof Off
    Require all denied
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
           [ $port, '/denied/x', 0 ],
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
           ["main server, Off <Location> /denied (403)", "$port/denied/x"],
           ["Off vhost, On <Location> /traced", "$vhost/traced/x"],
           ["Off vhost, /index.html", "$vhost/index.html"]) {
    my ($what, $key) = @$c;
    my ($t, $traced) = @{ $trace{$key} };
    is(!!$got{$t}, !!$traced, "$what: " . ($traced ? 'traced' : 'not traced'));
}

# The access log: no ids where no span is exported. Before, a request
# refused before fixups kept the ids post_read_request set.
like(raw_answer($vhost, "GARBAGE\r\n\r\n"), qr{^HTTP/1\.1 400},
     'Off vhost: a malformed request line is refused');
my @lines;
my $line = sub {
    my ($re) = @_;
    my ($l) = grep { $_ =~ $re } @lines;
    return $l // '';
};
wait_until(sub {
    @lines = split /\n/, read_file("$dir/access.log");
    return $line->(qr{^/\|400\|}) && $line->(qr{^/denied/x\|});
});
is($line->(qr{^/denied/x\|}), '/denied/x|403|-|-',
   'Off <Location> /denied, refused (403): no SPANPROF_* variables');
is($line->(qr{^/\|400\|}), '/|400|-|-',
   'Off vhost, refused while read (400): no SPANPROF_* variables');
like($line->(qr{^/index\.html\|200\|[0-9a-f]}),
     qr{^/index\.html\|200\|[0-9a-f]{32}\|00-[0-9a-f]{32}-},
     'main server, /index.html: its ids');

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
# "Spanprof" in .htaccess: no override class allows it (README), so httpd
# refuses it as it does any directive out of place: 500, the error log
# names the file and the directive, and the request is traced all the
# same, its span an Error. Where overrides are off httpd never reads it.
for my $c ([ 'All', 500 ], [ 'None', 200 ]) {
    my ($override, $status) = @$c;
    my $sub = lc "ht$override";
    mkdir "$dir/htdocs/$sub";
    chmod 0755, "$dir/htdocs/$sub";
    write_file("$dir/htdocs/$sub/.htaccess", "Spanprof Off\n");
    write_file("$dir/htdocs/$sub/x.html", "x\n");
    chmod 0644, "$dir/htdocs/$sub/.htaccess", "$dir/htdocs/$sub/x.html";
    my $t = sprintf '%032x', 0x5c0f00 + $status;
    my $code = `curl -s -o /dev/null -w '%{http_code}' -H 'traceparent: 00-$t-00f067aa0ba902b7-01' http://127.0.0.1:$port/$sub/x.html`;
    is($code, $status, ".htaccess under AllowOverride $override: $status");
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $t });
    is($span ? Spanprof::Receiver::attribute($span->{attributes},
                                             'http.response.status_code')
             : 'none',
       $status, ".htaccess under AllowOverride $override: traced, $status");
    is($span ? $span->{status}{code} // 0 : 'none', $status >= 500 ? 2 : 0,
       ".htaccess under AllowOverride $override: status "
       . ($status >= 500 ? 'Error' : 'unset'));
}
like(read_file("$dir/error.log"),
     qr{\[core:alert\] .*htall/\.htaccess: Spanprof not allowed here},
     '.htaccess: the error log names the file and the directive');

stop($httpd);

# "AllowOverrideList Spanprof" lets it into .htaccess, which httpd reads
# only while it maps a request: "Spanprof On" there, in a <VirtualHost>
# that is off, traces from a child's first request on, its variables
# (here in a response header) and span ids alike.
{
    my $dir = new_dir();
    my $vh = free_port();
    my $port = httpd_conf($dir, modules => ['headers'], extra => <<"EXTRA");
Listen 127.0.0.1:$vh
<VirtualHost 127.0.0.1:$vh>
    Spanprof Off
    Header always set X-Span-Id "%{SPANPROF_SPAN_ID}e"
</VirtualHost>
<Directory $dir/htdocs/lst>
    AllowOverrideList Spanprof
</Directory>
EXTRA
    mkdir "$dir/htdocs/lst";
    chmod 0755, "$dir/htdocs/lst";
    write_file("$dir/htdocs/lst/.htaccess", "Spanprof On\n");
    write_file("$dir/htdocs/lst/x.html", "x\n");
    chmod 0644, "$dir/htdocs/lst/.htaccess", "$dir/htdocs/lst/x.html";
    my $httpd = httpd_start($dir, $port, OTEL_BSP_SCHEDULE_DELAY => '100',
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'AllowOverrideList: httpd starts')
        or diag(read_file("$dir/error.log"));
    my $t = sprintf '%032x', 0x5c1000;
    my $hd = `curl -s -D - -o /dev/null -H 'traceparent: 00-$t-00f067aa0ba902b7-01' http://127.0.0.1:$vh/lst/x.html`;
    my ($sid) = $hd =~ /^X-Span-Id: ([0-9a-f]{16})\r?$/mi;
    ok($sid, 'AllowOverrideList, .htaccess On in a vhost that is off: the '
             . 'first request has its variables') or diag($hd);
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $t });
    is($span && $span->{spanId}, $sid // 'none',
       'AllowOverrideList, .htaccess On: its span is the one they name');
    stop($httpd);
}

done_testing();
