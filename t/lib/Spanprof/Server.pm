package Spanprof::Server;

# Runs the real nginx and the real apache2 with the built modules, each in
# a private directory: configuration test, start, stop, error log.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use Exporter 'import';
our @EXPORT_OK = qw(top_dir free_port new_dir write_file read_file
                    nginx_conf nginx_cmd nginx_test nginx_start
                    httpd_conf httpd_cmd httpd_test httpd_start text_file
                    gzip_location bench_files bench_nginx_server deflate_location
                    stop wait_for_log http_get spawn wait_for_port
                    wait_until);

sub top_dir { abs_path(dirname(__FILE__) . '/../../..') }

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1)
        or die "no free port: $!";
    my $port = $s->sockport;
    close $s;
    return $port;
}

sub new_dir {
    my $base = top_dir() . '/t/tmp';
    mkdir $base;
    my $dir = tempdir('run-XXXXXX', DIR => $base, CLEANUP => 1);
    # The servers' workers run as nobody and must read their files.
    chmod 0755, $dir;
    return $dir;
}

sub write_file {
    my ($path, $text) = @_;
    open my $fh, '>', $path or die "$path: $!";
    print $fh $text;
    close $fh;
}

sub read_file {
    my ($path) = @_;
    open my $fh, '<', $path or return '';
    local $/;
    my $text = <$fh>;
    close $fh;
    return $text;
}

# nginx.conf in $dir; $http goes inside http {}, $server inside server {},
# $location inside "location /". Optional: workers (1), log_level
# (notice), connections (64), module => 0 for nginx without spanprof,
# main (directives of the main context, e.g. worker_shutdown_timeout).
sub nginx_conf {
    my ($dir, %arg) = @_;
    my $module = top_dir() . '/build/ngx_http_spanprof_module.so';
    my $load = ($arg{module} // 1) ? "load_module $module;" : '';
    my $port = $arg{port} // free_port();
    my $http = $arg{http} // '';
    my $server = $arg{server} // '';
    my $location = $arg{location} // 'return 200 "ok\n";';
    my $workers = $arg{workers} // 1;
    my $level = $arg{log_level} // 'notice';
    my $connections = $arg{connections} // 64;
    my $main = $arg{main} // '';
    write_file("$dir/nginx.conf", <<"CONF");
$load
daemon off;
worker_processes $workers;
$main
error_log $dir/error.log $level;
pid $dir/nginx.pid;
events { worker_connections $connections; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
$http
    server {
        listen 127.0.0.1:$port;
$server
        location / { $location }
    }
}
CONF
    return $port;
}

# The command line that runs nginx on nginx_conf's configuration.
sub nginx_cmd {
    my ($dir) = @_;
    return ('/usr/sbin/nginx', '-p', $dir, '-c', "$dir/nginx.conf",
            '-e', "$dir/error.log");
}

# Runs a command with extra environment variables; returns (exit code,
# combined output).
sub run_cmd {
    my ($env, @cmd) = @_;
    local %ENV = (%ENV, %{ $env // {} });
    my $pid = open my $fh, '-|';
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDERR, '>&', \*STDOUT;
        exec @cmd or die "exec $cmd[0]: $!";
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? >> 8, $out);
}

sub nginx_test {
    my ($dir, %env) = @_;
    return run_cmd(\%env, '/usr/sbin/nginx', '-t', '-p', $dir,
                   '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
}

sub spawn {
    my ($env, $log, @cmd) = @_;
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        # A group of its own: httpd's prefork signals its whole process
        # group when it stops, and the test must not be in it.
        setpgrp(0, 0);
        %ENV = (%ENV, %{ $env // {} });
        open STDOUT, '>>', $log;
        open STDERR, '>>', $log;
        exec @cmd or die "exec $cmd[0]: $!";
    }
    return $pid;
}

# Waits until $pattern shows in $file; returns the file's text or undef.
# Calls $cond every 50 ms until it is true or $timeout (10) seconds pass;
# its last answer.
sub wait_until {
    my ($cond, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.05;
    }
    return $cond->();
}

sub wait_for_log {
    my ($file, $pattern, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (time < $end) {
        my $text = read_file($file);
        return $text if $text =~ $pattern;
        sleep 0.05;
    }
    return undef;
}

sub wait_for_port {
    my ($port, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (time < $end) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port, Proto => 'tcp');
        if ($s) { close $s; return 1 }
        sleep 0.05;
    }
    return 0;
}

# Starts nginx in the foreground of a child; returns its pid once the port
# answers, or undef.
sub nginx_start {
    my ($dir, $port, %env) = @_;
    my $pid = spawn(\%env, "$dir/stderr.log", nginx_cmd($dir));
    return wait_for_port($port) ? $pid : do { stop($pid); undef };
}

# httpd.conf in $dir, serving $dir/htdocs (index.html says "ok"); $extra
# goes at the end. Optional: mpm (event), modules (more of Debian's
# modules by name, e.g. [qw(deflate filter)]), log_level (notice),
# module => 0 for httpd without spanprof.
sub httpd_conf {
    my ($dir, %arg) = @_;
    my $module = top_dir() . '/build/mod_spanprof.so';
    my $mods = '/usr/lib/apache2/modules';
    my $port = $arg{port} // free_port();
    my $mpm = $arg{mpm} // 'event';
    my $extra = $arg{extra} // '';
    my $level = $arg{log_level} // 'notice';
    my $load = join "\n", map { "LoadModule ${_}_module $mods/mod_$_.so" }
        @{ $arg{modules} // [] };
    # one_child => N: a single child of N threads (a threaded MPM), all
    # made at its start, so that the child's pid stays one to watch.
    if (my $n = $arg{one_child}) {
        $extra = "StartServers 1\nServerLimit 1\nThreadLimit $n\n"
            . "ThreadsPerChild $n\nMaxRequestWorkers $n\n"
            . "MinSpareThreads 1\nMaxSpareThreads $n\n$extra";
    }
    $load .= "\nLoadModule spanprof_module $module" if $arg{module} // 1;
    my $types = -r '/etc/mime.types' ? '/etc/mime.types' : '/dev/null';
    write_file("$dir/httpd.conf", <<"CONF");
ServerRoot $dir
DefaultRuntimeDir $dir
PidFile $dir/httpd.pid
Listen 127.0.0.1:$port
ServerName localhost
User nobody
Group nogroup
ErrorLog $dir/error.log
LogLevel $level
LoadModule mpm_${mpm}_module $mods/mod_mpm_$mpm.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule mime_module $mods/mod_mime.so
LoadModule dir_module $mods/mod_dir.so
$load
TypesConfig $types
DocumentRoot $dir/htdocs
<Directory $dir/htdocs>
    Require all granted
</Directory>
$extra
CONF
    mkdir "$dir/htdocs";
    chmod 0755, "$dir/htdocs";
    write_file("$dir/htdocs/index.html", "ok\n");
    chmod 0644, "$dir/htdocs/index.html";
    return $port;
}

# The command line that runs apache2 on httpd_conf's configuration.
sub httpd_cmd {
    my ($dir) = @_;
    return ('/usr/sbin/apache2', '-f', "$dir/httpd.conf", '-DFOREGROUND');
}

# A text file of $lines numbered lines that compresses well, readable by
# the servers' workers.
sub text_file {
    my ($path, $lines) = @_;
    write_file($path, join('', map { "line $_ of a text the server "
                                     . "compresses at level 9\n" }
                                   1 .. $lines));
    chmod 0644, $path;
}

# An nginx location that gzips at level 9, the CPU work the tests make
# for the profilers to see. Options: path (/big), serve (what it serves:
# "alias $dir/big.txt;"), extra (more directives inside), lines (first
# write $dir/big.txt, a text_file of that many lines).
sub gzip_location {
    my ($dir, %arg) = @_;
    text_file("$dir/big.txt", $arg{lines}) if $arg{lines};
    my $path = $arg{path} // '/big';
    my $serve = $arg{serve} // "alias $dir/big.txt;";
    my $extra = defined $arg{extra} ? "\n            $arg{extra}" : '';
    return "location $path {
            $serve
            gzip on; gzip_comp_level 9; gzip_types text/plain;
            gzip_min_length 0;$extra
        }";
}

# httpd's counterpart, as configuration lines: path (/big) is file
# ($dir/big.txt; with lines, first written as a text_file of that many)
# through mod_deflate at level 9. Needs mod_deflate, mod_filter and
# mod_alias loaded.
sub deflate_location {
    my ($dir, %arg) = @_;
    my $path = $arg{path} // '/big';
    my $file = $arg{file} // "$dir/big.txt";
    text_file($file, $arg{lines}) if $arg{lines};
    return "Alias $path $file
<Directory $dir>
    Require all granted
</Directory>
DeflateCompressionLevel 9
<Location $path>
    SetOutputFilter DEFLATE
</Location>";
}

# The benchmarks' documents in $root: small.html (1 KiB) and big.txt
# (text_file's, 3500 lines, about 170 KiB).
sub bench_files {
    my ($root) = @_;
    mkdir $root;
    chmod 0755, $root;
    write_file("$root/small.html", ('x' x 1023) . "\n");
    chmod 0644, "$root/small.html";
    text_file("$root/big.txt", 3500);
}

# The benchmarks' nginx server block (the documents of bench_files in
# $root, /proxy/ to the upstream on port $up with keep-alive, big.txt
# gzipped at level 9) and the upstream it needs at http level: (http,
# server) for nginx_conf.
sub bench_nginx_server {
    my ($root, $up, $keepalive) = @_;
    return ("    upstream backend {
        server 127.0.0.1:$up; keepalive $keepalive;
    }", "root $root;
        location /proxy/ {
            proxy_pass http://backend/;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
        " . gzip_location($root, path => '/big.txt'));
}

sub httpd_test {
    my ($dir, %env) = @_;
    return run_cmd(\%env, '/usr/sbin/apache2', '-t', '-f', "$dir/httpd.conf");
}

sub httpd_start {
    my ($dir, $port, %env) = @_;
    my $pid = spawn(\%env, "$dir/stderr.log", httpd_cmd($dir));
    return wait_for_port($port) ? $pid : do { stop($pid); undef };
}

# SIGTERM, then SIGKILL if the server has not exited within 10 s.
sub stop {
    my ($pid) = @_;
    return unless $pid;
    kill 'TERM', $pid;
    my $end = time + 10;
    while (time < $end) {
        return if waitpid($pid, WNOHANG) == $pid;
        sleep 0.05;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

# A minimal HTTP/1.0 GET; returns (status, body).
sub http_get {
    my ($port, $path, @headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return (0, '');
    print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n"
        . join('', map { "$_\r\n" } @headers) . "\r\n";
    local $/;
    my $resp = <$s> // '';
    close $s;
    my ($status) = $resp =~ m{^HTTP/\S+ (\d+)};
    my (undef, $body) = split /\r\n\r\n/, $resp, 2;
    return ($status // 0, $body // '');
}

1;
