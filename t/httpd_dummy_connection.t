#!/usr/bin/perl
# httpd's "internal dummy connection": to wake a child it has told to exit
# (prefork's idle-server maintenance, a graceful restart), httpd connects
# to its own listener and sends "OPTIONS * HTTP/1.0" with the user agent
# "<version> (internal dummy connection)", which the child serves as a
# request. No client made it: it is no span. Each was exported as an
# OPTIONS * span (t/continuous.t under prefork once saw 42 spans for its
# 36 requests: six children told to exit).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file spawn wait_for_port stop
                        httpd_conf httpd_cmd wait_until);
use Spanprof::Receiver qw(attribute);
use Spanprof::Cases qw(spans);

Spanprof::Receiver::skip_unless_ready(curl => 1);

my $N = 12;
my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
# Two spare children at most: the children the load made are told to
# exit, one a second, as soon as it ends.
my $port = httpd_conf($dir, mpm => 'prefork', extra => <<"EXTRA");
LogFormat "%r|%{User-Agent}i" ua
CustomLog $dir/access.log ua
StartServers 2
MinSpareServers 2
MaxSpareServers 2
MaxRequestWorkers 32
EXTRA
# 12 MB each at 3 MB/s, more than the sockets' buffers take: $N requests
# at once keep children busy for about 4 s, long enough for prefork to
# start more.
open my $fh, '>', "$dir/htdocs/slow.txt" or die $!;
print $fh 'x' x 12_000_000;
close $fh;
chmod 0644, "$dir/htdocs/slow.txt";

my $parent = spawn({ OTEL_EXPORTER_OTLP_ENDPOINT =>
                         'http://127.0.0.1:' . $recv->port,
                     OTEL_BSP_SCHEDULE_DELAY => '200' },
                   "$dir/stderr.log", httpd_cmd($dir));
ok(wait_for_port($port, 20), 'httpd listens')
    or diag(read_file("$dir/error.log"));
my $curl = "curl -s -o /dev/null -w '%{http_code}\\n' -m 60 --limit-rate 3M "
         . "http://127.0.0.1:$port/slow.txt &";
my @codes = split /\n/, `(@{[ ($curl) x $N ]} wait) 2>&1`;
is(scalar(grep { $_ eq '200' } @codes), $N, "$N requests answered 200");

my $dummy = qr/^OPTIONS \* HTTP\/1\.0\|.*\(internal dummy connection\)$/m;
ok(wait_until(sub { (read_file("$dir/access.log") // '') =~ $dummy }, 60),
   'httpd sent an internal dummy connection to a child it told to exit')
    or diag(read_file("$dir/access.log"));
# Then one more request: once its span arrived, so had any span of the
# dummy connections, which ended before it began.
my $marker = `curl -s -o /dev/null -w '%{http_code}' -m 20 \\
              http://127.0.0.1:$port/index.html`;
is($marker, '200', 'a request after them answered 200');
wait_until(sub { grep { (attribute($_->{attributes}, 'url.path') // '')
                        eq '/index.html' } spans($recv) }, 30);
my @spans = spans($recv);
stop($parent);
my $dummies = () = read_file("$dir/access.log") =~ /$dummy/g;
my @options = grep { $_->{name} =~ /^OPTIONS/ } @spans;
is(scalar @options, 0, "no span for the $dummies dummy connections")
    or diag(join ' ', map { $_->{name} } @options);
is(scalar @spans, $N + 1, 'a span for each request, no more');

done_testing();
