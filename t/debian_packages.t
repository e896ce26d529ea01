#!/usr/bin/perl
# make deb: the three Debian packages it builds into build/deb/, read back
# with dpkg-deb (fields, Depends on the server ABI and on the shared
# libraries, file lists, conffiles, maintainer scripts), then each server
# package extracted (dpkg-deb -x, never installed) into a temporary root
# and run: the real nginx loads the packaged module through the packaged
# modules-available file, httpd the packaged mod_spanprof.so, and a
# request's span reaches the independent OTLP receiver through the exporter
# of the package, the one next to the module (checked by /proc/PID/exe).
# The nginx maintainer scripts run for real against a private
# modules-enabled directory; the apache2 ones against a recording
# apache2-maintscript-helper. Also: each package's md5sums against its
# files, the DEP-5 copyright and changelog.Debian.gz, stripped binaries
# whose debug files spanprof-dbg holds by build id, and lintian (errors
# and warnings fail; skipped when lintian is not installed). Nothing is
# installed into the system (t/debian_install.t does that, as root).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir new_dir write_file read_file nginx_conf
                        httpd_conf spawn wait_for_port http_get stop);
use Spanprof::Receiver qw(attribute);

sub run_cmd { Spanprof::Server::run_cmd(@_) }

Spanprof::Receiver::skip_unless_ready();
plan skip_all => 'dpkg-deb is not installed'
    if system('dpkg-deb --version >/dev/null 2>&1');

my $top = top_dir();
my $dir = new_dir();
# The exporter must be found next to the module, not named by hand.
delete $ENV{SPANPROF_EXPORTER_PATH};

my ($rc, $out) = run_cmd({}, 'make', '-C', $top, '--no-print-directory', 'deb');
is($rc, 0, 'make deb succeeds') or diag($out);

my ($sp_version) = read_file("$top/core/include/sp_common.h")
    =~ /^#define SP_VERSION "([^"]+)"/m;
my $arch = `dpkg --print-architecture`;
chomp $arch;
my ($nginx_abi) = read_file('/usr/share/nginx/src/debian/libnginx-mod.abisubstvars')
    =~ /^nginx:abi=(\S+)/m;
my ($mmn) = read_file('/usr/include/apache2/ap_mmn.h')
    =~ /^#define MODULE_MAGIC_NUMBER_MAJOR (\d+)/m;
ok($nginx_abi && $mmn, "the ABIs built against: $nginx_abi, apache2-api-$mmn");
my @provides = map { split /,\s*/ } map { `dpkg-query -W -f='\${Provides}' $_ 2>/dev/null` }
    qw(nginx nginx-core apache2-bin);
ok((grep { $_ eq $nginx_abi } @provides), "the installed nginx provides $nginx_abi");
ok((grep { $_ eq "apache2-api-$mmn" } @provides),
   "the installed apache2-bin provides apache2-api-$mmn");

# The build ids of the built binaries, in the paths spanprof-dbg gives
# their debug files.
my %debug;
for my $f (qw(ngx_http_spanprof_module.so mod_spanprof.so spanprof-exporter
              spanprof-dump)) {
    my ($id) = `readelf -n $top/build/$f` =~ /Build ID: ([0-9a-f]+)/;
    $debug{$f} = 'usr/lib/debug/.build-id/' . substr($id, 0, 2) . '/'
        . substr($id, 2) . '.debug';
}
sub docs {
    my ($name) = @_;
    return ("usr/share/doc/$name/copyright", "usr/share/doc/$name/changelog.Debian.gz",
            "usr/share/lintian/overrides/$name");
}

my %pkg = (
    'libnginx-mod-http-spanprof' => {
        abi => $nginx_abi, grpc => 1,
        files => [qw(usr/lib/nginx/modules/ngx_http_spanprof_module.so
                     usr/lib/nginx/modules/spanprof-exporter
                     usr/share/nginx/modules-available/mod-http-spanprof.conf),
                  docs('libnginx-mod-http-spanprof')],
        scripts => [qw(postinst prerm postrm)],
    },
    'libapache2-mod-spanprof' => {
        abi => "apache2-api-$mmn", grpc => 1,
        files => [qw(usr/lib/apache2/modules/mod_spanprof.so
                     usr/lib/apache2/modules/spanprof-exporter
                     etc/apache2/mods-available/spanprof.load),
                  docs('libapache2-mod-spanprof')],
        scripts => [qw(postinst prerm postrm)],
        conffiles => "/etc/apache2/mods-available/spanprof.load\n",
    },
    'spanprof-tools' => {
        files => [qw(usr/bin/spanprof-dump usr/share/man/man1/spanprof-dump.1.gz),
                  docs('spanprof-tools')],
        scripts => [],
    },
    'spanprof-dbg' => {
        files => [(sort values %debug),
                  docs('spanprof-dbg')],
        scripts => [], nolibc => 1,
    },
);

my %deb;
for my $name (sort keys %pkg) {
    my $p = $pkg{$name};
    my $deb = "$top/build/deb/${name}_$sp_version-1_$arch.deb";
    $deb{$name} = $deb;
    ok(-f $deb, "$name: build/deb/" . (split m{/}, $deb)[-1]) or next;
    my %f = map { /^(\S+): (.*)$/ ? ($1 => $2) : () }
        split /\n/, `dpkg-deb -f $deb`;
    is($f{Package}, $name, "$name: Package");
    is($f{Version}, "$sp_version-1", "$name: Version is SP_VERSION-1");
    is($f{Architecture}, $arch, "$name: Architecture $arch");
    like($f{Maintainer}, qr/^spanprof maintainers <[^<>\s]+\@[^<>\s]+>$/,
         "$name: Maintainer with an address (policy 5.6.2)");
    my @dep = map { (split ' ', $_)[0] } split /,\s*/, $f{Depends} // '';
    note("$name Depends: " . ($f{Depends} // ''));
    if ($p->{nolibc}) {
        is($f{Depends}, join(' | ', map { "$_ (= $sp_version-1)" }
                             qw(libnginx-mod-http-spanprof libapache2-mod-spanprof
                                spanprof-tools)),
           "$name: Depends on any of the three packages of its version");
        is($f{Section}, 'debug', "$name: Section debug");
    } else {
        ok((grep { $_ eq 'libc6' } @dep), "$name: Depends libc6 (dpkg-shlibdeps)");
        ok(!(grep { /^libunwind/ } @dep),
           "$name: no libunwind (nothing links it since libgcc's unwinder)");
    }
    if ($p->{nolibc}) {
    } elsif ($p->{abi}) {
        ok((grep { $_ eq $p->{abi} } @dep), "$name: Depends $p->{abi}");
    } else {
        ok(!(grep { /^(nginx-abi|apache2-api)-/ } @dep), "$name: no server ABI");
    }
    if ($p->{grpc}) {
        ok((grep { /^libgrpc\d+$/ } @dep), "$name: Depends libgrpc* (the exporter)");
        ok((grep { $_ eq 'libgcc-s1' } @dep),
           "$name: Depends libgcc-s1 (the sampler's unwinder, dlopen'ed)");
    }
    like(`dpkg-deb -f $deb Description`, qr/^\S.{10,79}\n(?: \S.*\n)+$/,
         "$name: a short and a long description");

    # The file list: exactly these files, owned by root, nothing under build/.
    my @list = split /\n/, `dpkg-deb -c $deb`;
    my @files = sort map { m{ \./(\S+)$} ? $1 : () } grep { /^-/ } @list;
    is_deeply(\@files, [sort @{ $p->{files} }], "$name: dpkg-deb -c file list");
    is(scalar(grep { !m{^\S+ root/root } } @list), 0, "$name: all root:root");
    for my $l (grep { m{ \./usr/(?:bin|lib/\S+/modules)/\S*spanprof-(?:exporter|dump)$} } @list) {
        like($l, qr/^-rwxr-xr-x /, "$name: executable " . (split ' ', $l)[-1]);
    }

    my $ctl = "$dir/$name.ctl";
    system('dpkg-deb', '-e', $deb, $ctl) == 0 or BAIL_OUT("dpkg-deb -e $deb");
    for my $s (@{ $p->{scripts} }) {
        ok(-x "$ctl/$s", "$name: $s executable");
        is(system('sh', '-n', "$ctl/$s"), 0, "$name: $s passes sh -n");
    }
    is(read_file("$ctl/conffiles"), $p->{conffiles} // '', "$name: conffiles");
    system('dpkg-deb', '-x', $deb, "$dir/root") == 0 or BAIL_OUT("dpkg-deb -x $deb");

    # md5sums (what debsums and dpkg --verify check): every file, right.
    my $sums = read_file("$ctl/md5sums");
    is_deeply([sort map { (split ' ', $_, 2)[1] } split /\n/, $sums],
              [sort @{ $p->{files} }], "$name: md5sums lists every file");
    my ($mrc, $mout) = run_cmd({}, 'sh', '-c',
                               "cd $dir/root && md5sum --quiet -c $ctl/md5sums");
    is($mrc, 0, "$name: md5sums match the files") or diag($mout);

    # Policy 12.5 and 12.7: a DEP-5 copyright that grants no licence it was
    # never given, and the Debian changelog of this version.
    my $copyright = read_file("$dir/root/usr/share/doc/$name/copyright");
    like($copyright, qr{\AFormat: https://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/\n},
         "$name: copyright is DEP-5");
    like($copyright, qr{^Files: \*\nCopyright: \d{4}(?:-\d{4})? The spanprof authors\nLicense: other\n}m,
         "$name: copyright: The spanprof authors, License: other");
    my $changelog = `gzip -dc $dir/root/usr/share/doc/$name/changelog.Debian.gz`;
    like($changelog, qr/^spanprof \(\Q$sp_version\E-1\) \S+; urgency=\w+\n/,
         "$name: changelog.Debian.gz of $sp_version-1");
    like($changelog, qr/^ -- \Q$f{Maintainer}\E  \w{3}, \d\d \w{3} \d{4} [\d:]{8} [+-]\d{4}\n\z/m,
         "$name: changelog trailer by the Maintainer, RFC 5322 date");
}

# Stripped binaries (policy 10.1), their debug information in spanprof-dbg
# under the build id the symbolizer looks it up by.
for my $f (sort keys %debug) {
    my ($path) = grep { m{/\Q$f\E$} } map { @{ $_->{files} } } values %pkg;
    unlike(`readelf -S $dir/root/$path`, qr/\.symtab|\.debug_info/,
           "$path: stripped");
    ok(-f "$dir/root/$debug{$f}", "spanprof-dbg: $debug{$f} for $f");
    like(`readelf -S $dir/root/$debug{$f} 2>/dev/null`, qr/\.debug_info/, "$f: the debug file has .debug_info");
}

# lintian: errors and warnings fail (overrides, each with its reason, in
# tools/deb/*.lintian).
SKIP: {
    skip 'lintian is not installed (make deps installs it)', 1
        if system('lintian --version >/dev/null 2>&1');
    my ($lrc, $lout) = run_cmd({}, 'lintian', '--allow-root', '--fail-on', 'error,warning',
                               '--display-info', sort values %deb);
    is($lrc, 0, 'lintian --fail-on error,warning: clean') or diag($lout);
    note($lout);
}
my $root = "$dir/root";
is(read_file("$root/usr/share/nginx/modules-available/mod-http-spanprof.conf"),
   "load_module modules/ngx_http_spanprof_module.so;\n",
   'nginx: modules-available loads the module by Debian\'s relative path');
is(read_file("$root/etc/apache2/mods-available/spanprof.load"),
   "LoadModule spanprof_module /usr/lib/apache2/modules/mod_spanprof.so\n",
   'httpd: spanprof.load');

# --- the nginx maintainer scripts, against a private modules-enabled, with
# a dpkg-trigger and an invoke-rc.d that record their calls instead of
# talking to dpkg and the init system (nginx "runs" while $dir/running
# exists; its upgrade fails while $dir/upgrade-fails does).
{
    my $en = "$dir/modules-enabled";
    my $bin = "$dir/fakebin";
    mkdir $en;
    mkdir $bin;
    write_file("$bin/dpkg-trigger", "#!/bin/sh\necho \"\$*\" >>$dir/triggers\n");
    write_file("$bin/invoke-rc.d", <<"RCD");
#!/bin/sh
echo "\$*" >>$dir/rcd
case "\$*" in
*status) test -e $dir/running ;;
*upgrade) test ! -e $dir/upgrade-fails ;;
*) exit 0 ;;
esac
RCD
    chmod 0755, "$bin/dpkg-trigger", "$bin/invoke-rc.d";
    my $link = "$en/50-mod-http-spanprof.conf";
    my $run = sub {
        my ($s, @args) = @_;
        my $text = read_file("$dir/libnginx-mod-http-spanprof.ctl/$s");
        $text =~ s{/etc/nginx/modules-enabled}{$en}g;
        $text =~ s{/usr/share/nginx/spanprof}{$dir/nginx-prefix-spanprof}g;
        $text =~ s{/var/lib/nginx/spanprof}{$dir/nginx-state-spanprof}g;
        write_file("$dir/$s.sh", $text);
        my ($rc, $out) = run_cmd({ PATH => "$bin:$ENV{PATH}" }, 'sh', "$dir/$s.sh", @args);
        is($rc, 0, "nginx $s @args: exit 0") or diag($out);
    };
    $run->('postinst', 'configure', '');
    is(readlink($link), '/usr/share/nginx/modules-available/mod-http-spanprof.conf',
       'fresh install: 50-mod-http-spanprof.conf enabled');
    like(read_file("$dir/triggers"), qr/^--no-await nginx-reload$/m,
         'fresh install: nginx-reload triggered');
    $run->('prerm', 'remove');
    $run->('postrm', 'remove');
    ok(!-l $link && -l "$link.removed", 'remove: the link set aside');
    $run->('postinst', 'configure', "$sp_version-1");
    ok(-l $link && !-l "$link.removed", 'reinstall after remove: enabled again');
    unlink $link;
    $run->('postinst', 'configure', "$sp_version-1");
    ok(!-l $link, 'upgrade: an administrator\'s removal is kept');
    $run->('postinst', 'configure', '');

    # nginx keeps a module it loaded across a reload: an upgrade while it
    # runs is its online binary upgrade (a new master loads the new
    # module), not the reload trigger; else, or when that fails, the
    # trigger. A fresh install has nothing loaded to replace.
    my $asked = sub {
        my ($do) = @_;
        unlink "$dir/rcd", "$dir/triggers";
        my $err = $do->();
        return (-e "$dir/rcd" ? read_file("$dir/rcd") : '',
                -e "$dir/triggers" ? read_file("$dir/triggers") : '', $err);
    };
    write_file("$dir/running", '');
    my ($rcd, $trig) = $asked->(sub { $run->('postinst', 'configure', "$sp_version-1") });
    like($rcd, qr/^nginx upgrade$/m, 'upgrade, nginx running: its binary upgrade');
    is($trig, '', 'and no reload trigger');
    ($rcd, $trig) = $asked->(sub { $run->('postinst', 'configure', '') });
    unlike($rcd, qr/upgrade/, 'fresh install, nginx running: no binary upgrade');
    like($trig, qr/^--no-await nginx-reload$/m, 'but the reload trigger');
    write_file("$dir/upgrade-fails", '');
    my $script = "$dir/postinst.sh";
    ($rcd, $trig, my $err) = $asked->(sub {
        (run_cmd({ PATH => "$bin:$ENV{PATH}" }, 'sh', $script, 'configure',
                 "$sp_version-1"))[1] });
    like($rcd, qr/^nginx upgrade$/m, 'upgrade that fails: tried');
    like($trig, qr/^--no-await nginx-reload$/m, 'then the reload trigger');
    like($err, qr/nginx runs the module it loaded before this upgrade until it restarts/,
         'and says nginx still runs the old module');
    unlink "$dir/running", "$dir/upgrade-fails";
    ($rcd, $trig) = $asked->(sub { $run->('postinst', 'configure', "$sp_version-1") });
    unlike($rcd, qr/upgrade/, 'upgrade, nginx stopped: no binary upgrade');
    like($trig, qr/^--no-await nginx-reload$/m, 'the reload trigger');

    # The directory nginx makes for the module's exporter path (earlier
    # builds: under its prefix).
    mkdir "$dir/nginx-prefix-spanprof";
    mkdir "$dir/nginx-state-spanprof";
    $run->('postrm', 'purge');
    ok(!-l $link && !-l "$link.removed", 'purge: no link left');
    ok(!-e "$dir/nginx-state-spanprof", 'purge: the exporter path nginx made is gone');
    ok(!-e "$dir/nginx-prefix-spanprof", 'purge: the one earlier builds made is gone');
}

# --- the apache2 maintainer scripts, with an apache2-maintscript-helper
# whose apache2_invoke records its arguments (the real one runs a2enmod
# on this machine's /etc/apache2).
{
    my $helper = "$dir/apache2-maintscript-helper";
    write_file($helper, "apache2_invoke() { echo \"\$*\" >>$dir/invoked; }\n");
    my $run = sub {
        my ($s, @args) = @_;
        my $text = read_file("$dir/libapache2-mod-spanprof.ctl/$s");
        $text =~ s{/usr/share/apache2/apache2-maintscript-helper}{$helper}g;
        write_file("$dir/a-$s.sh", $text);
        unlink "$dir/invoked";
        my ($rc, $out) = run_cmd({}, 'sh', "$dir/a-$s.sh", @args);
        is($rc, 0, "apache2 $s @args: exit 0") or diag($out);
        return read_file("$dir/invoked");
    };
    is($run->('postinst', 'configure', ''), "enmod spanprof\n",
       'httpd postinst configure: enmod through the helper');
    is($run->('prerm', 'remove'), "dismod spanprof\n", 'httpd prerm remove: dismod');
    is($run->('prerm', 'upgrade', "$sp_version-1"), '', 'httpd prerm upgrade: nothing');
    is($run->('postrm', 'remove'), '', 'httpd postrm remove: nothing more');
    is($run->('postrm', 'purge'), "dismod spanprof\n", 'httpd postrm purge: dismod');
}

# The exporter processes under $top (nginx starts it from a worker, a
# grandchild of the master; httpd from its parent), with their executables.
sub exporters {
    my ($top) = @_;
    my (%children, %args);
    for (split /\n/, `ps -eo pid=,ppid=,args=`) {
        my ($pid, $ppid, $args) = /^\s*(\d+)\s+(\d+)\s+(.*)$/ or next;
        push @{ $children{$ppid} }, $pid;
        $args{$pid} = $args;
    }
    my (@found, @todo);
    @todo = ($top);
    while (defined(my $p = shift @todo)) {
        for my $c (@{ $children{$p} // [] }) {
            push @todo, $c;
            push @found, [$c, readlink("/proc/$c/exe") // '']
                if $args{$c} =~ /^spanprof-exporter/;
        }
    }
    return @found;
}

# Runs a server, requests $path, checks the span and the exporter.
sub check_server {
    my (%a) = @_;
    my $recv = Spanprof::Receiver->start(dir => $a{dir});
    my %env = (OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:' . $recv->port,
               OTEL_BSP_SCHEDULE_DELAY => '200',
               OTEL_SERVICE_NAME => "deb-$a{name}");
    my $pid = spawn(\%env, "$a{dir}/stderr.log", @{ $a{cmd} });
    ok(wait_for_port($a{port}), "$a{name}: starts with the packaged module")
        or return diag(read_file("$a{dir}/error.log") . read_file("$a{dir}/stderr.log"));
    my ($status) = http_get($a{port}, '/deb-check');
    ok($status == 200 || $status == 404, "$a{name}: answers ($status)");

    my ($spans, $end) = ([], time + 15);
    while (time < $end) {
        ($spans) = $recv->collect;
        last if grep { (attribute($_->{attributes}, 'url.path') // '') eq '/deb-check' }
            @$spans;
        sleep 0.2;
    }
    my ($span) = grep { (attribute($_->{attributes}, 'url.path') // '') eq '/deb-check' }
        @$spans;
    ok($span, "$a{name}: the request's span reaches the receiver")
        or diag(read_file("$a{dir}/error.log"));
    if ($span) {
        is(attribute($span->{resource}{attributes}, 'service.name'), "deb-$a{name}",
           "$a{name}: from this server");
        is(attribute($span->{resource}{attributes}, 'telemetry.sdk.version'),
           $sp_version, "$a{name}: telemetry.sdk.version is the package's");
    }
    my @ex = exporters($pid);
    is(scalar(@ex), 1, "$a{name}: one exporter");
    is($ex[0][1], $a{exporter}, "$a{name}: it is the packaged one next to the module")
        if @ex;
    stop($pid);
    $recv->stop;
}

# --- nginx: the packaged modules-available file, included as is; its
# relative path resolves against the prefix, whose modules/ is (as in
# Debian's /usr/share/nginx) a link to the modules directory.
{
    my $d = new_dir();
    symlink("$root/usr/lib/nginx/modules", "$d/modules") or die "symlink: $!";
    my $port = nginx_conf($d, module => 0, location => 'return 200 "ok\n";');
    write_file("$d/nginx.conf",
               "include $root/usr/share/nginx/modules-available/mod-http-spanprof.conf;\n"
               . read_file("$d/nginx.conf"));
    check_server(name => 'nginx', dir => $d, port => $port,
                 cmd => ['/usr/sbin/nginx', '-p', $d, '-c', "$d/nginx.conf",
                         '-e', "$d/error.log"],
                 exporter => "$root/usr/lib/nginx/modules/spanprof-exporter");
}

# --- httpd: the packaged mod_spanprof.so
{
    my $d = new_dir();
    my $port = httpd_conf($d, module => 0, extra =>
        "LoadModule spanprof_module $root/usr/lib/apache2/modules/mod_spanprof.so\n");
    check_server(name => 'httpd', dir => $d, port => $port,
                 cmd => ['/usr/sbin/apache2', '-f', "$d/httpd.conf", '-DFOREGROUND'],
                 exporter => "$root/usr/lib/apache2/modules/spanprof-exporter");
}

done_testing();
