#!/usr/bin/perl
# The reference deployment, checked as far as a machine without Docker
# allows: docker-compose.yml and the collector's configuration parse as
# YAML (libyaml, through YAML::XS); every build context, Dockerfile, stage,
# copied file, template and mounted path exists; every environment variable
# is a spanprof setting of SPEC section 1 and both servers get the same
# switches; the addresses and ports named in the compose file, the
# Dockerfile's rendering of the templates, the backend's command and the
# collector's configuration agree; the collector's pipelines use only what
# it defines; and the very configuration files the images render pass
# `nginx -t` and `apache2 -t` here, with the paths of this machine and the
# environment of the compose file, without a warning.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(top_dir new_dir read_file free_port);

# Not exported by Spanprof::Server, but just what is needed here.
sub run_cmd { Spanprof::Server::run_cmd(@_) }
use Spanprof::Settings qw(settings);

BEGIN {
    eval { require YAML::XS; 1 }
        or plan skip_all => 'YAML::XS (Debian libyaml-libyaml-perl) is not '
                          . 'installed: make deps';
}

my $top = top_dir();
my $dir = new_dir();

# YAML::XS reads booleans and numbers as strings; that is all we need.
sub load_yaml {
    my ($path) = @_;
    my $data = eval { YAML::XS::LoadFile($path) };
    ok(ref $data eq 'HASH', "$path parses as a YAML mapping")
        or diag($@ // 'not a mapping');
    return $data // {};
}

my $compose = load_yaml("$top/docker-compose.yml");
my $services = $compose->{services} // {};
is_deeply([sort keys %$services],
          [sort qw(nginx httpd backend otel-collector)],
          'services: nginx, httpd, backend, otel-collector');

# --- the Dockerfiles: stages, copies, the templates they render

# Instructions of a Dockerfile, continuation lines joined, comments gone.
sub dockerfile {
    my ($path) = @_;
    my (@ins, $cur);
    for my $line (split /\n/, read_file($path)) {
        next if !defined $cur && $line =~ /^\s*(#|$)/;
        $cur = defined $cur ? "$cur $line" : $line;
        next if $cur =~ s/\\\s*$//;
        push @ins, $cur =~ s/\s+/ /gr;
        undef $cur;
    }
    return @ins;
}

my %stages;     # Dockerfile => { stage => [ rendered files ] }
my %rendered;   # "Dockerfile:stage" => { template => path, out => path,
                #                          values => { NAME => VALUE } }
my %cmd;        # "Dockerfile:stage" => [ CMD words ]
for my $svc (sort keys %$services) {
    my $build = $services->{$svc}{build} or next;
    my $context = "$top/" . ($build->{context} // '.');
    ok(-d $context, "$svc: build context $build->{context} exists");
    my $file = $build->{dockerfile} // 'Dockerfile';
    next if $stages{$file};
    ok(-f "$context/$file", "$svc: $file exists") or next;
    my (%seen, $stage, %copied);
    for my $ins (dockerfile("$context/$file")) {
        if ($ins =~ /^FROM (\S+)(?: AS (\S+))?$/i) {
            $stage = $2 // $1;
            like($1, qr/^(debian:bookworm|\w+)$/,
                 "$file: $stage is on debian:bookworm or an earlier stage");
            ok($1 eq 'debian:bookworm' || $seen{$1},
               "$file: $stage starts from a known image or stage");
            $seen{$stage} = 1;
        } elsif ($ins =~ /^COPY --from=(\S+) (\S+) (\S+)$/i) {
            ok($seen{$1}, "$file: $stage copies from earlier stage $1");
        } elsif ($ins =~ /^COPY (.+) (\S+)$/i) {
            for my $src (split ' ', $1) {
                ok(-e "$context/$src", "$file: $stage copies $src, which "
                                     . 'exists');
                $copied{$stage}{$src =~ s{.*/}{}r} = $src;
            }
        } elsif ($ins =~ /^RUN .*render\.sh (\S+) (\S+) ((?:\S+=\S*\s*)+)/) {
            my ($tpl, $out, $pairs) = ($1, $2, $3);
            my $base = $tpl =~ s{.*/}{}r;
            ok($copied{$stage}{$base},
               "$file: $stage renders $base, copied from the repository");
            $rendered{"$file:$stage"} = {
                template => $copied{$stage}{$base} // $base, out => $out,
                values => { map { split /=/, $_, 2 } split ' ', $pairs },
            };
        } elsif ($ins =~ /^CMD (\[.*\])$/i) {
            $cmd{"$file:$stage"} = eval { YAML::XS::Load("--- $1\n") } // [];
        }
    }
    $stages{$file} = \%seen;
}

for my $svc (sort keys %$services) {
    my $build = $services->{$svc}{build} or next;
    my $file = $build->{dockerfile} // 'Dockerfile';
    ok($stages{$file}{ $build->{target} // '' },
       "$svc: target $build->{target} is a stage of $file");
}

# The Dockerfile's values make every template whole (render.sh refuses a
# name the template lacks and a name left without a value).
for my $key (sort keys %rendered) {
    my $r = $rendered{$key};
    my @pairs = map { "$_=$r->{values}{$_}" } sort keys %{ $r->{values} };
    my ($rc, $out) = run_cmd({}, "$top/deploy/render.sh",
                             "$top/$r->{template}", "$dir/check.conf", @pairs);
    is($rc, 0, "$key: the Dockerfile gives $r->{template} every value")
        or diag($out);
}

# --- environment: spanprof's settings, the same switches in both servers

my %setting = map { $_->[0] => 1 } settings(certificate => '/dev/null');
$setting{SPLUNK_SNAPSHOT_SELECTION_RATE} = 1;
$setting{SPLUNK_SNAPSHOT_PROFILER_SAMPLING_INTERVAL} = 1;

# A compose value with ${NAME:-default} substituted as compose would with
# NAME unset; the names it reads are returned too.
sub interpolate {
    my ($v) = @_;
    my @names;
    $v =~ s/\$\{(\w+)(?::?-([^}]*))?\}/push @names, $1; $2 \/\/ ''/ge;
    return ($v, @names);
}

my %env;    # service => { NAME => value after interpolation }
for my $svc (qw(nginx httpd)) {
    my $e = $services->{$svc}{environment} // {};
    ok(ref $e eq 'HASH' && %$e, "$svc: environment is a mapping") or next;
    for my $name (sort keys %$e) {
        ok($setting{$name}, "$svc: $name is a spanprof setting (SPEC 1)");
        my ($value, @names) = interpolate($e->{$name});
        ok(!grep({ $_ ne $name } @names),
           "$svc: $name is switched by \$$name itself") if @names;
        $env{$svc}{$name} = $value;
    }
}
for my $name (sort keys %{ $services->{nginx}{environment} // {} }) {
    next if $name =~ /^(OTEL_SERVICE_NAME|SPLUNK_PROFILER_CALL_STACK_INTERVAL)$/;
    is($services->{httpd}{environment}{$name},
       $services->{nginx}{environment}{$name},
       "$name: the same in nginx and httpd");
}
isnt($env{nginx}{OTEL_SERVICE_NAME}, $env{httpd}{OTEL_SERVICE_NAME},
     'nginx and httpd are told apart by service.name');
ok($services->{nginx}{environment}{SPLUNK_SNAPSHOT_PROFILER_ENABLED}
       =~ /\$\{SPLUNK_SNAPSHOT_PROFILER_ENABLED/,
   'snapshot profiling is switched by the environment, not the image');
ok($services->{nginx}{environment}{SPLUNK_PROFILER_ENABLED}
       =~ /\$\{SPLUNK_PROFILER_ENABLED/,
   'continuous profiling is switched by the environment, not the image');

# --- addresses and ports agree across the files

sub port_of { ($_[0] // '') =~ /:?(\d+)\/?$/ ? $1 : undef }

sub stage_of {
    my ($svc) = @_;
    my $b = $services->{$svc}{build} // {};
    return ($b->{dockerfile} // 'Dockerfile') . ':' . ($b->{target} // '');
}

sub container_ports {
    my ($svc) = @_;
    my $s = $services->{$svc};
    return (map({ /(\d+)$/ ? $1 : () } @{ $s->{ports} // [] }),
            map({ "$_" } @{ $s->{expose} // [] }));
}

my $nginx = $rendered{ stage_of('nginx') }{values} // {};
my $httpd = $rendered{ stage_of('httpd') }{values} // {};
ok(grep({ $_ eq port_of($nginx->{NGINX_LISTEN}) } container_ports('nginx')),
   "nginx listens on $nginx->{NGINX_LISTEN}, a port compose publishes");
ok(grep({ $_ eq port_of($httpd->{HTTPD_LISTEN}) } container_ports('httpd')),
   "httpd listens on $httpd->{HTTPD_LISTEN}, a port compose exposes");

my ($up_host, $up_port) = ($nginx->{HTTPD_ADDR} // '') =~ /^([\w-]+):(\d+)$/;
is($up_host, 'httpd', 'nginx proxies to the httpd service');
is($up_port, port_of($httpd->{HTTPD_LISTEN}), 'on the port httpd listens on');

my ($be_host, $be_port) = ($httpd->{BACKEND_ADDR} // '') =~ /^([\w-]+):(\d+)$/;
is($be_host, 'backend', 'httpd proxies to the backend service');
my $be_cmd = join ' ', @{ $cmd{ stage_of('backend') } // [] };
my ($be_listen) = $be_cmd =~ /--listen \S*:(\d+)/;
is($be_port, $be_listen, 'on the port the backend is told to listen on');
ok(grep({ $_ eq ($be_listen // '') } container_ports('backend')),
   'a port compose exposes');

for my $svc (sort keys %$services) {
    for my $dep (@{ $services->{$svc}{depends_on} // [] }) {
        ok($services->{$dep}, "$svc depends on $dep, a service");
    }
}

# --- the collector

my $col = $services->{'otel-collector'} // {};
like($col->{image} // '', qr{^otel/opentelemetry-collector-contrib:\d},
     'the collector is the contrib image, at a fixed version');
my %mount;
for my $v (@{ $col->{volumes} // [] }) {
    my ($host, $inside) = split /:/, $v;
    ok(-e "$top/$host", "collector mounts $host, which exists");
    $mount{$inside} = $host;
}
my ($config_inside) = join(' ', @{ $col->{command} // [] })
                      =~ /--config=(\S+)/;
ok($config_inside && $mount{$config_inside},
   'the collector is given the mounted configuration');
my $config_path = "$top/" . ($mount{$config_inside // ''} // 'none');
my $config = load_yaml($config_path);

my $otlp_port = port_of($config->{receivers}{otlp}{protocols}{grpc}{endpoint});
ok($otlp_port, 'the collector receives OTLP/gRPC');
for my $svc (qw(nginx httpd)) {
    my ($host, $port) = ($env{$svc}{OTEL_EXPORTER_OTLP_ENDPOINT} // '')
                        =~ m{^http://([\w-]+):(\d+)$};
    is($host, 'otel-collector', "$svc exports to the collector service");
    is($port, $otlp_port, "$svc exports to the port the collector receives");
}
ok(grep({ $_ eq $otlp_port } container_ports('otel-collector')),
   'the collector publishes its OTLP port');

my $pipes = $config->{service}{pipelines} // {};
is_deeply([sort keys %$pipes], [qw(logs traces)],
          'pipelines for logs (profiles) and traces (spans)');
my %used;
for my $p (sort keys %$pipes) {
    for my $kind (qw(receivers processors exporters)) {
        for my $name (@{ $pipes->{$p}{$kind} // [] }) {
            ok(exists $config->{$kind}{$name},
               "$p pipeline: $kind $name is defined");
            $used{$kind}{$name} = 1;
        }
    }
    my @exp = @{ $pipes->{$p}{exporters} // [] };
    ok(grep({ $_ eq 'debug' } @exp), "$p pipeline: to the debug exporter");
    my ($file) = grep { m{^file(/|$)} } @exp;
    ok($file, "$p pipeline: to a file");
    my $path = $config->{exporters}{ $file // '' }{path} // '';
    my ($in) = grep { index($path, "$_/") == 0 } keys %mount;
    ok($in, "$p pipeline: the file $path is in a mounted directory");
}
for my $kind (qw(receivers processors exporters)) {
    for my $name (sort keys %{ $config->{$kind} // {} }) {
        ok($used{$kind}{$name}, "$kind $name is used by a pipeline");
    }
}
my $config_text = read_file($config_path);
like($config_text, qr/^\s*#\s*splunk_hec\/profiling:\s*$/m,
     'a commented splunk_hec/profiling exporter');
like($config_text, qr/^\s*#.*exporters:.*splunk_hec\/profiling/m,
     'and where it goes in the logs pipeline');

# --- nginx -t and apache2 -t on the same templates, for this machine

my $build = $ENV{SPANPROF_BUILD} // "$top/build";
SKIP: {
    skip 'modules not built (make build)', 4
        unless -f "$build/ngx_http_spanprof_module.so"
            && -f "$build/mod_spanprof.so";
    my %local = (
        nginx => {
            NGINX_MODULE => "$build/ngx_http_spanprof_module.so",
            NGINX_LISTEN => '127.0.0.1:' . free_port(),
            HTTPD_ADDR => '127.0.0.1:' . free_port(),
            RUN_DIR => $dir, ERROR_LOG => "$dir/nginx-error.log",
            ACCESS_LOG => "$dir/nginx-access.log",
        },
        httpd => {
            HTTPD_MODULE => "$build/mod_spanprof.so",
            APACHE_MODULES => '/usr/lib/apache2/modules',
            HTTPD_LISTEN => '127.0.0.1:' . free_port(),
            BACKEND_ADDR => '127.0.0.1:' . free_port(),
            RUN_DIR => $dir, USER => 'nobody', GROUP => 'nogroup',
            ERROR_LOG => "$dir/httpd-error.log",
            ACCESS_LOG => "$dir/httpd-access.log",
        },
    );
    my %check = (
        nginx => ['/usr/sbin/nginx', '-t', '-p', $dir, '-c',
                  "$dir/nginx.conf", '-e', "$dir/nginx-error.log"],
        httpd => ['/usr/sbin/apache2', '-t', '-f', "$dir/httpd.conf"],
    );
    for my $svc (qw(nginx httpd)) {
        my $r = $rendered{ stage_of($svc) } or next;
        my $v = $local{$svc};
        my ($rc, $out) = run_cmd({}, "$top/deploy/render.sh",
            "$top/$r->{template}", "$dir/$svc.conf",
            map { "$_=$v->{$_}" } sort keys %$v);
        is($rc, 0, "$svc: $r->{template} renders for this machine")
            or diag($out);
        # The compose environment, with an endpoint that resolves here.
        my %e = (%{ $env{$svc} },
                 OTEL_EXPORTER_OTLP_ENDPOINT => 'http://127.0.0.1:4317');
        ($rc, $out) = run_cmd(\%e, @{ $check{$svc} });
        ok($rc == 0 && $out !~ /\[(warn|emerg|alert|crit)\]|:warn\]|AH\d+:/,
           "$svc -t passes the configuration with the compose environment, "
           . 'without a warning') or diag($out);
    }
}

done_testing();
