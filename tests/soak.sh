#!/bin/sh
# soak.sh - a short soak under AddressSanitizer: 300 mixed requests through
# the runtime (priorities, samples, stop strings, cancels, arrivals over
# time, a KV pool small enough to preempt often; tools/soak.c says what is
# checked). ASan adds what the fast build cannot see: every byte read and
# written is checked, and the process must end without a leak. The RSS is
# reported, not limited: ASan's quarantine keeps freed memory resident
# (make soak checks it, on the fast build, over 10,000 requests).
# One thread: on a busy 2-core machine a second OpenMP thread waiting for a
# core makes every step slower, not faster. About 30 s.
# Prints "soak: N passed, N failed"; exits non-zero on any failure.
BIN=${TOOLS:-$(dirname "${INFER:-build/asan/infer}")}
pass=0; fail=0
if [ ! -x "$BIN/soak" ]; then
    echo "FAIL: $BIN/soak is not built"; fail=1
elif [ ! -f "${CORPUS_DIR:-../shared/corpus}/tinyshakespeare.txt" ]; then
    if [ "${CI:-}" = true ]; then echo "FAIL: the corpus is missing, and under CI that is a failure"; fail=1
    else echo "soak: skipped (no ../shared/corpus here)"; fi
else
    out=$(OMP_NUM_THREADS=1 "$BIN/soak" --requests 300 --threads 1 --check-alone 20 --rss-growth -1 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ]; then pass=1; else fail=1; fi
fi
echo "soak: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
