package Spanprof::Exporter;

# Runs build/spanprof-exporter the way a server will, through
# t/bin/exporter_drive.c (built here against the core archive): the driver
# creates the region, spawns the exporter, writes records like a worker,
# then stops the exporter and reports. Shared by t/exporter*.t.

use strict;
use warnings;

use POSIX qw(WNOHANG);
use Test::More ();
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir read_file wait_until);

use Exporter 'import';
our @EXPORT_OK = qw(build_driver start_drive finish_drive run_drive
                    finish_drive_when counters balanced check_end
                    failed_with);

# The exporter's peak RSS in every fault stays under this (README,
# "Bounds").
my $BOUND_KB = 64 * 1024;

my %running;

# Compiles the driver into $dir with debug info, so its frames have
# names, files and lines. Returns its path, or dies with the compiler's
# output.
sub build_driver {
    my ($dir) = @_;
    my $top = top_dir();
    my $build = $ENV{SPANPROF_BUILD} // "$top/build";
    my $bin = "$dir/exporter_drive";
    my @cmd = ('cc', '-std=c11', '-D_GNU_SOURCE', '-O1', '-g', '-Wall',
               '-Wextra', '-Werror', "-I$top/core/include", "-I$top/t/bin",
               "$top/t/bin/exporter_drive.c", "$build/libspanprof_core.a",
               '-lm', '-o', $bin);
    my $out = `@cmd 2>&1`;
    die "cannot build t/bin/exporter_drive.c (make build first?):\n$out"
        if $? != 0;
    return $bin;
}

# start_drive(dir => $dir, driver => $bin, env => {...}, args => [...])
# Starts the driver with exactly the OTEL_/SPLUNK_/SPANPROF_ variables of
# env (the harness's own are removed). Returns a handle.
sub start_drive {
    my (%a) = @_;
    my $n = ++$running{serial};
    my $h = {
        out => "$a{dir}/drive-$n.out",
        log => "$a{dir}/drive-$n.log",
    };
    my $exporter = $ENV{SPANPROF_BUILD} // top_dir() . '/build';
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        delete $ENV{$_} for grep { /^(OTEL_|SPLUNK_|SPANPROF_)/ } keys %ENV;
        $ENV{$_} = $a{env}{$_} for keys %{ $a{env} // {} };
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $h->{out};
        open STDERR, '>', $h->{log};
        exec $a{driver}, '--exporter', "$exporter/spanprof-exporter",
            @{ $a{args} // [] } or die "exec: $!";
    }
    $h->{pid} = $pid;
    $running{$pid} = $h;
    my $end = time + 10;
    while (time < $end && read_file($h->{out}) !~ /^exporter (\d+)$/m) {
        sleep 0.01;
    }
    ($h->{exporter_pid}) = read_file($h->{out}) =~ /^exporter (\d+)$/m;
    ($h->{driver_pid}) = read_file($h->{out}) =~ /^driver (\d+)$/m;
    return $h;
}

# Waits for the driver (at most $timeout s, default 60); fills in what it
# printed and the exporter's log.
sub finish_drive {
    my ($h, $timeout) = @_;
    my $end = time + ($timeout // 60);
    while (time < $end) {
        last if waitpid($h->{pid}, WNOHANG) == $h->{pid};
        sleep 0.05;
    }
    if (kill 0, $h->{pid}) {
        kill 'KILL', $h->{pid};
        waitpid($h->{pid}, 0);
        $h->{timed_out} = 1;
        # An exporter that hangs in its stop outlives its driver.
        kill 'KILL', $h->{exporter_pid} if $h->{exporter_pid};
    }
    delete $running{ $h->{pid} };
    my $out = read_file($h->{out});
    $h->{stdout} = $out;
    $h->{stderr} = read_file($h->{log});
    ($h->{written_samples}, $h->{written_spans}, $h->{ring_full}) =
        $out =~ /^written samples=(\d+) spans=(\d+) ring_full=(\d+)$/m;
    ($h->{hwm_kb}) = $out =~ /^exporter_hwm_kb (-?\d+)$/m;
    ($h->{stop_ms}) = $out =~ /^exporter_stop_ms (\d+)$/m;
    ($h->{exit}) = $out =~ /^exporter_exit (\d+)$/m;
    ($h->{signal}) = $out =~ /^exporter_signal (\d+)$/m;
    $h->{counters} = counters($h->{stderr}, 'at exit');
    return $h;
}

sub run_drive { finish_drive(start_drive(@_)) }

# For a driver started with a long --hold-ms: waits until $cond is true
# (at most $timeout s, default 60; a busy machine may take seconds to
# start the exporter and export), then ends the hold (SIGUSR1) so that the
# driver stops the exporter as usual; finish_drive's handle.
sub finish_drive_when {
    my ($h, $cond, $timeout) = @_;
    wait_until($cond, $timeout // 60);
    kill 'USR1', $h->{pid};
    return finish_drive($h);
}

# The last counters line of an exporter log (with $tag, e.g. "at exit"),
# as a hash; undef when there is none. In nginx's, httpd's or the plain
# format (no SPANPROF_SERVER).
sub counters {
    my ($log, $tag) = @_;
    my $info = qr/\[(?:spanprof:)?info\] .*spanprof-exporter: |: info: /;
    my @lines = grep { /${info}counters: / && (!$tag || /\Q$tag\E/) }
        split /\n/, $log;
    return undef unless @lines;
    my %c;
    $c{$1} = $2 while $lines[-1] =~ /\b([a-z_.A-Z]+)=(\d+)/g;
    return \%c;
}

# received = exported + every dropped.* + held
sub balanced {
    my ($c) = @_;
    my $sum = $c->{exported} + $c->{held};
    $sum += $c->{$_} for grep { /^dropped\./ } keys %$c;
    return $sum == $c->{received};
}

# The tests of an exporter that ended (finish_drive's handle): the driver
# finished, the exporter exited 0, its counters at exit add up, every
# record written was received, its peak RSS stayed under the bound.
# Returns the counters ({} when there are none).
sub check_end {
    my ($h, $what) = @_;
    Test::More::ok(!$h->{timed_out}, "$what: the driver finished");
    Test::More::is($h->{exit}, 0, "$what: the exporter exits 0")
        or Test::More::diag($h->{stderr});
    my $c = $h->{counters};
    Test::More::ok($c, "$what: counters at exit") or return {};
    Test::More::ok(balanced($c),
                   "$what: received = exported + dropped + held")
        or Test::More::diag(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
    Test::More::is($c->{received},
                   $h->{written_samples} + $h->{written_spans},
                   "$what: every record written was received");
    Test::More::ok($h->{hwm_kb} > 0 && $h->{hwm_kb} < $BOUND_KB,
                   "$what: peak RSS $h->{hwm_kb} kB under 64 MiB");
    return $c;
}

# The exporter of $h said that an export failed with $status.
sub failed_with {
    my ($h, $status) = @_;
    return read_file($h->{log}) =~ /export failed: .*\b$status\b/;
}

END {
    local $?;
    for my $pid (grep { /^\d+$/ } keys %running) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
        kill 'KILL', $running{$pid}{exporter_pid}
            if $running{$pid}{exporter_pid};
    }
}

1;
