#!/bin/sh
# The exporter benchmark (bench/README.md): throughput of the drain thread
# on one core, then peak RSS under a flood while the collector is down.
# `run.sh symbolizer [LOOKUPS [MAX_DEBUG_MIB]]`: only what the symbolizer
# holds as distinct addresses come (bench_symbolizer.c).
# `run.sh spans [SPANS [PER_STEP]]`: only the exporter's instructions per
# span under callgrind, by function (bench_spans.c).
# Run from the top of the tree after `make build`.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPANPROF_BUILD:-$top/build}
out=${TMPDIR:-/tmp}/spanprof-bench-exporter
mkdir -p "$out"
libs="$(pkg-config --libs grpc libprotobuf-c zlib libdw) -lelf -lpthread -lm"

cc -std=c11 -D_GNU_SOURCE -O2 -g -I"$top/core/include" -I"$top/t/bin" \
    "$top/bench/exporter/bench_exporter.c" "$build/libspanprof_export.a" \
    "$build/libspanprof_core.a" $libs -o "$out/bench_exporter"
cc -std=c11 -D_GNU_SOURCE -O1 -g -I"$top/core/include" -I"$top/t/bin" \
    "$top/t/bin/exporter_drive.c" "$build/libspanprof_core.a" -lm \
    -o "$out/exporter_drive"
cc -std=c11 -D_GNU_SOURCE -O2 -g -I"$top/core/include" -I"$top/t/bin" \
    "$top/bench/exporter/bench_symbolizer.c" "$build/libspanprof_export.a" \
    "$build/libspanprof_core.a" $libs -o "$out/bench_symbolizer"
cc -std=c11 -D_GNU_SOURCE -O2 -g -I"$top/core/include" \
    "$top/bench/exporter/bench_spans.c" "$build/libspanprof_export.a" \
    "$build/libspanprof_core.a" $libs -o "$out/bench_spans"

if [ "${1:-}" = spans ]; then
    spans=${2:-100000}
    valgrind --tool=callgrind --toggle-collect=sp_exporter_step \
        --callgrind-out-file="$out/spans.cg" "$out/bench_spans" "$spans" \
        "${3:-8}" >/dev/null 2>&1
    # self instructions per span, a function's inlined parts added up
    callgrind_annotate --threshold=99.9 --inclusive=no --auto=no \
        "$out/spans.cg" | awk -v n="$spans" '
        /file:function/ { on = 1; next }
        on && $1 ~ /^[0-9,]+$/ {
            c = $1; gsub(",", "", c); f = $0
            sub(/ \[.*$/, "", f); sub(/^.*:/, "", f)
            by[f] += c; all += c
        }
        END {
            for (f in by) if (by[f] / n >= 1) printf "%8.1f %s\n", by[f] / n, f
            printf "%8.1f all\n", all / n
        }' | sort -rn
    exit
fi

if [ "${1:-}" = symbolizer ]; then
    shift
    exec "$out/bench_symbolizer" "$@"
fi

echo "== throughput (one core: taskset -c 0)"
taskset -c 0 "$out/bench_exporter" "${ROUNDS:-7}"

echo "== peak RSS, default settings, collector down, 10 s flood"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -i PATH="$PATH" OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port" \
    "$out/exporter_drive" --exporter "$build/spanprof-exporter" \
    --flood-ms 10000 --ring-bytes 4194304 --slots 8 --hold-ms 1000 2>&1 |
    grep -E 'written|hwm|counters'
