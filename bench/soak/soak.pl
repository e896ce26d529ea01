#!/usr/bin/perl
# A soak of nginx or httpd (event MPM) with everything on, watching what
# an SRE would watch after a week (bench/README.md, "soak/"). From the top
# of the tree after `make build`:
#
#   perl bench/soak/soak.pl nginx|httpd [SECONDS]     (default 300)
#
# The server traces every request, selects a third of them for snapshot
# profiling (baggage splunk.trace.snapshot.volume=highest, 10 ms) and
# profiles continuously (SOAK_CONTINUOUS_MS, 20 ms), under a steady mixed
# load of SOAK_CLIENTS (3) clients, each pausing SOAK_PAUSE_MS (10) between
# requests: a small static file, a proxy to a local bare nginx, a text
# file gzipped/deflated at level 9. It is reloaded (nginx: SIGHUP, what
# `nginx -s reload` sends; httpd: SIGUSR1, `apachectl -k graceful`) every
# SOAK_RELOAD seconds (25; 0: never), and the OTLP receiver (the real one,
# t/receiver, not decoding) is stopped at SOAK_OUTAGE_AT seconds (a third
# of the run; 0: never) for SOAK_OUTAGE seconds (60), then started again
# on the same port.
#
# Every SOAK_EVERY seconds (5) one line: the exporter's VmRSS, VmHWM,
# descriptors and threads; the workers' (children's) largest VmRSS and
# descriptors; the master's (parent's) descriptors and VmRSS; the
# spanprof memfds open in the whole process tree (distinct inodes, and
# descriptors); the requests the receiver got. At the end, every counters
# line of every exporter is checked: dropped.corrupt and ring.corrupt 0,
# received = exported + dropped.* + held, and an exporter that read
# samples read an objects table too (else its profiles name nothing).
# Exit status 1 when an invariant broke or a client request failed.
# SOAK_LOG=FILE keeps a copy of the server's error log.
#
# SOAK_WRK=N: the load is wrk (-t1 -cN, keep-alive, as fast as it goes,
# the three paths in turn) instead. SOAK_PROBABILITY=P: no baggage;
# the server selects requests with SPLUNK_SNAPSHOT_SELECTION_PROBABILITY.
# SOAK_COLLECTOR=down: no receiver for the whole run (the endpoint is a
# closed port). SOAK_INTERVAL_MS: the snapshot interval (10; 1 fills the
# exporter's queue the fastest). SOAK_PIDS=1: each sample also lists
# every process (RSS, descriptors). Each new exporter counters line is
# printed as it comes.
# At the end, the growth per minute of each column after SOAK_WARMUP
# seconds (120), over that whole part and over its two halves (a leak
# grows in both; what levels off, in the first only), and of each process
# seen in 3 samples or more after the warm-up.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use List::Util qw(max sum0);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(free_port new_dir write_file read_file spawn
                        wait_for_port stop nginx_conf nginx_cmd httpd_conf httpd_cmd
                        bench_files bench_nginx_server);
use Spanprof::Receiver;
use Spanprof::Procs qw(family fd_count load_start load_stop);

my $server = shift // 'nginx';
my $SECONDS = shift // 300;
my $RELOAD = $ENV{SOAK_RELOAD} // 25;
my $OUTAGE_AT = $ENV{SOAK_OUTAGE_AT} // int($SECONDS / 3);
my $OUTAGE = $ENV{SOAK_OUTAGE} // 60;
my $EVERY = $ENV{SOAK_EVERY} // 5;
my $CLIENTS = $ENV{SOAK_CLIENTS} // 3;
my $PAUSE = ($ENV{SOAK_PAUSE_MS} // 10) / 1000;
my $CONTINUOUS_MS = $ENV{SOAK_CONTINUOUS_MS} // 20;
my $WRK = $ENV{SOAK_WRK} // 0;
my $PROBABILITY = $ENV{SOAK_PROBABILITY};
my $DOWN = ($ENV{SOAK_COLLECTOR} // '') eq 'down';
my $WARMUP = $ENV{SOAK_WARMUP} // 120;
$OUTAGE_AT = 0 if $DOWN;
die "usage: $0 nginx|httpd [SECONDS]\n" unless $server =~ /^(nginx|httpd)$/;

my @PATHS = ('/small.html', '/proxy/small.html', '/big.txt');


my $dir = new_dir();

# The proxied upstream: nginx without the module.
my $updir = "$dir/upstream";
mkdir $updir;
bench_files("$updir/www");
my $up = nginx_conf($updir, module => 0, log_level => 'warn',
                    connections => 512, server => "root $updir/www;",
                    location => '');
my $uppid = spawn(undef, "$updir/stderr.log", nginx_cmd($updir));
wait_for_port($up) or die "the upstream did not start\n";

my $recv = $DOWN ? undef
    : Spanprof::Receiver->start(dir => $dir, args => [ '--decode', 'no' ]);
my $rport = $recv ? $recv->port : free_port();

my ($port, @cmd);
if ($server eq 'nginx') {
    bench_files("$dir/www");
    my ($http, $srv) = bench_nginx_server("$dir/www", $up, 8);
    $port = nginx_conf($dir, workers => 2, connections => 512,
                       location => '', http => $http, server => $srv);
    @cmd = nginx_cmd($dir);
} else {
    $port = httpd_conf($dir, mpm => 'event',
        modules => [qw(proxy proxy_http deflate filter)], extra => <<"EXTRA");
StartServers 2
ServerLimit 4
ThreadsPerChild 8
MaxRequestWorkers 32
MinSpareThreads 8
MaxSpareThreads 16
DeflateCompressionLevel 9
<Location /big.txt>
    SetOutputFilter DEFLATE
</Location>
ProxyPass /proxy/ http://127.0.0.1:$up/
EXTRA
    bench_files("$dir/htdocs");
    @cmd = httpd_cmd($dir);
}

my %env = (
    OTEL_EXPORTER_OTLP_ENDPOINT => "http://127.0.0.1:$rport",
    OTEL_SERVICE_NAME => "soak-$server",
    SPLUNK_SNAPSHOT_PROFILER_ENABLED => 'true',
    SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => $ENV{SOAK_INTERVAL_MS} // '10',
    SPLUNK_PROFILER_ENABLED => 'true',
    SPLUNK_PROFILER_CALL_STACK_INTERVAL => $CONTINUOUS_MS,
    SPANPROF_COUNTERS_INTERVAL_MS => $ENV{SOAK_COUNTERS_MS} // 10000,
    defined $PROBABILITY
        ? (SPLUNK_SNAPSHOT_SELECTION_PROBABILITY => $PROBABILITY) : (),
);
my $master = spawn(\%env, "$dir/stderr.log", @cmd);
wait_for_port($port, 20)
    or die "$server did not start: " . read_file("$dir/error.log");

# ---- load: each client GETs the paths in turn, gzip accepted, every
# third request selected.
my ($clients, $wrk);
if ($WRK) {
    write_file("$dir/mix.lua", 'local paths = { "' . join('", "', @PATHS)
        . "\" }\nlocal i = 0\nrequest = function()\n"
        . "    i = i % #paths + 1\n"
        . "    return wrk.format(\"GET\", paths[i])\nend\n");
    $wrk = spawn(undef, "$dir/wrk.out", 'wrk', '-t1', "-c$WRK",
                 "-d${SECONDS}s", '-s', "$dir/mix.lua",
                 '-H', 'Accept-Encoding: gzip', "http://127.0.0.1:$port/");
} else {
    $clients = load_start($port, $CLIENTS, sub {
        my ($c, $n) = @_;
        sleep $PAUSE if $PAUSE > 0 && $n > 1;
        return ($PATHS[$n % @PATHS], 'Accept-Encoding: gzip')
            if defined $PROBABILITY;
        my $v = ($n + $c) % 3 == 0 ? 'highest' : 'off';
        return ($PATHS[$n % @PATHS], 'Accept-Encoding: gzip',
                "baggage: splunk.trace.snapshot.volume=$v");
    });
}

# ---- watching
sub status {
    my ($pid) = @_;
    my %s;
    for (split /\n/, read_file("/proc/$pid/status")) {
        $s{$1} = $2 if /^(\w+):\s+(\d+)/;
    }
    return \%s;
}

# Distinct spanprof memfd inodes and descriptors over @pids.
sub memfds {
    my (%ino, $fds);
    for my $pid (@_) {
        opendir my $d, "/proc/$pid/fd" or next;
        for my $fd (grep { /^\d+$/ } readdir $d) {
            my $link = readlink "/proc/$pid/fd/$fd" // next;
            next unless $link =~ m{^/memfd:spanprof};
            $ino{ (stat "/proc/$pid/fd/$fd")[1] // 0 }++;
            $fds++;
        }
    }
    return (scalar keys %ino, $fds // 0);
}

sub received {
    return sum0(map { scalar(() = read_file($_) =~ /\n/g) }
                glob("$dir/receiver-*.jsonl"));
}

my (@rows, %per_pid, $log_at);
my @head = qw(t exp_pid exp_rss exp_hwm exp_fds exp_thr workers wrk_rss
              wrk_fds mst_fds mst_rss memfd_ino memfd_fds otlp_reqs);
printf "%s\n", join "\t", @head;
sub sample {
    my ($t) = @_;
    my @f = family($master);
    my ($exp) = grep { $_->{args} =~ /^spanprof-exporter/ } @f;
    my @w = $server eq 'nginx'
        ? grep { $_->{args} =~ /worker process/ } @f
        : grep { $_->{args} =~ m{^/usr/sbin/apache2 } } @f;
    my $es = $exp ? status($exp->{pid}) : {};
    my @ws = map { status($_->{pid}) } @w;
    my $ms = status($master);
    my @row = (sprintf('%.0f', $t), $exp ? $exp->{pid} : '-',
        $es->{VmRSS} // '-', $es->{VmHWM} // '-',
        $exp ? fd_count($exp->{pid}) : '-', $es->{Threads} // '-',
        scalar @w, max(0, map { $_->{VmRSS} // 0 } @ws),
        max(0, map { fd_count($_->{pid}) } @w),
        fd_count($master), $ms->{VmRSS} // '-',
        memfds($master, map { $_->{pid} } @f), received());
    push @rows, \@row;
    printf "%s\n", join "\t", @row;
    for my $p ($master, map { $_->{pid} } $exp // (), @w) {
        my $s = $p == $master ? $ms : status($p);
        my $fds = fd_count($p);
        next unless $s->{VmRSS} && $fds >= 0;
        my $role = $p == $master ? 'master'
            : $exp && $p == $exp->{pid} ? 'exporter' : 'worker';
        push @{ $per_pid{"$role $p"} }, [ $t, $s->{VmRSS}, $fds ];
        printf "# pid %d %s rss %d fds %d\n", $p, $role, $s->{VmRSS}, $fds
            if $ENV{SOAK_PIDS};
    }
    # The exporters' counters lines logged since the last sample.
    if (open my $fh, '<', "$dir/error.log") {
        seek $fh, $log_at // 0, 0;
        while (<$fh>) {
            print "# $1\n" if /spanprof-exporter: (counters: .*)/;
        }
        $log_at = tell $fh;
    }
}

my $t0 = time;
my ($next_sample, $next_reload) = (0, $RELOAD || 1e9);
my ($reloads, $outage_end) = (0, undef);
my $outage_start = $OUTAGE_AT || 1e9;
while ((my $t = time - $t0) < $SECONDS) {
    if ($t >= $next_sample) {
        sample($t);
        $next_sample += $EVERY;
    }
    if ($t >= $next_reload) {
        kill $server eq 'nginx' ? 'HUP' : 'USR1', $master;
        $reloads++;
        $next_reload += $RELOAD;
    }
    if ($t >= $outage_start) {
        print "# collector stopped at ${\ int $t} s\n";
        $recv->stop;
        $outage_start = 1e9;
        $outage_end = $t + $OUTAGE;
    }
    if (defined $outage_end && $t >= $outage_end) {
        print "# collector started again at ${\ int $t} s\n";
        $recv = Spanprof::Receiver->start(dir => $dir, port => $rport,
                                          args => [ '--decode', 'no' ]);
        $outage_end = undef;
    }
    sleep 0.1;
}
sample(time - $t0);

my ($n, $bad);
if ($wrk) {
    waitpid $wrk, 0;
    my $out = read_file("$dir/wrk.out");
    ($n) = $out =~ /(\d+) requests in/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses:\s+(\d+)/;
    my ($errors) = $out =~ /Socket errors:(.*)/;
    # A read error is a keep-alive connection the old workers closed at
    # a reload as the request went: nginx does that without the module.
    $bad = ($non2xx // 0)
        + sum0(($errors // '') =~ /(?:connect|timeout) (\d+)/g);
    print "# wrk: $_\n" for grep { /requests in|Socket errors|Non-2xx/ }
        split /\n/, $out;
} else {
    ($n, $bad) = load_stop($clients);
}
stop($master);
stop($uppid);
$recv->stop if $recv;

# ---- the exporters' counters
my @broken;
my $lines = 0;
my %last;    # exporter pid => its last counters line
for (split /\n/, read_file("$dir/error.log")) {
    next unless /(\d+)#\d+: spanprof-exporter: counters: (.*)/
             || /\[pid (\d+)[^\]]*\] spanprof-exporter: counters: (.*)/;
    my ($pid, $text) = ($1, $2);
    my %c = $text =~ /([\w.]+)=(\d+)/g;
    $lines++;
    $last{$pid} = $text;
    my $dropped = sum0(map { $c{$_} } grep { /^dropped\./ } keys %c);
    push @broken, "exporter $pid: $text"
        if $c{'dropped.corrupt'} || $c{'ring.corrupt'}
           || $c{received} != $c{exported} + $dropped + $c{held};
    # Samples it could not map: no worker told it its objects.
    push @broken, "exporter $pid read samples and no objects table: $text"
        if $text =~ /\(at exit\)/ && $c{samples} && !$c{objects};
}
my @alerts = grep { /\[(alert|crit|emerg)\]|:(alert|crit|emerg)\]/ }
             split /\n/, read_file("$dir/error.log");

printf "# %s, %d s, %d reloads, %d requests (%d failed), %d counters lines "
    . "of %d exporters, %d broke an invariant, %d alert lines\n",
    $server, $SECONDS, $reloads, $n, $bad, $lines, scalar keys %last,
    scalar @broken, scalar @alerts;
print "# broken: $_\n" for @broken;
print "# alert: $_\n" for @alerts[0 .. ($#alerts < 9 ? $#alerts : 9)];
print "# last counters of the last exporter: ",
    $last{ (sort { $a <=> $b } keys %last)[-1] // '' } // 'none', "\n";
if (my $keep = $ENV{SOAK_LOG}) {
    write_file($keep, read_file("$dir/error.log"));
    print "# error log copied to $keep\n";
}
# ---- growth per minute after the warm-up: least squares slope of the
# column over [from, to] seconds.
sub slope {
    my ($pts, $from, $to) = @_;
    my @p = grep { $_->[0] >= $from && $_->[0] <= $to
                   && $_->[1] =~ /^\d+$/ } @$pts;
    return '-' if @p < 3;
    my $mx = sum0(map { $_->[0] } @p) / @p;
    my $my = sum0(map { $_->[1] } @p) / @p;
    my $sxx = sum0(map { ($_->[0] - $mx) ** 2 } @p) or return '-';
    return sprintf '%+.1f',
        60 * sum0(map { ($_->[0] - $mx) * ($_->[1] - $my) } @p) / $sxx;
}
my ($end, $mid) = ($rows[-1][0], ($WARMUP + $rows[-1][0]) / 2);
print "# growth per minute after ${WARMUP} s (whole, first half, second "
    . "half); KiB for rss, descriptors for fds:\n";
for my $col (qw(exp_rss exp_fds wrk_rss wrk_fds mst_rss mst_fds)) {
    my ($i) = grep { $head[$_] eq $col } 0 .. $#head;
    my @pts = map { [ $_->[0], $_->[$i] ] } @rows;
    printf "#   %-8s %8s %8s %8s\n", $col, slope(\@pts, $WARMUP, $end),
        slope(\@pts, $WARMUP, $mid), slope(\@pts, $mid, $end);
}
for my $k (sort keys %per_pid) {
    my @s = grep { $_->[0] >= $WARMUP } @{ $per_pid{$k} };
    next if @s < 3;
    printf "#   %-16s rss %6d..%6d %8s/min, fds %3d..%3d %6s/min\n", $k,
        $s[0][1], $s[-1][1], slope([ map { [ @$_[0, 1] ] } @s ], 0, 1e9),
        $s[0][2], $s[-1][2], slope([ map { [ @$_[0, 2] ] } @s ], 0, 1e9);
}
exit(@broken || $bad ? 1 : 0);
