package Spanprof::Upstream;

# Test upstreams that record what a server forwards to them: HTTP (for
# proxy_pass / mod_proxy), FastCGI, uwsgi (t/bin/upstream.pl) and gRPC
# (t/bin/grpc_upstream.js). Every upstream started here is stopped when its
# object goes away, and at the latest when the test process ends.
#
#   my $up = Spanprof::Upstream->start(dir => $dir, proto => 'fastcgi');
#   ... $up->port ...
#   my $req = $up->wait_request(1);   # the first request: { uri, headers }
#   $req->{headers}{traceparent}[0]

use strict;
use warnings;

use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir free_port read_file write_file);

my %running;
my $serial = 0;

sub start {
    my ($class, %o) = @_;
    my $dir = $o{dir} or die 'dir is required';
    my $proto = $o{proto} // 'http';
    my $n = ++$serial;
    my $self = bless {
        proto  => $proto,
        port   => free_port(),
        out    => "$dir/upstream-$n.jsonl",
        stdout => "$dir/upstream-$n.stdout",
        stderr => "$dir/upstream-$n.stderr",
    }, $class;
    write_file($self->{out}, '');
    my @cmd = $proto eq 'grpc'
        ? ('node', top_dir() . '/t/bin/grpc_upstream.js')
        : ($^X, top_dir() . '/t/bin/upstream.pl', '--proto', $proto);
    push @cmd, '--port', $self->{port}, '--out', $self->{out};

    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $self->{stdout};
        open STDERR, '>', $self->{stderr};
        exec @cmd or die "exec $cmd[0]: $!";
    }
    $running{$pid} = 1;
    $self->{pid} = $pid;

    my $end = time + 15;
    while (time < $end) {
        return $self if read_file($self->{stdout}) =~ /^listening \d+$/m;
        last if waitpid($pid, WNOHANG) == $pid;
        sleep 0.02;
    }
    my $err = read_file($self->{stderr});
    $self->stop;
    die "the $proto upstream did not start: $err";
}

sub port  { $_[0]{port} }
sub proto { $_[0]{proto} }

sub requests {
    my ($self) = @_;
    my $json = JSON::PP->new;
    return map { $json->decode($_) } grep { length }
           split /\n/, read_file($self->{out});
}

# The $n-th request (1-based) once it arrived, or undef after $timeout s.
sub wait_request {
    my ($self, $n, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (1) {
        my @r = $self->requests;
        return $r[$n - 1] if @r >= $n;
        return undef if time >= $end;
        sleep 0.02;
    }
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    _stop_pid($pid);
}

sub _stop_pid {
    my ($pid) = @_;
    delete $running{$pid};
    kill 'TERM', $pid;
    my $end = time + 5;
    while (time < $end) {
        return if waitpid($pid, WNOHANG) != 0;
        sleep 0.02;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{pid};
}

END {
    local $?;
    _stop_pid($_) for keys %running;
}

1;
