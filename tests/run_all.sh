#!/bin/sh
# run_all.sh - run every test binary given, then the CLI checks; print one
# closing line "N passed, N failed" and exit non-zero if anything failed.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pass=0; fail=0
# Each suite's wall time goes in the log after it ("-- N s"), so that the
# slow ones can be seen (make test should stay under 12 minutes on 2 cores).
for t in "$@"; do
    echo "== $t"
    start=$(date +%s)
    if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "!! $t failed"; fi
    echo "-- $t: $(($(date +%s) - start)) s"
done
for s in tests/*.sh; do
    [ "$s" = tests/run_all.sh ] && continue
    echo "== $s"
    start=$(date +%s)
    if sh "$s"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "!! $s failed"; fi
    echo "-- $s: $(($(date +%s) - start)) s"
done
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
