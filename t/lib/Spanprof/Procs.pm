package Spanprof::Procs;

# What a server leaves behind over its life (t/nginx_lifecycle.t,
# t/httpd_lifecycle.t): its processes, the spanprof shared memory and the
# descriptors its master/parent holds, and a load of plain GETs to run
# while it reloads.
#
#   my @f = family($master);              # every descendant: {pid ppid uid args}
#   my ($inodes, $maps) = shm_of($master);
#   my $load = load_start($port, 3);      # three clients GET / in a loop
#   my ($n, $bad) = load_stop($load);     # requests sent, not answered 200
#   diag(thread_stacks($master));         # where every thread waits

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX ();

use Spanprof::Server qw(read_file);

use Exporter 'import';
our @EXPORT_OK = qw(processes family exporters shm_of fd_count get_ok
                    load_start load_stop thread_stacks);

# Every process: pid => { pid, ppid, uid, args }.
sub processes {
    my %p;
    for (split /\n/, `ps -eo pid=,ppid=,uid=,args=`) {
        my ($pid, $ppid, $uid, $args) = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/
            or next;
        $p{$pid} = { pid => $pid, ppid => $ppid, uid => $uid, args => $args };
    }
    return \%p;
}

# Every descendant of pid.
sub family {
    my ($pid) = @_;
    my $p = processes();
    my @out;
    my @todo = ($pid);
    while (defined(my $q = shift @todo)) {
        for (values %$p) {
            next unless $_->{ppid} == $q;
            push @out, $_;
            push @todo, $_->{pid};
        }
    }
    return @out;
}

# The spanprof-exporter processes among pid's descendants.
sub exporters {
    my ($pid) = @_;
    return grep { $_->{args} =~ /^spanprof-exporter/ } family($pid);
}

# The spanprof memfd descriptors of pid (inode => fd count) and how many of
# its mappings are of them.
sub shm_of {
    my ($pid) = @_;
    my %inode;
    opendir my $d, "/proc/$pid/fd" or return ({}, 0);
    for my $fd (grep { /^\d+$/ } readdir $d) {
        my $link = readlink "/proc/$pid/fd/$fd" // next;
        next unless $link =~ m{^/memfd:spanprof};
        my $ino = (stat "/proc/$pid/fd/$fd")[1];
        $inode{$ino}++;
    }
    my $maps = grep { m{/memfd:spanprof} } split /\n/,
               read_file("/proc/$pid/maps");
    return (\%inode, $maps);
}

sub fd_count {
    my ($pid) = @_;
    opendir my $d, "/proc/$pid/fd" or return -1;
    return scalar grep { /^\d+$/ } readdir $d;
}

# One HTTP/1.0 GET of $path (default /) with @headers; 1 when answered
# 200 within 10 s (a server that accepts and never answers must not hang
# the test).
sub get_ok {
    return get_answer(@_) eq 'ok' ? 1 : 0;
}

# As get_ok, but says how a request that is not answered 200 ended:
# 'ok', 'reset' (the connection was reset before a byte of an answer came:
# the server's process ended holding it, unread) or 'bad'.
sub get_answer {
    my ($port, $path, @headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return 'bad';
    print $s "GET " . ($path // '/') . " HTTP/1.0\r\nHost: localhost\r\n"
        . join('', map { "$_\r\n" } @headers) . "\r\n";
    # select returns early on a signal (load_stop's TERM): read on until
    # the answer ends or the deadline passes.
    my $sel = IO::Select->new($s);
    my ($resp, $end, $reset) = ('', time + 10, 0);
    while ((my $left = $end - time) > 0) {
        $! = 0;
        unless ($sel->can_read($left)) {
            next if $!{EINTR};
            last;
        }
        my $got = sysread($s, $resp, 4096, length $resp);
        next if !defined $got && $!{EINTR};
        $reset = 1 if !defined $got && $!{ECONNRESET} && $resp eq '';
        last unless $got;
    }
    return 'ok' if $resp =~ m{^HTTP/1\.[01] 200 };
    return $reset ? 'reset' : 'bad';
}

# $clients (default 1) processes each sending GETs one after another until
# load_stop; returns the handle for load_stop. $next, when given, is
# called before each request with the client's number (1-based) and the
# request's, and returns its path and headers. With $retry_reset, a
# request whose connection is reset before any answer is sent once more
# and counted in load_stop's resets; its second try must be answered 200.
sub load_start {
    my ($port, $clients, $next, $retry_reset) = @_;
    my @kids;
    for my $c (1 .. ($clients // 1)) {
        pipe my $rd, my $wr or die "pipe: $!";
        my $pid = fork;
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            close $rd;
            my ($n, $bad, $resets, $stop) = (0, 0, 0, 0);
            local $SIG{TERM} = sub { $stop = 1 };
            # TERM waits until the request in flight is answered: a
            # connect or read it cut short would count as a failure.
            my $term = POSIX::SigSet->new(POSIX::SIGTERM());
            until ($stop) {
                $n++;
                my @req = $next ? $next->($c, $n) : ();
                POSIX::sigprocmask(POSIX::SIG_BLOCK(), $term);
                my $answer = get_answer($port, @req);
                if ($answer eq 'reset' && $retry_reset) {
                    $resets++;
                    $answer = get_answer($port, @req);
                }
                $bad++ unless $answer eq 'ok';
                POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $term);
            }
            print $wr "$n $bad $resets\n";
            close $wr;
            POSIX::_exit(0);    # not the parent's END blocks
        }
        close $wr;
        push @kids, [ $pid, $rd ];
    }
    return \@kids;
}

# Stops the load; returns (requests sent, requests not answered 200,
# requests sent again after a reset).
sub load_stop {
    my ($kids) = @_;
    my ($n, $bad, $resets) = (0, 0, 0);
    for (@$kids) {
        my ($pid, $rd) = @$_;
        kill 'TERM', $pid;
        waitpid $pid, 0;
        my ($kn, $kbad, $kresets) = split ' ', (readline($rd) // '0 0 0');
        $n += $kn;
        $bad += $kbad;
        $resets += $kresets // 0;
    }
    return ($n, $bad, $resets);
}

# Where the threads of pid's descendants are, when gdb is there: what
# makes a request that is never answered understood.
sub thread_stacks {
    my ($pid) = @_;
    return '' if system('gdb --version >/dev/null 2>&1');
    return join '', map { "--- $_->{pid} $_->{args}\n"
        . `gdb -p $_->{pid} -batch -ex 'thread apply all bt' 2>&1` }
        family($pid);
}

1;
