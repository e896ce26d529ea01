#!/usr/bin/perl
# build/spanprof-dump end to end, checked against Google's pprof (`go tool
# pprof`, which nobody here wrote) reading the same profiles:
#
# - profiles made by spanprof's own builders: t/bin/make_profile.c (the
#   fixed profile of t/pprof_tool.t) wrapped into an OTLP/JSON logs line by
#   t/bin/otlp_json_logs.c (sp_otlp and the console exporter's sp_otlp_json);
# - a real console exporter line of nginx under load (the fuzz seed
#   core/fuzz/corpus/dump_json/console_2.json), whose profiles are taken
#   out of the JSON here with Perl's own base64 and gunzip for pprof.
#
# Its folded stacks must be the stacks of `pprof -raw`, root first, with
# the same counts (all samples, and one trace's with --trace against
# pprof's -tagfocus); its top table the flat and cum of `pprof -top`;
# --list the traces of the samples' trace_id labels; --svg a flame graph
# with a box per function and its count. Then the command line's errors.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use JSON::PP ();
use MIME::Base64 qw(decode_base64);

use Spanprof::Server qw(top_dir new_dir read_file write_file);

my $go = `sh -c 'command -v go' 2>/dev/null`;
chomp $go;
plan skip_all => 'go (Debian golang-go) is not installed: make deps'
    unless $go;

my $top = top_dir();
my $dir = new_dir();
my $build = $ENV{SPANPROF_BUILD} // "$top/build";
my $DUMP = "$build/spanprof-dump";
ok(-x $DUMP, 'build/spanprof-dump is built') or BAIL_OUT('make build first');

$ENV{HOME} = $dir;
$ENV{PPROF_TMPDIR} = $dir;
$ENV{PPROF_BINARY_PATH} = "$dir/no-binaries";

# Runs a command; returns (exit status, stdout, stderr).
sub run {
    my @cmd = @_;
    my ($out, $err) = ("$dir/run.out", "$dir/run.err");
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or die;
        open STDERR, '>', $err or die;
        exec @cmd or die "exec $cmd[0]: $!";
    }
    waitpid($pid, 0);
    return ($? >> 8, read_file($out), read_file($err));
}

sub build_driver {
    my ($name) = @_;
    my @libs = split ' ', `pkg-config --libs grpc libprotobuf-c zlib libdw`;
    my ($rc, $out, $err) = run('cc', '-std=c11', '-D_GNU_SOURCE', '-O1',
        '-Wall', '-Wextra', '-Werror', "-I$top/core/include",
        "$top/t/bin/$name.c", "$build/libspanprof_export.a",
        "$build/libspanprof_core.a", @libs, '-lelf', '-lpthread', '-lm',
        '-o', "$dir/$name");
    ok($rc == 0, "t/bin/$name.c builds") or BAIL_OUT("$out$err");
    return "$dir/$name";
}

# --- pprof's view

# Folded stacks from `pprof -raw` (samples/count, the first value): each
# sample's locations leaf first, each location's lines innermost first,
# reversed to root first; equal stacks summed.
# Folded stacks of a profile as pprof -raw reads it: samples, or with
# value => 'cpu' the nanoseconds of cpu each stands for.
sub pprof_folded {
    my ($profile, @opts) = @_;
    my $cpu = @opts && $opts[0] eq 'cpu' ? shift @opts : '';
    my ($rc, $raw, $err) = run('go', 'tool', 'pprof', '-raw', @opts,
                               $profile);
    is($rc, 0, "pprof -raw @opts reads it") or diag($err);
    my (@samples, %loc, $section, $last);
    for my $line (split /\n/, $raw) {
        if ($line =~ /^(Samples|Locations|Mappings)/) { $section = $1; next }
        next unless $section;
        if ($section eq 'Samples'
            && $line =~ /^\s+(\d+)\s+(\d+): ([\d ]+?)\s*$/)
        {
            push @samples, [$cpu ? $2 : $1, split ' ', $3];
        } elsif ($section eq 'Locations') {
            if ($line =~ /^\s+(\d+): 0x[0-9a-f]+ M=\d+ (\S+) \S+ s=\d+$/) {
                $last = $1;
                $loc{$1} = [$2];
            } elsif (defined $last && $line =~ /^\s+(\S+) \S+ s=\d+$/) {
                push @{ $loc{$last} }, $1;
            }
        }
    }
    my %folded;
    for my $s (@samples) {
        my ($count, @ids) = @$s;
        my @leaf_first = map { @{ $loc{$_} // ['?'] } } @ids;
        $folded{ join ';', reverse @leaf_first } += $count;
    }
    return \%folded;
}

# flat and cum per function from `pprof -top`, counted in samples.
sub pprof_top {
    my (@profiles) = @_;
    my ($rc, $out, $err) = run('go', 'tool', 'pprof', '-top',
        '-sample_index=samples', '-nodecount=100000', '-nodefraction=0',
        '-edgefraction=0', @profiles);
    is($rc, 0, 'pprof -top reads it') or diag($err);
    my %top;
    for (split /\n/, $out) {
        next unless /^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+?)$/;
        my ($flat, $cum, $name) = ($1, $2, $3);
        $top{ $name =~ s/ \(inline\)$//r } = "$flat $cum";
    }
    return \%top;
}

# --- spanprof-dump's view

sub dump_folded {
    my ($rc, $out, $err) = run($DUMP, '--folded', @_);
    is($rc, 0, "spanprof-dump --folded @_[0 .. $#_ - 1]") or diag($err);
    my %folded;
    for (split /\n/, $out) {
        /^(.*) (\d+)$/ or do { fail("folded line: $_"); next };
        $folded{$1} += $2;
    }
    return \%folded;
}

sub dump_top {
    my ($rc, $out, $err) = run($DUMP, '--top=100000', @_);
    is($rc, 0, 'spanprof-dump --top') or diag($err);
    my %top;
    for (split /\n/, $out) {
        next unless /^\s*(\d+)\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+)$/;
        $top{$3} = "$1 $2";
    }
    return \%top;
}

# --- 1: the fixed profile of t/pprof_tool.t, in a console exporter line

my $make_profile = build_driver('make_profile');
my $otlp_json = build_driver('otlp_json_logs');
my ($rc, $out, $err) = run($make_profile, "$dir/p.pb", "$dir/p.pb.gz");
is($rc, 0, 'make_profile writes the profile') or diag($out . $err);
($rc, $out, $err) = run($otlp_json, 'shop', 'snapshot', "$dir/p.pb");
is($rc, 0, 'otlp_json_logs wraps it in an OTLP/JSON line') or diag($err);
write_file("$dir/p.jsonl", $out);
like($out, qr/^\{"resourceLogs":.*"pprof-gzip-base64"/,
     'a logs request with a pprof-gzip-base64 record');

my $want = pprof_folded("$dir/p.pb");
is(scalar keys %$want, 3, 'pprof -raw: three distinct stacks');
is_deeply(dump_folded("$dir/p.jsonl"), $want,
          'folded stacks: the stacks and counts pprof -raw shows');
is_deeply($want, {
    'main;ngx_http_core_run_phases;ngx_http_handler' => 2,
    'main;ngx_worker_process_cycle;ngx_process_events;ngx_inner' => 1,
    'main;ngx_worker_process_cycle;ngx_process_events;ngx_inner;unknown'
        => 1,
}, 'and those are the stacks make_profile made, root first');

my $trace = '0102030405060708090a0b0c0d0e0f10';
my $want_trace = pprof_folded("$dir/p.pb", "-tagfocus=trace_id=$trace");
is_deeply(dump_folded("--trace=$trace", "$dir/p.jsonl"), $want_trace,
          '--trace: the samples pprof -tagfocus=trace_id keeps');
is_deeply($want_trace,
          { 'main;ngx_worker_process_cycle;ngx_process_events;ngx_inner' => 1 },
          'one sample has that trace');

my $ptop = pprof_top("$dir/p.pb");
is(scalar keys %$ptop, 7, 'pprof -top: seven functions');
is_deeply(dump_top("$dir/p.jsonl"), $ptop,
          'top: every function with the flat and cum of pprof -top');

my $cpu = dump_folded('--value=cpu', "$dir/p.jsonl");
is_deeply($cpu, pprof_folded("$dir/p.pb", 'cpu'),
          '--value=cpu: the cpu nanoseconds pprof reads for each stack');
is($cpu->{'main;ngx_worker_process_cycle;ngx_process_events;ngx_inner;'
          . 'unknown'}, 40_000_000,
   '--value=cpu: a sample of weight 4 (3 missed expirations) is 40 ms');

($rc, $out, $err) = run($DUMP, '--list', '--spans', "$dir/p.jsonl");
is($rc, 0, '--list runs');
is($out, "trace $trace  samples 1  cpu 10.00 ms  spans 0\n",
   '--list: the one trace among the samples\' trace_id labels');

is_deeply(dump_folded('--service=shop', '--source=snapshot', '--by-service',
                      "$dir/p.jsonl"),
          +{ map { ("shop;$_" => $want->{$_}) } keys %$want },
          '--service, --source and --by-service (service.name as root)');
is_deeply(dump_folded('--source=continuous', "$dir/p.jsonl"), {},
          '--source=continuous: none of these');

($rc, $out, $err) = run($DUMP, "--svg=$dir/p.svg", "$dir/p.jsonl");
is($rc, 0, '--svg writes a flame graph') or diag($err);
my $svg = read_file("$dir/p.svg");
like($svg, qr{^<\?xml .*<svg xmlns="http://www.w3.org/2000/svg".*</svg>\n\z}s,
     'an SVG document');
for my $name (keys %$ptop) {
    my (undef, $cum) = split ' ', $ptop->{$name};
    like($svg, qr{<title>\Q$name\E \($cum samples, },
         "the flame graph has $name with its $cum samples");
}
($rc, $out) = run($DUMP, '--svg=-', "--trace=$trace", "$dir/p.jsonl");
like($out, qr{<title>ngx_inner \(1 samples, 100\.00%\)}, '--svg=- with --trace');
unlike($out, qr{ngx_http_handler}, 'holds only that trace\'s frames');

# --- 2: a real console exporter line (nginx under load)

my $real = "$top/core/fuzz/corpus/dump_json/console_2.json";
my $req = JSON::PP->new->decode(read_file($real));
my @bodies;
for my $rl (@{ $req->{resourceLogs} }) {
    for my $sl (@{ $rl->{scopeLogs} }) {
        push @bodies, map { $_->{body}{stringValue} } @{ $sl->{logRecords} };
    }
}
ok(@bodies >= 1, 'the real line holds profiles');
my %real_want;
for my $i (0 .. $#bodies) {
    my $gz = decode_base64($bodies[$i]);
    my $pb;
    gunzip(\$gz => \$pb) or die $GunzipError;
    write_file("$dir/real$i.pb", $pb);
    my $f = pprof_folded("$dir/real$i.pb");
    $real_want{$_} += $f->{$_} for keys %$f;
}
ok(keys %real_want > 3, 'real: pprof -raw shows several stacks');
is_deeply(dump_folded($real), \%real_want,
          'real: folded stacks as pprof -raw shows them');
# pprof merges the profiles it is given, as spanprof-dump does a line's.
is_deeply(dump_top($real), pprof_top(map { "$dir/real$_.pb" } 0 .. $#bodies),
          'real: top as pprof -top shows it');

# --- the command line

($rc, $out, $err) = run($DUMP, '--trace=xyz', $real);
is($rc, 2, 'a bad --trace is a usage error');
like($err, qr/--trace wants 32 hex digits/, 'and says why');
($rc, $out, $err) = run($DUMP, '--folded', '--top', $real);
is($rc, 2, 'two things to print is a usage error');
($rc, $out, $err) = run($DUMP, "$dir/missing.jsonl");
is($rc, 1, 'a missing file fails');
like($err, qr/missing\.jsonl: No such file/, 'naming it');

write_file("$dir/mixed.jsonl", "garbage\n" . read_file("$dir/p.jsonl"));
($rc, $out, $err) = run($DUMP, '--folded', "$dir/mixed.jsonl");
is($rc, 0, 'a line that is not OTLP/JSON is skipped');
like($err, qr/mixed\.jsonl:1: not OTLP\/JSON, skipped/, 'with a warning');
is(scalar(() = $out =~ /\n/g), 3, 'and the rest is read');
($rc, $out, $err) = run($DUMP, '--strict', '--folded', "$dir/mixed.jsonl");
is($rc, 1, '--strict stops there');

($rc, $out) = run($DUMP, '--help');
is($rc, 0, '--help');
like($out, qr/^usage: spanprof-dump/, 'prints the usage');

done_testing();
