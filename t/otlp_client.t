#!/usr/bin/perl
# spanprof's OTLP/gRPC client against an OTLP receiver nobody here wrote
# (t/receiver: grpc-js, otlp-transformer's generated decoders,
# pprof-format): requests arrive and decode, over plaintext and TLS with a
# self-signed certificate, with the headers as metadata; UNAVAILABLE,
# RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED are retried with backoff within
# the bounds, other codes are reported once; a collector that is absent,
# or dies, is reached again when it comes back.
#
# The client is driven by t/bin/otlp_send.c, built here against
# build/libspanprof_export.a (or $SPANPROF_BUILD/...), which sends
# hand-encoded requests.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir free_port read_file write_file);
use Spanprof::Receiver qw(attribute);

Spanprof::Receiver::skip_unless_ready();

# The harness's own settings must not leak into the driver's.
delete $ENV{$_} for grep { /^(OTEL_|SPLUNK_)/ } keys %ENV;

my $top = top_dir();
my $dir = new_dir();
my $DRIVER = "$dir/otlp_send";
my $build = $ENV{SPANPROF_BUILD} // "$top/build";

# --- the driver

{
    my @libs = split ' ', `pkg-config --libs grpc libprotobuf-c zlib libdw`;
    my @cmd = ('cc', '-std=c11', '-D_GNU_SOURCE', '-O1', '-Wall', '-Wextra',
               '-Werror', "-I$top/core/include", "$top/t/bin/otlp_send.c",
               "$build/libspanprof_export.a",
               "$build/libspanprof_core.a", @libs, '-lelf', '-lpthread',
               '-lm', '-o', $DRIVER);
    my $out = `@cmd 2>&1`;
    ok($? == 0 && -x $DRIVER, 'otlp_send builds against the exporter archive')
        or BAIL_OUT("cannot build t/bin/otlp_send.c (make build first?):\n"
                    . $out);
}

my %children;
my $runs = 0;
# Interrupted, still clean up (END blocks run on exit, not on signals).
$SIG{INT} = $SIG{TERM} = sub { exit 1 };
END { local $?; for (keys %children) { kill 'KILL', $_; waitpid($_, 0) } }

# Starts the driver; returns a handle for finish().
sub start_driver {
    my (%a) = @_;
    my $log = "$dir/driver-" . ++$runs . '.log';
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        %ENV = (%ENV, %{ $a{env} // {} });
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $log;
        open STDERR, '>&', \*STDOUT;
        exec $DRIVER, @{ $a{args} // [] } or die "exec: $!";
    }
    $children{$pid} = 1;
    return { pid => $pid, log => $log, start => time };
}

# "attempt N: ... failed: NAME (CODE) ...; retry in D ms" or "; no retry"
my $ATTEMPT = join '', '^attempt (\d+): .*? ',
                       '(?:failed: (\w+) \((\d+)\)|succeeded)',
                       '.*; (?:retry in (\d+) ms|no retry)$';
$ATTEMPT = qr/$ATTEMPT/;

# Waits for the driver (killed after $timeout s); returns what it said:
#   rc, out, wall (seconds), results (one hash per "result" line),
#   attempts (per call: n, name, code, delay or undef when no retry).
sub finish {
    my ($h, $timeout) = @_;
    my $end = time + ($timeout // 30);
    my $rc;
    while (1) {
        if (waitpid($h->{pid}, WNOHANG) == $h->{pid}) { $rc = $? >> 8; last }
        if (time > $end) {
            kill 'KILL', $h->{pid};
            waitpid($h->{pid}, 0);
            $rc = -1;
            last;
        }
        sleep 0.01;
    }
    delete $children{ $h->{pid} };
    my %r = (rc => $rc, wall => time - $h->{start},
             out => read_file($h->{log}), results => [], attempts => []);
    for my $line (split /\n/, $r{out}) {
        if ($line =~ /^result (.*)/) {
            push @{ $r{results} }, { map { split /=/, $_, 2 } split ' ', $1 };
        } elsif ($line =~ $ATTEMPT) {
            push @{ $r{attempts} }, { n => $1, name => $2 // 'OK',
                                      code => $3 // 0, delay => $4 };
        }
    }
    $r{result} = $r{results}[-1] // {};
    return \%r;
}

sub send_otlp { my (%a) = @_; finish(start_driver(%a), $a{timeout}) }

# The requests $r received after the first $n; their number in scalar
# context.
sub after {
    my ($r, $n) = @_;
    my @all = $r->requests;
    my @new = @all[$n .. $#all];
    return wantarray ? @new : scalar @new;
}

# --- plaintext: what arrives, decoded by the receiver

my $recv = Spanprof::Receiver->start(dir => $dir);
my $url = 'http://127.0.0.1:' . $recv->port;

my $d = send_otlp(args => ['--endpoint', $url, '--body', 'body: ünïcode',
                           '--service', 'checkout']);
is($d->{rc}, 0, 'a log export succeeds') or diag $d->{out};
is($d->{result}{code}, 0, '... with status OK');
is($d->{result}{attempts}, 1, '... in one attempt');
my ($req) = $recv->wait_requests(1);
ok($req, 'the receiver got the request') or diag $recv->stderr;
$req //= {};
is($req->{path}, '/opentelemetry.proto.collector.logs.v1.LogsService/Export',
   '... on the logs method');
my $rl = $req->{request}{resourceLogs}[0] // {};
is(attribute($rl->{resource}{attributes}, 'service.name'), 'checkout',
   'its decoder reads the resource attribute');
my $lr = $rl->{scopeLogs}[0]{logRecords}[0] // {};
is($lr->{body}{stringValue}, 'body: ünïcode', '... and the LogRecord body');
is($rl->{scopeLogs}[0]{scope}{name}, 'otel.profiling', '... and the scope');
is($lr->{timeUnixNano}, '1700000000123456789', '... and the time');
like($req->{metadata}{'user-agent'} // '', qr{^spanprof/\d+\.\d+\.\d+ },
     'the user agent names spanprof');

my $n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--signals', 'logs',
                        '--payload', 'empty']);
is($d->{result}{code}, 0, 'an empty request (zero bytes) is accepted');
($req) = after($recv, $n);
is($req->{request_bytes}, 0, '... and arrives empty');

$n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--payload', 'pprof']);
is($d->{result}{code}, 0, 'a pprof-gzip-base64 body is exported');
($req) = after($recv, $n);
$lr = $req->{request}{resourceLogs}[0]{scopeLogs}[0]{logRecords}[0] // {};
my $prof = $lr->{pprof}{resolved};
ok($prof, 'pprof-format decodes it after gunzip') or diag explain $lr;
$prof //= {};
is_deeply($prof->{sample_types}, [['samples', 'count'],
                                  ['cpu', 'nanoseconds']], '... sample types');
is($prof->{period}, 10000000, '... period');
my $frame = $prof->{samples}[0]{frames}[0] // {};
is("$frame->{function} $frame->{file}:$frame->{line} $frame->{mapping} "
   . "$frame->{build_id}", 'main otlp_send.c:42 /usr/bin/otlp_send abc123',
   '... and the frame with its mapping');
is($prof->{samples}[0]{labels}{trace_id}, '4bf92f3577b34da6a3ce929d0e0e4736',
   '... and its labels');

# Both signals through one client: one channel, one connection.
$n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--signals', 'logs,traces']);
is(join(',', map { $_->{code} } @{ $d->{results} }), '0,0',
   'logs and traces through one shared client');
my @two = after($recv, $n);
is(join(',', map { $_->{signal} } @two), 'logs,traces', '... both arrive');
is($two[0]{peer}, $two[1]{peer}, '... over the same connection');
my $span = $two[1]{request}{resourceSpans}[0]{scopeSpans}[0]{spans}[0] // {};
is("$span->{traceId} $span->{spanId} $span->{name}",
   '4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 GET /otlp_send',
   'the span decodes with its ids');

# --- headers

my $SECRET = 's3cr3t-t0ken';
$n = () = $recv->requests;
$d = send_otlp(env => { OTEL_EXPORTER_OTLP_ENDPOINT => $url,
                        OTEL_EXPORTER_OTLP_HEADERS =>
                            "X-SF-Token=$SECRET%2Cpart%3D2, Api-Key = a%20b" },
               args => ['--signals', 'logs,traces']);
is($d->{rc}, 0, 'export with OTEL_EXPORTER_OTLP_HEADERS') or diag $d->{out};
@two = after($recv, $n);
is(scalar @two, 2, '... two calls');
for my $r (@two) {
    is($r->{metadata}{'x-sf-token'}, "$SECRET,part=2",
       "the header arrives lowercased and percent-decoded ($r->{signal})");
    is($r->{metadata}{'api-key'}, 'a b', "... the second one too");
}
unlike($d->{out}, qr/\Q$SECRET\E/, 'the driver never shows a header value');

$d = send_otlp(env => { OTEL_EXPORTER_OTLP_HEADERS => "Bad/Key=$SECRET" },
               args => ['--endpoint', $url]);
is($d->{rc}, 2, 'a header key gRPC cannot send is refused up front');
like($d->{out}, qr{"Bad/Key" is not a valid gRPC metadata key},
     '... naming the key');
unlike($d->{out}, qr/\Q$SECRET\E/, '... not the value');

# --- statuses that are not retried

$recv->control(status => 'INVALID_ARGUMENT',
               message => 'bad batch: field 7 is wrong');
$n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--attempts', 5,
                        '--base', 50]);
is($d->{result}{name}, 'INVALID_ARGUMENT', 'INVALID_ARGUMENT is reported');
is($d->{result}{attempts}, 1, '... and not retried');
is($d->{result}{retryable}, 0, '... as not retryable');
is(scalar(after($recv, $n)), 1, '... the receiver saw one call');
is(() = $d->{out} =~ /^message .*"bad batch: field 7 is wrong"/mg, 1,
   '... with its status text, once');
$recv->control();

$n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--attempts', 5, '--signals',
    '/opentelemetry.proto.collector.logs.v1.LogsService/Nope']);
is($d->{result}{name}, 'UNIMPLEMENTED', 'an unknown method is UNIMPLEMENTED');
is($d->{result}{attempts}, 1, '... not retried');
like($d->{out}, qr/^message .*does not implement/m, '... with the status text');

$d = send_otlp(args => ['--endpoint', $url, '--payload', 'garbage']);
is($d->{result}{name}, 'INVALID_ARGUMENT',
   'bytes the independent decoder refuses are refused (the check can fail)');

$recv->control(partial => { rejected => 3, message => 'three too old' });
$d = send_otlp(args => ['--endpoint', $url]);
is($d->{result}{code}, 0, 'a partial success is a success');
is($d->{result}{rejected}, 3, '... with the rejected count read back');
like($d->{out}, qr/^message .*partial success: 3 rejected "three too old"/m,
     '... and the server\'s message');
$recv->control();

# --- RESOURCE_EXHAUSTED: retried with backoff

$recv->control(status => 'RESOURCE_EXHAUSTED', message => 'slow down',
               times => 2);
$n = () = $recv->requests;
$d = send_otlp(args => ['--endpoint', $url, '--attempts', 5, '--base', 100,
                        '--max', 150]);
is($d->{result}{code}, 0, 'RESOURCE_EXHAUSTED twice, then OK: delivered');
is($d->{result}{attempts}, 3, '... on the third attempt');
is(join(',', map { $_->{answer}{code} } after($recv, $n)), '8,8,0',
   '... the receiver answered 8, 8, 0');
my @a = @{ $d->{attempts} };
ok(defined $a[0]{delay} && $a[0]{delay} <= 100
   && defined $a[1]{delay} && $a[1]{delay} <= 150,
   '... waits within the backoff ceilings 100 and 150 ms')
    or diag $d->{out};
like($d->{out}, qr/RESOURCE_EXHAUSTED \(8\) "slow down"/,
     '... each failure is described with its status text');

$recv->control(status => 'RESOURCE_EXHAUSTED', message => 'slow down');
$d = send_otlp(args => ['--endpoint', $url, '--attempts', 3, '--base', 20]);
is("$d->{result}{name} $d->{result}{attempts} $d->{result}{retryable}",
   'RESOURCE_EXHAUSTED 3 1', 'always RESOURCE_EXHAUSTED: 3 attempts, given up');
$recv->control();

# --- a stalled receiver: DEADLINE_EXCEEDED within the timeout

$recv->control(stall_ms => -1);
$d = send_otlp(env => { OTEL_EXPORTER_OTLP_TIMEOUT => '700ms' },
               args => ['--endpoint', $url]);
is($d->{result}{name}, 'DEADLINE_EXCEEDED',
   'a stalled receiver gives DEADLINE_EXCEEDED');
my $ms = $d->{result}{elapsed_ms} // 0;
ok($ms >= 650 && $ms <= 1200, "... after the 700 ms timeout (took $ms ms)");
ok($d->{wall} < 2.5, sprintf('... the driver ends in %.2f s', $d->{wall}));

$d = send_otlp(args => ['--endpoint', $url, '--timeout', 500, '--attempts', 0,
                        '--max-elapsed', 1300, '--base', 100, '--max', 200]);
is($d->{result}{name}, 'DEADLINE_EXCEEDED', 'stalled, with retries');
ok($d->{result}{attempts} >= 2, "... retried ($d->{result}{attempts} calls)");
$ms = $d->{result}{elapsed_ms} // 0;
ok($ms <= 1300 + 200, "... within the 1300 ms total bound (took $ms ms)");
$recv->control();
$recv->stop;

# --- the collector absent: UNAVAILABLE, retried

my $port = free_port();
$d = send_otlp(args => ['--endpoint', "http://127.0.0.1:$port",
                        '--attempts', 3, '--base', 100, '--max', 150]);
is("$d->{result}{name} $d->{result}{retryable}", 'UNAVAILABLE 1',
   'no receiver: UNAVAILABLE, retryable');
is(join(',', map { $_->{name} } @{ $d->{attempts} }),
   'UNAVAILABLE,UNAVAILABLE,UNAVAILABLE', '... tried 3 times');
@a = @{ $d->{attempts} };
ok(defined $a[0]{delay} && $a[0]{delay} <= 100 && defined $a[1]{delay}
   && $a[1]{delay} <= 150 && !defined $a[2]{delay},
   '... with jittered waits under the ceilings, none after the last')
    or diag $d->{out};
is($d->{rc}, 1, '... and the driver says it failed');

# The receiver appears while the client retries.
my $h = start_driver(args => ['--endpoint', "http://127.0.0.1:$port",
                              '--attempts', 0, '--max-elapsed', 20000,
                              '--base', 250, '--max', 1000]);
sleep 1.2;
$recv = Spanprof::Receiver->start(dir => $dir, port => $port);
my $up = time;
$d = finish($h, 25);
my $late = time - $up;
is($d->{result}{code}, 0, 'receiver started during the retries: delivered')
    or diag $d->{out};
ok($d->{result}{attempts} >= 2, "... after $d->{result}{attempts} attempts");
is(scalar($recv->requests), 1, '... exactly once');
ok($late < 4, sprintf('... %.1f s after the receiver listened', $late));

# The receiver dies between two exports of one client and comes back.
$h = start_driver(args => ['--endpoint', "http://127.0.0.1:$port",
                           '--signals', 'logs,logs', '--pause', 1000,
                           '--attempts', 0, '--max-elapsed', 15000,
                           '--base', 200, '--max', 500]);
ok(scalar($recv->wait_requests(2, 10)) >= 2, 'first export of a client')
    or diag read_file($h->{log});
# Killed only once the client has its answer: killed between reading the
# request and answering, the receiver would have the client send the first
# export again, to the next receiver (seen on a loaded machine).
my $answered = time + 10;
sleep 0.01 until (read_file($h->{log}) // '') =~ /^result /m
                 || time > $answered;
$recv->stop('KILL');
sleep 2;
$recv = Spanprof::Receiver->start(dir => $dir, port => $port);
$d = finish($h, 25);
my @res = @{ $d->{results} };
is(join(',', map { $_->{code} } @res), '0,0',
   'receiver killed and restarted: the same client delivers again')
    or diag $d->{out};
ok(@res == 2 && $res[1]{attempts} >= 2,
   '... after retrying while it was gone');
is(scalar($recv->requests), 1, '... the new receiver got it once');
$recv->stop;

# --- TLS with a self-signed certificate made here

SKIP: {
    my $openssl = `openssl version 2>&1`;
    skip 'the openssl command is missing (tools/deps.sh installs it)', 12
        if $?;
    my $out = `openssl req -x509 -newkey ec \\
        -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \\
        -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \\
        -keyout $dir/key.pem -out $dir/cert.pem 2>&1`;
    is($?, 0, 'openssl makes a self-signed certificate') or diag $out;

    $recv = Spanprof::Receiver->start(dir => $dir,
                                      tls => ["$dir/cert.pem", "$dir/key.pem"]);
    my $tls = 'https://localhost:' . $recv->port;
    $d = send_otlp(env => { OTEL_EXPORTER_OTLP_ENDPOINT => $tls,
                            OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/cert.pem",
                            OTEL_EXPORTER_OTLP_HEADERS =>
                                "X-SF-Token=$SECRET" },
                   args => ['--signals', 'logs,traces']);
    is(join(',', map { $_->{code} } @{ $d->{results} }), '0,0',
       'TLS trusted through OTEL_EXPORTER_OTLP_CERTIFICATE') or diag $d->{out};
    my @got = $recv->requests;
    is(join(',', map { $_->{signal} } @got), 'logs,traces', '... both arrive');
    is(attribute($got[0]{request}{resourceLogs}[0]{resource}{attributes},
                 'service.name'), 'otlp_send', '... and decode');
    is($got[0]{metadata}{'x-sf-token'}, $SECRET, '... with the headers');
    unlike($d->{out}, qr/\Q$SECRET\E/, '... which the driver never shows');

    $d = send_otlp(args => ['--endpoint', $tls, '--attempts', 1]);
    is($d->{result}{name}, 'UNAVAILABLE',
       'the system trust store does not trust it: UNAVAILABLE');
    is(scalar($recv->requests), 2, '... and nothing is delivered');

    # Without a certificate file the client asks gRPC for its default
    # roots; pointing gRPC's own override at ours shows it does.
    $d = send_otlp(env => { GRPC_DEFAULT_SSL_ROOTS_FILE_PATH =>
                                "$dir/cert.pem" },
                   args => ['--endpoint', $tls, '--attempts', 1]);
    is($d->{result}{code}, 0, 'no certificate file: gRPC\'s default roots')
        or diag $d->{out};

    $d = send_otlp(args => ['--endpoint', 'http://localhost:' . $recv->port,
                            '--attempts', 1, '--timeout', 2000]);
    isnt($d->{result}{code}, 0, 'plaintext to a TLS port fails');

    $d = send_otlp(args => ['--endpoint', $tls, '--certificate',
                            "$dir/missing.pem"]);
    is($d->{rc}, 2, 'a missing certificate file fails the client');
    like($d->{out}, qr{cannot read the certificate file \S*/missing\.pem},
         '... naming the file');
    $recv->stop;
}

done_testing();
