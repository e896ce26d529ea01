package Spanprof::Receiver;

# The independent OTLP/gRPC test receiver (t/receiver/receiver.js: grpc-js,
# otlp-transformer's generated decoders, pprof-format): start it on a
# port, tell it how to answer, read back what it decoded, stop it. Every
# receiver started here is stopped when its object goes away, and at the
# latest when the test process ends, pass or fail.

use strict;
use warnings;

use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use Spanprof::Server qw(top_dir free_port read_file write_file);

use Exporter 'import';
our @EXPORT_OK = qw(attribute self_signed);

my %running;    # pid => 1, for the END block
my $serial = 0;

# undef when the receiver can run, else why not (for skip_all).
sub unavailable {
    my $recv = top_dir() . '/t/receiver';
    return 'node is not installed' if system('node --version >/dev/null 2>&1');
    return "no $recv/node_modules: run make deps (npm ci in t/receiver)"
        unless -d "$recv/node_modules/\@grpc/grpc-js"
            && -d "$recv/node_modules/\@opentelemetry/otlp-transformer"
            && -d "$recv/node_modules/pprof-format";
    return undef;
}

# skip_unless_ready(curl => 1, openssl => 1, apache2 => 1,
#                   apache_modules => ['http2', ...]): plan skip_all, with
# the reason of the first thing missing, unless the receiver and what is
# named can run. Most tests opened with the same lines of these checks;
# one place keeps their order and their reasons alike. Checks a test
# alone makes stay in that test.
sub skip_unless_ready {
    my (%need) = @_;
    my $mods = '/usr/lib/apache2/modules';
    # Loaded here, not at the top: the bench scripts use this module too.
    my $skip = sub { require Test::More; Test::More::plan(skip_all => $_[0]) };
    my $why = unavailable();

    $skip->($why) if $why;
    $skip->('curl is not installed')
        if $need{curl} && system('curl --version >/dev/null');
    $skip->('openssl is not installed')
        if $need{openssl} && system('openssl version >/dev/null 2>&1');
    $skip->('apache2 is not installed')
        if $need{apache2} && !-x '/usr/sbin/apache2';
    for (@{ $need{apache_modules} // [] }) {
        $skip->("no mod_$_ in $mods") unless -r "$mods/mod_$_.so";
    }
}

# A self-signed certificate for localhost, for tls => [...]: returns
# ($cert_pem, $key_pem) in $dir, readable by the servers' workers, or ()
# when openssl is missing or fails.
sub self_signed {
    my ($dir, $name) = @_;
    $name //= 'collector';
    return () if system('openssl version >/dev/null 2>&1');
    my @files = ("$dir/$name.pem", "$dir/$name.key");
    system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
           . " -nodes -days 2 -subj /CN=localhost -addext"
           . " subjectAltName=DNS:localhost,IP:127.0.0.1"
           . " -keyout $files[1] -out $files[0] >/dev/null 2>&1") == 0
        or return ();
    chmod 0644, @files;
    return @files;
}

# Spanprof::Receiver->start(dir => $dir, %options). Options:
#   port     listen here (default: a free port)
#   host     address to bind (default 127.0.0.1)
#   tls      [$cert_pem, $key_pem]
#   args     extra receiver.js arguments, e.g. [--status => 'UNAVAILABLE']
#   control  a plan written to the control file before start (see control)
#   wait     0: return without waiting for "listening" (default 1)
# Dies with the receiver's stderr if it does not listen within 15 s.
sub start {
    my ($class, %o) = @_;
    my $dir = $o{dir} or die 'dir is required';
    my $n = ++$serial;
    my $self = bless {
        dir     => $dir,
        port    => $o{port} // free_port(),
        out     => "$dir/receiver-$n.jsonl",
        control => "$dir/receiver-$n.control",
        stdout  => "$dir/receiver-$n.stdout",
        stderr  => "$dir/receiver-$n.stderr",
    }, $class;
    write_file($self->{out}, '');
    $self->control(%{ $o{control} // {} });
    my @cmd = ('node', top_dir() . '/t/receiver/receiver.js',
               '--port', $self->{port}, '--out', $self->{out},
               '--control', $self->{control},
               '--host', $o{host} // '127.0.0.1');
    push @cmd, '--tls-cert', $o{tls}[0], '--tls-key', $o{tls}[1] if $o{tls};
    push @cmd, @{ $o{args} // [] };

    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $self->{stdout};
        open STDERR, '>', $self->{stderr};
        exec @cmd or die "exec node: $!";
    }
    $running{$pid} = 1;
    $self->{pid} = $pid;
    return $self if defined $o{wait} && !$o{wait};
    $self->wait_listening(15) and return $self;
    my $err = read_file($self->{stderr});
    $self->stop;
    die "the receiver did not start on port $self->{port}: $err";
}

sub wait_listening {
    my ($self, $timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        return 1 if read_file($self->{stdout}) =~ /^listening (\d+)$/m;
        if (waitpid($self->{pid}, WNOHANG) == $self->{pid}) {
            delete $running{ delete $self->{pid} };
            return 0;
        }
        sleep 0.02;
    }
    return 0;
}

sub port   { $_[0]{port} }

# The environment of a server whose selected requests are sampled every
# interval ms and whose spans reach this receiver within about
# schedule_delay ms: (name => value, ...) for nginx_start and the like.
# Keys: interval (default 1), export_interval (profiles, default 300),
# schedule_delay (spans, default 100).
sub snapshot_env {
    my ($self, %o) = @_;
    return (SPLUNK_SNAPSHOT_PROFILER_ENABLED  => 'true',
            SPLUNK_SNAPSHOT_SAMPLING_INTERVAL => $o{interval} // '1',
            SPLUNK_PROFILER_EXPORT_INTERVAL   => $o{export_interval} // '300',
            OTEL_EXPORTER_OTLP_ENDPOINT       => 'http://127.0.0.1:'
                                                 . $self->{port},
            OTEL_BSP_SCHEDULE_DELAY           => $o{schedule_delay} // '100');
}
sub pid    { $_[0]{pid} }
sub stderr { read_file($_[0]{stderr}) }

# Replaces the control file (a rename, so the receiver never reads half
# of it). control() with no arguments: answer OK again.
sub control {
    my ($self, %plan) = @_;
    my $tmp = "$self->{control}.tmp";
    write_file($tmp, JSON::PP->new->canonical->encode(\%plan));
    rename $tmp, $self->{control} or die "rename $tmp: $!";
}

# Every request recorded so far, decoded from the JSON lines.
sub requests {
    my ($self) = @_;
    # Decoded once: tests ask again and again as data arrives, and the
    # receiver only ever appends whole lines.
    $self->{decoded} //= [];
    $self->{read_to} //= 0;
    open my $fh, '<', $self->{out} or return @{ $self->{decoded} };
    seek $fh, $self->{read_to}, 0;
    my $json = JSON::PP->new;
    while (my $line = <$fh>) {
        last unless $line =~ /\n\z/;
        $self->{read_to} += length $line;
        chomp $line;
        push @{ $self->{decoded} }, $json->decode($line) if length $line;
    }
    close $fh;
    return @{ $self->{decoded} };
}

# Every span and every profile sample decoded so far, as two array refs.
# A span carries its resource; a sample its log record and resource.
sub collect {
    my ($self) = @_;
    my (@spans, @samples);
    for my $req ($self->requests) {
        if ($req->{signal} eq 'traces') {
            for my $rs (@{ $req->{request}{resourceSpans} // [] }) {
                for my $ss (@{ $rs->{scopeSpans} // [] }) {
                    push @spans, map { { %$_, resource => $rs->{resource} } }
                        @{ $ss->{spans} // [] };
                }
            }
            next;
        }
        for my $rl (@{ $req->{request}{resourceLogs} // [] }) {
            for my $sl (@{ $rl->{scopeLogs} // [] }) {
                for my $lr (@{ $sl->{logRecords} // [] }) {
                    my $p = $lr->{pprof}{resolved} or next;
                    push @samples, map { { %$_, record => $lr,
                                           resource => $rl->{resource} } }
                        @{ $p->{samples} };
                }
            }
        }
    }
    return (\@spans, \@samples);
}

# Waits until at least $n requests arrived; returns them all.
sub wait_requests {
    my ($self, $n, $timeout) = @_;
    my $end = time + ($timeout // 10);
    my @r;
    while (time < $end) {
        @r = $self->requests;
        return @r if @r >= $n;
        sleep 0.02;
    }
    return @r;
}

# A collector that hangs for real (its process frozen, a network black
# hole): the connection stays open, the kernel takes what fits in its
# buffers, nothing is answered. thaw() lets it go on.
sub freeze { kill 'STOP', $_[0]{pid} if $_[0]{pid} }
sub thaw   { kill 'CONT', $_[0]{pid} if $_[0]{pid} }

# SIGTERM, then SIGKILL after 5 s; $signal 'KILL' kills at once.
sub stop {
    my ($self, $signal) = @_;
    my $pid = delete $self->{pid} or return;
    _stop_pid($pid, $signal);
}

sub _stop_pid {
    my ($pid, $signal) = @_;
    delete $running{$pid};
    kill $signal // 'TERM', $pid;
    # A frozen one (freeze) takes its signal once it runs again.
    kill 'CONT', $pid;
    my $end = time + 5;
    while (time < $end) {
        return if waitpid($pid, WNOHANG) != 0;
        sleep 0.02;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{pid};
}

END {
    local $?;
    _stop_pid($_) for keys %running;
}

# The value of the attribute $key in an OTLP KeyValue list, or undef.
sub attribute {
    my ($attrs, $key) = @_;
    for my $kv (@{ $attrs // [] }) {
        next unless $kv->{key} eq $key;
        my $v = $kv->{value} // {};
        return $v->{stringValue} // $v->{intValue} // $v->{boolValue}
            // $v->{doubleValue};
    }
    return undef;
}

1;
