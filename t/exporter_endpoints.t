#!/usr/bin/perl
# The exporter with the endpoints operators write, against the independent
# receiver (t/receiver):
# - traces and profiling logs to two endpoints (two channels), one of them
#   stalled (accepts, never answers) or down (refused): the other signal
#   keeps flowing while the exporter runs, not only at its stop, and its
#   memory stays bounded;
# - http://[::1]:PORT (IPv6) and a trailing slash reach the receiver;
# - host:port without a scheme: TLS, or plaintext with
#   OTEL_EXPORTER_OTLP_INSECURE=true;
# - http:// to a TLS port: the failure line hints at https://; TLS to a
#   plaintext port (host:port without a scheme) at http://, and an
#   HTTP/1.x server (OTLP/HTTP's port) at the gRPC port;
# - a value the configuration refuses (no port without a scheme, a path)
#   is said, naming the variable, the value and what is allowed, and the
#   default is used.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::IP;
use POSIX ();
use Test::More;

use Spanprof::Server qw(new_dir free_port read_file);
use Spanprof::Receiver;
use Spanprof::Exporter qw(build_driver start_drive finish_drive_when
                          balanced);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $driver = build_driver($dir);
my $BOUND_KB = 64 * 1024;

my %FAST = (SPLUNK_PROFILER_EXPORT_INTERVAL => 200,
            OTEL_BSP_SCHEDULE_DELAY => 200, OTEL_EXPORTER_OTLP_TIMEOUT => 1000,
            SPANPROF_SERVER => 'nginx', SPANPROF_LOG_LEVEL => 'info');
# Held until the test has what it waits for (finish_drive_when).
my @STEADY = qw(--samples 600 --spans 60 --for-ms 6000 --every-ms 100
                --hold-ms 60000);
my @FEW = qw(--samples 10 --spans 5 --hold-ms 60000);

sub signals {
    my ($rcv, $signal) = @_;
    return scalar grep { $_->{signal} eq $signal && $_->{answer}{code} == 0 }
        $rcv->requests;
}

# All of @FEW's records at $rcv.
sub all_arrived {
    my ($rcv) = @_;
    return sub {
        my ($spans, $samples) = $rcv->collect;
        return @$spans == 5 && @$samples == 10;
    };
}

# One signal's endpoint stalled or down: the other's data arrives while
# the exporter runs, before it is stopped, at the other endpoint only.
for my $case ([ stalled => 'logs' ], [ stalled => 'traces' ],
              [ down => 'logs' ], [ down => 'traces' ])
{
    my ($fault, $bad) = @$case;
    my $good = $bad eq 'logs' ? 'traces' : 'logs';
    my $what = "$bad endpoint $fault";
    my $ok = Spanprof::Receiver->start(dir => $dir);
    my ($stall, $bad_url);
    if ($fault eq 'stalled') {
        $stall = Spanprof::Receiver->start(dir => $dir,
                                           control => { stall_ms => -1 });
        $bad_url = 'http://127.0.0.1:' . $stall->port;
    } else {
        $bad_url = 'http://127.0.0.1:' . free_port();
    }
    my $ok_url = 'http://127.0.0.1:' . $ok->port;
    my %env = (%FAST, OTEL_EXPORTER_OTLP_ENDPOINT => $ok_url,
               ($bad eq 'logs' ? 'SPLUNK_PROFILER_LOGS_ENDPOINT'
                               : 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')
                   => $bad_url);
    my $h = start_drive(dir => $dir, driver => $driver, env => \%env,
                        args => \@STEADY);
    my $meanwhile = 0;
    finish_drive_when($h, sub { ($meanwhile = signals($ok, $good)) >= 3 });
    ok($meanwhile >= 3, "$what: $good keeps flowing meanwhile "
       . "($meanwhile requests before the stop)");
    like($h->{stderr}, qr/started for .* logs otlp \Q@{[ $bad eq 'logs'
         ? $bad_url : $ok_url ]}\E, traces otlp \Q@{[ $bad eq 'logs'
         ? $ok_url : $bad_url ]}\E,/, "$what: two endpoints in the startup line");
    is(signals($ok, $bad), 0, "$what: no $bad at the $good endpoint");
    like($h->{stderr}, qr/\[warn\] .*export failed: OTLP export of $bad(?x)
         \s to \s \Q$bad_url\E \s failed: \s
         @{[ $fault eq 'stalled' ? 'DEADLINE_EXCEEDED' : 'UNAVAILABLE' ]}/,
         "$what: the failure is said, naming the signal and the endpoint");
    my $c = $h->{counters} // {};
    ok(%$c && balanced($c), "$what: the counters add up")
        or diag(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
    ok($h->{hwm_kb} > 0 && $h->{hwm_kb} < $BOUND_KB,
       "$what: peak RSS $h->{hwm_kb} kB under 64 MiB");
    is($h->{exit}, 0, "$what: the exporter exits 0");
}

# Forms that connect.
SKIP: {
    my $v6 = IO::Socket::IP->new(LocalHost => '::1', Listen => 1);
    skip 'no IPv6 loopback', 2 unless $v6;
    close $v6;
    my $rcv = Spanprof::Receiver->start(dir => $dir, host => '::1');
    my $h = finish_drive_when(start_drive(dir => $dir, driver => $driver,
        env => { %FAST, OTEL_EXPORTER_OTLP_ENDPOINT =>
                     'http://[::1]:' . $rcv->port },
        args => \@FEW), all_arrived($rcv));
    ok(signals($rcv, 'traces') && signals($rcv, 'logs'),
       'http://[::1]:PORT: both signals arrive over IPv6')
        or diag($h->{stderr});
    is($h->{counters}{exported}, 15, '... all of them');
}

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = finish_drive_when(start_drive(dir => $dir, driver => $driver,
        env => { %FAST, OTEL_EXPORTER_OTLP_ENDPOINT =>
                     'http://127.0.0.1:' . $rcv->port . '/' },
        args => \@FEW), all_arrived($rcv));
    is($h->{counters}{exported}, 15, 'a trailing slash is ignored');
}

# The driver with %env until $until (a pattern of the exporter's log, or
# a sub) is true, then stopped; its handle.
sub drive_until {
    my ($until, %env) = @_;
    my $h = start_drive(dir => $dir, driver => $driver, env => \%env,
                        args => [qw(--samples 1 --spans 1 --hold-ms 60000)]);
    my $cond = ref $until eq 'CODE' ? $until
             : sub { read_file($h->{log}) =~ $until };
    return finish_drive_when($h, $cond);
}

# http:// to a collector's TLS port: gRPC says only "Socket closed"; the
# line adds that the port may expect TLS. Not when the port refuses.
SKIP: {
    my @cert = Spanprof::Receiver::self_signed($dir);
    skip 'openssl cannot make a certificate', 4 unless @cert;
    my $tls = Spanprof::Receiver->start(dir => $dir, tls => \@cert);
    my $hint = qr/the collector closed the connection at once: if its port(?x)
                  \s expects \s TLS, \s the \s endpoint \s must \s begin
                  \s with \s https:\/\//;
    for my $case ([ 'a TLS port' => $tls->port, 1 ],
                  [ 'a refusing port' => free_port(), 0 ])
    {
        my ($what, $port, $said) = @$case;
        my $url = "http://127.0.0.1:$port";
        my $h = drive_until(qr/export failed: OTLP export of traces/,
                            %FAST, OTEL_EXPORTER_OTLP_ENDPOINT => $url);
        my ($line) = $h->{stderr} =~ /(export failed: OTLP export of traces .*)/;
        like($line // '', qr/\Q$url\E failed: UNAVAILABLE/,
             "http:// to $what: the failure is said") or diag $h->{stderr};
        if ($said) {
            like($line // '', $hint, '... with the hint that it may be TLS');
        } else {
            unlike($line // '', $hint, '... without the TLS hint');
        }
    }
}

# The reverse: TLS to a plaintext port (most often host:port written
# without a scheme): OpenSSL says "wrong version number", or the port
# closes the connection; the line adds that the port may be plaintext,
# and for an endpoint without a scheme, why it was TLS. Not when the port
# is TLS and its certificate is not trusted. An HTTP/1.x server (OTLP/HTTP's
# port): the line names the gRPC port.
SKIP: {
    my @cert = Spanprof::Receiver::self_signed($dir, 'untrusted');
    skip 'openssl cannot make a certificate', 10 unless @cert;
    my $plain = Spanprof::Receiver->start(dir => $dir);
    my $tls = Spanprof::Receiver->start(dir => $dir, tls => \@cert);
    my $hint = qr/; the collector did not answer TLS: /;
    my $no_scheme = qr/$hint(?x)an \s endpoint \s without \s a \s scheme \s is
                       \s TLS; \s if \s its \s port \s is \s plaintext, \s write
                       \s http:\/\/host:port \s or \s set
                       \s OTEL_EXPORTER_OTLP_INSECURE=true/;
    my $scheme = qr/$hint(?x)if \s its \s port \s is \s plaintext, \s the
                    \s endpoint \s must \s begin \s with \s http:\/\/$/m;

    # Reads the request, closes without a word (as a gRPC server that
    # does not take what it read for HTTP/2), or answers it as HTTP/1.1.
    my $closer = IO::Socket::IP->new(Listen => 8, LocalHost => '127.0.0.1',
                                     LocalPort => 0, ReuseAddr => 1);
    my $http1 = IO::Socket::IP->new(Listen => 8, LocalHost => '127.0.0.1',
                                    LocalPort => 0, ReuseAddr => 1);
    skip "cannot listen: $!", 10 unless $closer && $http1;
    my @kids;
    for my $srv ([ $closer, '' ],
                 [ $http1, "HTTP/1.1 400 Bad Request\r\n"
                           . "Content-Length: 0\r\nConnection: close\r\n\r\n" ])
    {
        my $pid = fork;
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            while (my $c = $srv->[0]->accept) {
                my $buf;
                sysread($c, $buf, 65536);
                syswrite($c, $srv->[1]) if length $srv->[1];
                close $c;
            }
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }
    my $closer_port = $closer->sockport;
    my $http1_port = $http1->sockport;
    close $_ for $closer, $http1;

    for my $case (
        [ 'without a scheme to a plaintext port',
          '127.0.0.1:' . $plain->port, $no_scheme ],
        [ 'https:// to a plaintext port',
          'https://127.0.0.1:' . $plain->port, $scheme ],
        [ 'without a scheme to a port that closes',
          "127.0.0.1:$closer_port", $no_scheme ],
        [ 'https:// to a TLS port whose certificate is not trusted',
          'https://127.0.0.1:' . $tls->port, undef ],
        [ 'http:// to an HTTP/1.1 server',
          "http://127.0.0.1:$http1_port",
          qr/; the collector answered HTTP\/1\.x: the endpoint must be its(?x)
             \s OTLP\/gRPC \s port \s \(4317 \s by \s default\), \s not
             \s OTLP\/HTTP's \s \(4318\)/ ])
    {
        my ($what, $value, $want) = @$case;
        my $h = drive_until(qr/export failed: OTLP export of traces/,
                            %FAST, OTEL_EXPORTER_OTLP_ENDPOINT => $value);
        my ($line) = $h->{stderr} =~ /(export failed: OTLP export of traces .*)/;
        like($line // '', qr/ failed: UNAVAILABLE/, "$what: the failure is said")
            or diag $h->{stderr};
        if ($want) {
            like($line // '', $want, '... with what to check');
        } else {
            unlike($line // '', $hint, '... without the plaintext hint')
                or diag $line;
        }
    }
    kill 'TERM', @kids;
    waitpid($_, 0) for @kids;
}

# host:port without a scheme, as gRPC clients take it (OpenTelemetry's
# OTLP exporter specification): TLS, unless OTEL_EXPORTER_OTLP_INSECURE.
SKIP: {
    my @cert = Spanprof::Receiver::self_signed($dir, 'scheme-less');
    skip 'openssl cannot make a certificate', 4 unless @cert;
    for my $case ([ 'TLS by default', 'https',
                    Spanprof::Receiver->start(dir => $dir, tls => \@cert),
                    OTEL_EXPORTER_OTLP_CERTIFICATE => $cert[0] ],
                  [ 'plaintext with OTEL_EXPORTER_OTLP_INSECURE=true', 'http',
                    Spanprof::Receiver->start(dir => $dir),
                    OTEL_EXPORTER_OTLP_INSECURE => 'true' ])
    {
        my ($what, $scheme, $rcv, %env) = @$case;
        my $value = '127.0.0.1:' . $rcv->port;
        my $h = drive_until(sub { signals($rcv, 'traces')
                                  && signals($rcv, 'logs') },
                            %FAST, %env, OTEL_EXPORTER_OTLP_ENDPOINT => $value);
        like($h->{stderr}, qr/started for .* logs otlp $scheme:\/\/\Q$value\E,/,
             "\"$value\": $what, as the startup line says");
        ok(signals($rcv, 'traces') && signals($rcv, 'logs'),
           "\"$value\": both signals arrive") or diag $h->{stderr};
    }
}

# Forms the configuration refuses: said, and the default used.
for my $value ('collector', 'http://collector:4317/v1/traces',
               'grpc://collector:4317')
{
    my $h = drive_until(qr/started for/,
                        %FAST, OTEL_EXPORTER_OTLP_ENDPOINT => $value);
    like($h->{stderr}, qr/invalid value "\Q$value\E" in environment(?x)
         \s variable \s OTEL_EXPORTER_OTLP_ENDPOINT, \s allowed: .*
         "https:\/\/host\[:port\]" \s \(TLS\) \s or \s "host:port"
         \s \(TLS \s unless \s OTEL_EXPORTER_OTLP_INSECURE \s is \s true\),
         \s a \s host \s of \s at \s most \s 255 \s bytes;
         \s using \s
         the \s default/, "\"$value\": said, with what is allowed");
    like($h->{stderr}, qr/started for .* logs otlp http:\/\/localhost:4317,/,
         "\"$value\": the default endpoint is used");
}

done_testing;
