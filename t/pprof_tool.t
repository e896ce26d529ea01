#!/usr/bin/perl
# spanprof's pprof builder against Google's pprof (`go tool pprof`, which
# nobody here wrote): t/bin/make_profile.c, built here against
# build/libspanprof_export.a (or $SPANPROF_BUILD/...), writes a profile
# with a fixed content, raw and gzipped; pprof must read both without
# complaint, and its -raw and -traces views must show the stacks in the
# right order with the right function names, files and lines, the labels
# of SPEC section 5, the sample types and period, and the mappings with
# their build ids.

use strict;
use warnings;
use lib 't/lib';
use Test::More;

use Spanprof::Server qw(top_dir new_dir);

my $go = `sh -c 'command -v go' 2>/dev/null`;
chomp $go;
plan skip_all => 'go (Debian golang-go) is not installed: make deps'
    unless $go;

my $top = top_dir();
my $dir = new_dir();
my $build = $ENV{SPANPROF_BUILD} // "$top/build";
my $DRIVER = "$dir/make_profile";

# pprof keeps nothing in the user's home, and finds no real binary.
$ENV{HOME} = $dir;
$ENV{PPROF_TMPDIR} = $dir;
$ENV{PPROF_BINARY_PATH} = "$dir/no-binaries";

{
    my @libs = split ' ', `pkg-config --libs grpc libprotobuf-c zlib libdw`;
    my @cmd = ('cc', '-std=c11', '-D_GNU_SOURCE', '-O1', '-Wall', '-Wextra',
               '-Werror', "-I$top/core/include", "$top/t/bin/make_profile.c",
               "$build/libspanprof_export.a", "$build/libspanprof_core.a",
               @libs, '-lelf', '-lpthread', '-lm', '-o', $DRIVER);
    my $out = `@cmd 2>&1`;
    ok($? == 0 && -x $DRIVER,
       'make_profile builds against the exporter archive')
        or BAIL_OUT("cannot build t/bin/make_profile.c (make build first?):\n"
                    . $out);
}

my $made = `$DRIVER $dir/p.pb $dir/p.pb.gz 2>&1`;
is($?, 0, 'make_profile writes the profiles') or diag($made);
my ($frames) = $made =~ /^frames (\d+)$/m;
is($frames, 13, 'the builder counts 13 frames (3 + 4 + 3 + 3)');

# Runs go tool pprof; returns (exit status, stdout, stderr).
sub pprof {
    my @args = @_;
    my $out = "$dir/pprof.out";
    my $err = "$dir/pprof.err";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or die;
        open STDERR, '>', $err or die;
        exec 'go', 'tool', 'pprof', @args or die "exec: $!";
    }
    waitpid($pid, 0);
    my $rc = $? >> 8;
    local $/;
    open my $o, '<', $out or die;
    open my $e, '<', $err or die;
    return ($rc, scalar <$o>, scalar <$e>);
}

# pprof's complaints about a profile it cannot read; a missing binary for
# symbolization is expected (the mapping paths are made up).
sub no_complaint {
    my ($err, $what) = @_;
    my @bad = grep { !/Local\ symbolization\ failed
                       |binary\ filenames\ not\ available
                       |PPROF_BINARY_PATH|^\s*$/x }
              split /\n/, $err;
    ok(!@bad, "$what: pprof does not complain") or diag($err);
}

# --- -raw: the profile as pprof decoded it

my ($rc, $raw, $err) = pprof('-raw', "$dir/p.pb");
is($rc, 0, 'pprof -raw reads the profile') or diag($err);
no_complaint($err, '-raw');

my ($rcz, $rawz, $errz) = pprof('-raw', "$dir/p.pb.gz");
is($rcz, 0, 'pprof -raw reads the gzipped profile') or diag($errz);
is($rawz, $raw, 'the gzipped profile is the same profile');

like($raw, qr/^PeriodType: cpu nanoseconds$/m, 'period type cpu/nanoseconds');
like($raw, qr/^Period: 10000000$/m, 'period: the 10 ms interval in ns');
like($raw, qr/^samples\/count cpu\/nanoseconds$/m,
     'sample types samples/count and cpu/nanoseconds');
like($raw, qr/^Duration: 30ms$/m, 'duration from the first to the last');

# Samples: "   1   10000000: 1 2 3 " then label lines.
my (@samples, $section);
my (%locations, $last_loc, @mappings);
for my $line (split /\n/, $raw) {
    if ($line =~ /^(Samples|Locations|Mappings)/) { $section = $1; next }
    next unless $section;
    if ($section eq 'Samples') {
        if ($line =~ /^\s+(\d+)\s+(\d+): ([\d ]+?)\s*$/) {
            push @samples, { values => "$1 $2", ids => [split ' ', $3],
                             labels => {} };
        } elsif (@samples && $line =~ /^\s+\S+:\[/) {
            while ($line =~ /([\w.]+):\[([^\]]*)\]/g) {
                $samples[-1]{labels}{$1} = $2;
            }
        }
    } elsif ($section eq 'Locations') {
        if ($line =~ /^\s+(\d+): (0x[0-9a-f]+) M=(\d+) (\S+) (\S+) s=0$/) {
            $last_loc = $1;
            $locations{$1} = { address => $2, mapping => $3,
                               lines => ["$4 $5"] };
        } elsif (defined $last_loc && $line =~ /^\s+(\S+) (\S+) s=0$/) {
            push @{ $locations{$last_loc}{lines} }, "$1 $2";
        }
    } elsif ($section eq 'Mappings') {
        push @mappings, $line if $line =~ /\S/;
    }
}

is(scalar @samples, 4, 'four samples');
is_deeply([map { $_->{values} } @samples],
          ['1 10000000', '1 40000000', '1 10000000', '1 10000000'],
          'each sample: one sample, its weight in periods of cpu (the '
          . 'second missed 3 expirations)');
my $ids = 0;
$ids += @{ $_->{ids} } for @samples;
is($ids, $frames, 'the frame count is the locations of the samples');

# A sample's stack as pprof resolves it: every line of every location,
# leaf first (inlined functions before the function they are in).
sub stack {
    my ($s) = @_;
    return [map { @{ $locations{$_}{lines} } } @{ $s->{ids} }];
}

my @handler = ('ngx_inner src/core/ngx_inner.h:7',
               'ngx_process_events src/event/ngx_event.c:120',
               'ngx_worker_process_cycle src/os/unix/ngx_process_cycle.c:790',
               'main src/core/nginx.c:383');
is_deeply(stack($samples[0]), \@handler,
          'sample 1: the stack, leaf first, with the inlined call');
is_deeply(stack($samples[1]), ['unknown unknown:0', @handler],
          'sample 2: a frame nobody could name is "unknown", line 0');
my @phases = ('ngx_http_handler src/http/ngx_http_core_module.c:850',
              'ngx_http_core_run_phases src/http/ngx_http_core_module.c:878',
              'main src/core/nginx.c:383');
is_deeply(stack($samples[2]), \@phases, 'sample 3: its stack');
is_deeply($samples[3]{ids}, $samples[2]{ids},
          'the same stack twice uses the same locations');

is_deeply($samples[0]{labels}, {
    'source.event.time' => '1700000000123',
    'source.event.period' => '10',
    trace_id => '0102030405060708090a0b0c0d0e0f10',
    span_id => 'a1a2a3a4a5a6a7a8',
    'thread.id' => '4242',
    'thread.os.id' => '4242',
    'thread.name' => 'nginx',
    'thread.state' => 'running',
}, 'sample 1: the labels of SPEC section 5, with the span');
is_deeply($samples[1]{labels}, {
    'source.event.time' => '1700000000133',
    'source.event.period' => '10',
    'thread.id' => '4243',
    'thread.os.id' => '4243',
    'thread.name' => 'nginx',
    'thread.state' => 'blocked',
    'thread.stack.truncated' => 'true',
}, 'sample 2: no span ids without a span; truncated says so');
is_deeply($samples[2]{labels}, {
    'source.event.time' => '1700000000143',
    'source.event.period' => '10',
    'thread.id' => '4244',
    'thread.os.id' => '4244',
    'thread.name' => 'nginx',
}, 'sample 3: no thread.state when it is not known');

is(scalar @mappings, 2, 'two mappings');
like($mappings[0], qr{^1:\ 0x555555554000/0x555555654000/0x0
                      \ /opt/spanprof-test/sbin/nginx
                      \ 00112233445566778899aabbccddeeff01234567
                      \ \[FN\]\[FL\]\[LN\]\[IN\]$}x,
     'nginx: range, path, build id; functions, files, lines, inlines known');
like($mappings[1], qr{^2:\ 0x7ffff7c00000/0x7ffff7d80000/0x28000
                      \ /opt/spanprof-test/lib/libc\.so\.6\ cafef00d\s*$}x,
     'libc: range, offset, path, build id; not all named, so no [FN]');
is($locations{ $samples[1]{ids}[0] }{mapping}, 2,
   'the unnamed frame keeps its mapping');
is($locations{ $samples[1]{ids}[0] }{address}, '0x7ffff7d1e456',
   'and its address, to be named later');

# --- -traces: what a person reads

my ($rct, $traces, $errt) = pprof('-traces', "$dir/p.pb.gz");
is($rct, 0, 'pprof -traces reads the profile') or diag($errt);
no_complaint($errt, '-traces');
like($traces, qr/^Type: cpu$/m, 'type cpu');

my @blocks = grep { /\S/ && !/^File:/m }
             split /^-----------\+-+\n/m, $traces;
is(scalar @blocks, 4, 'four traces');
my @stacks = map {
    my @f;
    for my $l (split /\n/) {
        push @f, $1 if $l =~ /^\s+(?:\d+ms\s+)?([A-Za-z_]\w*(?: \(inline\))?)$/;
    }
    \@f;
} @blocks;
is_deeply($stacks[0], ['ngx_inner (inline)', 'ngx_process_events',
                       'ngx_worker_process_cycle', 'main'],
          'trace 1, top of stack first');
is_deeply($stacks[1], ['unknown', 'ngx_inner (inline)', 'ngx_process_events',
                       'ngx_worker_process_cycle', 'main'], 'trace 2');
is_deeply($stacks[2], ['ngx_http_handler', 'ngx_http_core_run_phases',
                       'main'], 'trace 3');
like($blocks[0], qr/^\s*trace_id:\s+0102030405060708090a0b0c0d0e0f10$/m,
     'trace 1 shows its trace_id');
like($blocks[0], qr/^\s*span_id:\s+a1a2a3a4a5a6a7a8$/m,
     'trace 1 shows its span_id');
like($blocks[1], qr/^\s*thread\.stack\.truncated:\s+true$/m,
     'trace 2 shows it was truncated');
unlike($blocks[1], qr/trace_id/, 'trace 2 has no trace_id');
like($blocks[0], qr/^\s+10ms\s+ngx_inner/m, 'each sample weighs 10ms');

done_testing();
