package Spanprof::Cases;

# Requests a test tells apart by an "x-case: N" header, and what became of
# each: its access log line (a log_format that starts with
# "$http_x_case|"), what a recording upstream (Spanprof::Upstream) got, and
# the spans the OTLP receiver (Spanprof::Receiver) decoded.

use strict;
use warnings;

use IO::Socket::INET;
use JSON::PP ();
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(read_file write_file top_dir);

use Exporter 'import';
our @EXPORT_OK = qw(curl_case log_case upstream_case spans wait_spans
                    arrived raw_answer keepalive_answers traced_requests
                    h2_requests);

my $serial = 0;
my $traced = 0;

# $n GETs of / on $port, each the child of a sampled remote span ($parent)
# of a trace of its own, so that they are recorded whatever the sampler
# says of the load; the trace ids of those answered 200.
sub traced_requests {
    my ($port, $n, $parent) = @_;
    my @ids;
    for (1 .. $n) {
        my $trace = sprintf '%032x', 0xc0ffee00 + ++$traced;
        my (undef, $code) = curl_case(
            url => "http://127.0.0.1:$port/",
            headers => [ [ traceparent => "00-$trace-$parent-01" ] ]);
        push @ids, $trace if $code == 200;
    }
    return @ids;
}

# curl_case(url => $url, headers => [[name, value]...], h2 => 1,
#           timeout => $s): (case, HTTP code, body).
sub curl_case {
    my (%o) = @_;
    my $case = ++$serial;
    my @cmd = ('curl', '-s', '-m', $o{timeout} // 10, '-w', '|%{http_code}',
               '-H', "x-case: $case");
    push @cmd, '--http2-prior-knowledge' if $o{h2};
    push @cmd, '-H', "$_->[0]: $_->[1]" for @{ $o{headers} // [] };
    push @cmd, $o{url};
    open my $fh, '-|', @cmd or die "curl: $!";
    local $/;
    my $out = <$fh> // '';
    close $fh;
    my ($body, $code) = $out =~ /^(.*)\|(\d+)$/s;
    return ($case, $code // 0, $body // '');
}

# The fields after the case of its access log line, named by @names;
# undef if it does not show within 10 s.
sub log_case {
    my ($file, $case, @names) = @_;
    my $end = time + 10;
    while (time < $end) {
        for (split /\n/, read_file($file)) {
            my ($c, @f) = split /\|/, $_, -1;
            next unless $c eq $case;
            my %line;
            @line{@names} = @f;
            return \%line;
        }
        sleep 0.02;
    }
    return undef;
}

# The requests of that case the upstream got, once there are $n (default
# 1) or after 10 s.
sub upstream_case {
    my ($up, $case, $n) = @_;
    my $end = time + 10;
    my @r;
    while (time < $end) {
        @r = grep { ($_->{headers}{'x-case'}[0] // '') eq $case }
             $up->requests;
        last if @r >= ($n // 1);
        sleep 0.02;
    }
    return @r;
}

# Every span the receiver decoded so far.
sub spans {
    my ($recv) = @_;
    my @spans;
    for my $req ($recv->requests) {
        next unless $req->{signal} eq 'traces';
        for my $rs (@{ $req->{request}{resourceSpans} // [] }) {
            push @spans, @{ $_->{spans} // [] } for @{ $rs->{scopeSpans} };
        }
    }
    return @spans;
}

# The spans for which $match is true, once there are $n (default 1) or
# after 10 s.
sub wait_spans {
    my ($recv, $match, $n) = @_;
    my $end = time + 10;
    my @s;
    while (time < $end) {
        @s = grep { $match->($_) } spans($recv);
        last if @s >= ($n // 1);
        sleep 0.05;
    }
    return @s;
}

# How many of the trace ids @ids have a span at the receiver, once all do
# or after $timeout s.
sub arrived {
    my ($recv, $timeout, @ids) = @_;
    my %want = map { $_ => 1 } @ids;
    my $end = time + $timeout;
    my %got;
    while (1) {
        $want{ $_->{traceId} } and $got{ $_->{traceId} } = 1 for spans($recv);
        last if keys %got == @ids || time >= $end;
        sleep 0.2;
    }
    return scalar keys %got;
}

# The whole answer to $bytes sent as they are (a request no client would
# write: HTTP/0.9, an absolute-form target, a path with dot segments) over
# a connection of their own to 127.0.0.1:$port; '' when none.
sub raw_answer {
    my ($port, $bytes) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return '';
    print $s $bytes;
    local $/;
    my $answer = <$s> // '';
    close $s;
    return $answer;
}

# The statuses of the requests @requests (each its bytes, as they are)
# sent one after another over one connection to 127.0.0.1:$port, each
# once the answer to the one before is read (its headers and
# Content-Length bytes); as many as were answered before the server closed
# the connection or 10 s passed.
sub keepalive_answers {
    my ($port, @requests) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return ();
    my ($buf, @codes) = ('');
    my $end = time + 10;
    for my $request (@requests) {
        print $s $request;
        my $answer;
        while (time < $end) {
            if ($buf =~ /\A(HTTP\/1\.\d (\d+).*?\r\n\r\n)/s) {
                my ($head, $code) = ($1, $2);
                my $len = $head =~ /^Content-Length:\s*(\d+)/mi ? $1 : 0;
                if (length($buf) >= length($head) + $len) {
                    substr($buf, 0, length($head) + $len) = '';
                    $answer = $code;
                    last;
                }
            }
            my $n = sysread($s, $buf, 65536, length $buf);
            last unless $n;
        }
        last unless defined $answer;
        push @codes, $answer;
    }
    close $s;
    return @codes;
}

# The results of an HTTP/2 plan sent to $port by t/bin/h2_client.js
# (whose head says what a request and a result hold), the plan written to
# the file $plan; one result per request, in order. $port may be a hash of
# the plan's other keys: { port => N, tls => 1 }.
sub h2_requests {
    my ($port, $plan, @requests) = @_;
    my %head = ref $port ? %$port : (port => $port);
    write_file($plan, JSON::PP->new->encode(
        { %head, requests => \@requests }));
    my $out = `node ${\ top_dir()}/t/bin/h2_client.js < $plan`;
    my $r = eval { JSON::PP->new->decode($out) } // [];
    return @$r;
}

1;
