#!/usr/bin/perl
# Requests over TLS, as most servers take them: real nginx (ssl, http2) and
# real apache2 (mod_ssl, mod_http2) with a self-signed certificate, curl
# over HTTP/1.1 and over HTTP/2 negotiated with ALPN, the independent OTLP
# receiver. Each span says url.scheme "https", the protocol the request
# came in, and the TLS port; a plain-text request next to them still says
# "http".

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Spanprof::Server qw(new_dir read_file free_port nginx_conf nginx_start
                        httpd_conf httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(curl_case wait_spans);

Spanprof::Receiver::skip_unless_ready(curl => 1, openssl => 1);

sub certificate {
    my ($dir) = @_;
    system("openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
           . "-subj /CN=localhost -keyout $dir/key.pem -out $dir/cert.pem "
           . ">/dev/null 2>&1") == 0
        or die 'openssl req failed';
    chmod 0644, "$dir/key.pem", "$dir/cert.pem";
}

# One request per way in; the span of each, found by its trace id (the
# client sends a traceparent, so the test knows it).
sub check_server {
    my (%o) = @_;
    my $recv = $o{recv};
    my $serial = 0;
    for my $way ([ 'https', '1.1', $o{tls}, 0 ], [ 'https', '2', $o{tls}, 1 ],
                 [ 'http', '1.1', $o{plain}, 0 ])
    {
        my ($scheme, $version, $port, $h2) = @$way;
        my $trace = sprintf '%032x', 0x5ec0000 + ++$serial + 16 * $o{base};
        my @cmd = ('curl', '-s', '-k', '-m', '10', '-o', '/dev/null',
                   '-w', '%{http_code}|%{http_version}',
                   '-H', "traceparent: 00-$trace-00f067aa0ba902b7-01");
        push @cmd, $h2 ? '--http2' : '--http1.1' if $scheme eq 'https';
        push @cmd, "$scheme://localhost:$port/";
        open my $fh, '-|', @cmd or die "curl: $!";
        my $out = do { local $/; <$fh> } // '';
        close $fh;
        my ($code, $got_version) = split /\|/, $out;
        my $what = "$o{server}, $scheme over HTTP/$version";
        is($code, 200, "$what: answered");
        is($got_version, $version, "$what: curl spoke HTTP/$version");
        my ($span) = wait_spans($recv, sub { $_[0]->{traceId} eq $trace });
        ok($span, "$what: the span arrives") or next;
        my %attr = map { $_ => Spanprof::Receiver::attribute(
                                  $span->{attributes}, $_) }
                   qw(url.scheme network.protocol.version server.port
                      http.response.status_code);
        is($attr{'url.scheme'}, $scheme, "$what: url.scheme");
        is($attr{'network.protocol.version'}, $version,
           "$what: network.protocol.version");
        is($attr{'server.port'}, $port, "$what: server.port");
        is($attr{'http.response.status_code'}, 200,
           "$what: http.response.status_code");
    }
}

my %env = (OTEL_BSP_SCHEDULE_DELAY => '100');

{
    my $dir = new_dir();
    certificate($dir);
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $tls = free_port();
    my $plain = nginx_conf($dir, server => <<"SERVER");
        listen 127.0.0.1:$tls ssl http2;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
SERVER
    my $nginx = nginx_start($dir, $plain, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($nginx, 'nginx starts with TLS and the module')
        or diag(read_file("$dir/error.log"));
    check_server(server => 'nginx', recv => $recv, tls => $tls,
                 plain => $plain, base => 0);
    stop($nginx);
    unlike(read_file("$dir/error.log"), qr/\[(alert|emerg|crit)\]/,
           'nginx: no alert in the error log');
}

{
    my $dir = new_dir();
    certificate($dir);
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $tls = free_port();
    my $plain = httpd_conf($dir, modules => [qw(socache_shmcb ssl http2)],
                           extra => <<"EXTRA");
Listen 127.0.0.1:$tls
<VirtualHost 127.0.0.1:$tls>
    SSLEngine on
    SSLCertificateFile $dir/cert.pem
    SSLCertificateKeyFile $dir/key.pem
    Protocols h2 http/1.1
</VirtualHost>
EXTRA
    my $httpd = httpd_start($dir, $plain, %env,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
    ok($httpd, 'httpd starts with mod_ssl, mod_http2 and the module')
        or diag(read_file("$dir/error.log"));
    check_server(server => 'httpd', recv => $recv, tls => $tls,
                 plain => $plain, base => 1);
    stop($httpd);
    unlike(read_file("$dir/error.log"), qr/\[[\w:]*(alert|emerg|crit)\]/,
           'httpd: no alert in the error log');
}

done_testing();
