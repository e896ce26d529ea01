#!/usr/bin/perl
# A changed configuration at a reload: real nginx (nginx -s reload, HUP to
# the master) and real apache2 (graceful USR1 and restart HUP to the
# parent), two OTLP receivers. Each step changes the directives and
# reloads:
#   B  the endpoint moves to the second receiver, the service name
#      changes, snapshot profiling is turned on (the selection probability
#      1, clamped to 0.10 with a warning): the spans held back by the
#      first configuration's 60 s batch delay reach the first receiver
#      (the old exporter flushes), later ones only the second, with the new
#      service.name; a selected request (volume=highest) has samples; one
#      exporter, a new one; the startup line is logged with the new values;
#   C  snapshot profiling off again: a selected request has no samples;
#   D  "spanprof off;" at http level / "Spanprof Off" in the main server:
#      no exporter, no shared memory (the master or parent held it until
#      it stopped), no spans;
#   E  on again, the service name's directive removed: one exporter, one
#      shared memory, spans with the variable's service.name;
#   F  a bad value: nginx -s reload refuses it naming the directive, and a
#      HUP sent anyway keeps the old workers; apachectl's configuration
#      test and apache2 -k graceful refuse it: the server goes on
#      exporting as before;
#   G, H  to the first receiver with a 60 s delay and back (httpd: -k
#      restart): the old exporter flushes there too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf nginx_cmd
                        nginx_start httpd_conf httpd_start
                        gzip_location deflate_location stop wait_until);
use Spanprof::Receiver;
use Spanprof::Procs qw(processes family exporters shm_of);
use Spanprof::Cases qw(curl_case arrived);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $PARENT = 'b7ad6b7169203331';
my $mods = '/usr/lib/apache2/modules';
my $trace = 0;

# A GET of $path with a sampled remote parent of a trace of its own (and
# volume=highest when $selected): its trace id, or undef unless 200.
sub request {
    my ($port, $path, $selected) = @_;
    my $id = sprintf '%08x%024x', $$, ++$trace;
    my @h = ([ traceparent => "00-$id-$PARENT-01" ]);
    push @h, [ baggage => 'splunk.trace.snapshot.volume=highest' ],
             [ 'Accept-Encoding' => 'gzip' ] if $selected;
    my (undef, $code) = curl_case(url => "http://127.0.0.1:$port$path",
                                  headers => \@h);
    return $code == 200 ? $id : undef;
}

sub requests { my ($port, $n) = @_; map { request($port, '/') } 1 .. $n }

# The spans of trace $id at $recv.
sub spans_of {
    my ($recv, $id) = @_;
    my ($spans) = $recv->collect;
    return grep { $_->{traceId} eq $id } @$spans;
}

# How many samples of trace $id $recv has, once there are some or after
# $timeout s.
sub samples_of {
    my ($recv, $id, $timeout) = @_;
    my $n = 0;
    wait_until(sub {
        my (undef, $samples) = $recv->collect;
        $n = grep { ($_->{labels}{trace_id} // '') eq $id } @$samples;
        return $n > 0;
    }, $timeout);
    return $n;
}

sub service_of {
    my ($span) = @_;
    return Spanprof::Receiver::attribute($span->{resource}{attributes},
                                         'service.name') // '';
}

sub show { join "\n", map { "$_->{pid} $_->{ppid} $_->{args}" } @_ }

# The settings of each step, as (name, value) pairs of the table in
# README "Configuration"; $d->{directive} spells them for the server.
sub settings {
    my ($recv, $service, $delay, $snapshot, @more) = @_;
    return ([ endpoint => 'http://127.0.0.1:' . $recv->port ],
            (defined $service ? [ service_name => $service ] : ()),
            [ bsp_schedule_delay => $delay ],
            [ snapshot => $snapshot ? 'on' : 'off' ],
            [ snapshot_sampling_interval => '1ms' ],
            [ profiler_export_interval => '300ms' ], @more);
}

my %nginx_name = (endpoint => 'spanprof_otlp_endpoint',
                  service_name => 'spanprof_service_name',
                  bsp_schedule_delay => 'spanprof_bsp_schedule_delay',
                  snapshot => 'spanprof_snapshot',
                  probability => 'spanprof_snapshot_selection_probability',
                  snapshot_sampling_interval =>
                      'spanprof_snapshot_sampling_interval',
                  profiler_export_interval =>
                      'spanprof_profiler_export_interval',
                  off => 'spanprof');
my %httpd_name = (endpoint => 'SpanprofOtlpEndpoint',
                  service_name => 'SpanprofServiceName',
                  bsp_schedule_delay => 'SpanprofBspScheduleDelay',
                  snapshot => 'SpanprofSnapshot',
                  probability => 'SpanprofSnapshotSelectionProbability',
                  snapshot_sampling_interval =>
                      'SpanprofSnapshotSamplingInterval',
                  profiler_export_interval =>
                      'SpanprofProfilerExportInterval',
                  off => 'Spanprof');

sub count { my ($text, $re) = @_; my $n = () = $text =~ /$re/g; $n }

# ---- the two servers

sub nginx_driver {
    my $dir = new_dir();
    my $port;
    my $d = { name => 'nginx', dir => $dir,
              probability => $nginx_name{probability} };
    $d->{write} = sub {
        my (@s) = @_;
        my $http = join '', map {
            "    $nginx_name{ $_->[0] } "
            . ($_->[0] eq 'off' ? 'off' : "\"$_->[1]\"") . ";\n" } @s;
        $port = nginx_conf($dir, http => $http, port => $port,
                           server => gzip_location($dir, lines => 60000));
        $d->{port} = $port;
    };
    $d->{start} = sub { nginx_start($dir, $port, @_) };
    # nginx -s reload: the way an operator (and systemd) reloads nginx.
    $d->{reload} = sub {
        my $before = count(read_file("$dir/error.log"), qr/reconfiguring/);
        my ($rc, $out) = Spanprof::Server::run_cmd({}, nginx_cmd($dir),
                                                   '-s', 'reload');
        $d->{last_out} = $out;
        return 0 if $rc;
        return wait_until(sub {
            count(read_file("$dir/error.log"), qr/reconfiguring/) > $before
        });
    };
    $d->{workers} = sub {
        map { $_->{pid} }
        grep { $_->{args} =~ /worker process$/ } family($d->{pid});
    };
    return $d;
}

sub httpd_driver {
    my ($mpm) = @_;
    my $dir = new_dir();
    my $port;
    my $d = { name => "httpd $mpm", dir => $dir,
              probability => $httpd_name{probability} };
    my $mods_conf = join "\n",
        map { "LoadModule ${_}_module $mods/mod_$_.so" }
        qw(deflate filter alias);
    $d->{write} = sub {
        my (@s) = @_;
        my $main = join '', map {
            "$httpd_name{ $_->[0] } "
            . ($_->[0] eq 'off' ? 'Off' : "\"$_->[1]\"") . "\n" } @s;
        $port = httpd_conf($dir, mpm => $mpm, port => $port,
                           extra => "$mods_conf\n"
                                    . deflate_location($dir, lines => 60000)
                                    . "\n$main");
        $d->{port} = $port;
    };
    $d->{start} = sub { httpd_start($dir, $port, @_) };
    # apachectl -k graceful (USR1) or -k restart (HUP): the configuration
    # test apachectl runs first, then apache2 -k, which signals the parent
    # once it read the configuration too.
    $d->{reload} = sub {
        my ($sig) = @_;
        my $log = read_file("$dir/error.log");
        my $before = count($log, qr/resuming normal operations/);
        my ($rc, $out) = Spanprof::Server::run_cmd({}, '/usr/sbin/apache2',
                                                   '-t', '-f',
                                                   "$dir/httpd.conf");
        $d->{last_out} = $out;
        return 0 if $rc;
        ($rc, $out) = Spanprof::Server::run_cmd({}, '/usr/sbin/apache2',
            '-f', "$dir/httpd.conf",
            '-k', ($sig // 'USR1') eq 'HUP' ? 'restart' : 'graceful');
        $d->{last_out} = $out;
        return 0 if $rc;
        return wait_until(sub {
            count(read_file("$dir/error.log"),
                  qr/resuming normal operations/) > $before
        }, 15);
    };
    $d->{workers} = sub {
        map { $_->{pid} }
        grep { $_->{args} =~ m{^/usr/sbin/apache2 } } family($d->{pid});
    };
    return $d;
}

# Waits until the server has $n exporters (and nothing is stopping);
# returns them.
sub exporters_settled {
    my ($d, $n) = @_;
    my @e;
    wait_until(sub { @e = exporters($d->{pid}); @e == $n }, 15);
    sleep 0.5;
    return exporters($d->{pid});
}

sub run {
    my ($d) = @_;
    my $name = $d->{name};
    my $dir = $d->{dir};
    my $ra = Spanprof::Receiver->start(dir => $dir);
    my $rb = Spanprof::Receiver->start(dir => $dir);

    # ---- A: the first receiver, a 60 s batch delay, snapshot off

    $d->{write}->(settings($ra, 'svc-a', '60000', 0));
    # The service name's variable: what a removed directive falls back to.
    $d->{pid} = $d->{start}->(OTEL_SERVICE_NAME => 'svc-env');
    ok($d->{pid}, "$name: starts")
        or return diag(read_file("$dir/error.log"));
    my @e = exporters_settled($d, 1);
    is(scalar @e, 1, "$name: A: one exporter");
    my %old = map { $_->{pid} => 1 } @e;
    my @a = requests($d->{port}, 3);
    is(scalar @a, 3, "$name: A: requests answered");
    is(arrived($ra, 1, @a), 0, "$name: A: their spans wait for the delay");

    # ---- B: endpoint, service name, snapshot changed

    $d->{write}->(settings($rb, 'svc-b', '100', 1, [ probability => '1' ]));
    ok($d->{reload}->('USR1'), "$name: B: reloaded")
        or diag($d->{last_out});
    @e = exporters_settled($d, 1);
    is(scalar @e, 1, "$name: B: exactly one exporter")
        or diag(show(family($d->{pid})));
    ok(@e && !$old{ $e[0]{pid} }, "$name: B: a new exporter");
    is(arrived($ra, 15, @a), 3,
       "$name: B: the old exporter flushed the spans before the reload "
       . 'to the old endpoint');
    my @b = requests($d->{port}, 3);
    is(arrived($rb, 10, @b), 3, "$name: B: spans after it at the new one");
    sleep 1;
    is(arrived($ra, 0, @b), 0, "$name: B: and not at the old one");
    is(arrived($rb, 0, @a), 0, "$name: B: none before it at the new one");
    my @svc = map { service_of($_) } map { spans_of($rb, $_) } @b;
    is(scalar(grep { $_ eq 'svc-b' } @svc), 3,
       "$name: B: with the new service.name") or diag("@svc");
    my $sel = request($d->{port}, '/big', 1);
    ok($sel, "$name: B: a selected request answered");
    cmp_ok(samples_of($rb, $sel // 'x', 10), '>', 0,
           "$name: B: snapshot on by the reload: its samples arrive");
    my $log = read_file("$dir/error.log");
    my $ep = 'http://127.0.0.1:' . $rb->port;
    like($log, qr/configuration:.*OTEL_SERVICE_NAME=svc-b \(directive\)/,
         "$name: B: the startup line shows the new service name");
    like($log, qr/configuration:.*OTEL_EXPORTER_OTLP_ENDPOINT=\Q$ep\E
                  \ \(directive\)/x,
         "$name: B: and the new endpoint");
    like($log, qr/configuration:.*SPLUNK_SNAPSHOT_PROFILER_ENABLED=true
                  \ \(directive\)/x,
         "$name: B: and snapshot profiling on");
    like($log, qr/configuration:.*SPLUNK_SNAPSHOT_SELECTION_PROBABILITY=0\.1
                  \ \(directive\)/x,
         "$name: B: and the selection probability clamped");
    my $clamp = qq{value "1" in "$d->{probability}" directive is above }
                . 'the maximum 0.10';
    like($log, qr/\Q$clamp\E/,
         "$name: B: the clamp is warned about at the reload");
    %old = map { $_->{pid} => 1 } @e;

    # ---- C: snapshot off again (httpd: -k restart)

    $d->{write}->(settings($rb, 'svc-b', '100', 0));
    ok($d->{reload}->('HUP'), "$name: C: reloaded") or diag($d->{last_out});
    @e = exporters_settled($d, 1);
    is(scalar @e, 1, "$name: C: exactly one exporter");
    $sel = request($d->{port}, '/big', 1);
    is(arrived($rb, 10, $sel // 'x'), 1, "$name: C: a selected request's "
                                          . 'span arrives');
    is(samples_of($rb, $sel // 'x', 2), 0,
       "$name: C: snapshot off by the reload: no samples");
    like(read_file("$dir/error.log"),
         qr/configuration:.*SPLUNK_SNAPSHOT_PROFILER_ENABLED=false/,
         "$name: C: the startup line shows snapshot profiling off");

    # ---- D: spanprof off for the whole server

    $d->{write}->(settings($rb, 'svc-b', '100', 0), [ 'off' ]);
    ok($d->{reload}->('USR1'), "$name: D: reloaded") or diag($d->{last_out});
    @e = exporters_settled($d, 0);
    is(scalar @e, 0, "$name: D: off: no exporter")
        or diag(show(family($d->{pid})));
    my ($shm) = shm_of($d->{pid});
    is(scalar keys %$shm, 0, "$name: D: off: no shared memory");
    my @holders;
    wait_until(sub {
        @holders = grep { keys %{ (shm_of($_->{pid}))[0] } }
                   family($d->{pid});
        !@holders;
    });
    is(scalar @holders, 0, "$name: D: off: no process of the server holds "
                           . 'it once the old ones ended')
        or diag(show(@holders));
    my @off = requests($d->{port}, 3);
    is(scalar @off, 3, "$name: D: off: requests answered");
    sleep 1.5;
    is(arrived($rb, 0, @off) + arrived($ra, 0, @off), 0,
       "$name: D: off: no spans");
    like(read_file("$dir/error.log"),
         qr/configuration: OTEL_SDK_DISABLED=true \(directive\)/,
         "$name: D: the startup line says spanprof is off");

    # ---- E: on again (httpd: -k restart)

    # The service name's directive removed: its variable again.
    $d->{write}->(settings($rb, undef, '100', 0));
    ok($d->{reload}->('HUP'), "$name: E: reloaded") or diag($d->{last_out});
    @e = exporters_settled($d, 1);
    is(scalar @e, 1, "$name: E: on again: one exporter");
    ($shm) = shm_of($d->{pid});
    is(scalar keys %$shm, 1, "$name: E: on again: one shared memory");
    my @on = requests($d->{port}, 3);
    is(arrived($rb, 10, @on), 3, "$name: E: on again: spans arrive");
    @svc = map { service_of($_) } map { spans_of($rb, $_) } @on;
    is(scalar(grep { $_ eq 'svc-env' } @svc), 3,
       "$name: E: the directive removed: the variable's service.name")
        or diag("@svc");
    like(read_file("$dir/error.log"),
         qr/configuration:[ ]OTEL_SDK_DISABLED=false,.*
            OTEL_SERVICE_NAME=svc-env[ ]\(env\)/x,
         "$name: E: the startup line is logged again");

    # ---- F: a bad value

    my %workers = map { $_ => 1 } $d->{workers}->();
    my %exp = map { $_->{pid} => 1 } @e;
    $d->{write}->(map { $_->[0] eq 'snapshot_sampling_interval'
                            ? [ $_->[0] => '5000' ] : $_ }
                  settings($ra, 'svc-f', '100', 0));
    ok(!$d->{reload}->('USR1'), "$name: F: a bad value is refused");
    my $iv = $d->{name} eq 'nginx' ? 'spanprof_snapshot_sampling_interval'
                                   : 'SpanprofSnapshotSamplingInterval';
    like($d->{last_out}, qr/invalid value "5000" in "?\Q$iv\E/,
         "$name: F: naming the directive") or diag($d->{last_out});
    if ($d->{name} eq 'nginx') {
        # A HUP sent anyway: the master tests the new configuration and
        # keeps the old one.
        my $before = count(read_file("$dir/error.log"), qr/reconfiguring/);
        kill 'HUP', $d->{pid};
        wait_until(sub { count(read_file("$dir/error.log"),
                               qr/reconfiguring/) > $before });
        sleep 1;
        like(read_file("$dir/error.log"),
             qr/\[emerg\].*invalid value "5000" in "\Q$iv\E"/,
             "$name: F: HUP: the master logs the error naming the "
             . 'directive');
        is_deeply([ sort $d->{workers}->() ], [ sort keys %workers ],
                  "$name: F: HUP: the old workers go on");
    }
    @e = exporters_settled($d, 1);
    is_deeply([ map { $_->{pid} } @e ], [ keys %exp ],
              "$name: F: the same one exporter");
    my @f = requests($d->{port}, 3);
    is(arrived($rb, 10, @f), 3,
       "$name: F: the server goes on exporting as configured before");
    sleep 0.5;
    is(arrived($ra, 0, @f), 0, "$name: F: not to the refused endpoint");

    # ---- G: back to the first receiver with a 60 s delay, then to the
    # second again (httpd: -k restart): the spans held back flushed

    $d->{write}->(settings($ra, 'svc-g', '60000', 0));
    ok($d->{reload}->('USR1'), "$name: G: reloaded") or diag($d->{last_out});
    @e = exporters_settled($d, 1);
    my @g = requests($d->{port}, 3);
    is(arrived($ra, 1, @g), 0, "$name: G: spans wait for the delay");
    $d->{write}->(settings($rb, 'svc-h', '100', 0));
    ok($d->{reload}->('HUP'), "$name: H: reloaded") or diag($d->{last_out});
    @e = exporters_settled($d, 1);
    is(scalar @e, 1, "$name: H: exactly one exporter");
    is(arrived($ra, 15, @g), 3,
       "$name: H: the old exporter flushed them to the old endpoint");
    my @h = requests($d->{port}, 3);
    is(arrived($rb, 10, @h), 3, "$name: H: spans after it at the new one");
    sleep 0.5;
    is(arrived($ra, 0, @h) + arrived($rb, 0, @g), 0,
       "$name: H: each at its own endpoint only");

    my @all = (family($d->{pid}), { pid => $d->{pid} });
    stop($d->{pid});
    my @left;
    wait_until(sub {
        my $p = processes();
        @left = grep { $p->{ $_->{pid} } } @all;
        !@left;
    }, 15);
    is(scalar @left, 0, "$name: stop: nothing left") or diag(show(@left));
    my $errors = join "\n", grep { /\[(\S*:)?(alert|crit)\]/ }
        split /\n/, read_file("$dir/error.log");
    is($errors, '', "$name: no alert in the error log");
}

run(nginx_driver());
run(httpd_driver($_))
    for split /,/, ($ENV{SPANPROF_MPMS} // 'event,prefork');
done_testing();
