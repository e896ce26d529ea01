#!/usr/bin/perl
# Where the exporter's lines (and the module's own) go, for each form of
# the servers' error log, and two debugging run modes of httpd. Each run
# starts with no collector, so the exporter has something to say ("export
# failed" at warn, besides its "started" at info), then the collector
# comes up on that port and spans must arrive through the same exporter.
# Real nginx and apache2, the modules' exporter, the independent receiver.
#   nginx  error_log FILE, with another in the server block and an access
#          log: the exporter's lines in the main one only, none in the
#          others or in an answer, at the right levels;
#          error_log stderr: on nginx's stderr;
#          error_log syslog:server=127.0.0.1:PORT (a UDP socket here): the
#          exporter's lines as datagrams with nginx's header (facility
#          local7, tag, host) and their own severity, next to the
#          module's startup line; before, they went only to nginx's
#          default file log (stderr for Debian's build), none to syslog;
#          error_log FILE warn and syslog notice: the file at warn gets
#          the exporter's warnings and not its info lines (it got them,
#          at the syslog's level), syslog gets both; after a rotation
#          (rename, USR1) the exporter writes into the new file (with a
#          syslog first in the list the exporter was never replaced and
#          wrote on into the renamed one);
#          error_log memory:1m (nginx --with-debug): spans flow, nothing
#          of the exporter's below error in the default file log.
#   httpd  ErrorLog FILE, with a VirtualHost's own: the main one only;
#          ErrorLog "|$/bin/cat >> FILE": through the piped logger;
#          ErrorLog syslog:local1:TAG (root: /dev/log of a private mount
#          namespace is a socket here): the exporter's lines with httpd's
#          header (TAG[PID]) and form ([spanprof:warn] [pid N:tid N]);
#          before, httpd's stderr, the exporter's, was /dev/null: lost;
#          -X and -DONE_PROCESS: an exporter runs, spans flow, nothing is
#          left after the stop.
# A graceful stop with a request in flight is t/nginx_graceful_stop.t's
# and t/httpd_recycle.t's; log rotation with one file t/nginx_logrotate.t's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use IO::Socket::UNIX;
use Socket qw(SOCK_DGRAM);
use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(new_dir read_file write_file free_port spawn
                        wait_for_port wait_until stop http_get nginx_conf
                        nginx_cmd httpd_conf httpd_cmd);
use Spanprof::Receiver;
use Spanprof::Procs qw(exporters family processes);
use Spanprof::Cases qw(arrived traced_requests);

Spanprof::Receiver::skip_unless_ready(curl => 1);
plan skip_all => 'apache2 is not installed' unless -x '/usr/sbin/apache2';

my $PARENT = '00f067aa0ba902b7';

# An exporter line at that level, in either server's file format.
sub exporter_line {
    my ($level, $text) = @_;
    my $nginx = qr/\S+ \S+ \[$level\] \d+#\d+: /;
    my $httpd = qr/\[[^]]+\] \[spanprof:$level\] \[pid \d+:tid \d+\] /;
    return qr/^(?:$nginx|$httpd)spanprof-exporter: $text/m;
}

# A datagram socket for a syslog: UDP on 127.0.0.1, or a Unix one at
# $path that the workers' user may write to.
sub syslog_socket {
    my ($path) = @_;
    if (defined $path) {
        my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $path)
            or die "bind $path: $!";
        chmod 0666, $path;
        return $s;
    }
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'udp') or die "udp: $!";
    return $s;
}

# Every datagram the socket holds now, appended to @$got.
sub drain {
    my ($sock, $got) = @_;
    $sock->blocking(0);
    my $buf;
    push @$got, $buf while defined $sock->recv($buf, 65536) && length $buf;
    return $got;
}

# The common run. %o: start => sub (%env) returning (pid, port); where =>
# sub returning the text the exporter's lines are expected in (at least
# one "export failed" warning, or warned => a pattern of it; undef:
# nowhere to look); while_running => sub (pid, port, exporter) before the
# collector comes up (nginx_run's gets the directory first). Returns the
# exporters seen.
sub run {
    my ($name, %o) = @_;
    my $dir = $o{dir};
    my $cport = free_port();
    my ($pid, $port) = $o{start}->(
        OTEL_EXPORTER_OTLP_ENDPOINT => "http://127.0.0.1:$cport",
        OTEL_BSP_SCHEDULE_DELAY     => '100');
    ok($pid, "$name: starts") or do {
        diag(read_file("$dir/stderr.log") . read_file("$dir/error.log"));
        return;
    };
    my %answers;
    for (1 .. 3) {
        my ($status, $body) = http_get($port, '/');
        $answers{"$status $body"}++;
    }
    is_deeply(\%answers, { "200 ok\n" => 3 },
              "$name: answers as they are, nothing written into them");
    my $warned = $o{warned} // exporter_line('warn', 'export failed');
    if ($o{where}) {
        ok(wait_until(sub { $o{where}->() =~ $warned }, 20),
           "$name: no collector: the exporter's warning is where expected")
            or diag($o{where}->());
    } else {
        sleep 1.5;
    }
    my @exp = exporters($pid);
    is(scalar @exp, 1, "$name: one exporter");
    $o{while_running}->($pid, $port, @exp) if $o{while_running};

    my $recv = Spanprof::Receiver->start(dir => $dir, port => $cport);
    my @ids = traced_requests($port, 2, $PARENT);
    is(arrived($recv, 20, @ids), 2,
       "$name: the collector up: spans of requests arrive");
    my @all = (family($pid), { pid => $pid });
    stop($pid);
    my $p = processes();
    ok(wait_until(sub { $p = processes(); !grep { $p->{ $_->{pid} } } @all },
                  10),
       "$name: nothing left after the stop");
    $recv->stop;
    return @exp;
}

# ---- nginx

sub nginx_run {
    my ($name, %o) = @_;
    my $dir = new_dir();
    my $port = nginx_conf($dir, server => $o{server} ? $o{server}->($dir) : '',
                          http => "    access_log $dir/access.log;\n");
    my $conf = read_file("$dir/nginx.conf");
    $conf =~ s{^error_log .*$}{$o{error_log}->($dir)}me or die;
    write_file("$dir/nginx.conf", $conf);
    my @exp = run("nginx $name", dir => $dir,
        start => sub {
            my $pid = spawn({ @_ }, "$dir/stderr.log", nginx_cmd($dir));
            return (wait_for_port($port) ? $pid : do { stop($pid); undef },
                    $port);
        },
        where => $o{where} && sub { $o{where}->($dir) },
        warned => $o{warned},
        while_running => $o{while_running}
                         && sub { $o{while_running}->($dir, @_) });
    return ($dir, @exp);
}

{
    my ($dir, $exp) = nginx_run('file',
        error_log => sub { "error_log $_[0]/error.log notice;" },
        server => sub { "        error_log $_[0]/server.log notice;\n" },
        where => sub { read_file("$_[0]/error.log") },
        while_running => sub {
            my ($dir, $pid, $port, $e) = @_;
            is(readlink("/proc/$e->{pid}/fd/2"), "$dir/error.log",
               'nginx file: the exporter\'s stderr is the error log');
        });
    my $log = read_file("$dir/error.log");
    like($log, exporter_line('info', 'started for'),
         'nginx file: its info lines');
    like($log, qr/\[notice\] \d+#\d+: spanprof: exporter process \d+ started/,
         'nginx file: the module\'s line');
    unlike(read_file("$dir/server.log"), qr/spanprof/,
           'nginx file: none in the server block\'s error log');
    unlike(read_file("$dir/access.log"), qr/spanprof/,
           'nginx file: none in the access log');
}

{
    my ($dir) = nginx_run('stderr',
        error_log => sub { 'error_log stderr notice;' },
        where => sub { read_file("$_[0]/stderr.log") });
    like(read_file("$dir/stderr.log"), exporter_line('info', 'started for'),
         'nginx stderr: its info lines on nginx\'s stderr');
    unlike(read_file("$dir/error.log"), qr/spanprof-exporter/,
           'nginx stderr: none in the startup log');
}

# The syslog header: "<PRI>Mmm dd hh:mm:ss HOST TAG: " (nginx; no HOST
# with nohostname) or "<PRI>Mmm dd hh:mm:ss TAG[PID]: " (httpd, through
# glibc's syslog(3)); $rest what follows.
sub syslog_line {
    my ($pri, $head, $rest) = @_;
    return qr/^<$pri>\w{3} [ \d]\d \d\d:\d\d:\d\d $head: $rest/;
}

# Whether a datagram of @$got matches.
sub got {
    my ($got, $pattern) = @_;
    return scalar grep { $_ =~ $pattern } @$got;
}

my $date = qr{\d{4}/\d\d/\d\d \d\d:\d\d:\d\d};

{
    my $sock = syslog_socket();
    my $u = $sock->sockport;
    my @got;
    my $all = sub { join "\n", @{ drain($sock, \@got) } };
    my ($dir) = nginx_run('syslog',
        error_log => sub {
            "error_log syslog:server=127.0.0.1:$u,tag=sptest notice;" },
        where => $all, warned => qr/spanprof-exporter: export failed/);
    $all->();
    my $head = qr/\S+ sptest/;
    # local7 (23): notice 189, info 190, warn 188
    ok(got(\@got, syslog_line(189, $head, qr/$date \[notice\] \d+#\d+: /
                              . qr/spanprof: exporter process \d+ started$/)),
       'nginx syslog: the module\'s startup line');
    ok(got(\@got, syslog_line(190, $head, qr/$date \[info\] \d+#\d+: /
                              . qr/spanprof-exporter: started for /)),
       'nginx syslog: the exporter\'s info line, severity info, nginx\'s '
       . 'header') or diag(join "\n", @got);
    ok(got(\@got, syslog_line(188, $head, qr/$date \[warn\] \d+#\d+: /
                              . qr/spanprof-exporter: export failed: /)),
       'nginx syslog: its warning, severity warning');
    ok(!got(\@got, qr/\n/), 'nginx syslog: a line a datagram, no newline');
    unlike(read_file("$dir/error.log"), qr/\[(info|warn)\].*spanprof-exp/,
           'nginx syslog: none below error in the default file log (at '
           . 'error, as nginx\'s own)');
}

{
    my $sock = syslog_socket();
    my $u = $sock->sockport;
    my @got;
    my ($dir) = nginx_run('file warn + syslog notice',
        error_log => sub {
            "error_log $_[0]/error.log warn;\n"
            . "error_log syslog:server=127.0.0.1:$u,nohostname notice;" },
        where => sub { read_file("$_[0]/error.log") });
    drain($sock, \@got);
    unlike(read_file("$dir/error.log"), exporter_line('info', ''),
           'nginx file warn + syslog notice: none of the exporter\'s info '
           . 'lines in the file at warn');
    ok(got(\@got, syslog_line(190, 'nginx', qr/$date \[info\] \d+#\d+: /
                              . qr/spanprof-exporter: started for /)),
       'nginx file warn + syslog notice: they are in syslog (nohostname)')
        or diag(join "\n", @got);
    ok(got(\@got, qr/^<188>.*spanprof-exporter: export failed/),
       'nginx file warn + syslog notice: its warnings in syslog too');
}

# Rotation with a syslog first in nginx's list of logs.
{
    my $sock = syslog_socket();
    my $u = $sock->sockport;
    my $dir = new_dir();
    my $port = nginx_conf($dir);
    my $conf = read_file("$dir/nginx.conf");
    $conf =~ s{^error_log .*$}{error_log $dir/error.log warn;
error_log syslog:server=127.0.0.1:$u notice;}m or die;
    write_file("$dir/nginx.conf", $conf);
    my $pid = spawn({ OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:'
                                                     . free_port() },
                    "$dir/stderr.log", nginx_cmd($dir));
    ok(wait_for_port($port), 'nginx rotation: starts');
    my $first;
    wait_until(sub { ($first) = exporters($pid); $first }, 10);
    rename "$dir/error.log", "$dir/error.log.1" or die "rename: $!";
    kill 'USR1', $pid;
    my $second;
    ok(wait_until(sub {
           ($second) = grep { $_->{pid} != $first->{pid} } exporters($pid);
           $second && readlink("/proc/$second->{pid}/fd/2") }, 10),
       'nginx rotation: the exporter is replaced');
    is($second && readlink("/proc/$second->{pid}/fd/2"), "$dir/error.log",
       'nginx rotation: the new one writes into the new file');
    stop($pid);
}

{
    my ($dir) = nginx_run('memory',
        error_log => sub { 'error_log memory:1m notice;' },
        where => undef);
    unlike(read_file("$dir/error.log"), qr/\[(info|warn)\].*spanprof-exporter/,
           'nginx memory: none below error in the default file log (at error)');
}

# ---- httpd

sub httpd_run {
    my ($name, %o) = @_;
    my $dir = new_dir();
    my $port = httpd_conf($dir);
    my $conf = read_file("$dir/httpd.conf");
    $conf =~ s{^ErrorLog .*$}{$o{error_log}->($dir)}me or die;
    $conf .= $o{extra}->($dir, $port) if $o{extra};
    write_file("$dir/httpd.conf", $conf);
    my @cmd = (httpd_cmd($dir), @{ $o{args} // [] });
    @cmd = $o{wrap}->($dir, @cmd) if $o{wrap};
    my @exp = run("httpd $name", dir => $dir,
        start => sub {
            my $pid = spawn({ @_ }, "$dir/stderr.log", @cmd);
            return (wait_for_port($port) ? $pid : do { stop($pid); undef },
                    $port);
        },
        where => $o{where} && sub { $o{where}->($dir) },
        warned => $o{warned},
        while_running => $o{while_running});
    return ($dir, @exp);
}

{
    my ($dir) = httpd_run('file',
        error_log => sub { "ErrorLog $_[0]/error.log" },
        extra => sub {
            my ($dir, $port) = @_;
            "<VirtualHost 127.0.0.1:$port>\n    ServerName localhost\n"
            . "    ErrorLog $dir/vhost.log\n"
            . "    CustomLog $dir/access.log \"%h %r %>s\"\n</VirtualHost>\n";
        },
        where => sub { read_file("$_[0]/error.log") });
    like(read_file("$dir/error.log"), exporter_line('info', 'started for'),
         'httpd file: its info lines in the main error log');
    unlike(read_file("$dir/vhost.log"), qr/spanprof/,
           'httpd file: none in the VirtualHost\'s error log');
    like(read_file("$dir/access.log"), qr/GET/, 'httpd file: an access log');
    unlike(read_file("$dir/access.log"), qr/spanprof/,
           'httpd file: none in the access log');
}

{
    my ($dir) = httpd_run('piped',
        error_log => sub { "ErrorLog \"|\$/bin/cat >> $_[0]/piped.log\"" },
        where => sub { read_file("$_[0]/piped.log") });
    like(read_file("$dir/piped.log"), exporter_line('info', 'started for'),
         'httpd piped: its info lines through the piped logger');
}

SKIP: {
    my $probe = new_dir();
    mkdir "$probe/$_" for qw(up work);
    skip 'no private mount namespace with an overlay on /dev (root only)', 6
        if system('unshare', '-m', 'sh', '-c',
                  "mount --make-rprivate / && mount -t overlay overlay -o "
                  . "lowerdir=/dev,upperdir=$probe/up,workdir=$probe/work "
                  . '/dev 2>/dev/null') != 0;
    my ($sock, @got);
    my ($dir) = httpd_run('syslog',
        error_log => sub { 'ErrorLog syslog:local1:sptest' },
        # /dev/log, in this process only, is the test's socket
        wrap => sub {
            my ($dir, @cmd) = @_;
            mkdir "$dir/$_" for qw(up work);
            $sock = syslog_socket("$dir/log.sock");
            return ('unshare', '-m', 'sh', '-c',
                    'mount --make-rprivate / && mount -t overlay overlay '
                    . "-o lowerdir=/dev,upperdir=$dir/up,workdir=$dir/work "
                    . "/dev && ln -s $dir/log.sock /dev/log && exec \"\$@\"",
                    'sh', @cmd);
        },
        where => sub { join "\n", @{ drain($sock, \@got) } },
        warned => qr/spanprof-exporter: export failed/);
    drain($sock, \@got);
    my $ids = qr/\[pid \d+:tid \d+\]/;
    # local1 (17): notice 141, info 142, warn 140
    ok(got(\@got, syslog_line(141, qr/sptest\[\d+\]/,
                              qr/\[spanprof:notice\] $ids /
                              . qr/spanprof: exporter process \d+ started$/)),
       'httpd syslog: the module\'s startup line') or diag(join "\n", @got);
    ok(got(\@got, syslog_line(142, qr/sptest\[(\d+)\]/,
                              '\[spanprof:info\] \[pid \1:tid \1\] '
                              . 'spanprof-exporter: started for ')),
       'httpd syslog: the exporter\'s info line, httpd\'s header and form');
    ok(got(\@got, syslog_line(140, qr/sptest\[\d+\]/,
                              qr/\[spanprof:warn\] $ids /
                              . qr/spanprof-exporter: export failed: /)),
       'httpd syslog: its warning, severity warning');
    unlike(read_file("$dir/stderr.log"), qr/spanprof/,
           'httpd syslog: nothing on the terminal');
}

for my $mode (['-X'], ['-DONE_PROCESS']) {
    my ($dir, $exp) = httpd_run("@$mode",
        error_log => sub { "ErrorLog $_[0]/error.log" },
        args => $mode,
        where => sub { read_file("$_[0]/error.log") });
    like(read_file("$dir/error.log"),
         exporter_line('info', 'counters: received=(\d+) .*exported=\1 '
                               . 'held=0 '),
         "httpd @$mode: its last counters: every span exported, the "
         . 'failed ones again');
}

done_testing();
