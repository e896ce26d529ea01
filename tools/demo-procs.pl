#!/usr/bin/perl
# The processes of one demo run (tools/demo.sh), so that it can prove it
# left nothing running:
#
#   demo-procs.pl snapshot DIR PID...   records PID... and every process
#                                       below them, plus those that name
#                                       DIR, in DIR/run/started.pids
#   demo-procs.pl left DIR              prints the processes of the run
#                                       still alive; exits 1 if any
#
# A process belongs to the run when it was recorded by snapshot and still
# has the same start time (a pid can be reused), or when its command line
# or environment names DIR: the exporters (their command line is only
# "spanprof-exporter: nginx", but the environment spanprof builds for
# them carries SPANPROF_CONSOLE_PATH under DIR) and processes started
# after the snapshot (the backend's per-connection children). This
# process and its ancestors (the demo itself, make, a test) never count.
use strict;
use warnings;

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return undef;
    local $/;
    my $text = <$fh>;
    return $text;
}

# (ppid, start time) from /proc/PID/stat; the command may hold spaces.
sub stat_of {
    my ($pid) = @_;
    my $stat = slurp("/proc/$pid/stat") // return;
    $stat =~ s/^.*\)\s+//s;
    my @f = split ' ', $stat;
    return ($f[1], $f[19]);
}

sub args_of {
    my $cmd = slurp("/proc/$_[0]/cmdline") // '';
    $cmd =~ s/\0+$//;
    $cmd =~ tr/\0/ /;
    return $cmd;
}

sub all_pids {
    opendir my $dh, '/proc' or die "/proc: $!\n";
    return grep { /^\d+$/ } readdir $dh;
}

sub ancestors {
    my %mine;
    my $pid = $$;
    while ($pid > 1 && !$mine{$pid}) {
        $mine{$pid} = 1;
        ($pid) = stat_of($pid);
        last unless defined $pid;
    }
    return %mine;
}

# Processes that name $dir in their command line or environment.
sub naming {
    my ($dir, $mine) = @_;
    my @found;
    for my $pid (all_pids()) {
        next if $mine->{$pid};
        my $env = slurp("/proc/$pid/environ") // '';
        push @found, $pid
            if index(args_of($pid), "$dir/") >= 0
            || index($env, "$dir/") >= 0;
    }
    return @found;
}

my ($cmd, $dir, @roots) = @ARGV;
die "usage: $0 snapshot DIR PID... | left DIR\n"
    unless defined $dir && ($cmd // '') =~ /^(snapshot|left)$/;
$dir =~ s{/+$}{};
my %mine = ancestors();
my $list = "$dir/run/started.pids";

if ($cmd eq 'snapshot') {
    my %children;
    for my $pid (all_pids()) {
        my ($ppid) = stat_of($pid);
        push @{ $children{$ppid} }, $pid if defined $ppid;
    }
    my %seen;
    my @todo = (@roots, naming($dir, \%mine));
    while (defined(my $pid = shift @todo)) {
        next if $seen{$pid}++ || $mine{$pid};
        push @todo, @{ $children{$pid} // [] };
    }
    open my $fh, '>', $list or die "$list: $!\n";
    for my $pid (sort { $a <=> $b } keys %seen) {
        my (undef, $start) = stat_of($pid);
        print $fh "$pid $start ", args_of($pid), "\n" if defined $start;
    }
    close $fh or die "$list: $!\n";
    exit 0;
}

my %alive;
for my $line (split /\n/, slurp($list) // '') {
    my ($pid, $start) = split ' ', $line;
    my (undef, $now) = stat_of($pid);
    $alive{$pid} = 1 if defined $now && $now eq $start && !$mine{$pid};
}
$alive{$_} = 1 for naming($dir, \%mine);
for my $pid (sort { $a <=> $b } keys %alive) {
    my $args = args_of($pid);
    print "$pid $args\n" if length $args;    # a zombie has none
}
exit(grep({ length args_of($_) } keys %alive) ? 1 : 0);
