#!/usr/bin/perl
# build/spanprof-exporter end to end: started by sp_exporter_spawn from a
# driver that writes records as a worker does, exporting to the
# independent receiver (grpc-js + otlp-transformer + pprof-format), over
# plain gRPC and TLS with headers, and to the console. Every field of SPEC
# section 5 is checked on what the receiver decoded; go tool pprof reads
# a profile that arrived.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use JSON::PP ();
use MIME::Base64 qw(decode_base64);
use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use Time::HiRes qw(time);

use Spanprof::Server qw(top_dir new_dir read_file write_file wait_until);
use Spanprof::Receiver qw(attribute);
use Spanprof::Exporter qw(build_driver start_drive run_drive
                          finish_drive_when counters balanced);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $driver = build_driver($dir);
my $SECRET = 's3cr3t-token-value';

sub base_env {
    my ($endpoint) = @_;
    return (
        OTEL_EXPORTER_OTLP_ENDPOINT => $endpoint,
        OTEL_EXPORTER_OTLP_HEADERS => "x-spanprof-test=$SECRET,x-other=1",
        SPLUNK_PROFILER_EXPORT_INTERVAL => '300',
        OTEL_BSP_SCHEDULE_DELAY => '300',
        OTEL_SERVICE_NAME => 'drive-svc',
        OTEL_RESOURCE_ATTRIBUTES => 'deployment.environment=test',
        # counters every 200 ms, for exported_all
        SPANPROF_COUNTERS_INTERVAL_MS => '200',
    );
}

# The driver's records are written at once (--samples 40 --spans 5) and
# held until the exporter says it exported all 45 (at most 60 s: a busy
# machine may take seconds to start the exporter and export), then it is
# stopped.
my @ALL = qw(--samples 40 --spans 5 --hold-ms 60000);

sub exported_all {
    my ($h) = @_;
    return sub {
        my $c = counters(read_file($h->{log})) // {};
        return ($c->{exported} // 0) == 45;
    };
}

sub drive_all {
    my (%env) = @_;
    my $h = start_drive(dir => $dir, driver => $driver, env => \%env,
                        args => \@ALL);
    return finish_drive_when($h, exported_all($h));
}

# The records of one signal in the decoded requests, each with its
# resource and scope: (signal, resource key, scope key, records key).
my %SHAPE = (logs => [qw(resourceLogs scopeLogs logRecords)],
             traces => [qw(resourceSpans scopeSpans spans)]);

sub items {
    my ($signal, @requests) = @_;
    my ($rkey, $skey, $ikey) = @{ $SHAPE{$signal} };
    my @r;
    for my $req (grep { $_->{signal} eq $signal } @requests) {
        for my $res (@{ $req->{request}{$rkey} // [] }) {
            for my $sc (@{ $res->{$skey} // [] }) {
                push @r, map { { %$_, resource => $res->{resource},
                                 scope => $sc->{scope} } }
                    @{ $sc->{$ikey} // [] };
            }
        }
    }
    return @r;
}

sub log_records { items('logs', @_) }
sub spans { items('traces', @_) }

# Each [key, expected] of @$want is the attribute's value in $attrs.
sub attributes_are {
    my ($attrs, $want, $what) = @_;
    is(attribute($attrs, $_->[0]), $_->[1], "$what: $_->[0]") for @$want;
}

sub check_resource {
    my ($res, $h, $what) = @_;
    my $a = $res->{attributes};
    attributes_are($a, [
        ['service.name', 'drive-svc'],
        ['telemetry.sdk.name', 'spanprof'],
        ['telemetry.sdk.version', '0.1.0'],
        ['telemetry.sdk.language', 'cpp'],
        ['telemetry.distro.name', 'spanprof'],
        ['telemetry.distro.version', '0.1.0'],
        # the worker's pid (the driver's); the server's executable
        ['process.pid', $h->{driver_pid}],
        ['process.executable.name', 'nginx'],
        ['process.runtime.name', 'nginx'],
        ['process.runtime.version', '1.22.1'],
        # from OTEL_RESOURCE_ATTRIBUTES
        ['deployment.environment', 'test'],
    ], $what);
    ok(length(attribute($a, 'host.name') // ''), "$what: host.name");
}

# symtab: the driver is named from its symbol table, without files or
# lines (its debug info over SPANPROF_DEBUG_MAX_BYTES), but for the first
# address looked up (the leaf's), named from the debug info read once.
sub check_logs {
    my ($h, $what, $requests, %opt) = @_;
    my @records = log_records(@$requests);
    ok(@records >= 1, "$what: profiling log records arrived");
    return unless @records;
    check_resource($records[0]{resource}, $h, "$what logs");
    is($records[0]{scope}{name}, 'otel.profiling', "$what: scope name");
    is($records[0]{scope}{version}, '0.1.0', "$what: scope version");

    my ($samples, $truncated, $bad_frames, $bad_labels) = (0, 0, 0, 0);
    for my $r (@records) {
        my $a = $r->{attributes};
        attributes_are($a, [
            ['com.splunk.sourcetype', 'otel.profiling'],
            ['profiling.data.type', 'cpu'],
            ['profiling.data.format', 'pprof-gzip-base64'],
            ['profiling.instrumentation.source', 'snapshot'],
        ], $what);
        ok(!$r->{pprof_error}, "$what: the body decodes as gzip+pprof")
            or diag($r->{pprof_error});
        my $p = $r->{pprof}{resolved} or next;
        my $n = @{ $p->{samples} };
        is(attribute($a, 'profiling.data.total.frame.count'), 4 * $n,
           "$what: total.frame.count is the frames of its samples");
        is_deeply($p->{sample_types},
                  [[qw(samples count)], [qw(cpu nanoseconds)]],
                  "$what: sample types");
        is_deeply($p->{period_type}, [qw(cpu nanoseconds)],
                  "$what: period type");
        is($p->{period}, 10_000_000, "$what: period is the interval");
        for my $s (@{ $p->{samples} }) {
            $samples++;
            my @names = map { $_->{function} } @{ $s->{frames} };
            $bad_frames++ unless "@names" eq 'drive_leaf drive_mid '
                . 'drive_root main';
            for my $f (@{ $s->{frames} }) {
                my $at = $opt{symtab} && $f->{function} ne 'drive_leaf'
                    ? ($f->{file} // 'unknown') eq 'unknown' && !$f->{line}
                    : ($f->{file} // '') =~ /exporter_drive\.c$/
                      && $f->{line} > 0;
                $bad_frames++ unless $at && $f->{mapping} eq $driver
                    && $f->{build_id} =~ /^[0-9a-f]{40}$/;
            }
            my $l = $s->{labels};
            $bad_labels++ unless $l->{trace_id}
                    eq '4b000000000000000000000000000036'
                && $l->{span_id} eq '00f00000000000b7'
                && $l->{'thread.name'} eq 'drive-worker'
                && $l->{'thread.state'} eq 'running'
                && $l->{'thread.id'} > 0 && $l->{'thread.os.id'} > 0
                && $l->{'source.event.period'} == 10
                && abs($l->{'source.event.time'} - time * 1000) < 600_000;
            $truncated++ if ($l->{'thread.stack.truncated'} // '') eq 'true';
            is_deeply($s->{values}, [1, 10_000_000],
                      "$what: sample values") if $samples == 1;
        }
    }
    is($samples, 40, "$what: all 40 samples arrived");
    is($bad_frames, 0, "$what: every frame named, "
       . ($opt{symtab} ? 'but the first without file and line, with '
                       : 'with file, line, ')
       . 'mapping and build id');
    is($bad_labels, 0, "$what: every sample has the SPEC 5 labels");
    is($truncated, 4, "$what: truncated stacks say so");
}

sub check_traces {
    my ($h, $what, @requests) = @_;
    my @spans = spans(@requests);
    is(scalar @spans, 5, "$what: the 5 spans arrived");
    return unless @spans;
    check_resource($spans[0]{resource}, $h, "$what traces");
    my $s = (sort { $a->{spanId} cmp $b->{spanId} } @spans)[0];
    is($s->{traceId}, '4b000000000000000000000000000036', "$what: trace id");
    is($s->{spanId}, '0100000000000001', "$what: span id");
    is($s->{parentSpanId}, '0000000000000042', "$what: parent span id");
    is($s->{traceState}, 'vendor=value', "$what: trace state");
    is($s->{name}, 'GET /drive', "$what: name");
    is($s->{kind}, 2, "$what: kind SERVER");
    is($s->{status}{code}, 2, "$what: status Error");
    is($s->{endTimeUnixNano} - $s->{startTimeUnixNano}, 2_500_000,
       "$what: start and end times");
    is(attribute($s->{attributes}, 'http.request.method'), 'GET',
       "$what: string attribute");
    is(attribute($s->{attributes}, 'http.response.status_code'), 503,
       "$what: int attribute");
    ok(attribute($s->{attributes}, 'splunk.snapshot.profiling'),
       "$what: bool attribute");
}

sub check_run {
    my ($h, $what) = @_;
    ok(!$h->{timed_out}, "$what: the driver finished");
    is($h->{exit}, 0, "$what: the exporter exits 0 on SIGTERM")
        or diag($h->{stderr});
    my $c = $h->{counters};
    ok($c, "$what: counters logged at exit") or return;
    is($c->{received}, 45, "$what: 45 records received");
    is($c->{exported}, 45, "$what: 45 exported");
    ok(balanced($c), "$what: received = exported + dropped + held");
    unlike($h->{stderr}, qr/\Q$SECRET\E/, "$what: no secret in the log");
    # The driver starts it as nginx's module does.
    my $head = qr{\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[info\] \d+#\d+: };
    like($h->{stderr}, qr/^${head}spanprof-exporter: started for nginx/m,
         "$what: log lines have nginx's format, the exporter's name");
}

# --- plain gRPC

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = start_drive(dir => $dir, driver => $driver,
        env => { base_env('http://127.0.0.1:' . $rcv->port) },
        args => \@ALL);
    my $pid = $h->{exporter_pid};
    # Until it runs (the child of the driver's fork execs it).
    wait_until(sub { read_file("/proc/$pid/comm") eq "spanprof-export\n" },
               60);
    is(read_file("/proc/$pid/comm"), "spanprof-export\n",
       'the exporter names its thread for ps');
    # and its senders, one per signal, for top -H and perf
    my $senders = sub {
        join ' ', sort grep { /^spanprof-(logs|traces)$/ }
            map { read_file("$_/comm") =~ s/\n//r } glob "/proc/$pid/task/*";
    };
    wait_until(sub { $senders->() eq 'spanprof-logs spanprof-traces' }, 60);
    is($senders->(), 'spanprof-logs spanprof-traces',
       'the senders are named by their signal');
    like(read_file("/proc/$pid/cmdline"), qr/^spanprof-exporter: drive\0/,
         'argv[0] is the title given');
    finish_drive_when($h, exported_all($h));
    check_run($h, 'grpc');
    is($h->{counters}{'symbolizer.resets'}, 0,
       'grpc: under SPANPROF_DEBUG_MAX_BYTES, libdw keeps its state');
    my @req = $rcv->requests;
    check_logs($h, 'grpc', \@req);
    check_traces($h, 'grpc', @req);
    my ($md) = map { $_->{metadata} } grep { $_->{signal} eq 'logs' } @req;
    is($md->{'x-spanprof-test'}, $SECRET, 'headers arrive as metadata');
    my %paths = map { $_->{path} => 1 } @req;
    ok($paths{'/opentelemetry.proto.collector.logs.v1.LogsService/Export'}
       && $paths{'/opentelemetry.proto.collector.trace.v1.TraceService/Export'},
       'both services called on one endpoint');

    # Google's pprof reads a profile as it arrived.
    my ($rec) = log_records(@req);
    my $gz = decode_base64($rec->{body}{stringValue});
    my $raw;
    gunzip(\$gz => \$raw) or die $GunzipError;
    write_file("$dir/arrived.pb", $raw);
  SKIP: {
        skip 'go is not installed', 2
            unless `sh -c 'command -v go' 2>/dev/null`;
        local $ENV{HOME} = $dir;
        local $ENV{PPROF_TMPDIR} = $dir;
        my $out = `go tool pprof -raw $dir/arrived.pb 2>&1`;
        is($?, 0, 'go tool pprof reads the profile') or diag($out);
        like($out, qr/drive_leaf.*\n.*drive_mid.*\n.*drive_root.*\n.*main/,
             'pprof shows the stack leaf first');
    }
}

# --- SPANPROF_DEBUG_MAX_BYTES below what the driver's own debug info takes
# to name one address: read once, then the driver is named from its symbol
# table, said once in the log, instead of being read again for each new
# address (resets do not spin; the unit tests check the resets themselves).

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = run_drive(dir => $dir, driver => $driver,
        env => { base_env('http://127.0.0.1:' . $rcv->port),
                 SPANPROF_DEBUG_MAX_BYTES => '1' },
        args => [qw(--samples 40 --spans 5 --hold-ms 1500)]);
    check_run($h, 'debug bound');
    check_logs($h, 'debug bound', [$rcv->requests], symtab => 1);
    my $c = $h->{counters};
    is($c->{'symbolizer.over_cap_objects'}, 1,
       'debug bound: the driver is counted over the bound');
    is($c->{'symbolizer.resets'}, 0, 'debug bound: no reset');
    is($c->{'symbolizer.debug_bytes'}, 0,
       'debug bound: libdw holds no debug info');
    my @told = $h->{stderr} =~ /^.*\[warn\].*symbolizer: .*$/mg;
    is(scalar @told, 1, 'debug bound: one warning') or diag($h->{stderr});
    like($told[0] // '', qr/\Q$driver\E .*SPANPROF_DEBUG_MAX_BYTES=1: /,
         'debug bound: it names the file and the bound');
}

# --- TLS with a self-signed certificate, and headers

SKIP: {
    skip 'openssl is not installed', 1
        unless `sh -c 'command -v openssl' 2>/dev/null`;
    my $out = `openssl req -x509 -newkey rsa:2048 -nodes -days 2 \\
        -subj /CN=localhost -addext subjectAltName=DNS:localhost \\
        -keyout $dir/key.pem -out $dir/cert.pem 2>&1`;
    is($?, 0, 'a self-signed certificate') or diag($out);
    my $rcv = Spanprof::Receiver->start(dir => $dir,
        tls => ["$dir/cert.pem", "$dir/key.pem"]);
    my $h = drive_all(base_env('https://localhost:' . $rcv->port),
                      OTEL_EXPORTER_OTLP_CERTIFICATE => "$dir/cert.pem");
    check_run($h, 'tls');
    my @req = $rcv->requests;
    check_logs($h, 'tls', \@req);
    check_traces($h, 'tls', @req);
    my ($md) = map { $_->{metadata} } @req;
    is($md->{'x-spanprof-test'}, $SECRET, 'tls: headers arrive as metadata');
}

# --- console: OTLP/JSON lines

{
    my $file = "$dir/console.jsonl";
    my $h = drive_all(base_env('http://127.0.0.1:1'),
                      OTEL_LOGS_EXPORTER => 'console',
                      OTEL_TRACES_EXPORTER => 'console',
                      SPANPROF_CONSOLE_PATH => $file);
    check_run($h, 'console');
    my @lines = grep { length } split /\n/, read_file($file);
    my $json = JSON::PP->new;
    my @docs = eval { map { $json->decode($_) } @lines };
    ok(!$@ && @docs >= 2, 'console lines parse as JSON') or diag($@);
    my ($logs) = grep { $_->{resourceLogs} } @docs;
    my ($traces) = grep { $_->{resourceSpans} } @docs;
    my $rl = $logs->{resourceLogs}[0];
    is(attribute($rl->{resource}{attributes}, 'process.pid'),
       $h->{driver_pid}, 'console: process.pid, int64 as a string');
    my $lr = $rl->{scopeLogs}[0]{logRecords}[0];
    is($rl->{scopeLogs}[0]{scope}{name}, 'otel.profiling', 'console: scope');
    like($lr->{timeUnixNano}, qr/^\d{19}$/, 'console: times as strings');
    is(attribute($lr->{attributes}, 'profiling.data.format'),
       'pprof-gzip-base64', 'console: log attributes');
    like($lr->{body}{stringValue}, qr/^H4sI/, 'console: body is gzip base64');
    my $sp = $traces->{resourceSpans}[0]{scopeSpans}[0]{spans}[0];
    is($sp->{traceId}, '4b000000000000000000000000000036',
       'console: trace id as hex');
    is($sp->{kind}, 2, 'console: enums as numbers');
    is($sp->{status}{code}, 2, 'console: status');
    is(attribute($sp->{attributes}, 'http.response.status_code'), '503',
       'console: int attribute as a string');
}

# --- the deprecated text format

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = drive_all(base_env('http://127.0.0.1:' . $rcv->port),
                      SPANPROF_PROFILING_FORMAT => 'text');
    check_run($h, 'text');
    my @records = log_records($rcv->requests);
    is(scalar @records, 40, 'text: one log record per sample');
    is(attribute($records[0]{attributes}, 'profiling.data.format'), 'text',
       'text: format attribute');
    is($records[0]{traceId}, '4b000000000000000000000000000036',
       'text: TraceId field');
    like($records[0]{body}{stringValue},
         qr/"drive-worker" #\d+ .*\n.*\n\tat drive_leaf\(.*exporter_drive\.c:\d+\)\n\tat drive_mid/,
         'text: the call stack format');
}

# --- stopped as soon as it started (a reload right after a start): it
# still starts, exports what it was given and exits 0. The SIGTERM came
# while it loaded its libraries, and killed it silently with all of it.

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = run_drive(dir => $dir, driver => $driver,
        env => { base_env('http://127.0.0.1:' . $rcv->port) },
        args => [qw(--samples 40 --spans 5 --hold-ms 0)]);
    check_run($h, 'stopped at once');
}

# --- the supervisor dies: the exporter flushes and goes. Also when it
# dies at once, before the exporter could ask to be told (a stop asked at
# its start: the exporter used to leave at once, with nothing sent and
# nothing logged).

for my $hold (300, 0) {
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = run_drive(dir => $dir, driver => $driver,
        env => { base_env('http://127.0.0.1:' . $rcv->port),
                 SPLUNK_PROFILER_EXPORT_INTERVAL => '60000',
                 OTEL_BSP_SCHEDULE_DELAY => '60000' },
        args => ['--samples', 40, '--spans', 5, '--hold-ms', $hold,
                 '--no-stop']);
    my $pid = $h->{exporter_pid};
    wait_until(sub { !kill 0, $pid }, 60);
    ok(!kill(0, $pid),
       "the exporter ends when its supervisor dies (hold $hold ms)");
    my $log = read_file($h->{log});
    like($log, qr/counters: .*\(at exit\)/, 'and logs its counters')
        or diag("exporter log: [$log]");
    my @records = log_records($rcv->requests);
    my @spans = spans($rcv->requests);
    is(scalar @spans, 5, 'spans held for the next batch are flushed');
    ok(@records >= 1, 'so are profiles held for the next interval');
}

# --- a region laid out by a module of another spanprof version (nginx
# keeps the module it loaded across the reload that follows a package
# upgrade, and starts the new exporter from disk): the exporter cannot
# read it and says why and what to do, not "start me from the server
# module".

{
    my $rcv = Spanprof::Receiver->start(dir => $dir);
    my $h = run_drive(dir => $dir, driver => $driver,
        env => { base_env('http://127.0.0.1:' . $rcv->port) },
        args => [qw(--samples 4 --spans 1 --hold-ms 0 --layout 999)]);
    is($h->{exit}, 1, 'another layout: the exporter exits 1');
    like($h->{stderr},
         qr/error.*spanprof module is of another version than this exporter \(its shared memory has layout 999, this exporter reads layout \d+\).*restart or "service nginx upgrade" loads the new one/,
         'and says the module is of another version, and what to do')
        or diag($h->{stderr});
    unlike($h->{stderr}, qr/no usable region/, 'not a region it cannot use');
    is(scalar(spans($rcv->requests)), 0, 'nothing exported');
}

done_testing;
