#!/usr/bin/perl
# httpd: the access log has a span's ids (%{SPANPROF_TRACE_ID}e, which
# mod_log_config reads of the request a request ended in) also where its
# ErrorDocument's request never had them set:
#   - a request refused while httpd read it (a header line without a
#     colon, 400), before post_read_request: its span begins as it is
#     logged, after the ErrorDocument's request was made;
#   - an ErrorDocument whose own request is refused before fixups (a
#     <Location> that denies it): its request has only the REDIRECT_*
#     copies of the variables.
# Both spans were exported, their access log lines said "-".
# Real apache2, the independent OTLP receiver.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);

use Spanprof::Server qw(new_dir read_file write_file httpd_conf httpd_start
                        stop);
use Spanprof::Receiver;
use Spanprof::Cases qw(wait_spans raw_answer);

Spanprof::Receiver::skip_unless_ready();

my $dir = new_dir();
my $recv = Spanprof::Receiver->start(dir => $dir);
my $port = httpd_conf($dir, extra => <<"EXTRA");
LogFormat "%{SPANPROF_TRACE_ID}e %>s %U" ids
CustomLog $dir/access.log ids
ErrorDocument 400 /err400.html
ErrorDocument 404 /denied/err404.html
<Location /denied>
    Require all denied
</Location>
EXTRA
write_file("$dir/htdocs/err400.html", "bad\n");
chmod 0644, "$dir/htdocs/err400.html";
my $httpd = httpd_start($dir, $port, OTEL_BSP_SCHEDULE_DELAY => '100',
    OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port);
ok($httpd, 'httpd starts') or BAIL_OUT(read_file("$dir/error.log"));

my $n = 0;
for my $c (['refused while read', 400, '/index.html', "Bad Header Line\r\n"],
           ['ErrorDocument refused', 404, '/missing', '']) {
    my ($what, $status, $path, $bad) = @$c;
    my $trace = sprintf '%032x', 0xe44d0c00 + ++$n;
    my $logged = () = read_file("$dir/access.log") =~ /\n/g;
    # The traceparent before the line httpd refuses: it keeps it.
    my $answer = raw_answer($port, "GET $path HTTP/1.1\r\n"
        . "Host: 127.0.0.1\r\nConnection: close\r\n"
        . "traceparent: 00-$trace-00f067aa0ba902b7-01\r\n$bad\r\n");
    my ($code) = $answer =~ m{^HTTP/1\.\d (\d+)};
    is($code, $status, "$what: answered $status");
    my ($span) = wait_spans($recv, sub { $_[0]{traceId} eq $trace });
    ok($span, "$what: its span arrives");
    my @lines;
    for (1 .. 50) {
        @lines = split /\n/, read_file("$dir/access.log");
        last if @lines > $logged;
        sleep 0.1;
    }
    my ($id) = split / /, $lines[$logged] // '';
    is($id, $trace, "$what: the access log has its trace id")
        or diag($lines[$logged] // 'no line');
}

stop($httpd);
my @bad = grep { /\[(?:\w+:)?(?:alert|crit|emerg)\]|exit signal/ }
          split /\n/, read_file("$dir/error.log");
is(join("\n", @bad), '', 'no alert or crash in the error log');

done_testing();
