#!/usr/bin/perl
# The Debian packages of `make deb`, installed for real with dpkg -i on this
# machine's nginx and apache2, checked as an operator would, then removed
# and purged: what is left after each step, and that purge leaves the
# system as it was found.
#
#   install  every file in place and matching dpkg's md5sums (dpkg
#            --verify, what debsums checks), the conffile registered;
#            httpd: a2query -m spanprof enabled by the maintainer script,
#            apache2ctl -t loads it; nginx: the modules-enabled link Debian's
#            libnginx-mod-* packages make, nginx -t (system configuration,
#            no server started) loads it; spanprof-dump runs, its manual
#            page is found; spanprof-dbg holds the binaries' debug files.
#   remove   the binaries gone, the conffile kept, the module disabled
#            (httpd) or its link set aside (nginx).
#   purge    nothing of the packages left: files, links, conffiles, the
#            apache2 module state, dpkg's own records.
#
# Services are never started or reloaded: the maintainer scripts run with
# an invoke-rc.d first in PATH that records what they asked for and answers
# as a container's policy-rc.d does (denied), a status query with "not
# running". So the test also shows the scripts cope with no init system.
#
# Root and dpkg only (skipped otherwise). A leftover of an earlier run is
# purged first, and again in END; concurrent runs on one machine take turns
# (a lock file).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::MD5;
use Fcntl qw(:flock :mode O_RDONLY O_DIRECTORY);
use File::Find ();
use Test::More;

use Spanprof::Server qw(top_dir new_dir write_file read_file);

sub run_cmd { Spanprof::Server::run_cmd(@_) }

plan skip_all => 'not root: installing packages needs it' if $> != 0;
plan skip_all => 'dpkg is not installed'
    if system('dpkg --version >/dev/null 2>&1');
for my $p (qw(nginx apache2)) {
    plan skip_all => "$p is not installed (make deps installs it)"
        unless `dpkg-query -W -f='\${Status}' $p 2>/dev/null` eq 'install ok installed';
}
plan skip_all => 'a2query is not installed' unless -x '/usr/sbin/a2query';

my @pkgs = qw(libnginx-mod-http-spanprof libapache2-mod-spanprof spanprof-tools
              spanprof-dbg);
my $top = top_dir();
my $dir = new_dir();
my ($sp_version) = read_file("$top/core/include/sp_common.h")
    =~ /^#define SP_VERSION "([^"]+)"/m;
my $version = "$sp_version-1";

# One run at a time on this machine (checkouts side by side): both would
# purge each other's packages. The lock is flock(2) on dpkg's database
# directory, opened read-only: dpkg's own locks are fcntl(2) locks on files
# in it, which flock does not touch, and no lock file is left behind.
my $lock;
sysopen($lock, '/var/lib/dpkg', O_RDONLY | O_DIRECTORY) or die "/var/lib/dpkg: $!";
flock($lock, LOCK_EX) or die "flock: $!";

# The maintainer scripts' view of the init system (see the top).
my $stub = "$dir/stub";
my $rcd_log = "$dir/invoke-rc.d.log";
mkdir $stub;
write_file("$stub/invoke-rc.d", <<"SH");
#!/bin/sh
echo "\$*" >>$rcd_log
case " \$* " in *" status "*) exit 3 ;; esac
exit 101
SH
chmod 0755, "$stub/invoke-rc.d";
my %env = (PATH => "$stub:$ENV{PATH}", DEBIAN_FRONTEND => 'noninteractive');

# dpkg with its arguments; waits while another dpkg or apt holds the lock.
sub dpkg {
    my (@args) = @_;
    my ($rc, $out);
    for (1 .. 60) {
        ($rc, $out) = run_cmd(\%env, 'dpkg', @args);
        last unless $rc != 0 && $out =~ /locked by another process/;
        sleep 2;
    }
    return ($rc, $out);
}

# Our packages dpkg knows in any state but purged.
sub known {
    return grep {
        my $s = `dpkg-query -W -f='\${db:Status-Abbrev}' $_ 2>/dev/null`;
        $s =~ /^.[^n]/;
    } @pkgs;
}

sub purge_leftovers {
    my @k = known() or return;
    my ($rc, $out) = dpkg('--purge', '--force-remove-reinstreq', @k);
    diag("purging leftovers (@k): $out") if $rc;
}

# nginx creates /var/lib/nginx/spanprof (beside its client body temp path:
# the module's exporter path) at nginx -t, and earlier builds put it under
# the prefix, /usr/share/nginx/spanprof; the package's purge removes both
# when empty. What was there before this test is put back as it was.
my @nginx_paths = ('/var/lib/nginx/spanprof', '/usr/share/nginx/spanprof');
my %nginx_path_was = map { $_ => [lstat $_] } @nginx_paths;
sub restore_nginx_path {
    for my $path (@nginx_paths) {
        my @was = @{ $nginx_path_was{$path} };
        next if !@was || -e $path;
        mkdir $path, $was[2] & 07777 or next;
        chown $was[4], $was[5], $path;
        chmod $was[2] & 07777, $path;
    }
}

# An administrator's a2dismod/a2enmod of spanprof is remembered under
# /var/lib/apache2/module/ (and kept by an install, forgotten by a purge):
# set aside for the test, so that the install is a fresh one, and put back.
# a2dismod -m (the prerm's, through apache2-maintscript-helper) creates its
# own state directory, disabled_by_maint, when it is missing, and nothing
# removes it: apache2's, not the package's. Removed again if it was not
# there and stays empty.
my @apache_state_dirs = grep { !-d $_ } map { "/var/lib/apache2/module/$_" }
    qw(enabled_by_maint enabled_by_admin disabled_by_maint disabled_by_admin);
my %apache_state_was;
for my $d (qw(enabled_by_maint enabled_by_admin disabled_by_maint disabled_by_admin)) {
    my $f = "/var/lib/apache2/module/$d/spanprof";
    $apache_state_was{$f} = [(lstat $f)[2, 4, 5]] if -f $f;
}
sub restore_apache_state {
    rmdir $_ for @apache_state_dirs;
    for my $f (sort keys %apache_state_was) {
        next if -e $f;
        write_file($f, '');
        chown $apache_state_was{$f}[1], $apache_state_was{$f}[2], $f;
        chmod $apache_state_was{$f}[0] & 07777, $f;
    }
}

# Interrupted (prove killed, Ctrl-C): END still runs.
$SIG{$_} = sub { exit 1 } for qw(INT TERM HUP);

END {
    # $? is the exit status of the test: the commands here must not set it.
    local $?;
    if ($> == 0 && $lock) {
        purge_leftovers();
        restore_nginx_path();
        restore_apache_state();
    }
}

purge_leftovers();

# What the packages could touch, as path => "type mode owner target/md5".
my @debug_ids;
sub snapshot {
    my %s;
    my @roots = ('/etc/nginx', '/etc/apache2', '/var/lib/apache2', '/usr/lib/nginx',
                 '/usr/lib/apache2/modules', '/usr/share/nginx/modules-available',
                 @nginx_paths, '/usr/bin/spanprof-dump',
                 '/usr/share/man/man1/spanprof-dump.1.gz',
                 (map { ("/usr/share/doc/$_", "/usr/share/lintian/overrides/$_",
                         glob("/var/lib/dpkg/info/$_.*")) } @pkgs),
                 (map { '/usr/lib/debug/.build-id/' . substr($_, 0, 2) } @debug_ids));
    File::Find::find({ no_chdir => 1, wanted => sub {
        my @st = lstat $_ or return;
        my $what = S_ISLNK($st[2]) ? 'l ' . readlink($_)
                 : S_ISDIR($st[2]) ? 'd'
                 : do { open my $fh, '<', $_; binmode $fh;
                        'f ' . Digest::MD5->new->addfile($fh)->hexdigest };
        $s{$_} = sprintf('%o %d:%d %s', $st[2] & 07777, $st[4], $st[5], $what);
    } }, grep { -e $_ || -l $_ } @roots);
    return \%s;
}

sub diff_snapshots {
    my ($a, $b) = @_;
    my @d;
    for my $p (sort keys %{ { %$a, %$b } }) {
        my ($x, $y) = ($a->{$p} // 'absent', $b->{$p} // 'absent');
        push @d, "$p: $x -> $y" if $x ne $y;
    }
    return @d;
}

# --- build the packages into a directory of this test's own (not
# build/deb, which t/debian_packages.t rebuilds).
my ($rc, $out) = run_cmd({}, 'make', '-C', $top, '--no-print-directory', 'build');
is($rc, 0, 'make build') or diag($out);
($rc, $out) = run_cmd({}, "$top/tools/mkdeb.sh", "$top/build", "$dir/deb", $version);
is($rc, 0, 'tools/mkdeb.sh') or BAIL_OUT($out);
my $arch = `dpkg --print-architecture`;
chomp $arch;
my @debs = map { "$dir/deb/${_}_${version}_$arch.deb" } @pkgs;
for my $f (qw(ngx_http_spanprof_module.so mod_spanprof.so spanprof-exporter spanprof-dump)) {
    push @debug_ids, `readelf -n $top/build/$f` =~ /Build ID: ([0-9a-f]+)/;
}
is(scalar(@debug_ids), 4, 'the build ids of the four binaries');

my $before = snapshot();
if (%apache_state_was) {
    note('set aside until the end: ' . join(' ', sort keys %apache_state_was));
    unlink keys %apache_state_was;
}

# --- install
unlink $rcd_log;
($rc, $out) = dpkg('-i', @debs);
is($rc, 0, 'dpkg -i: the four packages install') or diag($out);
note($out);
for my $p (@pkgs) {
    is(`dpkg-query -W -f='\${Status} \${Version}' $p 2>&1`, "install ok installed $version",
       "$p: installed, $version");
    ($rc, $out) = run_cmd({}, 'dpkg', '--verify', $p);
    ok($rc == 0 && $out eq '', "$p: dpkg --verify: every file matches its md5sum")
        or diag($out);
}
my $conffiles = `dpkg-query -W -f='\${Conffiles}' libapache2-mod-spanprof`;
my ($sum) = $conffiles =~ m{^ /etc/apache2/mods-available/spanprof\.load ([0-9a-f]{32})$}m;
ok($sum, 'httpd: spanprof.load registered as a conffile') or diag($conffiles);
is(Digest::MD5->new->add(read_file('/etc/apache2/mods-available/spanprof.load'))->hexdigest,
   $sum // '', 'httpd: the conffile is the packaged one');

for my $f (qw(/usr/lib/nginx/modules/ngx_http_spanprof_module.so
              /usr/lib/apache2/modules/mod_spanprof.so)) {
    ok(-f $f, "$f in place");
}
for my $f (qw(/usr/lib/nginx/modules/spanprof-exporter
              /usr/lib/apache2/modules/spanprof-exporter /usr/bin/spanprof-dump)) {
    ok(-x $f, "$f in place, executable");
}

# httpd: enabled by the postinst, as Debian's libapache2-mod-* are.
($rc, $out) = run_cmd({}, 'a2query', '-m', 'spanprof');
chomp $out;
is($rc, 0, 'httpd: a2query -m spanprof: enabled');
like($out, qr/enabled by maintainer script/, "httpd: ... by the maintainer script ($out)");
is(readlink('/etc/apache2/mods-enabled/spanprof.load'), '../mods-available/spanprof.load',
   'httpd: mods-enabled/spanprof.load');
($rc, $out) = run_cmd({}, 'apache2ctl', '-t', '-D', 'DUMP_MODULES');
is($rc, 0, 'httpd: apache2ctl -t with the system configuration') or diag($out);
like($out, qr/^ spanprof_module \(shared\)$/m, 'httpd: the system configuration loads spanprof_module');

# nginx: the modules-enabled link, as Debian's libnginx-mod-* make it.
is(readlink('/etc/nginx/modules-enabled/50-mod-http-spanprof.conf'),
   '/usr/share/nginx/modules-available/mod-http-spanprof.conf',
   'nginx: modules-enabled/50-mod-http-spanprof.conf');
($rc, $out) = run_cmd({}, 'nginx', '-t');
is($rc, 0, 'nginx: nginx -t with the system configuration') or diag($out);
ok(-d '/var/lib/nginx/spanprof', 'nginx: the exporter path is beside the '
   . 'client body temp path, /var/lib/nginx/spanprof');
ok(@{ $nginx_path_was{'/usr/share/nginx/spanprof'} }
   || !-e '/usr/share/nginx/spanprof', 'nginx: nothing is made under /usr');
($rc, $out) = run_cmd({}, 'nginx', '-T');
like($out, qr{^load_module modules/ngx_http_spanprof_module\.so;$}m,
     'nginx: the system configuration loads the module');

# The init system was asked, never obeyed.
my $asked = read_file($rcd_log);
note("invoke-rc.d was called with:\n$asked");
like($asked, qr/^apache2 restart$/m, 'httpd postinst asked for a restart (denied here)');
unlike($asked, qr/^(?:--\S+ )*nginx (?!status)/m,
       'nginx was only asked for its status (the nginx-reload trigger: not running)');

# spanprof-tools and spanprof-dbg.
($rc, $out) = run_cmd({}, '/usr/bin/spanprof-dump', '--help');
is($rc, 0, 'spanprof-dump --help');
SKIP: {
    skip 'man-db is not installed', 1 unless -x '/usr/bin/man';
    is(`man -w spanprof-dump 2>&1`, "/usr/share/man/man1/spanprof-dump.1.gz\n",
       'man spanprof-dump finds its page');
}
for my $id (@debug_ids) {
    my $f = '/usr/lib/debug/.build-id/' . substr($id, 0, 2) . '/' . substr($id, 2) . '.debug';
    ok(-f $f, "spanprof-dbg: $f");
}
for my $f (qw(/usr/lib/nginx/modules/ngx_http_spanprof_module.so
              /usr/lib/apache2/modules/mod_spanprof.so)) {
    my ($id) = `readelf -n $f` =~ /Build ID: ([0-9a-f]+)/;
    ok($id && grep({ $_ eq $id } @debug_ids), "$f: the build id of the build");
}

# --- remove: the conffile stays, the module is disabled.
unlink $rcd_log;
($rc, $out) = dpkg('-r', @pkgs);
is($rc, 0, 'dpkg -r') or diag($out);
for my $p (@pkgs) {
    # Without conffiles dpkg forgets a removed package at once.
    like(`dpkg-query -W -f='\${db:Status-Abbrev}' $p 2>&1`,
         $p eq 'libapache2-mod-spanprof' ? qr/^rc/ : qr/^(?:rc|un|pn)|no packages found/,
         "$p: removed" . ($p eq 'libapache2-mod-spanprof' ? ', its conffile kept' : ''));
}
ok(!-e '/usr/lib/nginx/modules/ngx_http_spanprof_module.so'
   && !-e '/usr/lib/apache2/modules/mod_spanprof.so', 'remove: the modules are gone');
ok(-f '/etc/apache2/mods-available/spanprof.load', 'remove: the conffile stays');
($rc, $out) = run_cmd({}, 'a2query', '-m', 'spanprof');
chomp $out;
isnt($rc, 0, "httpd: not enabled after remove ($out)");
ok(!-e '/etc/apache2/mods-enabled/spanprof.load', 'httpd: mods-enabled/spanprof.load gone');
ok(!-e '/etc/nginx/modules-enabled/50-mod-http-spanprof.conf',
   'nginx: the link is not enabled after remove');
($rc, $out) = run_cmd({}, 'apache2ctl', '-t');
is($rc, 0, 'httpd: apache2ctl -t after remove') or diag($out);
($rc, $out) = run_cmd({}, 'nginx', '-t');
is($rc, 0, 'nginx: nginx -t after remove') or diag($out);

# --- purge: nothing left.
($rc, $out) = dpkg('--purge', @pkgs);
is($rc, 0, 'dpkg --purge') or diag($out);
is(join(' ', known()), '', 'purge: dpkg knows none of the packages');
ok(!-e '/etc/apache2/mods-available/spanprof.load', 'purge: the conffile is gone');
ok(!-e '/etc/nginx/modules-enabled/50-mod-http-spanprof.conf'
   && !-l '/etc/nginx/modules-enabled/50-mod-http-spanprof.conf.removed',
   'purge: no nginx link, not even set aside');
($rc, $out) = run_cmd({}, 'a2query', '-m', 'spanprof');
chomp $out;
is($rc, 1, "httpd: a2query knows no spanprof module ($out)");
is(join(' ', grep { -e $_ } map { glob("/var/lib/apache2/module/$_/spanprof") }
        qw(enabled_by_maint enabled_by_admin disabled_by_maint disabled_by_admin)),
   '', 'httpd: no module state left in /var/lib/apache2/module');
restore_nginx_path();
restore_apache_state();
my @d = diff_snapshots($before, snapshot());
is(scalar(@d), 0, 'purge: the system is as it was before the install') or diag(join "\n", @d);

done_testing();
