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
# callgrind: nginx, every process (master, worker, exporter) under
# valgrind --tool=callgrind --trace-children=yes, for the same wall time
# with N keep-alive requests of the small file (ab -k) and with none;
# (instructions with N - instructions with 0) / N per configuration.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use List::Util qw(sum);
use POSIX qw(strftime);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file free_port
                        spawn wait_for_port stop);
use Spanprof::Receiver;

my $what = shift // 'all';
my $ROUNDS = shift // 3;
my $DURATION = $ENV{BENCH_SECONDS} // 5;
my $CALLGRIND_REQUESTS = $ENV{BENCH_REQUESTS} // 2000;
my $CALLGRIND_SECONDS = $ENV{BENCH_WALL} // 30;
my $top = top_dir();
my $mods = '/usr/lib/apache2/modules';
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

sub docs {
    my ($root) = @_;
    mkdir $root;
    chmod 0755, $root;
    write_file("$root/small.html", ('x' x 1023) . "\n");
    write_file("$root/big.txt", join('', map { "line $_ of a text that is "
                                               . "compressed at level 9\n" }
                                         1 .. 3500));
    chmod 0644, "$root/$_" for qw(small.html big.txt);
}

sub temp_paths {
    my ($dir) = @_;
    return join "\n", map { "    ${_}_temp_path $dir/$_;" }
        qw(client_body proxy fastcgi uwsgi scgi);
}

# The upstream of the proxy workload: a bare nginx.
sub upstream_conf {
    my ($dir, $port) = @_;
    docs("$dir/up");
    write_file("$dir/up.conf", <<"CONF");
daemon off;
worker_processes 1;
error_log $dir/up-error.log warn;
pid $dir/up.pid;
events { worker_connections 1024; }
http {
    access_log off;
${\ temp_paths($dir)}
    server { listen 127.0.0.1:$port; root $dir/up; }
}
CONF
}

sub nginx_conf {
    my ($dir, $mode, $port, $up, %o) = @_;
    my $load = $mode eq 'bare' ? ''
        : "load_module $top/build/ngx_http_spanprof_module.so;";
    my $off = $mode eq 'off' ? 'spanprof off;' : '';
    my $master = $o{master} // 'on';
    docs("$dir/www");
    write_file("$dir/nginx.conf", <<"CONF");
$load
daemon off;
master_process $master;
worker_processes 1;
error_log $dir/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    $off
${\ temp_paths($dir)}
    upstream backend { server 127.0.0.1:$up; keepalive 16; }
    server {
        listen 127.0.0.1:$port;
        root $dir/www;
        location /proxy/ {
            proxy_pass http://backend/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location /big.txt {
            gzip on; gzip_comp_level 9; gzip_types text/plain;
            gzip_min_length 0;
        }
    }
}
CONF
    return ('/usr/sbin/nginx', '-p', $dir, '-c', "$dir/nginx.conf",
            '-e', "$dir/error.log");
}

sub httpd_conf {
    my ($dir, $mode, $port, $up) = @_;
    my $load = $mode eq 'bare' ? ''
        : "LoadModule spanprof_module $top/build/mod_spanprof.so";
    my $off = $mode eq 'off' ? 'Spanprof Off' : '';
    docs("$dir/www");
    write_file("$dir/httpd.conf", <<"CONF");
ServerRoot $dir
DefaultRuntimeDir $dir
PidFile $dir/httpd.pid
Listen 127.0.0.1:$port
ServerName localhost
User nobody
Group nogroup
ErrorLog $dir/error.log
LogLevel warn
LoadModule mpm_event_module $mods/mod_mpm_event.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule mime_module $mods/mod_mime.so
LoadModule proxy_module $mods/mod_proxy.so
LoadModule proxy_http_module $mods/mod_proxy_http.so
LoadModule deflate_module $mods/mod_deflate.so
LoadModule filter_module $mods/mod_filter.so
$load
StartServers 1
ServerLimit 1
ThreadsPerChild 16
MaxRequestWorkers 16
MinSpareThreads 1
MaxSpareThreads 16
KeepAlive On
MaxKeepAliveRequests 0
TypesConfig /dev/null
AddType text/html .html
AddType text/plain .txt
DocumentRoot $dir/www
DeflateCompressionLevel 9
<Directory $dir/www>
    Require all granted
</Directory>
<Location /big.txt>
    SetOutputFilter DEFLATE
</Location>
ProxyPass /proxy/ http://127.0.0.1:$up/
$off
CONF
    return ('/usr/sbin/apache2', '-f', "$dir/httpd.conf", '-DFOREGROUND');
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
    my $recv = Spanprof::Receiver->start(dir => $dir);
    pin(1, $recv->pid);
    my $up = free_port();
    upstream_conf($dir, $up);
    my $uppid = spawn(undef, "$dir/up.log", 'taskset', '-c', '1',
                      '/usr/sbin/nginx', '-p', $dir, '-c', "$dir/up.conf",
                      '-e', "$dir/up-error.log");
    wait_for_port($up) or die "upstream did not start";

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
                    ? nginx_conf($sdir, $mode, $port, $up)
                    : httpd_conf($sdir, $mode, $port, $up);
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

# Instructions of every process of one nginx run under callgrind.
sub callgrind_total {
    my ($mode, $requests, $recv, $up) = @_;
    my $dir = new_dir();
    my $port = free_port();
    my @cmd = nginx_conf($dir, $mode, $port, $up);
    # The workers (nobody) write their own profiles when they exit.
    mkdir "$dir/cg";
    chmod 01777, "$dir/cg";
    my $start = time;
    my $pid = spawn(server_env($mode, $recv), "$dir/stderr.log",
                    'valgrind', '--tool=callgrind', '--trace-children=yes',
                    "--callgrind-out-file=$dir/cg/cg.%p", @cmd);
    wait_for_port($port, 60) or die "nginx ($mode) under valgrind did not start";
    sleep 2;
    if ($requests) {
        my $out = `ab -k -n $requests -c 1 http://127.0.0.1:$port/small.html 2>&1`;
        my ($failed) = $out =~ /Failed requests:\s+(\d+)/;
        my ($non2xx) = $out =~ /Non-2xx responses:\s+(\d+)/;
        die "ab: $out" if !defined $failed || $failed || $non2xx;
    }
    sleep 0.2 while time < $start + $CALLGRIND_SECONDS;
    kill 'QUIT', $pid;
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
        system('mkdir', '-p', "$keep/$mode-$requests");
        system("cp $dir/cg/cg.* $keep/$mode-$requests/");
    }
    my (%by);
    for my $f (glob "$dir/cg/cg.*") {
        my $text = read_file($f);
        my ($cmd) = $text =~ /^cmd:\s*(.*)$/m;
        my ($n) = $text =~ /^(?:summary|totals):\s*(\d+)/m;
        my $who = ($cmd // '') =~ /spanprof-exporter/ ? 'exporter' : 'nginx';
        $who = 'worker' if $who eq 'nginx' && (stat $f)[4] != 0;
        $by{$who} += $n // 0;
        $by{all} += $n // 0;
    }
    return \%by;
}

sub run_callgrind {
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $up = free_port();
    upstream_conf($dir, $up);
    my $uppid = spawn(undef, "$dir/up.log", '/usr/sbin/nginx', '-p', $dir,
                      '-c', "$dir/up.conf", '-e', "$dir/up-error.log");
    wait_for_port($up) or die "upstream did not start";
    my %per;
    my @modes = split ' ', ($ENV{BENCH_MODES} // 'bare off tracing snapshot');
    for my $mode (@modes) {
        my $idle = callgrind_total($mode, 0, $recv, $up);
        my $busy = callgrind_total($mode, $CALLGRIND_REQUESTS, $recv, $up);
        $per{$mode} = { map { $_ => (($busy->{$_} // 0) - ($idle->{$_} // 0))
                                  / $CALLGRIND_REQUESTS } qw(all worker exporter) };
        printf STDERR "callgrind %-9s %8.0f instructions/request (worker "
            . "%.0f, exporter %.0f)\n", $mode, @{ $per{$mode} }{qw(all worker exporter)};
    }
    stop($uppid);
    $recv->stop;
    print "## callgrind, nginx, small static file, keep-alive, ",
        strftime('%Y-%m-%d', gmtime), "\n\n", machine(), "\n";
    printf "ab -k -c 1 -n %d, each run %d s of wall time, minus the same "
        . "run with no request\n\n", $CALLGRIND_REQUESTS, $CALLGRIND_SECONDS;
    print "| configuration | instructions/request (all processes) | "
        . "the worker | the exporter | added to bare |\n"
        . "| --- | --- | --- | --- | --- |\n";
    for my $mode (@modes) {
        printf "| %s | %.0f | %.0f | %.0f | %+.0f |\n", $mode,
            $per{$mode}{all}, $per{$mode}{worker}, $per{$mode}{exporter},
            $per{$mode}{all} - ($per{bare}{all} // 0);
    }
    print "\n";
}

run_wrk() if $what eq 'wrk' || $what eq 'all';
run_callgrind() if $what eq 'callgrind' || $what eq 'all';
