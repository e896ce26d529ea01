#!/usr/bin/perl
# The httpd module loads into Debian's apache2, every directive accepts its
# good values and fails "apache2 -t" with a clear message for bad ones, a
# bad environment variable warns once, and the startup line shows the
# effective configuration and where each value came from.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(new_dir write_file httpd_conf httpd_test
                        httpd_start);
use Spanprof::Settings qw(settings);
use Spanprof::ConfigChecks qw(check_loads check_directives
                              check_bad_environment check_clamp
                              check_switches check_startup_line);

my $dir = new_dir();
write_file("$dir/ca.pem", "-----BEGIN CERTIFICATE-----\n");
# Readable, PEM, but no certificate: the exporter could not use it.
write_file("$dir/key.pem", "-----BEGIN PRIVATE KEY-----\n");
my @settings = settings(certificate => "$dir/ca.pem",
                        no_certificate => "$dir/key.pem");

my %httpd = (
    name   => 'apache2',
    column => 2,
    conf   => sub {
        my ($dir, $directives) = @_;
        return httpd_conf($dir, extra => $directives);
    },
    check  => \&httpd_test,
    start  => \&httpd_start,
    emerg  => sub {
        my ($name, $shown) = @_;
        return qr/Syntax error on line \d+ of \S+httpd\.conf:\ninvalid value \Q$shown\E in "\Q$name\E" directive, allowed: \S/;
    },
    # httpd itself refuses an empty argument, in its own words.
    empty  => sub { qr/\Q$_[0]\E takes one argument/ },
);

check_loads(\%httpd, $dir);
check_directives(\%httpd, $dir, @settings);
check_bad_environment(\%httpd, $dir, @settings);
check_clamp(\%httpd, $dir, @settings);
check_switches(\%httpd, $dir, sub {
    my ($dir, $top) = @_;
    httpd_conf($dir, extra => "$top\n<Location /traced>\n"
                              . "    Spanprof On\n</Location>");
}, @settings);
check_startup_line(\%httpd, $dir, @settings);

# --- where directives may appear

httpd_conf($dir, extra => "<VirtualHost 127.0.0.1:*>\n"
                          . "    SpanprofOtlpEndpoint http://x:1\n"
                          . "</VirtualHost>");
my ($rc, $out) = httpd_test($dir);
isnt($rc, 0, 'a server-wide setting inside <VirtualHost> fails');
like($out, qr/SpanprofOtlpEndpoint cannot occur within <VirtualHost>/,
     '... saying where it may not occur');

httpd_conf($dir, extra => "Spanprof On\n<VirtualHost 127.0.0.1:*>\n"
                          . "    Spanprof Off\n</VirtualHost>\n"
                          . "<Location /private>\n    Spanprof Off\n"
                          . "</Location>\n<Directory /tmp>\n    Spanprof On\n"
                          . "</Directory>");
($rc, $out) = httpd_test($dir);
is($rc, 0, 'Spanprof On|Off in server, virtual host, location, directory')
    or diag $out;

# Blanks around a value are dropped, for the switch as for every setting.
httpd_conf($dir, extra => "Spanprof \" On \"\n<Location /private>\n"
                          . "    Spanprof \"Off \"\n</Location>");
($rc, $out) = httpd_test($dir);
is($rc, 0, 'Spanprof " On ": blanks around the value are dropped')
    or diag $out;

done_testing();
