#!/usr/bin/perl
# The server benchmarks of bench/README.md ("Servers"), run by hand from the
# top of the tree after `make build`:
#
#   perl bench/servers/run.pl [wrk|callgrind|all] [ROUNDS]
#
# wrk: nginx and httpd (event MPM), each serving a small static file, a
# proxy to a local upstream (a bare nginx) and a file gzipped at level 9,
# in six configurations run interleaved in rounds (every configuration once
# per round, in turn), so the machine's drift falls on all of them alike:
#   bare        no module loaded
#   off         module loaded, `spanprof off` / `Spanprof Off`
#   tracing     module on, both profilers off
#   snapshot    snapshot profiler at the default probability (1 %)
#   all-10ms    every request selected (baggage highest), 10 ms interval
#   continuous  the continuous profiler on (snapshot off)
# The server (all its processes, the exporter included) runs on CPU 0;
# wrk, the upstream and the OTLP receiver (t/receiver, the real one) on
# CPU 1. Reported: median requests/s and p99 over the rounds, and the ratio
# of the medians to bare.
#
# callgrind: nginx, then httpd (BENCH_SERVERS picks), every process
# (master or parent, workers or children, exporter) under
# valgrind --tool=callgrind --trace-children=yes, for the same wall time
# with W + N keep-alive requests of the small file (ab -k) and with W;
# (instructions with W + N - instructions with W) / N per configuration.
# The W requests (BENCH_WARMUP, 200) take what happens once in a server's
# life out of the figure: the exporter's gRPC channel is made, and the
# libraries it needs bound, at its first export. BENCH_WARMUP=0 counts
# that in, over the N requests.
#
# BENCH_NGINX_SERVER: more lines for nginx's server block, as a
# configuration to compare would have them (`error_page 404 /404.html;`
# makes the module run its REWRITE handler for every request).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use List::Util qw(sum);
use POSIX qw(strftime);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir write_file read_file free_port spawn
                        wait_for_port stop nginx_conf nginx_cmd httpd_conf
                        httpd_cmd bench_files bench_nginx_server);
use Spanprof::Receiver;

my $what = shift // 'all';
my $ROUNDS = shift // 3;
my $DURATION = $ENV{BENCH_SECONDS} // 5;
my $CALLGRIND_REQUESTS = $ENV{BENCH_REQUESTS} // 2000;
my $CALLGRIND_WARMUP = $ENV{BENCH_WARMUP} // 200;
my $CALLGRIND_SECONDS = $ENV{BENCH_WALL} // 30;
my $SELECT_ALL = 'baggage: splunk.trace.snapshot.volume=highest';

my @MODES = qw(bare off tracing snapshot all-10ms continuous);
my %MODE_ENV = (
    bare       => {},
    off        => {},
    tracing    => { SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'false',
                    SPLUNK_PROFILER_ENABLED => 'false' },
    snapshot   => { SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true' },
    'all-10ms' => { SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
                    SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => '10' },
    continuous => { SPLUNK_PROFILER_ENABLED => 'true' },
);
my @WORKLOADS = (
    [ static => '/small.html' ],
    [ proxy  => '/proxy/small.html' ],
    [ gzip   => '/big.txt' ],
);


# The upstream of the proxy workload: a bare nginx in a directory of its own.
sub upstream_start {
    my $dir = new_dir();
    bench_files("$dir/www");
    my $port = nginx_conf($dir, module => 0, log_level => 'warn',
                          connections => 1024, server => "root $dir/www;",
                          location => '');
    my $pid = spawn(undef, "$dir/stderr.log", 'taskset', '-c', '1',
                    nginx_cmd($dir));
    wait_for_port($port) or die "upstream did not start";
    return ($pid, $port);
}

sub nginx_server {
    my ($dir, $mode, $port, $up) = @_;
    bench_files("$dir/www");
    my $off = $mode eq 'off' ? 'spanprof off;' : '';
    my ($http, $srv) = bench_nginx_server("$dir/www", $up, 16);
    $srv .= "\n        $ENV{BENCH_NGINX_SERVER}" if $ENV{BENCH_NGINX_SERVER};
    nginx_conf($dir, port => $port, module => $mode ne 'bare',
               log_level => 'warn', connections => 1024, location => '',
               http => "    $off\n$http", server => $srv);
    return nginx_cmd($dir);
}

sub httpd_server {
    my ($dir, $mode, $port, $up) = @_;
    my $off = $mode eq 'off' ? 'Spanprof Off' : '';
    httpd_conf($dir, port => $port, module => $mode ne 'bare',
               log_level => 'warn', one_child => 16,
               modules => [qw(proxy proxy_http deflate filter)],
               extra => <<"EXTRA");
KeepAlive On
MaxKeepAliveRequests 0
DeflateCompressionLevel 9
<Location /big.txt>
    SetOutputFilter DEFLATE
</Location>
ProxyPass /proxy/ http://127.0.0.1:$up/
$off
EXTRA
    bench_files("$dir/htdocs");
    return httpd_cmd($dir);
}

sub server_env {
    my ($mode, $recv) = @_;
    return {
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        OTEL_SERVICE_NAME => 'bench',
        %{ $MODE_ENV{$mode} },
    };
}

sub pin {
    my ($cpu, $pid) = @_;
    system("taskset -a -p -c $cpu $pid >/dev/null 2>&1");
}

# One wrk run: (requests/s, p99 ms, failures).
sub wrk {
    my ($port, $path, @headers) = @_;
    my @h = map { ('-H', $_) } @headers;
    my $cmd = join ' ', 'taskset -c 1 wrk -t1 -c8', "-d${DURATION}s",
        '--latency', (map { "'$_'" } @h), "http://127.0.0.1:$port$path";
    my $out = `$cmd 2>&1`;
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($v, $unit) = $out =~ /^\s+99%\s+([\d.]+)(us|ms|s)\b/m;
    my $p99 = !defined $v ? undef
        : $unit eq 'us' ? $v / 1000 : $unit eq 's' ? $v * 1000 : $v;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses:\s+(\d+)/;
    my ($errors) = $out =~ /Socket errors:(.*)/;
    my $fail = ($non2xx // 0) + (defined $errors ? sum($errors =~ /(\d+)/g) : 0);
    die "wrk failed: $out" unless defined $rps;
    return ($rps, $p99, $fail);
}

sub median {
    my @s = sort { $a <=> $b } @_;
    return undef unless @s;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

sub machine {
    my ($model) = read_file('/proc/cpuinfo') =~ /^model name\s*:\s*(.*)$/m;
    my $kernel = `uname -r`; chomp $kernel;
    my ($nginx) = `/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)};
    my ($httpd) = `/usr/sbin/apache2 -v 2>&1` =~ m{Apache/(\S+)};
    my $n = `nproc`; chomp $n;
    return "$n CPUs ($model), Linux $kernel, nginx $nginx, Apache $httpd";
}

sub load { (split ' ', read_file('/proc/loadavg'))[0] }

sub run_wrk {
    my $dir = new_dir();
    # Not decoding: decoding every span in JavaScript took about as much
    # CPU as nginx (cpu_split.pl), on the CPU wrk uses.
    my $recv = Spanprof::Receiver->start(dir => $dir,
                                         args => [ '--decode', 'no' ]);
    pin(1, $recv->pid);
    my ($uppid, $up) = upstream_start();

    my %r;            # server, workload, mode => [ [rps, p99], ... ]
    my $failures = 0;
    my $load0 = load();
    for my $round (1 .. $ROUNDS) {
        for my $server (qw(nginx httpd)) {
            for my $mode (@MODES) {
                my $sdir = "$dir/$server-$mode-$round";
                mkdir $sdir;
                my $port = free_port();
                my @cmd = $server eq 'nginx'
                    ? nginx_server($sdir, $mode, $port, $up)
                    : httpd_server($sdir, $mode, $port, $up);
                my $pid = spawn(server_env($mode, $recv), "$sdir/stderr.log",
                                'taskset', '-c', '0', @cmd);
                wait_for_port($port, 20)
                    or die "$server ($mode) did not start: "
                           . (read_file("$sdir/error.log") // '');
                sleep 0.5;
                for my $w (@WORKLOADS) {
                    my ($name, $path) = @$w;
                    my @h = ('Accept-Encoding: gzip');
                    push @h, $SELECT_ALL if $mode eq 'all-10ms';
                    my ($rps, $p99, $fail) = wrk($port, $path, @h);
                    $failures += $fail;
                    push @{ $r{$server}{$name}{$mode} }, [ $rps, $p99 ];
                    printf STDERR "round %d %-5s %-10s %-6s %9.0f req/s "
                        . "p99 %7.2f ms%s\n", $round, $server, $mode, $name,
                        $rps, $p99 // -1, $fail ? " FAILED $fail" : '';
                }
                stop($pid);
            }
        }
    }
    stop($uppid);
    $recv->stop;

    print "## wrk, ", strftime('%Y-%m-%d', gmtime), "\n\n";
    print machine(), "\n";
    printf "load average %s at the start, %s at the end; %d rounds of %d s "
        . "per cell, wrk -t1 -c8, keep-alive; failed requests: %d\n\n",
        $load0, load(), $ROUNDS, $DURATION, $failures;
    for my $server (qw(nginx httpd)) {
        print "### $server\n\n";
        print "| configuration | ",
            join(' | ', map { "$_->[0] req/s (ratio) | p99 ms" } @WORKLOADS),
            " |\n";
        print '| --- ' x (1 + 2 * @WORKLOADS), "|\n";
        for my $mode (@MODES) {
            my @cells;
            for my $w (@WORKLOADS) {
                my $runs = $r{$server}{ $w->[0] };
                my $rps = median(map { $_->[0] } @{ $runs->{$mode} });
                my $bare = median(map { $_->[0] } @{ $runs->{bare} });
                my $p99 = median(map { $_->[1] // () } @{ $runs->{$mode} });
                push @cells, sprintf('%.0f (%.3f)', $rps, $rps / $bare),
                    sprintf('%.2f', $p99 // -1);
            }
            print "| $mode | ", join(' | ', @cells), " |\n";
        }
        print "\n";
    }
    exit 1 if $failures;
}

# Instructions of every process of one server's run under callgrind.
sub callgrind_total {
    my ($server, $mode, $requests, $recv, $up) = @_;
    my $dir = new_dir();
    my $port = free_port();
    my @cmd = $server eq 'nginx' ? nginx_server($dir, $mode, $port, $up)
                                 : httpd_server($dir, $mode, $port, $up);
    # The workers and children (nobody) write their own profiles when
    # they exit.
    mkdir "$dir/cg";
    chmod 01777, "$dir/cg";
    my $start = time;
    my $pid = spawn(server_env($mode, $recv), "$dir/stderr.log",
                    # httpd's parent forks the exporter as root and the
                    # child becomes nobody: a vgdb file the root valgrind
                    # made for that pid would stop the child's valgrind.
                    'valgrind', '--tool=callgrind', '--trace-children=yes',
                    '--vgdb=no',
                    split(' ', $ENV{BENCH_CALLGRIND_OPTS} // ''),
                    "--callgrind-out-file=$dir/cg/cg.%p", @cmd);
    wait_for_port($port, 60)
        or die "$server ($mode) under valgrind did not start";
    sleep 2;
    if ($requests) {
        my $out = `ab -k -n $requests -c 1 http://127.0.0.1:$port/small.html 2>&1`;
        my ($failed) = $out =~ /Failed requests:\s+(\d+)/;
        my ($non2xx) = $out =~ /Non-2xx responses:\s+(\d+)/;
        die "ab: $out" if !defined $failed || $failed || $non2xx;
    }
    # Both runs of a configuration must last as long, or what happens
    # with time (timers, the exporter's polls) does not cancel out.
    warn sprintf("%s (%s, %d requests) took %.0f s, over BENCH_WALL=%d: "
                 . "raise it\n", $server, $mode, $requests, time - $start,
                 $CALLGRIND_SECONDS)
        if time > $start + $CALLGRIND_SECONDS;
    sleep 0.2 while time < $start + $CALLGRIND_SECONDS;
    # Both stop gracefully, their children writing their profiles.
    kill $server eq 'nginx' ? 'QUIT' : 'WINCH', $pid;
    waitpid($pid, 0);
    # The exporter flushes and writes its profile after the master is gone.
    my $end = time + 60;
    while (time < $end) {
        last unless grep { (read_file("/proc/$_/cmdline") // '')
                               =~ /^\S*valgrind.*spanprof-exporter/ }
                    map { m{/proc/(\d+)/} } glob '/proc/[0-9]*/cmdline';
        sleep 0.5;
    }
    if (my $keep = $ENV{BENCH_KEEP}) {      # for callgrind_annotate
        system('mkdir', '-p', "$keep/$server-$mode-$requests");
        system("cp $dir/cg/cg.* $keep/$server-$mode-$requests/");
    }
    my (%by);
    for my $f (glob "$dir/cg/cg.*") {
        my $text = read_file($f);
        my ($cmd) = $text =~ /^cmd:\s*(.*)$/m;
        my ($n) = $text =~ /^(?:summary|totals):\s*(\d+)/m;
        my $who = ($cmd // '') =~ /spanprof-exporter/ ? 'exporter' : 'main';
        $who = 'worker' if $who eq 'main' && (stat $f)[4] != 0;
        $by{$who} += $n // 0;
        $by{all} += $n // 0;
    }
    return \%by;
}

sub run_callgrind {
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my ($uppid, $up) = upstream_start();
    my %per;
    my @servers = split ' ', ($ENV{BENCH_SERVERS} // 'nginx httpd');
    my @modes = split ' ', ($ENV{BENCH_MODES} // 'bare off tracing snapshot');
    for my $server (@servers) {
        for my $mode (@modes) {
            my $idle = callgrind_total($server, $mode, $CALLGRIND_WARMUP,
                                       $recv, $up);
            my $busy = callgrind_total($server, $mode,
                                       $CALLGRIND_WARMUP + $CALLGRIND_REQUESTS,
                                       $recv, $up);
            my $p = $per{$server}{$mode} = {
                map { $_ => (($busy->{$_} // 0) - ($idle->{$_} // 0))
                            / $CALLGRIND_REQUESTS } qw(all worker exporter) };
            printf STDERR "callgrind %-5s %-9s %8.0f instructions/request "
                . "(workers %.0f, exporter %.0f)\n", $server, $mode,
                @$p{qw(all worker exporter)};
        }
    }
    stop($uppid);
    $recv->stop;
    for my $server (@servers) {
        print "## callgrind, $server, small static file, keep-alive, ",
            strftime('%Y-%m-%d', gmtime), "\n\n", machine(), "\n";
        printf "ab -k -c 1 -n %d, each run %d s of wall time, minus the same "
            . "run with ab -n %d, over %d\n\n",
            $CALLGRIND_WARMUP + $CALLGRIND_REQUESTS, $CALLGRIND_SECONDS,
            $CALLGRIND_WARMUP, $CALLGRIND_REQUESTS;
        print "| configuration | instructions/request (all processes) | "
            . ($server eq 'nginx' ? 'the worker' : 'the child')
            . " | the exporter | added to bare |\n"
            . "| --- | --- | --- | --- | --- |\n";
        for my $mode (@modes) {
            my $p = $per{$server}{$mode};
            printf "| %s | %.0f | %.0f | %.0f | %+.0f |\n", $mode,
                $p->{all}, $p->{worker}, $p->{exporter},
                $p->{all} - ($per{$server}{bare}{all} // 0);
        }
        print "\n";
    }
}

run_wrk() if $what eq 'wrk' || $what eq 'all';
run_callgrind() if $what eq 'callgrind' || $what eq 'all';
