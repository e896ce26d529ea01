package Spanprof::HeaderMatrix;

# The matrix of incoming trace headers (issue 5's "Done means") and what a
# server with the module must make of each, shared by t/nginx_headers.t and
# t/httpd_headers.t so that one table holds the cases and one function the
# expectations:
#
#   for my $c (cases()) { ... send $c->{headers} to $c->{path} // '/proxy' ... }
#   check_case($c, log => $line, upstream => $headers, span => $span_of,
#              route => $route, port => $port, probability => $p);
#   check_unexported($recv, @checked);
#   check_selection(log_of => sub { ...request with these headers... },
#                   probability => $p);
#   check_samples_in_spans($recv);
#
# or all but the last in one call, for a server that logs the variables in
# the order above after "$http_x_case|" and proxies /proxy to $up:
#   run_matrix(recv => $recv, up => $up, log => $access_log,
#              port_of => sub { $h2 ? ... }, route_of => sub { $proxied ? ... },
#              server => 'nginx', probability => $p);
#
# A log line is a hash of trace_id span_id snapshot traceparent baggage
# status (the module's variables); the upstream's headers are a hash of
# lowercase names to lists of values (Spanprof::Upstream's requests).

use strict;
use warnings;

use Test::More;

use Spanprof::Receiver qw(attribute);
use Spanprof::Cases qw(spans curl_case log_case upstream_case wait_spans);

use Exporter 'import';
our @EXPORT_OK = qw(cases check_case check_unexported check_selection
                    run_matrix
                    check_samples_in_spans selected_by_id volume_of
                    $IN_TRACE $IN_PARENT $VOLUME);

our $IN_TRACE = '0af7651916cd43dd8448eb211c80319c';
our $IN_PARENT = 'b7ad6b7169203331';
our $VOLUME = 'splunk.trace.snapshot.volume';

# SPEC 3: the last 7 hex digits against floor(p * 0x0FFFFFFF).
sub selected_by_id {
    my ($trace_id, $probability) = @_;
    return hex(substr $trace_id, -7) <= int($probability * 0x0FFFFFFF);
}

sub members { split /,/, $_[0] // '' }

sub volume_of {
    my ($baggage) = @_;
    for (members($baggage)) { return $1 if /^\Q$VOLUME\E=([^;]*)/ }
    return undef;
}

# The cases: name, headers ([name, value] pairs, in order), path when not
# /proxy, and what to expect: parent (continues the incoming trace),
# unsampled (flags 00: not exported), tracestate (as sent on), volume (as
# received), kept / dropped baggage members, status, query.
sub cases {
    my $tp = "00-$IN_TRACE-$IN_PARENT";
    my @invalid = (
        [ 'version ff'          => "ff-$IN_TRACE-$IN_PARENT-01" ],
        [ 'zero trace id'       => '00-' . ('0' x 32) . "-$IN_PARENT-01" ],
        [ 'zero parent id'      => "00-$IN_TRACE-" . ('0' x 16) . '-01' ],
        [ 'upper-case hex'      => '00-' . uc($IN_TRACE) . "-$IN_PARENT-01" ],
        [ 'short trace id'      => '00-' . substr($IN_TRACE, 1) . "-$IN_PARENT-01" ],
        [ 'long parent id'      => "00-$IN_TRACE-${IN_PARENT}0-01" ],
        [ 'non-hex flags'       => "$tp-0g" ],
        [ 'wrong delimiter'     => "00_${IN_TRACE}_${IN_PARENT}_01" ],
        [ 'v00 with more data'  => "$tp-01-extra" ],
        [ 'garbage'             => 'not a traceparent' ],
    );
    my @big = map { "k$_=v$_" } 0 .. 199;
    my $long = 'x' x 100;
    return (
        { name => 'no trace headers', headers => [] },
        { name => 'valid traceparent, sampled', parent => 1,
          headers => [ [ traceparent => "$tp-01" ] ] },
        { name => 'valid traceparent, not sampled', parent => 1, unsampled => 1,
          headers => [ [ traceparent => "$tp-00" ] ] },
        (map { { name => "invalid traceparent: $_->[0]", invalid => 1,
                 headers => [ [ traceparent => $_->[1] ],
                              [ tracestate => 'rojo=00f067aa0ba902b7' ] ] } }
             @invalid),
        # Not a list header: two are one invalid value (RFC 9110 5.3), and
        # W3C's test suite (test_traceparent_duplicated) wants a new trace.
        { name => 'invalid traceparent: two traceparent headers',
          invalid => 1,
          headers => [ [ traceparent => "$tp-01" ],
                       [ traceparent => '00-' . reverse($IN_TRACE)
                                        . "-$IN_PARENT-01" ],
                       [ tracestate => 'rojo=00f067aa0ba902b7' ] ] },
        { name => 'tracestate', parent => 1,
          tracestate => 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
          headers => [ [ traceparent => "$tp-01" ],
                       [ tracestate => 'rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE' ] ] },
        { name => 'two tracestate headers', parent => 1,
          tracestate => 'rojo=1,congo=2',
          headers => [ [ traceparent => "$tp-01" ], [ tracestate => 'rojo=1' ],
                       [ tracestate => 'congo=2' ] ] },
        { name => 'baggage without the volume', kept => ['k=v', 'p=1;prop'],
          headers => [ [ baggage => 'k=v,p=1;prop' ] ] },
        { name => 'baggage volume highest', volume => 'highest',
          headers => [ [ baggage => "a=1,$VOLUME=highest" ] ] },
        { name => 'baggage volume off', volume => 'off',
          headers => [ [ baggage => "$VOLUME=off,a=1" ] ] },
        { name => 'baggage volume other', volume => 'loud',
          headers => [ [ baggage => "$VOLUME=loud" ] ] },
        { name => 'highest with an unsampled parent', volume => 'highest',
          parent => 1, unsampled => 1,
          headers => [ [ traceparent => "$tp-00" ],
                       [ baggage => "$VOLUME=highest" ] ] },
        # The volume needs a member: 179 received ones stay.
        { name => 'baggage over 180 members', kept => ['k0=v0', 'k178=v178'],
          dropped => ['k179=v179', 'k199=v199'],
          headers => [ [ baggage => join ',', @big ] ] },
        { name => 'baggage over 8192 bytes', kept => ["a0=$long"],
          headers => [ [ baggage => join ',', map { "a$_=$long" } 0 .. 99 ] ] },
        { name => 'malformed baggage members', kept => ['good=1', 'enc=a%20b'],
          dropped => ['=novalue', 'bad key=1', 'x=y z', 'noequals'],
          headers => [ [ baggage => 'good=1, =novalue,bad key=1,x=y z,'
                                     . 'noequals,enc=a%20b' ] ] },
        { name => 'two baggage headers', kept => ['a=1', 'b=2'],
          headers => [ [ baggage => 'a=1' ], [ baggage => 'b=2' ] ] },
        { name => '5xx', path => '/fail', status => 503, headers => [] },
        { name => 'query', path => '/proxy?q=1&r=2', query => 'q=1&r=2',
          headers => [] },
    );
}

# The assertions for one case $c (a case of cases() with what: the test's
# name for it, code: the HTTP code answered, h2: sent over HTTP/2). %o:
#   log          its log line (undef: not found)
#   upstream     the headers the proxied upstream got (undef: not proxied)
#   proxied      it was meant for the upstream
#   span         sub { span id => exported span or undef }
#   route        the route the server names the span after ("GET $route"),
#                undef when it knows none ("GET", no http.route)
#   port         the server.port it was sent to
#   probability  the selection probability the server runs with
sub check_case {
    my ($c, %o) = @_;
    my $what = $c->{what};
    my $status = $c->{status} // 200;
    is($c->{code}, $status, "$what: answered $status");

    my $l = $o{log};
    ok($l, "$what: access log line") or return;
    my $got = $o{upstream};
    ok($got, "$what: the upstream got the request") if $o{proxied};

    # The entry span's ids in the variables.
    like($l->{trace_id}, qr/^[0-9a-f]{32}$/, "$what: \$spanprof_trace_id");
    like($l->{span_id}, qr/^[0-9a-f]{16}$/, "$what: \$spanprof_span_id");
    my $flags = $c->{unsampled} ? '00' : '01';
    is($l->{traceparent}, "00-$l->{trace_id}-$l->{span_id}-$flags",
       "$what: \$spanprof_traceparent is the entry span, flags $flags");
    if ($c->{parent}) {
        is($l->{trace_id}, $IN_TRACE, "$what: continues the trace");
    } else {
        isnt($l->{trace_id}, $IN_TRACE, "$what: a new trace");
    }
    isnt($l->{span_id}, $IN_PARENT, "$what: a new span id");

    # Selection and the baggage going on.
    my $volume = $c->{volume};
    my $selected = defined $volume
        ? $volume eq 'highest'
        : selected_by_id($l->{trace_id}, $o{probability});
    my $profiled = $selected && !$c->{unsampled} ? 1 : 0;
    is($l->{snapshot}, $profiled, "$what: \$spanprof_snapshot $profiled");
    is(volume_of($l->{baggage}), $volume // ($selected ? 'highest' : 'off'),
       "$what: baggage carries the volume" . ($volume ? ' as received' : ''));
    my @m = members($l->{baggage});
    ok(@m <= 180 && length($l->{baggage}) <= 8192,
       "$what: baggage within 180 members and 8192 bytes");
    my %m = map { $_ => 1 } @m;
    ok($m{$_}, "$what: baggage keeps $_") for @{ $c->{kept} // [] };
    ok(!$m{$_}, "$what: baggage drops $_") for @{ $c->{dropped} // [] };
    is(scalar(grep { /^\Q$VOLUME\E=/ } @m), 1, "$what: one volume member");

    if ($got) {
        is_deeply($got->{traceparent}, [ $l->{traceparent} ],
                  "$what: upstream traceparent is the entry span's");
        is_deeply($got->{baggage}, [ $l->{baggage} ],
                  "$what: upstream baggage, once");
        if ($c->{tracestate}) {
            is_deeply($got->{tracestate}, [ $c->{tracestate} ],
                      "$what: upstream tracestate as received");
        } else {
            ok(!exists $got->{tracestate}, "$what: no upstream tracestate");
        }
    }

    # The exported span.
    if ($c->{unsampled}) {
        $c->{absent} = $l->{span_id};
        return;
    }
    my $s = $o{span}->($l->{span_id});
    ok($s, "$what: span exported") or return;
    is($s->{traceId}, $l->{trace_id}, "$what: span trace id");
    is($s->{parentSpanId} // '', $c->{parent} ? $IN_PARENT : '',
       "$what: span parent");
    is($s->{traceState} // '', $c->{tracestate} // '',
       "$what: span tracestate");
    my $route = $o{route};
    my $name = defined $route ? "GET $route" : 'GET';
    my ($path) = ($c->{path} // '/proxy') =~ /^([^?]*)/;
    is($s->{name}, $name, "$what: name $name");
    is($s->{kind}, 2, "$what: kind SERVER");
    is($s->{status}{code} // 0, $status >= 500 ? 2 : 0,
       "$what: status " . ($status >= 500 ? 'Error' : 'unset'));
    my %want = (
        'http.request.method'       => 'GET',
        'url.path'                  => $path,
        'url.scheme'                => 'http',
        'http.response.status_code' => $status,
        'error.type'                => $status >= 500 ? "$status" : undef,
        'http.route'                => $route,
        'server.address'            => '127.0.0.1',
        'server.port'               => $o{port},
        'client.address'            => '127.0.0.1',
        'network.peer.address'      => '127.0.0.1',
        'network.protocol.version'  => $c->{h2} ? '2' : '1.1',
        'url.query'                 => $c->{query},
        'splunk.snapshot.profiling' => $profiled ? 1 : undef,
    );
    for my $k (sort keys %want) {
        is(attribute($s->{attributes}, $k), $want{$k}, "$what: $k");
    }
    like(attribute($s->{attributes}, 'user_agent.original') // '',
         qr{^curl/}, "$what: user_agent.original");
    cmp_ok($s->{endTimeUnixNano}, '>=', $s->{startTimeUnixNano},
           "$what: ends after it starts");
}

# Unsampled entry spans are not exported (call it last: by then every
# sampled span has arrived, and they were sent in between).
sub check_unexported {
    my ($recv, @check) = @_;
    my %exported = map { $_->{spanId} => 1 } spans($recv);
    for my $c (grep { $_->{absent} } @check) {
        ok(!$exported{ $c->{absent} }, "$c->{what}: span not exported");
    }
    is(scalar(grep { $_->{traceId} eq $IN_TRACE && !$_->{parentSpanId} }
               spans($recv)),
       0, 'no exported span takes the incoming trace without its parent');
}

# Selection through the server: highest, off, and random trace ids.
# $o{log_of}->(headers) sends one request and returns its log line.
sub check_selection {
    my (%o) = @_;
    my $p = $o{probability};
    my (%sel, $bad_rule, $bad_baggage);
    for my $volume ('highest', 'off') {
        my $n = 0;
        for (1 .. 20) {
            my $l = $o{log_of}->([ [ baggage => "$VOLUME=$volume" ] ]);
            $n += $l && $l->{snapshot} eq '1';
        }
        $sel{$volume} = $n;
    }
    is($sel{highest}, 20, 'volume highest: every request selected');
    is($sel{off}, 0, 'volume off: no request selected');

    my ($n, $hits) = (200, 0);
    my @ids = map { join '', map { sprintf '%04x', int rand 65536 } 1 .. 8 }
              1 .. $n;
    for my $id (@ids) {
        my $l = $o{log_of}->([ [ traceparent => "00-$id-$IN_PARENT-01" ] ])
            or next;
        my $want = selected_by_id($id, $p) ? 1 : 0;
        $hits += $l->{snapshot};
        $bad_rule++ if $l->{snapshot} ne $want;
        $bad_baggage++
            if volume_of($l->{baggage}) ne ($want ? 'highest' : 'off');
    }
    ok(!$bad_rule,
       "no baggage: each of $n random trace ids selected by SPEC 3's rule");
    ok(!$bad_baggage, 'no baggage: the volume sent on says the decision');
    # p = 0.1 over 200: mean 20, sd 4.2; 6 sd above, and at least one. The
    # fraction over 20,000 ids is test_entry's.
    ok($hits > 0 && $hits < 46, "selected fraction near $p ($hits of $n)");

    my @same = map { $o{log_of}->([ [ traceparent =>
                                      "00-$ids[0]-$IN_PARENT-01" ] ]) }
               1 .. 2;
    is($same[0]{snapshot}, $same[1]{snapshot},
       'the same trace id, the same decision');
}

# Every profile sample that names a span was taken while that span lived
# (SPEC 3: sampling starts with the entry span and stops when it ends), and
# names a span that was exported. Call it after the server stopped: by then
# everything it sampled has been flushed.
sub check_samples_in_spans {
    my ($recv) = @_;
    my ($spans, $samples) = $recv->collect;
    my %span = map { $_->{spanId} => $_ } @$spans;
    my ($named, $unknown, @outside) = (0, 0);
    for my $x (@$samples) {
        my $id = $x->{labels}{span_id} // next;
        $named++;
        my $s = $span{$id} or do { $unknown++; next };
        # The label is in whole milliseconds.
        my $at = $x->{labels}{'source.event.time'} * 1e6;
        push @outside, sprintf('%s: %.0f ms after its end', $id,
                               ($at - $s->{endTimeUnixNano}) / 1e6)
            if $at > $s->{endTimeUnixNano} + 1e6
            || $at < $s->{startTimeUnixNano} - 1e6;
    }
    note("$named samples name a span");
    is($unknown, 0, 'every sample names an exported span');
    is(scalar(@outside), 0, 'every sample was taken while its span lived')
        or diag(join "\n", @outside[0 .. ($#outside < 9 ? $#outside : 9)]);
}

# Every case over HTTP/1.1 and HTTP/2, then selection, through a server.
sub run_matrix {
    my (%o) = @_;
    my $request = sub {
        my (%r) = @_;
        return curl_case(%r, url => sprintf('http://127.0.0.1:%d%s',
                                            $o{port_of}->($r{h2}),
                                            $r{path} // '/proxy'));
    };
    my $log_line = sub {
        log_case($o{log}, $_[0],
                 qw(trace_id span_id snapshot traceparent baggage status));
    };
    my $span_of = sub {
        my ($span_id) = @_;
        my ($s) = wait_spans($o{recv}, sub { $_[0]{spanId} eq $span_id });
        return $s;
    };

    my @check;
    for my $h2 (0, 1) {
        my $proto = $h2 ? 'HTTP/2' : 'HTTP/1.1';
        for my $c (cases()) {
            my ($case, $code) = $request->(h2 => $h2, path => $c->{path},
                                           headers => $c->{headers});
            push @check, { %$c, case => $case, code => $code, h2 => $h2,
                           what => "$o{server}, $proto, $c->{name}" };
        }
    }
    for my $c (@check) {
        my $proxied = ($c->{path} // '/proxy') =~ m{^/proxy};
        my ($up) = $proxied ? upstream_case($o{up}, $c->{case}) : ();
        check_case($c, log => $log_line->($c->{case}), proxied => $proxied,
                   upstream => $up && $up->{headers}, span => $span_of,
                   route => $o{route_of}->($proxied),
                   port => $o{port_of}->($c->{h2}),
                   probability => $o{probability});
    }
    check_unexported($o{recv}, @check);

    check_selection(probability => $o{probability}, log_of => sub {
        my ($case) = $request->(headers => $_[0]);
        return $log_line->($case);
    });
}

1;

