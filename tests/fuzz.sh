#!/bin/sh
# fuzz.sh - every input in tests/fuzz/<target>/ replayed through its fuzz
# target (built with gcc and the sanitizers, linked with tests/fuzz/replay.c:
# build/asan/<target>). The seeds, and every input that once found a bug,
# must run clean: no crash, leak, undefined behaviour or broken promise.
# Prints a line per target, then "fuzz: N passed, N failed" (inputs);
# exits non-zero on any failure. make fuzz is the other half (clang).
BIN=${TOOLS:-$(dirname "${INFER:-build/asan/infer}")}
export OMP_NUM_THREADS=1
# Every model that loads runs its forward pass here, NaN weights included
# (the fuzz targets skip those while fuzzing, for speed: tests/fuzz/fuzz.h);
# nan-weight* in the corpora once found ops_exp converting NaN to an int.
export FUZZ_ALL_WEIGHTS=1
pass=0; fail=0
for src in tests/fuzz/fuzz_*.c; do
    t=$(basename "$src" .c)
    if [ ! -x "$BIN/$t" ]; then
        fail=$((fail + 1)); echo "FAIL: $BIN/$t is not built"; continue
    fi
    out=$("$BIN/$t" "tests/fuzz/$t" 2>&1)
    rc=$?
    line=$(echo "$out" | tail -1)
    echo "$line"
    p=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    if [ -z "$p" ] || [ -z "$f" ]; then   # the driver itself died
        fail=$((fail + 1)); echo "$out" | tail -20
        continue
    fi
    pass=$((pass + p)); fail=$((fail + f))
    [ $rc -ne 0 ] && echo "$out" | grep -v "^$t: [0-9]* inputs" | tail -40
    [ $rc -ne 0 ] && [ "$f" -eq 0 ] && fail=$((fail + 1))
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
