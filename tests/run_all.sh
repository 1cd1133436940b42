#!/bin/sh
# run_all.sh - run every test binary given, then the CLI checks; print one
# closing line "N passed, N failed" and exit non-zero if anything failed.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pass=0; fail=0
# Each suite's wall time goes in the log after it ("-- N s"), so that the
# slow ones can be seen (make test should stay under 12 minutes on 2 cores).
#
# The binaries named in RUN_ALL_BESIDE (default: test_model and
# test_speculative, the longest, arithmetic with no clock in their checks)
# run one after another in a second lane, started first, while everything
# else runs in turn in the first; their logs are printed whole at the end.
# RUN_ALL_BESIDE= runs everything in one lane.
beside=${RUN_ALL_BESIDE-build/asan/test_model build/asan/test_speculative}
side=$(mktemp -d); trap 'rm -rf "$side"' EXIT
(
for t in "$@"; do
    case " $beside " in *" $t "*) ;; *) continue ;; esac
    n=$(basename "$t")
    start=$(date +%s)
    if "$t" > "$side/$n.log" 2>&1; then echo 0 > "$side/$n.rc"; else echo 1 > "$side/$n.rc"; fi
    echo $(($(date +%s) - start)) > "$side/$n.s"
done
) &
for t in "$@"; do
    case " $beside " in *" $t "*) continue ;; esac
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
wait
for t in "$@"; do
    case " $beside " in *" $t "*) ;; *) continue ;; esac
    n=$(basename "$t")
    echo "== $t (run beside the others)"
    cat "$side/$n.log"
    if [ "$(cat "$side/$n.rc" 2>/dev/null)" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "!! $t failed"; fi
    echo "-- $t: $(cat "$side/$n.s" 2>/dev/null) s, beside the others"
done
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
