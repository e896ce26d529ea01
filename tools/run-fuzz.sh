#!/bin/sh
# Runs each libFuzzer target for a bounded time from its committed seed
# corpus, prints how many inputs each executed, and fails on any finding.
set -u
seconds=$1; shift
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    seeds=core/fuzz/corpus/${name#fuzz_}
    work=$(dirname "$bin")/corpus-$name
    mkdir -p "$work"
    [ -d "$seeds" ] || seeds=
    log=$(dirname "$bin")/$name.log
    ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$seconds" \
        -print_final_stats=1 -artifact_prefix="$(dirname "$bin")/$name-" \
        "$work" $seeds >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$log"
        echo "FAIL $name (exit $rc), see $log"
        status=1
    else
        echo "ok   $name: ${execs:-?} inputs in ${seconds}s"
    fi
done
[ "$status" -eq 0 ] && echo "fuzz: all targets clean"
exit $status
