#!/usr/bin/perl
# The last step of tools/demo.sh: what the OTLP/gRPC receiver got, shown
# with spanprof-dump.
#
#   demo-report.pl [--dump PATH] [--requests N] [--top N] DIR
#
# Reads DIR/out/receiver.jsonl (t/receiver/receiver.js: one decoded export
# request per line) and writes its requests as OTLP/JSON lines to
# DIR/out/otlp.jsonl, the format of the Collector's file exporter, which
# spanprof-dump reads. Then, for every trace that has profiles (most
# samples first): the request it was (from nginx's span), its span tree,
# its top frames, and a flame graph written to DIR/flame/NN-TRACEID.svg,
# whose path it prints.
use strict;
use warnings;

use Getopt::Long;
use JSON::PP ();

my $dump = 'spanprof-dump';
my $requests;
my $top_n = 12;
GetOptions('dump=s' => \$dump, 'requests=i' => \$requests,
           'top=i' => \$top_n)
    && @ARGV == 1
    or die "usage: $0 [--dump PATH] [--requests N] [--top N] DIR\n";
my $dir = $ARGV[0];
my $recv = "$dir/out/receiver.jsonl";
my $otlp = "$dir/out/otlp.jsonl";

my $json = JSON::PP->new->canonical;
my %count = (logs => 0, traces => 0, spans => 0, records => 0);
my %request_of;    # trace id => description from the entry span
open my $in, '<', $recv or die "$recv: $!\n";
open my $out, '>', $otlp or die "$otlp: $!\n";
while (my $line = <$in>) {
    my $r = $json->decode($line);
    next unless $r->{request} && $r->{signal};
    $count{ $r->{signal} }++;
    for my $rl (@{ $r->{request}{resourceLogs} // [] }) {
        for my $sl (@{ $rl->{scopeLogs} // [] }) {
            for my $rec (@{ $sl->{logRecords} // [] }) {
                $count{records}++;
                # The receiver's own decoding of the pprof: not OTLP.
                delete @$rec{qw(pprof pprof_error)};
            }
        }
    }
    print $out $json->encode($r->{request}), "\n";
    for my $rs (@{ $r->{request}{resourceSpans} // [] }) {
        for my $ss (@{ $rs->{scopeSpans} // [] }) {
            for my $span (@{ $ss->{spans} // [] }) {
                $count{spans}++;
                # The root of the trace is nginx's span: the request as
                # the client sent it.
                next if $span->{parentSpanId};
                $request_of{ $span->{traceId} } = describe($span);
            }
        }
    }
}
close $out or die "$otlp: $!\n";

sub attr {
    my ($span, $key) = @_;
    for my $kv (@{ $span->{attributes} // [] }) {
        next unless $kv->{key} eq $key;
        my $v = $kv->{value} // {};
        return $v->{stringValue} // $v->{intValue};
    }
    return undef;
}

sub describe {
    my ($span) = @_;
    my $target = attr($span, 'url.path') // '?';
    my $query = attr($span, 'url.query');
    $target .= "?$query" if defined $query && length $query;
    my $ua = attr($span, 'user_agent.original') // '';
    my $why = $ua =~ /baggage/ ? 'selected by its baggage'
                               : 'selected by its trace id';
    return sprintf '%s %s -> %s, %s',
        attr($span, 'http.request.method') // '?', $target,
        attr($span, 'http.response.status_code') // '?', $why;
}

sub run {
    my @cmd = @_;
    open my $fh, '-|', @cmd or die "$cmd[0]: $!\n";
    local $/;
    my $text = <$fh> // '';
    close $fh;
    die "failed: @cmd\n" if $?;
    return $text;
}

sub indent {
    my ($text) = @_;
    $text =~ s/^/    /mg;
    return $text;
}

# From folded stacks under their service's frame: per service, its
# samples and its hottest stack's top frames, leaf first, runs of frames
# nobody could name shown once.
sub hottest {
    my ($folded) = @_;
    my (%total, %best, %best_n);
    for my $line (split /\n/, $folded) {
        my ($stack, $n) = $line =~ /^(.*) (\d+)$/ or next;
        my ($svc, @frames) = split /;/, $stack;
        $total{$svc} += $n;
        next if ($best_n{$svc} // 0) >= $n;
        $best_n{$svc} = $n;
        $best{$svc} = [reverse @frames];
    }
    my $text = '';
    for my $svc (sort { $total{$b} <=> $total{$a} } keys %total) {
        my @top;
        for my $f (@{ $best{$svc} }) {
            next if $f eq 'unknown' && @top && $top[-1] eq 'unknown';
            push @top, $f;
            last if @top == $top_n;
        }
        $text .= sprintf "  %s: %d samples; top frames of its hottest stack "
                       . "(%d samples):\n      %s\n",
                         $svc, $total{$svc}, $best_n{$svc},
                         join(' < ', @top) . (@top == $top_n ? ' < ...' : '');
    }
    return $text;
}

my @traces = run($dump, '--list', $otlp) =~ /^trace ([0-9a-f]{32})/mg;
printf "received %d trace and %d profiling log exports: %d spans, %d "
     . "profiles (one per worker process and export interval)\n",
     $count{traces}, $count{logs}, $count{spans}, $count{records};
printf "%d traces were profiled%s. For each: the request, its spans "
     . "(nginx's, httpd's under it, and the samples taken while each "
     . "worked), per server the top frames of the stack it was seen in most "
     . "(the function running first, then its callers), and its flame "
     . "graph.\n",
     scalar @traces,
     defined $requests ? " (of $requests requests)" : '';
print "nginx is sampled on CPU time (a worker waiting costs nothing), httpd "
    . "on the wall clock (a thread waiting for the backend shows, in poll).\n"
    . "A frame named \"unknown\" is a function the stripped server binaries "
    . "do not name (its address and build id are kept in the profile).\n";

my $n = 0;
my @svgs;
for my $t (@traces) {
    $n++;
    my $svg = sprintf '%s/flame/%02d-%s.svg', $dir, $n, $t;
    print "\n", "-" x 72, "\n";
    printf "trace %d of %d: %s\n", $n, scalar @traces,
        $request_of{$t} // 'request unknown (no root span received)';
    print indent(run($dump, '--list', '--spans', "--trace=$t", $otlp));
    print hottest(run($dump, '--folded', '--by-service', "--trace=$t",
                      $otlp));
    run($dump, '--by-service', "--svg=$svg", "--trace=$t", $otlp);
    print "  flame graph: $svg\n";
    push @svgs, $svg;
}

print "\n", "-" x 72, "\n";
if (!@traces) {
    print "no trace was profiled: see $dir/log for the servers' logs\n";
    exit 1;
}
print "flame graphs (open in a browser; hover a box for its count):\n";
print "  $_\n" for @svgs;
print "the data: $otlp (OTLP/JSON lines); try\n"
    . "  $dump --folded --trace=$traces[0] $otlp\n"
    . "server logs: $dir/log\n";
