package Spanprof::ConfigChecks;

# The configuration checks both servers must pass, written once. Each test
# file hands in a driver for its server:
#   name       "nginx" or "apache2", for test names
#   column     index of the server's directive name in Settings.pm rows
#   conf       sub ($dir, $directives_text) -> $port: writes the config
#   check      sub ($dir, %env) -> ($rc, $output): the configuration test
#   start      sub ($dir, $port, %env) -> $pid
#   emerg      sub ($directive, $shown_value) -> qr// for a bad directive
#   empty      sub ($directive) -> qr// for an empty argument, or undef

use strict;
use warnings;

use Test::More;

use Spanprof::Server qw(stop wait_for_log read_file http_get);
use Spanprof::Settings qw(settings);

use Exporter 'import';
our @EXPORT_OK = qw(check_loads check_directives check_bad_environment
                    check_clamp check_switches check_startup_line
                    startup_log);

my $SECRET = '(not shown: it holds secrets)';

# As messages quote a value: its first 64 bytes, then "...".
sub shown {
    my ($env, $value) = @_;
    return $SECRET if $env eq 'OTEL_EXPORTER_OTLP_HEADERS';
    return length $value > 64 ? '"' . substr($value, 0, 64) . '..."'
                              : qq{"$value"};
}

sub env_form {
    my ($v) = @_;
    return { on => 'true', off => 'false' }->{$v} // $v;
}

sub check_loads {
    my ($d, $dir) = @_;
    my $port = $d->{conf}->($dir, '');
    my ($rc, $out) = $d->{check}->($dir);
    is($rc, 0, "$d->{name} -t passes with only the module loaded")
        or diag $out;

    my $pid = $d->{start}->($dir, $port);
    ok($pid, "$d->{name} starts with the module")
        or diag read_file("$dir/stderr.log") . read_file("$dir/error.log");
    my ($status) = http_get($port, '/');
    is($status, 200, 'and serves a request');
    stop($pid);
}

# Good values pass; bad values fail, naming directive, value and allowed.
sub check_directives {
    my ($d, $dir, @settings) = @_;
    for my $s (@settings) {
        my ($env, $good, $bad) = @$s[0, 3, 4];
        my $name = $s->[$d->{column}];

        for my $v (@$good) {
            $d->{conf}->($dir, "$name $v");
            my ($rc, $out) = $d->{check}->($dir);
            is($rc, 0, "$name $v passes") or diag $out;
        }
        for my $v (@$bad) {
            $d->{conf}->($dir, "$name $v");
            my ($rc, $out) = $d->{check}->($dir);
            isnt($rc, 0, "$name $v fails");
            if ($v eq '""' && $d->{empty}) {
                like($out, $d->{empty}->($name),
                     "$name \"\": the server says an argument is needed");
                next;
            }
            my $shown = $v eq '""' ? '""' : shown($env, $v);
            like($out, $d->{emerg}->($name, $shown),
                 "$name $v: the message names directive, value, allowed");
        }
    }
}

# A bad variable warns, names it, and does not fail the test.
sub check_bad_environment {
    my ($d, $dir, @settings) = @_;
    for my $s (@settings) {
        my ($env, $bad) = @$s[0, 4];
        next if $bad->[0] eq '""';  # an empty variable counts as unset
        $d->{conf}->($dir, '');
        my ($rc, $out) = $d->{check}->($dir, $env => $bad->[0]);
        is($rc, 0, "bad $env does not fail $d->{name} -t") or diag $out;
        my $shown = shown($env, $bad->[0]);
        like($out, qr/spanprof: invalid value \Q$shown\E in environment variable \Q$env\E, allowed: .*; using the default/,
             "bad $env warns");
    }
}

# A probability above the limit is clamped with a warning, from a directive
# or from the environment, and the warning reads like every other line of
# the module: "spanprof: " first.
sub check_clamp {
    my ($d, $dir, @settings) = @_;
    my $env = 'SPLUNK_SNAPSHOT_SELECTION_PROBABILITY';
    my ($row) = grep { $_->[0] eq $env } @settings;
    my $name = $row->[$d->{column}];
    my $tail = qr/is above the maximum 0\.10 and is clamped to 0\.10/;

    $d->{conf}->($dir, "$name 0.5");
    my ($rc, $out) = $d->{check}->($dir);
    is($rc, 0, "$name 0.5 passes") or diag $out;
    like($out, qr/spanprof: value "0\.5" in "\Q$name\E" directive $tail/,
         "$name 0.5: clamped, said with the module's prefix");

    $d->{conf}->($dir, '');
    ($rc, $out) = $d->{check}->($dir, $env => '0.5');
    like($out, qr/spanprof: value "0\.5" of environment variable \Q$env\E(?x)
         \s $tail/, "$env=0.5: clamped, said with the module's prefix");
}

# The two server-wide switches, the on/off directive at the top level and
# OTEL_SDK_DISABLED, set both ways or under an inner scope's "on": one
# warning says which wins. $inner->($dir, $top) writes a configuration
# with the on directive in an inner scope, and $top (a directive line, or
# '') at the top level.
sub check_switches {
    my ($d, $dir, $inner, @settings) = @_;
    my ($row) = grep { $_->[0] eq 'OTEL_SDK_DISABLED' } @settings;
    my $name = $row->[$d->{column}];
    my %off = (OTEL_SDK_DISABLED => 'true');
    my $wins = qr/spanprof: "\Q$name\E on" [^"]* overrides the environment/i;
    $wins = qr/$wins variable OTEL_SDK_DISABLED=true: spanprof is on/;
    my $no_effect = qr/spanprof: "\Q$name\E on" in [^"]+ has no effect:/i;

    $d->{conf}->($dir, "$name on");
    my ($rc, $out) = $d->{check}->($dir, %off);
    is($rc, 0, "$name on with OTEL_SDK_DISABLED=true passes") or diag $out;
    is(() = $out =~ /\[(?:spanprof:)?warn\][^\n]*$wins/g, 1,
       '... one warning, that the directive wins') or diag $out;
    my $log = startup_log($d, $dir, "$name on", %off);
    like($log, qr/$wins/, '... at startup too');
    like($log, qr/configuration: OTEL_SDK_DISABLED=false \(directive\)/,
         '... and the directive does win');

    $inner->($dir, '');
    ($rc, $out) = $d->{check}->($dir, %off);
    like($out, qr/$no_effect the environment variable OTEL_SDK_DISABLED=true/,
         "$name on inside, OTEL_SDK_DISABLED=true: said to have no effect");
    like($out, qr/OTEL_SDK_DISABLED=true turns spanprof off for the whole/,
         '... saying why');

    $inner->($dir, "$name off");
    ($rc, $out) = $d->{check}->($dir);
    like($out, qr/$no_effect "\Q$name\E off" [^"]* turns spanprof off/i,
         "$name on inside, off at the top: said to have no effect");

    for my $case ([ "$name on", 'false' ], [ '', '' ]) {
        $inner->($dir, $case->[0]);
        ($rc, $out) = $d->{check}->($dir,
                                    OTEL_SDK_DISABLED => $case->[1]);
        unlike($out, qr/$wins|$no_effect/,
               "no warning where nothing is at odds ('$case->[0]', "
               . "OTEL_SDK_DISABLED='$case->[1]')");
    }
}

sub startup_log {
    my ($d, $dir, $directives, %env) = @_;
    my $port = $d->{conf}->($dir, $directives);
    unlink "$dir/error.log";
    my $pid = $d->{start}->($dir, $port, %env);
    my $log = wait_for_log("$dir/error.log", qr/spanprof \S+ configuration:/);
    stop($pid);
    ok($log, "$d->{name}: startup line logged")
        or diag read_file("$dir/stderr.log");
    return $log // '';
}

# The startup line: each variable when no directive is set, each directive
# over its variable; header values never shown; logged once.
sub check_startup_line {
    my ($d, $dir, @settings) = @_;
    my %env = map { $_->[0] => env_form($_->[3][0]) } @settings;
    $env{OTEL_SDK_DISABLED} = 'false';
    $env{SPLUNK_SNAPSHOT_SAMPLING_INTERVAL} = '20';
    $env{OTEL_EXPORTER_OTLP_HEADERS} = 'X-SF-Token=topsecret';
    $env{SPLUNK_PROFILER_ENABLED} = 'maybe';

    my $log = startup_log($d, $dir, '', %env);
    my ($line) = $log =~ /(\[(?:spanprof:)?notice\] .*spanprof \S+ configuration:.*)/;
    ok($line, 'at notice level');
    $line //= '';
    for my $s (@settings) {
        next if $s->[0] eq 'SPLUNK_PROFILER_ENABLED';
        like($line, qr/\Q$s->[0]\E=[^()]* \(env\)/, "$s->[0] taken from env");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=20ms \(env\)/,
         'with the value of the variable');
    like($line, qr/SPLUNK_PROFILER_ENABLED=false,/,
         'a bad variable leaves the default');
    is(() = $log =~ /invalid value "maybe" in environment variable/g, 1,
       'and is warned about once');
    unlike($log, qr/topsecret/, 'header values are never logged');
    like($line, qr/OTEL_EXPORTER_OTLP_HEADERS=X-SF-Token=\*\*\* \(env\)/,
         'header names are, with the values masked');
    is(() = $log =~ /configuration:/g, 1, 'the line is logged once');

    my $directives = join "\n",
        map { "$_->[$d->{column}] $_->[3][-1]" } @settings;
    $directives =~ s/(snapshot_?sampling_?interval) \S+/$1 30/i;
    $log = startup_log($d, $dir, $directives, %env);
    ($line) = $log =~ /(spanprof \S+ configuration:.*)/;
    $line //= '';
    for my $s (@settings) {
        like($line, qr/\Q$s->[0]\E=[^()]* \(directive\)/,
             "$s->[$d->{column}] wins over $s->[0]");
    }
    like($line, qr/SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=30ms \(directive\)/,
         'with the value of the directive');

    $d->{conf}->($dir, '');
    my (undef, $out) = $d->{check}->($dir);
    unlike($out, qr/configuration:/,
           "$d->{name} -t prints no startup line: a test is not a startup");
}

1;
