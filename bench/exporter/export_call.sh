#!/bin/sh
# Instructions per gRPC export call (bench_export_call.c) under callgrind,
# against the real receiver (t/receiver, node, not decoding): RUNS runs
# (default 5) of CALLS calls, each run's figure and their median; the
# inclusive costs per function of the last run go to $out/annotate.txt.
# The runs differ by a few per cent: how the answer's bytes and the
# window updates fall into reads and poller wakeups is up to the
# scheduler. Run from the top of the tree after `make build`.
#   [RUNS=N] export_call.sh [CALLS [SPANS]]      defaults 200 and 512
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPANPROF_BUILD:-$top/build}
out=${TMPDIR:-/tmp}/spanprof-bench-export-call
calls=${1:-200}
runs=${RUNS:-5}
mkdir -p "$out"
rm -f "$out"/cg.out*
libs="$(pkg-config --libs grpc libprotobuf-c zlib) -lpthread -lm"

cc -std=c11 -D_GNU_SOURCE -O2 -g -I"$top/core/include" \
    "$top/bench/exporter/bench_export_call.c" "$build/libspanprof_export.a" \
    "$build/libspanprof_core.a" $libs -o "$out/bench_export_call"

: >"$out/receiver.out"
node "$top/t/receiver/receiver.js" --port 0 --decode no \
    --out "$out/receiver.out" >"$out/receiver.stdout" 2>&1 &
node=$!
trap 'kill $node 2>/dev/null' EXIT
port=
for i in $(seq 1 300); do
    port=$(sed -n 's/^listening \([0-9]*\)$/\1/p' "$out/receiver.stdout")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { cat "$out/receiver.stdout"; exit 1; }

figures=
for r in $(seq 1 "$runs"); do
    rm -f "$out"/cg.out*
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$out/bench_export_call" "http://127.0.0.1:$port" "$calls" ${2:-} \
        >"$out/bench.log" 2>"$out/valgrind.log" ||
        { cat "$out/bench.log" "$out/valgrind.log"; exit 1; }
    dump=$(ls "$out"/cg.out.* | head -1)
    total=$(sed -n 's/^summary: *//p' "$dump")
    figures="$figures $((total / calls))"
done
echo "instructions per call ($runs runs of $calls calls):$figures"
echo "median: $(echo $figures | tr ' ' '\n' | sort -n |
    sed -n "$(( (runs + 1) / 2 ))p")"
callgrind_annotate --inclusive=yes --threshold=99.5 "$dump" \
    >"$out/annotate.txt"
echo "by function (inclusive): $out/annotate.txt"
