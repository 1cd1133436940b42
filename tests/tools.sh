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

for t in mkmodel bench kbench train bpe_train soak mkcorpus compress ceilings rows8_ab; do
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
           "soak --requests 5" "mkcorpus --tokenizer x" "compress --bits 12" "ceilings --gib 1" "rows8_ab --rounds 3"; do
    set -- $tfv
    run $1 $2 $3 --help
    [ $rc -eq 0 ] && grep -q "usage" "$tmp/out" && ok || bad "$tfv --help -> rc $rc, stderr: $(cat "$tmp/err")"
    run $1 $2
    [ $rc -eq 2 ] && grep -q -- "$2 needs a value" "$tmp/err" && ok || bad "$1 $2 -> rc $rc, stderr: $(cat "$tmp/err")"
done
# mkmodel --arch: a Qwen2 and a Qwen3 file (its own head size) that the engine
# loads as that architecture and runs; what does not fit an architecture is refused
small="--dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --vocab 300 --ctx 32 --type q8_0"
for arch in qwen2 qwen3; do
    extra=""; [ $arch = qwen3 ] && extra="--head-dim 32"
    run mkmodel $small --arch $arch $extra "$tmp/$arch.gguf"
    [ $rc -eq 0 ] && grep -q "($arch)" "$tmp/out" && ok || bad "mkmodel --arch $arch -> rc $rc, $(cat "$tmp/err")"
    timeout 60 "${INFER:-build/asan/infer}" --model "$tmp/$arch.gguf" --prompt "hi" -n 4 --temperature 0 \
        --device cuda > "$tmp/out" 2> "$tmp/err"
    # the CUDA wing runs llama files only: a Qwen file is told so by name, before any GPU is looked for
    grep -q "the CUDA kernels run llama files; this one is $arch" "$tmp/err" && ok \
        || bad "infer --device cuda on a $arch file: $(cat "$tmp/err")"
    timeout 60 "${INFER:-build/asan/infer}" --model "$tmp/$arch.gguf" --prompt "hi" -n 4 --temperature 0 \
        > "$tmp/out" 2> "$tmp/err" && grep -q "generated 4" "$tmp/err" && ok \
        || bad "infer on mkmodel's $arch file: $(cat "$tmp/err")"
done
grep -aq "qwen3.attention.key_length" "$tmp/qwen3.gguf" && ok || bad "mkmodel's qwen3 file names no key_length"
# bench_batch on a small llama file: its table through the whole engine, the
# limit column left out on request (--ceilings 0: measuring it reads 1 GiB
# several times); a --ceilings that is not 0 or 1 is named, exit 2
run mkmodel $small "$tmp/llama.gguf"
run bench_batch --ceilings 0 --threads 1 --concurrency 1,2 --prompt 8 --decode 2 --kv 0 "$tmp/llama.gguf"
[ $rc -eq 0 ] && grep -q '% of limit |$' "$tmp/out" && [ "$(grep -c '^| [12] | 8 | 2 | .* | - | - |$' "$tmp/out")" = 2 ] && ok \
    || bad "bench_batch --ceilings 0 -> rc $rc, $(tail -c 600 "$tmp/out") $(cat "$tmp/err")"
# with the limit: the measuring process's ceilings line names the CPU kind,
# and each row its limit (what binds; * as the weights fit in the cache) and
# a share of it (the child reads 1 GiB several times: about 20 s here)
timeout 120 "$BIN/bench_batch" --threads 1 --concurrency 1 --prompt 8 --decode 2 --kv 0 "$tmp/llama.gguf" \
    > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q '^ceilings of this .* family [0-9]* model [0-9]* .*best read [0-9.]* GB/s' "$tmp/out" \
    && grep -Eq '^\| 1 \| 8 \| 2 \| .* \| [0-9.]+ \((read|int8|FMA|AMX)\)\*? \| [0-9]+% \|$' "$tmp/out" && ok \
    || bad "bench_batch with its limit -> rc $rc, $(grep -E '^(ceil|\| 1 )' "$tmp/out") $(cat "$tmp/err")"
run bench_batch --ceilings 2 "$tmp/llama.gguf"
[ $rc -eq 2 ] && grep -q -- "--ceilings wants an integer in 0..1, got '2'" "$tmp/err" && ok \
    || bad "bench_batch --ceilings 2 -> rc $rc, $(cat "$tmp/err")"
run mkmodel $small --arch mamba "$tmp/x.gguf"
[ $rc -eq 2 ] && grep -q "wants llama, qwen2 or qwen3" "$tmp/err" && ok || bad "--arch mamba -> rc $rc, $(cat "$tmp/err")"
# rows8_ab: a type it has no copy in eights for, or a shape the copy cannot
# hold, is named, exit 2; a small matrix gives both forms' rounds
for a in "--type F16" "--shape 12x256" "--shape 16x100"; do
    run rows8_ab $a
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "${a#--* }" "$tmp/err" && ok \
        || bad "rows8_ab $a -> rc $rc, stderr: $(cat "$tmp/err")"
done
for ty in Q4_K Q6_K; do
    run rows8_ab --type $ty --shape 16x256 --tokens 3 --copies 2 --rounds 1
    [ $rc -eq 0 ] && grep -q "^in place" "$tmp/out" && grep -q "^in eights" "$tmp/out" && ok \
        || bad "rows8_ab --type $ty -> rc $rc, stderr: $(cat "$tmp/err")"
done
# ceilings: a thread count or a size out of range is named, exit 2
for a in "--threads 0" "--threads 1,x" "--gib 100"; do
    run ceilings $a
    [ $rc -eq 2 ] && grep -q "wants an integer" "$tmp/err" && ok || bad "ceilings $a -> rc $rc, $(cat "$tmp/err")"
done
run mkmodel $small --head-dim 32 "$tmp/x.gguf"
[ $rc -eq 2 ] && grep -q "head-dim is for qwen3" "$tmp/err" && ok || bad "--head-dim on llama -> rc $rc, $(cat "$tmp/err")"

echo "tools: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
