#!/usr/bin/perl
# httpd: a subrequest that lands in a scope that is off (a <Location> with
# "Spanprof Off", reached by mod_include's include virtual) does not end
# the profiling of the request it belongs to. Only the scope the initial
# request ends in decides (SPEC 2: subrequests belong to its entry span),
# but fixups, run for each subrequest too, stopped the span's sampling
# when a subrequest's scope was off: the page's later work (here a second
# include, proxied to a backend that waits) went unsampled. The span is
# recorded all the same.
# The other way round: a page in a <VirtualHost> that is off whose include
# lands in a <Location> that is on and is proxied. The page's span is not
# exported, so the backend must not be told it is its parent: it gets the
# client's traceparent, as it would with spanprof off. Before, it got the
# id of a span nobody would ever see.
# Real apache2 (event, prefork), the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file free_port httpd_conf
                        httpd_start stop);
use Spanprof::Receiver;
use Spanprof::Upstream;
use Spanprof::Cases qw(spans wait_spans curl_case);

Spanprof::Receiver::skip_unless_ready(curl => 1, apache_modules => ['include']);

my $WAIT = 2;           # s, the backend's wait
my $INTERVAL = 10;      # ms

# Answers each request after $WAIT s.
my $back = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                 Listen => 16, Proto => 'tcp', ReuseAddr => 1)
    or die "listen: $!";
my $back_port = $back->sockport;
my $back_pid = fork // die "fork: $!";
if (!$back_pid) {
    $SIG{PIPE} = 'IGNORE';
    while (my $c = $back->accept) {
        my $head = '';
        while ($head !~ /\r\n\r\n/) {
            sysread($c, $head, 4096, length $head) or last;
        }
        sleep $WAIT;
        syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     . "Content-Length: 5\r\nConnection: close\r\n\r\nslow\n");
        close $c;
    }
    exit 0;
}
close $back;

sub run_mpm {
    my ($mpm, $n) = @_;
    my $dir = new_dir();
    my $recv = Spanprof::Receiver->start(dir => $dir);
    my $up = Spanprof::Upstream->start(dir => $dir);
    my $up_port = $up->port;
    my $vhost = free_port();
    my $port = httpd_conf($dir, mpm => $mpm,
                          modules => [qw(include proxy proxy_http)],
                          extra => <<"EXTRA");
<Directory $dir/htdocs>
    Options +Includes
    AddOutputFilter INCLUDES .shtml
</Directory>
<Location /off>
    Spanprof Off
</Location>
ProxyPass /slow http://127.0.0.1:$back_port/slow
Listen 127.0.0.1:$vhost
<VirtualHost 127.0.0.1:$vhost>
    Spanprof Off
    <Location /on>
        Spanprof On
    </Location>
    ProxyPass /on/up http://127.0.0.1:$up_port/on/up
</VirtualHost>
EXTRA
    mkdir "$dir/htdocs/off";
    chmod 0755, "$dir/htdocs/off";
    write_file("$dir/htdocs/off/part.txt", "part\n");
    write_file("$dir/htdocs/on.txt", "on\n");
    # The control: the same page with an include in a scope that is on.
    for (['off', '/off/part.txt'], ['on', '/on.txt']) {
        write_file("$dir/htdocs/page-$_->[0].shtml",
                   "<!--#include virtual=\"$_->[1]\" -->\n"
                   . "<!--#include virtual=\"/slow\" -->\n");
    }
    write_file("$dir/htdocs/page-vhost.shtml",
               "<!--#include virtual=\"/on/up\" -->\n");
    chmod 0644, glob("$dir/htdocs/*.* $dir/htdocs/off/*");
    my $httpd = httpd_start($dir, $port,
        $recv->snapshot_env(interval => $INTERVAL, export_interval => '200'));
    ok($httpd, "$mpm: httpd starts") or return;

    my %span;
    for my $which (qw(on off)) {
        my $trace = sprintf '%032x', 0x5ab00000 + 2 * $n + ($which eq 'off');
        my (undef, $code, $body) = curl_case(
            url => "http://127.0.0.1:$port/page-$which.shtml",
            headers => [ [ traceparent => "00-$trace-00f067aa0ba902b7-01" ],
                         [ baggage => 'splunk.trace.snapshot.volume='
                                      . 'highest' ] ]);
        is($code, 200, "$mpm: include $which: 200");
        like($body, qr/slow/, "$mpm: include $which: the slow part is in");
        ($span{$which}) = wait_spans($recv,
                                     sub { $_[0]{traceId} eq $trace });
        ok($span{$which}, "$mpm: include $which: the page's span arrives");
    }
    if ($span{on} && $span{off}) {
        sleep 1;        # the samples of the last export interval
        my (undef, $samples) = $recv->collect;
        my %count;
        $count{ $_->{labels}{span_id} // '' }++ for @$samples;
        # About $WAIT s / $INTERVAL ms of them, with either include.
        for my $which (qw(on off)) {
            my $got = $count{ $span{$which}{spanId} } // 0;
            cmp_ok($got, '>=', $WAIT * 1000 / $INTERVAL / 4,
                   "$mpm: include $which: the page is sampled while its "
                   . "second include waits ($got samples)");
        }
    }

    # The vhost that is off: its page's include to the proxied <Location>
    # that is on, then that <Location> asked directly (the control: there
    # the backend gets our span as its parent).
    my (%trace, %req);
    for my $which (qw(page direct)) {
        $trace{$which} = sprintf '%032x', 0x5ac00000 + 2 * $n
                                          + ($which eq 'direct');
        my (undef, $code) = curl_case(
            url => "http://127.0.0.1:$vhost/"
                   . ($which eq 'page' ? 'page-vhost.shtml' : 'on/up'),
            headers => [ [ traceparent => "00-$trace{$which}"
                                          . '-00f067aa0ba902b7-01' ] ]);
        is($code, 200, "$mpm: off vhost, $which: 200");
        ($req{$which}) = grep {
            ($_->{headers}{traceparent}[0] // '') =~ /^00-$trace{$which}-/
        } $up->requests;
    }
    my ($direct) = wait_spans($recv,
                              sub { $_[0]{traceId} eq $trace{direct} });
    is(($req{direct} && $req{direct}{headers}{traceparent}[0]) // '',
       "00-$trace{direct}-" . ($direct ? $direct->{spanId} : '?') . '-01',
       "$mpm: off vhost, On <Location> asked directly: the backend's "
       . 'parent is its exported span');
    is(($req{page} && $req{page}{headers}{traceparent}[0]) // '',
       "00-$trace{page}-00f067aa0ba902b7-01",
       "$mpm: off vhost, its page's include to the On <Location>: the "
       . "backend gets the client's traceparent");
    ok(!grep({ $_->{traceId} eq $trace{page} } spans($recv)),
       "$mpm: off vhost, its page: no span");

    stop($httpd);
    my @bad = grep { /\[(?:\w+:)?(?:alert|crit|emerg)\]|exit signal/ }
              split /\n/, read_file("$dir/error.log");
    is(join("\n", @bad), '', "$mpm: no alert or crash in the error log");
}

my $n = 0;
run_mpm($_, $n++) for qw(event prefork);

kill 'TERM', $back_pid;
waitpid $back_pid, 0;

done_testing();
