#!/usr/bin/perl
# The exporter's CPU per span while nginx traces every request of a 1 KiB
# file (wrk -t1 -c8, the receiver not decoding, as cpu_split.pl): for
# each exporter executable given, the exporter's user and system CPU per
# 100k spans, gRPC export calls per second (the receiver's record of
# them) and each thread's voluntary/involuntary context switches over
# the run. Executables are alternated round by round (the machine is
# noisy), the order rotated, and the medians printed at the end. Run by
# hand after `make build`, from the top of the tree:
#
#   perl bench/servers/exporter_cpu.pl [ROUNDS] [LABEL=EXPORTER ...]
#
# Without LABEL=EXPORTER: the tree's own build/spanprof-exporter. To
# compare with another commit, build it in another clone and pass both,
# e.g. `base=/tmp/base/build/spanprof-exporter new=build/spanprof-exporter`
# (the module is this tree's; SPANPROF_EXPORTER_PATH picks the
# exporter). BENCH_SECONDS (5) is each wrk run's length; PERF_OUT=PREFIX
# records `perf record -F 4000 -g` of the exporter during each run into
# PREFIX.LABEL.ROUND.data (PERF_CALL_GRAPH=dwarf for DWARF stacks);
# SETTLE_SECONDS (1) is how long after wrk the exporter's CPU is still
# counted, for the spans it had not sent yet; THREADS=1 prints every
# run's per-thread figures, not only the summary;
# PIN=1 places the processes as run.pl's wrk runs do: nginx and its
# exporter on CPU 0, wrk and the receiver on CPU 1. Each run's "lost" is
# what the exporter's counters at exit say the workers could not write
# (ring.full) or it dropped (dropped.*), by name when not 0.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t/lib";

use Cwd qw(abs_path);
use POSIX ();
use Time::HiRes qw(time sleep);
use Spanprof::Server qw(new_dir nginx_conf nginx_start stop write_file
                        read_file top_dir);
use Spanprof::Receiver;
use Spanprof::Procs qw(family);
use Spanprof::Exporter qw(counters);

my $ROUNDS = @ARGV && $ARGV[0] =~ /^\d+$/ ? shift : 3;
my $SECONDS = $ENV{BENCH_SECONDS} // 5;
my $HZ = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
my @VARIANTS = map { /^([^=]+)=(.+)$/ or die "not LABEL=PATH: $_\n";
                     -x $2 or die "$2 is not executable\n";
                     [ $1, abs_path($2) ] } @ARGV;
@VARIANTS = ([ tree => top_dir() . '/build/spanprof-exporter' ])
    unless @VARIANTS;

# Each thread of pid: tid => { name, user, sys, vol, invol } so far (CPU in
# seconds). Threads are named by comm plus their order of creation among
# threads of that name (tids grow), so runs can be compared.
sub threads_of {
    my ($pid) = @_;
    my %t;
    opendir my $d, "/proc/$pid/task" or return {};
    for my $tid (grep { /^\d+$/ } readdir $d) {
        my $stat = read_file("/proc/$pid/task/$tid/stat") or next;
        my ($comm, $rest) = $stat =~ /\((.*)\) (.*)/s or next;
        my @f = split / /, $rest;
        my $status = read_file("/proc/$pid/task/$tid/status");
        my ($vol) = $status =~ /^voluntary_ctxt_switches:\s+(\d+)/m;
        my ($invol) = $status =~ /^nonvoluntary_ctxt_switches:\s+(\d+)/m;
        # schedstat's run time is in ns, stat's user/sys in clock ticks
        my ($run) = read_file("/proc/$pid/task/$tid/schedstat") =~ /^(\d+)/;
        $t{$tid} = { comm => $tid == $pid ? 'main' : $comm,
                     user => $f[11] / $HZ, sys => $f[12] / $HZ,
                     cpu => ($run // 0) / 1e9,
                     vol => $vol // 0, invol => $invol // 0 };
    }
    my %seen;
    for my $tid (sort { $a <=> $b } keys %t) {
        my $c = $t{$tid}{comm};
        $t{$tid}{name} = $seen{$c}++ ? "$c#$seen{$c}" : $c;
    }
    return \%t;
}

# What each thread did between two threads_of: name => { user, sys, vol,
# invol }; threads gone in between are left out, new ones count from 0.
sub threads_delta {
    my ($before, $after) = @_;
    my %d;
    for my $tid (keys %$after) {
        my $a = $after->{$tid};
        my $b = $before->{$tid} // { map { $_ => 0 } qw(cpu user sys vol invol) };
        $d{ $a->{name} } = { map { $_ => $a->{$_} - $b->{$_} }
                             qw(cpu user sys vol invol) };
    }
    return \%d;
}

# Trace export calls the receiver recorded between two times (ms since
# the epoch), and their bytes.
sub calls_between {
    my ($file, $from, $to) = @_;
    my ($n, $bytes) = (0, 0);
    for (split /\n/, read_file($file)) {
        my ($t) = /"time_ms":(\d+)/ or next;
        next unless /"signal":"traces"/ && $t >= $from && $t < $to;
        $n++;
        $bytes += $1 if /"request_bytes":(\d+)/;
    }
    return ($n, $bytes);
}

sub one_run {
    my ($exporter, $perf_out) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir,
                                         args => [ '--decode', 'no' ]);
    system("taskset -a -p -c 1 $recv->{pid} >/dev/null") if $ENV{PIN};
    write_file("$dir/small.html", 'x' x 1024);
    chmod 0644, "$dir/small.html";
    my $port = nginx_conf($dir,
                          server => "location /s { alias $dir/small.html; }");
    my $nginx = nginx_start($dir, $port,
        OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
        SPANPROF_EXPORTER_PATH => $exporter)
        or die "nginx did not start\n";
    sleep 1;
    my ($exp) = map { $_->{pid} }
                grep { $_->{args} =~ /spanprof-exporter/ } family($nginx);
    die "no exporter under nginx $nginx\n" unless $exp;
    if ($ENV{PIN}) {
        system("taskset -a -p -c 0 $_ >/dev/null")
            for $nginx, map { $_->{pid} } family($nginx);
    }
    my $perf;
    if ($perf_out) {
        my @g = ($ENV{PERF_CALL_GRAPH} // '') eq 'dwarf'
              ? ('--call-graph', 'dwarf') : ('-g');
        $perf = fork // die "fork: $!";
        if (!$perf) {
            open STDOUT, '>', '/dev/null';
            open STDERR, '>', '/dev/null';
            { exec 'perf', 'record', '-F', 4000, @g, '-p', $exp,
                   '-o', $perf_out, '--', 'sleep', $SECONDS }
            POSIX::_exit(127);
        }
    }
    my $before = threads_of($exp);
    my $t0 = time;
    my $pin = $ENV{PIN} ? 'taskset -c 1 ' : '';
    my $out = `${pin}wrk -t1 -c8 -d${SECONDS}s http://127.0.0.1:$port/s 2>&1`;
    my $t1 = time;
    # What wrk's requests cost the exporter includes what it does after
    # wrk ends with spans still in its rings or queue: counted up to a
    # settle time after (at rest it takes about 3 ms of CPU a second).
    sleep($ENV{SETTLE_SECONDS} // 1);
    my $delta = threads_delta($before, threads_of($exp));
    waitpid $perf, 0 if $perf;
    # Calls answered during the run; the last batch's answer may come a
    # little after wrk, so the window is the run's own.
    my ($calls, $bytes) = calls_between($recv->{out}, $t0 * 1000,
                                        $t1 * 1000);
    stop($nginx);
    $recv->stop;
    # The exporter's last counters (at exit): what the workers could not
    # write (ring.full) and what it dropped. An exporter that takes less
    # CPU by falling behind (the queue holds OTEL_BSP_MAX_QUEUE_SIZE,
    # 2048 spans, about 27 ms of this load) shows it here.
    my $counters = counters(read_file("$dir/error.log") // '', 'at exit')
                   // {};
    my ($lost, @lost) = (0);
    for my $name (sort grep { /^(?:ring\.full|dropped\.)/ } keys %$counters) {
        $lost += $counters->{$name};
        push @lost, "$name=$counters->{$name}" if $counters->{$name};
    }
    my ($requests) = $out =~ /(\d+) requests in/;
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    return { rps => $rps // 0, spans => $requests // 0,
             secs => $t1 - $t0, threads => $delta,
             lost => $lost, lost_by => "@lost",
             calls => $calls, kb => $calls ? $bytes / $calls / 1024 : 0 };
}

sub median {
    my @s = sort { $a <=> $b } @_;
    return 0 unless @s;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

sub sum_of {
    my ($threads, $key) = @_;
    my $n = 0;
    $n += $_->{$key} for values %$threads;
    return $n;
}

printf "# %d s of wrk -t1 -c8 a run, every request traced; exporter CPU in"
       . " seconds (schedstat; user/system from stat), per-100k: CPU s per"
       . " 100k spans\n", $SECONDS;
my %runs;
for my $round (1 .. $ROUNDS) {
    # rotated: no variant always runs first after the previous one's stop
    my @order = @VARIANTS[ map { ($_ + $round - 1) % @VARIANTS }
                           0 .. $#VARIANTS ];
    for my $v (@order) {
        my ($label, $path) = @$v;
        my $perf_out = $ENV{PERF_OUT} ? "$ENV{PERF_OUT}.$label.$round.data"
                                      : undef;
        my $r = one_run($path, $perf_out);
        my $th = $r->{threads};
        my ($user, $sys) = (sum_of($th, 'user'), sum_of($th, 'sys'));
        my $cpu = sum_of($th, 'cpu');
        $r->{per100k} = $r->{spans} ? $cpu * 1e5 / $r->{spans} : 0;
        $r->{callrate} = $r->{secs} ? $r->{calls} / $r->{secs} : 0;
        $r->{vol} = sum_of($th, 'vol') / ($r->{secs} || 1);
        $r->{invol} = sum_of($th, 'invol') / ($r->{secs} || 1);
        push @{ $runs{$label} }, $r;
        printf "round %d %-8s %6.0f req/s  exporter %.3f s (%.2f/%.2f)"
               . "  per-100k %.3f  calls/s %5.1f (%3.0f KiB)  switches/s vol"
               . " %6.0f invol %5.0f  lost %d %s\n",
               $round, $label, $r->{rps}, $cpu, $user, $sys, $r->{per100k},
               $r->{callrate}, $r->{kb}, $r->{vol}, $r->{invol}, $r->{lost},
               $r->{lost_by};
        next unless $ENV{THREADS};
        for my $name (sort keys %$th) {
            my $t = $th->{$name};
            printf "    %-18s cpu %.3f s (%.2f/%.2f)  switches vol %6d"
                   . " invol %5d\n", $name, $t->{cpu}, $t->{user}, $t->{sys},
                   $t->{vol}, $t->{invol};
        }
    }
}

print "# medians over $ROUNDS rounds; by thread: CPU s per 100k spans,"
      . " switches per second vol/invol (threads idle in all runs left out)\n";
for my $v (@VARIANTS) {
    my $label = $v->[0];
    my $rs = $runs{$label};
    my %names = map { %{ $_->{threads} } } @$rs;
    printf "%-8s per-100k %.3f  req/s %6.0f  calls/s %5.1f  switches/s vol"
           . " %6.0f invol %5.0f\n", $label,
           median(map { $_->{per100k} } @$rs), median(map { $_->{rps} } @$rs),
           median(map { $_->{callrate} } @$rs), median(map { $_->{vol} } @$rs),
           median(map { $_->{invol} } @$rs);
    for my $n (sort keys %names) {
        my @t = map { $_->{threads}{$n} // {} } @$rs;
        my $cpu = median(map { ($t[$_]{cpu} // 0) * 1e5
                               / ($rs->[$_]{spans} || 1) } 0 .. $#t);
        my $vol = median(map { ($t[$_]{vol} // 0) / $rs->[$_]{secs} } 0 .. $#t);
        my $inv = median(map { ($t[$_]{invol} // 0) / $rs->[$_]{secs} }
                         0 .. $#t);
        next unless $cpu >= 0.0005 || $vol >= 0.5;
        printf "    %-18s %.3f  %5.0f/%.0f\n", $n, $cpu, $vol, $inv;
    }
}
