#!/bin/sh
# cuda.sh - the CUDA wing builds, and asking for a GPU where there is none
# fails cleanly. Needs no GPU: where nvcc is missing it says it skipped.
#  1. `make cuda-compile`: every src/kernels/*.cu and tools/kcheck.cu through
#     nvcc with -Werror (sm_90), infer and kcheck linked with the kernels.
#  2. That infer, asked for --device cuda on a machine without a GPU, says so
#     in one line and exits 1 (with a GPU: it generates, exit 0).
#  3. A build without the kernels (build/asan/infer) answers --device cuda
#     with one line naming make cuda, exit 1; --device tpu is refused (exit 2).
# Prints "N passed, N failed"; exits non-zero on any failure.
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
M=data/shakespeare.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"${INFER:-build/asan/infer}" --model $M --prompt a -n 2 --device cuda > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "this build has no CUDA kernels.*make cuda" "$tmp/e" && ok \
    || bad "--device cuda in a build without CUDA: exit $rc, $(cat "$tmp/e")"
"${INFER:-build/asan/infer}" --model $M --prompt a -n 2 --device tpu > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "device: 'tpu' is not cpu or cuda" "$tmp/e" && ok || bad "--device tpu: exit $rc, $(cat "$tmp/e")"

if [ ! -x "$NVCC" ]; then
    echo "skipped: the CUDA compile suite ($NVCC not found; CUDA_HOME names the toolkit)"
else
    if make -s -j"$(nproc 2>/dev/null || echo 2)" cuda-compile > "$tmp/log" 2>&1; then ok; else bad "make cuda-compile failed:"; tail -20 "$tmp/log"; fi
    if [ -x build/cuda/infer-asan ]; then
        build/cuda/infer-asan --model $M --prompt a -n 2 --device cuda > /dev/null 2> "$tmp/e"; rc=$?
        if nvidia-smi -L > /dev/null 2>&1; then
            [ $rc -eq 0 ] && ok || bad "--device cuda on a GPU: exit $rc, $(cat "$tmp/e")"
        else
            [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "no CUDA GPU here" "$tmp/e" && ok \
                || bad "--device cuda without a GPU: exit $rc, $(cat "$tmp/e")"
        fi
    fi
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
