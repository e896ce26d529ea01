#!/bin/sh
# Runs cmocka test binaries, prints each one's result and the totals, and
# fails if any test failed or any binary crashed.
set -u
label=$1; shift
run=0; failed=0; broken=0
for bin in "$@"; do
    out=$("$bin" 2>&1); rc=$?
    n=$(printf '%s\n' "$out" | sed -n 's/^\[==========\] \([0-9]*\) test(s) run\./\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s).*/\1/p' | awk '{s+=$1} END {print s+0}')
    run=$((run + n)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
        printf '%s\n' "$out"
        [ "$f" -eq 0 ] && broken=$((broken + 1))
        echo "FAIL $(basename "$bin") (exit $rc)"
    else
        echo "ok   $(basename "$bin"): $n tests"
    fi
done
echo "$label: $run tests run, $failed failed, $broken binaries crashed"
[ "$failed" -eq 0 ] && [ "$broken" -eq 0 ]
