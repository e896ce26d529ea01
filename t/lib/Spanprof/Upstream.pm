package Spanprof::Upstream;

# Test upstreams that record what a server forwards to them: HTTP (for
# proxy_pass / mod_proxy), FastCGI, uwsgi and AJP13 (mod_proxy_ajp), all
# in t/bin/upstream.pl, and gRPC (t/bin/grpc_upstream.js). They are run
# like the OTLP receiver (they say "listening PORT" too), so they share its
# waiting and stopping: an upstream is stopped when its object goes away.
#
#   my $up = Spanprof::Upstream->start(dir => $dir, proto => 'fastcgi');
#   my $bad = Spanprof::Upstream->start(dir => $dir, status => 502);
#   my $late = Spanprof::Upstream->start(dir => $dir, delay => 2);
#   ... $up->port ...
#   my $req = $up->wait_request(1);   # the first request: { uri, headers }
#   $req->{headers}{traceparent}[0]

use strict;
use warnings;

use JSON::PP ();
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir free_port read_file write_file spawn);
use Spanprof::Receiver;
use parent -norequire, 'Spanprof::Receiver';

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
        stdout => "$dir/upstream-$n.log",
        stderr => "$dir/upstream-$n.log",
    }, $class;
    write_file($self->{out}, '');
    my @cmd = $proto eq 'grpc'
        ? ('node', top_dir() . '/t/bin/grpc_upstream.js')
        : ($^X, top_dir() . '/t/bin/upstream.pl', '--proto', $proto);
    push @cmd, '--port', $self->{port}, '--out', $self->{out};
    # every answer with that status (upstream.pl, HTTP)
    push @cmd, '--status', $o{status} if $o{status};
    # every answer that many seconds late (upstream.pl, HTTP)
    push @cmd, '--delay', $o{delay} if $o{delay};

    $self->{pid} = spawn(undef, $self->{stdout}, @cmd);
    $self->wait_listening(15) and return $self;
    my $err = $self->stderr;
    $self->stop;
    die "the $proto upstream did not start: $err";
}

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

1;
