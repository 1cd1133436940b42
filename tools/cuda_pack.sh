#!/bin/sh
# cuda_pack.sh - everything tools/cuda_check.sh needs on a GPU machine that
# has a CUDA driver but none of this project's libraries or fixtures, packed
# into one file to carry there:
#
#   tools/cuda_pack.sh [BASELINE_COMMIT]
#
# Builds `make cuda` from the committed tree (a clean worktree of HEAD, so
# edits in progress stay out), strips the programs cuda_check.sh runs
# (infer, kcheck, gpucheck, mkmodel, bench_batch, compress), copies the shared
# libraries they load that a bare machine lacks (OpenBLAS and its runtime,
# cJSON, PCRE2) and the fixtures the check reads, and writes
# .gpu/pack.tar.xz (about 30 MB). With BASELINE_COMMIT, that commit's
# gpucheck goes in too, as gpucheck-0-base, and cuda_check.sh's settings
# table compares against it. .gpu/ is kept out of git (.git/info/exclude).
#
# On the GPU machine, from the repository root:
#
#   cd .gpu && tar xJf pack.tar.xz && cd .. && export LD_LIBRARY_PATH=$PWD/.gpu/lib &&
#   BIN=.gpu/bin FIXTURES=.gpu/fixtures tools/cuda_check.sh
set -eu
FIXTURES=${FIXTURES:-../shared/fixtures}
base=${1:-}
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt/head" 2>/dev/null; git worktree remove --force "$wt/base" 2>/dev/null; rm -rf "$wt"' EXIT
build() {   # build COMMIT DIR TARGETS...
    c=$1 d=$2
    shift 2
    git worktree add -q --detach "$d" "$c"
    make -s -C "$d" -j"$(nproc)" "$@" > "$d.log" 2>&1 || { tail -20 "$d.log"; echo "cuda_pack: make cuda failed at $c" >&2; exit 1; }
}
build HEAD "$wt/head" cuda
rm -rf .gpu/bin .gpu/lib .gpu/fixtures
mkdir -p .gpu/bin .gpu/lib .gpu/fixtures
for b in infer kcheck gpucheck mkmodel bench_batch compress; do strip -o ".gpu/bin/$b" "$wt/head/build/cuda/$b"; done
if [ -n "$base" ]; then
    build "$base" "$wt/base" build/cuda/gpucheck
    strip -o .gpu/bin/gpucheck-0-base "$wt/base/build/cuda/gpucheck"
fi
# the libraries a machine with only a driver and a C runtime lacks
ldd .gpu/bin/infer .gpu/bin/bench_batch | awk '/=>/ { print $3 }' | sort -u |
    grep -v -e 'libc\.so' -e 'libm\.so' -e 'libstdc++' -e 'libgcc_s' -e 'libpthread' -e 'libdl\.so' -e 'librt\.so' |
    while read -r l; do cp -L "$l" .gpu/lib/; done
for f in tiny/tiny-f32.gguf tiny/tiny-f16.gguf tiny/tiny-bf16.gguf tiny/tiny-q8_0.gguf tiny/tiny.bin \
         tiny/tokenizer.bin rand/rand-f32.gguf rand/rand-f16.gguf quant/quant-q4_0.gguf quant/quant-q4_k_m.gguf \
         quant/quant-q6_k.gguf llama3/llama3-q8_0.gguf; do
    [ -f "$FIXTURES/$f" ] || { echo "cuda_pack: $FIXTURES/$f is missing" >&2; exit 1; }
    mkdir -p ".gpu/fixtures/$(dirname "$f")"
    cp "$FIXTURES/$f" ".gpu/fixtures/$f"
done
tar cf - -C .gpu bin lib fixtures | xz -T0 -6 > .gpu/pack.tar.xz
echo "cuda_pack: .gpu/pack.tar.xz, $(du -m .gpu/pack.tar.xz | cut -f1) MB, from $(git rev-parse --short HEAD)${base:+ (baseline $base)}"
