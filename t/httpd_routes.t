#!/usr/bin/perl
# httpd's span names and http.route (SPEC 2: "{method} {route}", the route
# the matched <Location>/handler). A request that ends in a <Location> is
# named by that section's path, the last one httpd merged (a more specific
# one that follows a broader one wins); a <LocationMatch> or
# <Location ~ ...> by its regex as written; <Location /> by "/"; a
# <Location> of a <VirtualHost>, and the main server's that apply there,
# alike. Elsewhere, as before: the handler's name (mod_proxy's
# "proxy-server" for a ProxyPass outside any <Location>, "server-status"
# set in a <Directory>), or the method alone (a static file). Real apache2,
# curl, a recording HTTP backend, the OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file free_port httpd_conf httpd_start
                        stop);
use Spanprof::Receiver qw(attribute);
use Spanprof::Upstream;
use Spanprof::Cases qw(curl_case upstream_case wait_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1, apache_modules => ['status']);

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $up = Spanprof::Upstream->start(dir => $dir, proto => 'http');
my $back = 'http://127.0.0.1:' . $up->port;
my ($vhost, $rooted) = (free_port(), free_port());

my $port = httpd_conf($dir, modules => [qw(proxy proxy_http status)],
                      extra => <<"EXTRA");
<Location /api>
    ProxyPass $back/api
</Location>
<Location /api/v2>
    Spanprof On
    ProxyPass $back/v2
</Location>
<LocationMatch "^/items/[0-9]+\$">
    SetHandler server-status
</LocationMatch>
<Location ~ "^/things/[a-z]+\$">
    SetHandler server-status
</Location>
<Directory $dir/htdocs/st>
    SetHandler server-status
</Directory>
ProxyPass /plain $back/plain
Listen 127.0.0.1:$vhost
<VirtualHost 127.0.0.1:$vhost>
    <Location /vapi>
        ProxyPass $back/vapi
    </Location>
</VirtualHost>
Listen 127.0.0.1:$rooted
<VirtualHost 127.0.0.1:$rooted>
    <Location />
        Require all granted
    </Location>
</VirtualHost>
EXTRA
mkdir "$dir/htdocs/st";
chmod 0755, "$dir/htdocs/st";

my $httpd = httpd_start($dir, $port, OTEL_BSP_SCHEDULE_DELAY => '100',
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
ok($httpd, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));

# [ what, port, path, name, http.route, the backend's path or undef ]
my @cases = (
    [ '<Location /api> with ProxyPass', $port, '/api/users',
      'GET /api', '/api', '/api/users' ],
    [ '<Location /api/v2> after <Location /api>', $port, '/api/v2/users',
      'GET /api/v2', '/api/v2', '/v2/users' ],
    [ 'a static file outside any <Location>', $port, '/index.html',
      'GET', undef, undef ],
    [ 'ProxyPass outside any <Location>', $port, '/plain/x',
      'GET proxy-server', 'proxy-server', '/plain/x' ],
    [ 'SetHandler server-status in a <Directory>', $port, '/st/x',
      'GET server-status', 'server-status', undef ],
    [ '<LocationMatch>', $port, '/items/42',
      'GET ^/items/[0-9]+$', '^/items/[0-9]+$', undef ],
    [ '<Location ~ regex>', $port, '/things/abc',
      'GET ^/things/[a-z]+$', '^/things/[a-z]+$', undef ],
    [ '<Location /vapi> of a <VirtualHost>', $vhost, '/vapi/x',
      'GET /vapi', '/vapi', '/vapi/x' ],
    [ 'the main server\'s <Location /api> in a <VirtualHost>', $vhost,
      '/api/x', 'GET /api', '/api', '/api/x' ],
    [ '<Location /> of a <VirtualHost>', $rooted, '/index.html',
      'GET /', '/', undef ],
);

my $serial = 0;
for my $c (@cases) {
    my ($what, $p, $path, $name, $route, $backend) = @$c;
    my $t = sprintf '%032x', 0x7a0e00 + ++$serial;
    my ($case, $code) = curl_case(url => "http://127.0.0.1:$p$path",
        headers => [ [ traceparent => "00-$t-00f067aa0ba902b7-01" ] ]);
    is($code, 200, "$what: 200");
    if (defined $backend) {
        my ($got) = upstream_case($up, $case);
        is($got ? $got->{uri} : undef, $backend,
           "$what: the backend got $backend");
    }
    my ($span) = wait_spans($recv, sub { $_[0]{traceId} eq $t });
    ok($span, "$what: a span") or next;
    is($span->{name}, $name, "$what: named '$name'");
    is(attribute($span->{attributes}, 'http.route'), $route,
       "$what: http.route " . ($route // 'none'));
}
stop($httpd);
done_testing();
