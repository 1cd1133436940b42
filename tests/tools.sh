#!/bin/sh
# tools.sh - the command lines of the tools in tools/.
#  1. --help and -h print the usage on stdout and exit 0, wherever they stand.
#  2. An unknown option is called that ("unknown option X"), with or without
#     a value after it, and exits 2; a known option without its value says so.
# Prints "N passed, N failed"; exits non-zero on any failure.
BIN=${TOOLS:-$(dirname "${INFER:-build/asan/infer}")}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# run TOOL ARGS...: stdout, stderr and status in $tmp/out, $tmp/err, $rc
run() { timeout 20 "$BIN/$@" > "$tmp/out" 2> "$tmp/err"; rc=$?; }

# --help and -h alone on every program (the rest of this file holds the
# tools whose whole command line is checked)
for t in infer serve bench_serve bench_batch gpucheck ../rans_bench; do
    if [ ! -x "$BIN/$t" ]; then bad "$BIN/$t is not built"; continue; fi
    for h in --help -h; do
        run $t $h
        [ $rc -eq 0 ] && grep -q "usage" "$tmp/out" && ok \
            || bad "$t $h -> rc $rc, stdout: $(head -c 200 "$tmp/out"), stderr: $(head -c 300 "$tmp/err")"
    done
done

for t in mkmodel bench kbench train bpe_train soak mkcorpus compress; do
    if [ ! -x "$BIN/$t" ]; then bad "$BIN/$t is not built"; continue; fi
    for h in --help -h; do
        run $t $h
        [ $rc -eq 0 ] && grep -q "usage" "$tmp/out" && [ ! -s "$tmp/err" ] && ok \
            || bad "$t $h -> rc $rc, stdout: $(head -c 200 "$tmp/out"), stderr: $(cat "$tmp/err")"
    done
    for args in "--frobnicate" "--frobnicate 1"; do
        run $t $args
        [ $rc -eq 2 ] && grep -q -- "unknown option --frobnicate" "$tmp/err" && ! grep -q "value" "$tmp/err" && ok \
            || bad "$t $args -> rc $rc, stderr: $(cat "$tmp/err")"
    done
done
# --help after another option; a known option at the end without its value
for tfv in "mkmodel --dim 64" "bench --runs 2" "kbench --reps 2" "train --steps 2" "bpe_train --vocab 300" \
           "soak --requests 5" "mkcorpus --tokenizer x" "compress --bits 12"; do
    set -- $tfv
    run $1 $2 $3 --help
    [ $rc -eq 0 ] && grep -q "usage" "$tmp/out" && ok || bad "$tfv --help -> rc $rc, stderr: $(cat "$tmp/err")"
    run $1 $2
    [ $rc -eq 2 ] && grep -q -- "$2 needs a value" "$tmp/err" && ok || bad "$1 $2 -> rc $rc, stderr: $(cat "$tmp/err")"
done
echo "tools: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
