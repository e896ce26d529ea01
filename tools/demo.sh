#!/bin/sh
# make demo: the reference deployment on this machine, end to end.
#
#   tools/demo.sh [--no-build] [--dir DIR] [--seconds N]
#
# 1. make deps and make build (not with --no-build);
# 2. starts an OTLP/gRPC receiver (t/receiver/receiver.js) and, through
#    deploy/local.sh, the backend, httpd and nginx (nginx -> httpd ->
#    backend), both servers with spanprof exporting over OTLP/gRPC to the
#    receiver, as they would to a Collector;
# 3. sends a mix of requests for N seconds (default 10);
# 4. stops everything it started (also on Ctrl-C or an error) and checks
#    that nothing is left;
# 5. prints the profiled traces (tools/demo-report.pl, spanprof-dump):
#    span tree, top frames and a flame graph SVG per trace.
#
# Output goes to DIR (default build/demo, emptied first). Ports: NGINX_PORT
# (default 18080), HTTPD_PORT (18081), BACKEND_PORT (18082),
# RECEIVER_PORT (14317), all on 127.0.0.1.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=${SPANPROF_BUILD:-$top/build}
dir=$build/demo
seconds=10
do_build=1

while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) do_build=0 ;;
        --dir) dir=${2:?--dir needs a value}; shift ;;
        --seconds) seconds=${2:?--seconds needs a value}; shift ;;
        *) echo "usage: $0 [--no-build] [--dir DIR] [--seconds N]" >&2
           exit 2 ;;
    esac
    shift
done
case "$seconds" in
    ''|*[!0-9]*) echo "demo: --seconds wants a whole number" >&2; exit 2 ;;
esac

export NGINX_PORT=${NGINX_PORT:-18080}
export HTTPD_PORT=${HTTPD_PORT:-18081}
export BACKEND_PORT=${BACKEND_PORT:-18082}
RECEIVER_PORT=${RECEIVER_PORT:-14317}

say() {
    printf '%s\n' "$*"
}

step() {
    say ""
    say "== $*"
}

if [ $do_build = 1 ]; then
    step "1/5 install what is needed and build (make deps build)"
    make -C "$top" --no-print-directory deps
    mkdir -p "$build"
    say "building (output in $build/demo-build.log)"
    make -C "$top" --no-print-directory build >"$build/demo-build.log" 2>&1 \
        || { tail -n 30 "$build/demo-build.log" >&2
             say "demo: the build failed" >&2; exit 1; }
    say "built build/ngx_http_spanprof_module.so, build/mod_spanprof.so," \
        "build/spanprof-exporter, build/spanprof-dump"
fi

for f in spanprof-exporter spanprof-dump mod_spanprof.so \
         ngx_http_spanprof_module.so; do
    [ -e "$build/$f" ] || { say "demo: no $build/$f: run make build" >&2
                            exit 1; }
done
[ -d "$top/t/receiver/node_modules/@grpc/grpc-js" ] \
    || { say "demo: the receiver's packages are missing: run make deps" >&2
         exit 1; }

# Free ports first: a busy one would send our traffic to someone else.
for p in $NGINX_PORT $HTTPD_PORT $BACKEND_PORT $RECEIVER_PORT; do
    if perl -MIO::Socket::INET -e \
        'exit !IO::Socket::INET->new(PeerAddr => "127.0.0.1",
                                     PeerPort => $ARGV[0])' "$p"
    then
        say "demo: 127.0.0.1:$p is in use; choose other ports with" \
            "NGINX_PORT, HTTPD_PORT, BACKEND_PORT, RECEIVER_PORT" >&2
        exit 1
    fi
done

case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac
rm -rf "$dir"
mkdir -p "$dir/run" "$dir/log" "$dir/out" "$dir/flame"

receiver_pid=
servers_started=0

# Stops what was started, in the order data flows out: the servers first
# (their exporters flush to the receiver when they stop), then the
# receiver. Runs on every exit, Ctrl-C included.
cleanup() {
    rc=0
    if [ $servers_started = 1 ]; then
        servers_started=0
        "$top/deploy/local.sh" stop "$dir" || rc=1
        # The exporters outlive their server by the time they take to
        # send what they hold (at most OTEL_EXPORTER_OTLP_TIMEOUT).
        i=0
        while ! "$top/tools/demo-procs.pl" left "$dir" >"$dir/run/left" \
              && grep -q 'spanprof-exporter' "$dir/run/left" \
              && [ $i -lt 200 ]; do
            sleep 0.1
            i=$((i + 1))
        done
    fi
    if [ -n "$receiver_pid" ]; then
        kill -TERM "$receiver_pid" 2>/dev/null || true
        i=0
        while kill -0 "$receiver_pid" 2>/dev/null && [ $i -lt 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -KILL "$receiver_pid" 2>/dev/null || true
        receiver_pid=
    fi
    return $rc
}

on_signal() {
    trap - EXIT INT TERM
    say "" >&2
    say "demo: interrupted: stopping what it started" >&2
    cleanup || true
    exit 130
}

on_exit() {
    rc=$?
    trap - EXIT INT TERM
    if [ $rc != 0 ]; then
        say "demo: failed (logs in $dir/log): stopping what it started" >&2
    fi
    cleanup || true
    exit $rc
}
trap on_exit EXIT
trap on_signal INT TERM

step "2/5 start: receiver, backend, httpd, nginx"
setsid node "$top/t/receiver/receiver.js" --port "$RECEIVER_PORT" \
    --out "$dir/out/receiver.jsonl" >"$dir/log/receiver.out" \
    2>"$dir/log/receiver.err" </dev/null &
receiver_pid=$!
i=0
until grep -q '^listening' "$dir/log/receiver.out" 2>/dev/null; do
    kill -0 "$receiver_pid" 2>/dev/null && [ $i -lt 300 ] \
        || { cat "$dir/log/receiver.err" >&2
             say "demo: the receiver did not start" >&2; exit 1; }
    sleep 0.1
    i=$((i + 1))
done
say "OTLP/gRPC receiver on 127.0.0.1:$RECEIVER_PORT" \
    "(writes what it decodes to $dir/out/receiver.jsonl)"

# What a deployment sets: snapshot profiling on, the Collector's address.
# The rest only makes a short demo show more: 1 ms sampling (default 10)
# for more samples per request, the highest selection probability (0.10,
# default 0.01), exports every 200 ms rather than every 1 s / 5 s.
export SPLUNK_SNAPSHOT_PROFILER_ENABLED=true
export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$RECEIVER_PORT
export SPLUNK_SNAPSHOT_SAMPLING_INTERVAL=1
export SPLUNK_SNAPSHOT_SELECTION_PROBABILITY=0.10
export SPLUNK_PROFILER_EXPORT_INTERVAL=200
export OTEL_BSP_SCHEDULE_DELAY=200
servers_started=1
"$top/deploy/local.sh" start "$dir"
"$top/tools/demo-procs.pl" snapshot "$dir" "$receiver_pid" \
    $(cat "$dir"/run/*.pid)

step "3/5 traffic for $seconds s through nginx (127.0.0.1:$NGINX_PORT)"
url=http://127.0.0.1:$NGINX_PORT
selected='baggage: splunk.trace.snapshot.volume=highest'
sent=0
failed=0
# get UA URL [curl options]: one request; the user agent names how the
# request was meant to be selected, so the report can say it.
get() {
    ua=$1
    path=$2
    shift 2
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -A "$ua" \
           "$@" "$url$path") || code=000
    sent=$((sent + 1))
    [ "$code" = 200 ] || failed=$((failed + 1))
}
say "every round: GET / three times, GET /cpu (SHA-256 in the backend," \
    "then 1 MiB that nginx gzips), GET /slow (the backend waits 300 ms);"
say "every fourth round the same three again with the baggage" \
    "splunk.trace.snapshot.volume=highest, which selects the trace;"
say "other requests are selected by their trace id with probability 0.10."
# One request first to show the trace context each hop passes on.
curl -s --max-time 30 -A 'demo (selected by baggage)' -H "$selected" \
    "$url/" >"$dir/out/first-response.txt" || true
sent=1
sed -n 's/^\(traceparent\|baggage\): /  the backend received \1: /p' \
    "$dir/out/first-response.txt"
end=$(($(date +%s) + seconds))
round=0
while [ "$(date +%s)" -lt $end ]; do
    if [ $((round % 4)) = 0 ]; then
        get 'demo (selected by baggage)' '/cpu?rounds=20000&kb=1024' \
            -H "$selected" -H 'Accept-Encoding: gzip'
        get 'demo (selected by baggage)' '/slow?ms=300' -H "$selected"
        get 'demo (selected by baggage)' '/' -H "$selected"
    fi
    get demo / ; get demo / ; get demo /
    get demo '/cpu?rounds=20000&kb=1024' -H 'Accept-Encoding: gzip'
    get demo '/slow?ms=300'
    round=$((round + 1))
done
say "sent $sent requests, $failed failed"

step "4/5 stop nginx, httpd (their exporters send what they hold), backend," \
     "receiver"
cleanup || { say "demo: stopping failed" >&2; exit 1; }
if "$top/tools/demo-procs.pl" left "$dir" >"$dir/run/left"; then
    say "nothing left running (checked in /proc: every process started," \
        "and any naming $dir)"
else
    say "demo: still running after stop:" >&2
    cat "$dir/run/left" >&2
    exit 1
fi

step "5/5 what the receiver got"
exec "$top/tools/demo-report.pl" --dump "$build/spanprof-dump" \
    --requests "$sent" "$dir"
