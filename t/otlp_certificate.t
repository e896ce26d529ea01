#!/usr/bin/perl
# OTEL_EXPORTER_OTLP_CERTIFICATE and its directives with real nginx and
# apache2 exporting over TLS to the independent receiver (t/receiver) with
# a self-signed certificate made here:
# - the certificate itself: spans arrive over TLS;
# - a file that is not a PEM certificate (a private key), from the
#   environment: nginx -t passes with a warning naming the variable, and
#   the default (the system's trust store) is used: the exporter runs (it
#   used to exit at every start, restarted forever) and says that the
#   collector's certificate does not verify;
# - the same file in the directive: the configuration test fails, naming
#   the directive (nginx and apache2);
# - a file only root may read (the exporter runs as the workers' user):
#   the configuration test and the start say that user cannot read it;
# - a PEM certificate that did not sign the collector's: the handshake
#   fails, said once per signal, the exporter runs on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file nginx_conf nginx_test nginx_start
                        httpd_conf httpd_test stop http_get wait_until);
use Spanprof::Receiver;
use Spanprof::Cases qw(spans);

Spanprof::Receiver::skip_unless_ready(openssl => 1);

my $dir = new_dir();
for my $name (qw(collector other)) {
    my $out = `openssl req -x509 -newkey ec \\
        -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \\
        -subj /CN=localhost -addext subjectAltName=DNS:localhost \\
        -keyout $dir/$name.key -out $dir/$name.pem 2>&1`;
    die "openssl: $out" if $?;
    # The exporter runs as the workers' user.
    chmod 0644, "$dir/$name.key", "$dir/$name.pem";
}
my $recv = Spanprof::Receiver->start(dir => $dir,
    tls => ["$dir/collector.pem", "$dir/collector.key"]);
my $endpoint = 'https://localhost:' . $recv->port;

# nginx with %env for 2 s of requests; its error log.
sub run_nginx {
    my (%env) = @_;
    my $run = new_dir();
    my $port = nginx_conf($run, log_level => 'info');
    my $pid = nginx_start($run, $port, OTEL_EXPORTER_OTLP_ENDPOINT => $endpoint,
                          OTEL_BSP_SCHEDULE_DELAY => '100ms', %env);
    ok($pid, 'nginx starts') or return '';
    for (1 .. 20) {
        http_get($port, '/');
        sleep 0.1;
    }
    stop($pid);
    return read_file("$run/error.log");
}

my $log = run_nginx(OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/collector.pem");
ok(scalar(spans($recv)) > 0, 'its own certificate: spans arrive over TLS')
    or diag($log);

# From the environment: warned, the default used.
my $check = new_dir();
nginx_conf($check);
my ($rc, $out) = nginx_test($check,
    OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/collector.key");
is($rc, 0, 'a key in the variable: nginx -t passes');
like($out, qr/\[warn\] spanprof: invalid value "\Q$dir\E\/collector\.key"(?x)
     \s in \s environment \s variable \s OTEL_EXPORTER_OTLP_CERTIFICATE, \s
     allowed: \s the \s path \s of \s a \s readable \s PEM \s file \s of \s
     certificates .*; \s using \s the \s default/,
     '... with a warning naming the variable, the value and what is allowed');

my $n = () = spans($recv);
$log = run_nginx(OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/collector.key");
is(() = $log =~ /spanprof: exporter process \d+ started/g, 1,
   'a key in the variable: one exporter for the whole run');
unlike($log, qr/spanprof-exporter: cannot start/,
       '... which does not fail at its start');
like($log, qr/export failed: OTLP export of traces to \Q$endpoint\E(?x)
     \s failed: \s UNAVAILABLE .* certificate \s verify \s failed/,
     '... and says the collector\'s certificate does not verify');
is(scalar(spans($recv)), $n, '... against the system trust store');

# In the directive: the configuration test fails.
nginx_conf($check,
           http => "spanprof_otlp_certificate $dir/collector.key;");
($rc, $out) = nginx_test($check);
isnt($rc, 0, 'a key in spanprof_otlp_certificate: nginx -t fails');
like($out, qr/\[emerg\] invalid value "\Q$dir\E\/collector\.key" in(?x)
     \s "spanprof_otlp_certificate" \s directive, \s allowed: \s the \s
     path \s of \s a \s readable \s PEM \s file \s of \s certificates/,
     '... naming the directive, the value and what is allowed');
httpd_conf($check, extra => "SpanprofOtlpCertificate $dir/collector.key");
($rc, $out) = httpd_test($check);
isnt($rc, 0, 'a key in SpanprofOtlpCertificate: apache2 -t fails');
like($out, qr/invalid value "\Q$dir\E\/collector\.key" in(?x)
     \s "SpanprofOtlpCertificate" \s directive, \s allowed: \s the \s path
     \s of \s a \s readable \s PEM \s file \s of \s certificates/,
     '... naming the directive, the value and what is allowed');

# A certificate only root may read: the master (root) can, the exporter
# (the workers' user) cannot. The configuration test and the start say so,
# naming that user, from the variable or a directive; the exporter then
# uses the system trust store without a warning of its own that blamed
# the value.
SKIP: {
    skip 'the servers run as root only when the test does', 8 if $> != 0;
    my $private = "$dir/root-only.pem";
    system('cp', "$dir/collector.pem", $private) == 0 or die 'cp';
    chmod 0600, $private;
    my $unreadable = qr/\[(?:spanprof:)?warn\].* spanprof: the certificate(?x)
        \s file \s "\Q$private\E" \s \((environment \s variable|directive)
        \s OTEL_EXPORTER_OTLP_CERTIFICATE\) \s cannot \s be \s read \s by
        \s user \s nobody, \s uid \s \d+, \s which \s the \s exporter \s
        runs \s as: \s Permission \s denied; \s the \s exporter \s uses
        \s the \s system \s trust \s store/;

    nginx_conf($check);
    ($rc, $out) = nginx_test($check, OTEL_EXPORTER_OTLP_CERTIFICATE => $private);
    is($rc, 0, 'a root-only file in the variable: nginx -t passes');
    like($out, $unreadable, '... saying the exporter\'s user cannot read it')
        or diag $out;
    nginx_conf($check, http => "spanprof_otlp_certificate $private;");
    ($rc, $out) = nginx_test($check);
    like($out, $unreadable, '... in spanprof_otlp_certificate too')
        or diag $out;
    httpd_conf($check, extra => "SpanprofOtlpCertificate $private");
    ($rc, $out) = httpd_test($check);
    is($rc, 0, 'a root-only file in SpanprofOtlpCertificate: apache2 -t '
       . 'passes');
    like($out, $unreadable, '... saying the exporter\'s user cannot read it')
        or diag $out;

    $log = run_nginx(OTEL_EXPORTER_OTLP_CERTIFICATE => $private);
    is(() = $log =~ /$unreadable/g, 1, 'at startup: said once');
    like($log, qr/configuration: .*OTEL_EXPORTER_OTLP_CERTIFICATE=\(none\)/,
         '... the startup line shows the system trust store in use');
    unlike($log, qr/invalid value "\Q$private\E"/,
           '... and the exporter does not call the value invalid');
}

# A certificate that did not sign the collector's.
$log = run_nginx(OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/other.pem");
my @failed = grep { /export failed/ } split /\n/, $log;
is(scalar(grep { /OTLP export of traces .*certificate verify failed/ }
          @failed), 1, 'another CA: the handshake failure is said once')
    or diag(join "\n", @failed);
is(() = $log =~ /spanprof: exporter process \d+ started/g, 1,
   '... and the exporter runs on');
is(scalar(spans($recv)), $n, '... nothing is sent');

done_testing();
