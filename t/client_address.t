#!/usr/bin/perl
# client.address and network.peer.address behind a proxy: with nginx's
# realip (set_real_ip_from, real_ip_header X-Forwarded-For) and httpd's
# mod_remoteip, client.address is the client the proxy names, as the
# server's own $remote_addr / %a say, and network.peer.address stays the
# connection's peer; without them, both are the peer. Also after an
# internal redirect (try_files to a named location). Real nginx and apache2, curl, the
# independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_start httpd_conf
                        httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $serial = 0;

# @cases: [path, X-Forwarded-For or undef, client.address, status]
sub check {
    my ($server, $recv, $port, @cases) = @_;
    for my $c (@cases) {
        my ($path, $xff, $client, $status) = @$c;
        my $trace = sprintf '%032x', 0xadd0 + ++$serial;
        my $what = "$server: $path" . ($xff ? " from $xff" : '');
        my $h = $xff ? "-H 'X-Forwarded-For: $xff'" : '';
        my $code = `curl -s -o /dev/null -w '%{http_code}' $h -H 'traceparent: 00-$trace-00f067aa0ba902b7-01' http://127.0.0.1:$port$path`;
        is($code, $status, "$what: answered $status");
        my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
        ok($span, "$what: the span arrives") or next;
        is(Spanprof::Receiver::attribute($span->{attributes},
                                         'client.address'),
           $client, "$what: client.address $client");
        is(Spanprof::Receiver::attribute($span->{attributes},
                                         'network.peer.address'),
           '127.0.0.1', "$what: network.peer.address is the peer");
    }
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir, server => <<"SERVER");
        location /behind {
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Forwarded-For;
            root $dir;
            try_files /none \@gone;
        }
        location \@gone { return 200 "gone\\n"; }
SERVER
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts') or diag(read_file("$dir/error.log"));
    check('nginx', $recv, $port,
          [ '/behind', '203.0.113.7', '203.0.113.7', 200 ],
          [ '/behind', undef, '127.0.0.1', 200 ],
          [ '/', '203.0.113.7', '127.0.0.1', 200 ]);
    stop($nginx);
}

# A unix-domain listener: its peer has no address (nginx's "unix:" is a
# placeholder, not one), so neither attribute is there.
{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = nginx_conf($dir, server => "        listen unix:$dir/s.sock;");
    my $nginx = nginx_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts with a unix-domain listener')
        or diag(read_file("$dir/error.log"));
    my $trace = sprintf '%032x', 0xadd0 + ++$serial;
    my $code = `curl -s -o /dev/null -w '%{http_code}' --unix-socket $dir/s.sock -H 'traceparent: 00-$trace-00f067aa0ba902b7-01' http://local/`;
    is($code, 200, 'nginx: unix socket: answered');
    my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
    ok($span, 'nginx: unix socket: the span arrives');
    for my $key (qw(client.address network.peer.address)) {
        is(Spanprof::Receiver::attribute($span->{attributes} // [], $key),
           undef, "nginx: unix socket: no $key");
    }
    stop($nginx);
}

{
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $port = httpd_conf($dir, modules => ['remoteip'], extra => <<"EXTRA");
RemoteIPHeader X-Forwarded-For
RemoteIPTrustedProxy 127.0.0.1
EXTRA
    my $httpd = httpd_start($dir, $port, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts') or diag(read_file("$dir/error.log"));
    check('httpd', $recv, $port,
          [ '/index.html', '203.0.113.7', '203.0.113.7', 200 ],
          [ '/index.html', undef, '127.0.0.1', 200 ]);
    stop($httpd);
}

done_testing();
