#!/bin/sh
# run_all.sh - run every test binary given, then the CLI checks; print one
# closing line "N passed, N failed" and exit non-zero if anything failed.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pass=0; fail=0
for t in "$@"; do
    echo "== $t"
    if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "!! $t failed"; fi
done
for s in tests/*.sh; do
    [ "$s" = tests/run_all.sh ] && continue
    echo "== $s"
    if sh "$s"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "!! $s failed"; fi
done
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
