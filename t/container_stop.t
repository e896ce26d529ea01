#!/usr/bin/perl
# nginx and httpd stopped the way a container stops them: Docker's official
# images run `nginx -g 'daemon off;'` / `httpd -DFOREGROUND` as the first
# process of their PID namespace, and `docker stop` sends the image's
# STOPSIGNAL (QUIT to nginx, WINCH to httpd: graceful stops; Kubernetes,
# `nginx -s stop` and `apachectl -k stop` send TERM). When that process
# exits, the kernel kills every other process of the namespace (systemd's
# KillMode=mixed, Debian's nginx.service and apache2.service, does the same
# to the unit's). Neither server waited for the exporter: the spans it
# held (OTEL_BSP_SCHEDULE_DELAY, 5 s by default) were lost on every stop,
# without even its counters line. Now nginx's exporter manager and httpd's
# parent wait for it at exit (sp_exporter_wait_exit), and the exporter does
# not wait out a collector that refuses during the stop. Real nginx and
# apache2 (event MPM) as PID 1 of a new PID namespace (unshare), the
# modules' exporter, the independent receiver, a 60 s batch delay so that
# every span is held when the stop comes:
#   - the graceful stop signal and TERM: every span arrives, the
#     exporter's counters at exit;
#   - the graceful stop with no collector: the server is gone within a few
#     seconds (not the 10 s export timeout) and the spans are counted as
#     dropped.
# Root only (a PID namespace).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file nginx_conf httpd_conf
                        httpd_cmd spawn wait_for_port free_port wait_until
                        http_get);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans);
use Spanprof::Procs qw(family);

plan skip_all => 'needs root (a PID namespace)' if $> != 0;
plan skip_all => 'unshare --pid does not work here'
    if system('unshare --pid --fork true >/dev/null 2>&1');
Spanprof::Receiver::skip_unless_ready();

my $N = 30;


# A GET with a traceparent of trace $trace; 1 when answered 200.
sub traced_get {
    my ($port, $trace) = @_;
    my ($status) = http_get($port, '/',
        "traceparent: 00-$trace-00f067aa0ba902b7-01");
    return $status == 200 ? 1 : 0;
}

# Each server: its configuration with the endpoint and a 60 s batch delay,
# the command that runs it in the foreground, its graceful stop signal, and
# which process of the namespace gets the signal.
my %SERVERS = (
    nginx => {
        conf => sub {
            my ($dir, $endpoint) = @_;
            my $port = nginx_conf($dir, workers => 2,
                http => "spanprof_otlp_endpoint $endpoint;\n"
                      . "    spanprof_bsp_schedule_delay 60s;");
            my $conf = read_file("$dir/nginx.conf");
            $conf =~ s/daemon off;\n//;
            write_file("$dir/nginx.conf", $conf);
            return $port;
        },
        cmd => sub {
            my ($dir) = @_;
            return ('/usr/sbin/nginx', '-p', "$dir/", '-c', "$dir/nginx.conf",
                    '-e', "$dir/error.log", '-g', 'daemon off;');
        },
        graceful => 'QUIT',
        main => qr/^nginx: master/,
    },
    httpd => {
        conf => sub {
            my ($dir, $endpoint) = @_;
            return httpd_conf($dir,
                extra => "SpanprofOtlpEndpoint $endpoint\n"
                       . "SpanprofBspScheduleDelay 60s\n");
        },
        cmd => \&httpd_cmd,
        graceful => 'WINCH',
        main => qr{^/usr/sbin/apache2},
    },
);

# $server as PID 1 of a new PID namespace, $N traced requests, $signal to
# it; returns what happened.
sub run_stop {
    my ($server, $endpoint, $signal, $trace) = @_;
    my $d = $SERVERS{$server};
    my $what = "$server $signal";
    my $dir = new_dir();
    my $port = $d->{conf}->($dir, $endpoint);
    my $ns = spawn({}, "$dir/stderr.log", 'unshare', '--pid', '--fork',
                   $d->{cmd}->($dir));
    my %r = (dir => $dir);
    if (!wait_for_port($port)
        || !wait_until(sub { grep { $_->{args} =~ /^spanprof-exporter/ }
                                 family($ns) }))
    {
        diag("$what: " . read_file("$dir/stderr.log")
             . read_file("$dir/error.log"));
        kill 'KILL', $ns;
        waitpid $ns, 0;
        return \%r;
    }
    my ($main) = grep { $_->{args} =~ $d->{main} && $_->{ppid} == $ns }
        family($ns);

    $r{answered} = 0;
    $r{answered} += traced_get($port, $trace) for 1 .. $N;

    my $t = time;
    kill $signal, $main->{pid};
    $r{exited} = wait_until(sub { waitpid($ns, WNOHANG) == $ns }, 20);
    $r{seconds} = time - $t;
    if (!$r{exited}) {
        kill 'KILL', $ns;
        waitpid $ns, 0;
    }
    $r{log} = read_file("$dir/error.log");
    ($r{counters}) = $r{log} =~ /spanprof-exporter: counters: (.*) \(at exit\)/;
    return \%r;
}

sub counter {
    my ($r, $name) = @_;
    return undef unless defined $r->{counters};
    return $r->{counters} =~ /(?:^| )\Q$name\E=(\d+)/ ? $1 : undef;
}

sub bad_lines {
    my ($r) = @_;
    # nginx: [alert]; httpd: [module:alert]
    my $level = qr/\[(?:[a-z_]+:)?(?:alert|crit|emerg)\]/;
    return [ ($r->{log} // '') =~ /^(.*$level.*)$/mg ];
}

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $endpoint = 'http://127.0.0.1:' . $recv->port;

my $n = 0;
for my $server (sort keys %SERVERS) {
    for my $signal ($SERVERS{$server}{graceful}, 'TERM') {
        my $trace = sprintf '%032x', ++$n;
        my $r = run_stop($server, $endpoint, $signal, $trace);
        my $w = "$server $signal";
        is($r->{answered}, $N, "$w: $N requests answered");
        ok($r->{exited}, "$w: the server, PID 1 of its namespace, exits");
        is(scalar wait_spans($recv, sub { $_[0]{traceId} eq $trace }, $N),
           $N, "$w: the $N spans the exporter held arrive");
        is(counter($r, 'exported'), $N,
           "$w: its counters at exit say $N exported")
            or diag($r->{log});
        is_deeply(bad_lines($r), [], "$w: no alert, crit or emerg");
    }

    # No collector: nothing to wait for. The default export timeout is 10 s.
    my $signal = $SERVERS{$server}{graceful};
    my $r = run_stop($server, 'http://127.0.0.1:' . free_port(), $signal,
                     sprintf('%032x', ++$n));
    my $w = "$server, no collector";
    is($r->{answered}, $N, "$w: $N requests answered");
    ok($r->{exited} && $r->{seconds} < 5, "$w: the server exits within 5 s")
        or diag("exited: " . ($r->{exited} // 0) . " after $r->{seconds} s");
    is(counter($r, 'received'), $N, "$w: the exporter received $N");
    is(counter($r, 'dropped.shutdown'), $N,
       "$w: and counts them dropped at the stop")
        or diag($r->{log});
    is(counter($r, 'held'), 0, "$w: none held at exit");
    is_deeply(bad_lines($r), [], "$w: no alert, crit or emerg");
}

done_testing();
