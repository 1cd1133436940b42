#!/bin/sh
# bench_codec.sh - the weight codec's figures, what `make bench` runs after the
# forward-pass tables (BENCH_CODEC=0 skips it):
#  1. the entropy coder alone (build/fast/rans_bench): encode and decode MB/s on
#     one core, plain loop and AVX-512, beside zstd levels 3 and 19 on the same
#     bytes (64 MiB of int8 weights), at 14 probability bits and at the 12 the
#     weight codec uses;
#  2. what compress makes of real files, bits per byte beside the order-0
#     entropy: the default model (Q8_0 as shipped, and rounded to BF16 and F16
#     by compress --retype) and the TinyLlama-shaped BF16 benchmark file;
#  3. --low-mem: batched decode at 1 and 16 requests on the TinyLlama-shaped
#     BF16 file, uncompressed, on the fast tier (BF16E, --low-mem 1) and on
#     the rANS tier (a layer at a time, --low-mem 2), each in its own process
#     so that each peak RSS is its own.
#
#   BENCH_BIN   where the tools are [build/fast]
#   BENCH_DIR   where benchmark models are kept [build/bench-models]
#   BENCH_CODEC_SHAPE   the mkmodel preset of part 3 [tinyllama]
#   BENCH_CODEC_DECODE  decode steps timed per row in part 3 [16]
set -eu
bin=${BENCH_BIN:-build/fast}
dir=${BENCH_DIR:-build/bench-models}
shape=${BENCH_CODEC_SHAPE:-tinyllama}
steps=${BENCH_CODEC_DECODE:-16}
for tool in rans_bench compress mkmodel bench_batch; do
    [ -x "$bin/$tool" ] || { echo "bench_codec.sh: $bin/$tool is missing; run make fast first" >&2; exit 1; }
done
echo "bench_codec.sh: BENCH_CODEC_SHAPE=$shape BENCH_CODEC_DECODE=$steps sh tools/bench_codec.sh"
mkdir -p "$dir"
status=0

echo "== 1. the entropy coder, one core"
"$bin/rans_bench" --mib 64 --runs 5 || status=$?
echo "-- at 12 probability bits, what coded tensors use (one gather a symbol: rans.h, RANS_PACKED_BITS)"
"$bin/rans_bench" --mib 64 --runs 5 --bits 12 --no-zstd | grep -E "^rANS|decode|encode" || status=$?

echo
echo "== 2. compressed model files: per-plane entropy beside what was paid (compress's summary lines)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
summary() {   # NAME FILE
    if "$bin/compress" "$2" "$tmp/c.gguf" > "$tmp/table"; then
        echo "-- $1"
        grep -E "^(coded|file)" "$tmp/table"
        # the first two coded layers' rows show the planes (exponent first)
        grep -E "^blk\.0\.(attn_q|ffn_down)" "$tmp/table"
    else
        status=1
    fi
}
summary "default model, Q8_0 as shipped" data/shakespeare.gguf
for t in bf16 f16; do
    "$bin/compress" --retype "$t" data/shakespeare.gguf "$tmp/$t.gguf" > /dev/null
    summary "default model rounded to $(echo $t | tr a-z A-Z)" "$tmp/$t.gguf"
done
big="$dir/$shape-bf16.gguf"
if [ ! -f "$big" ]; then
    need=$("$bin/mkmodel" --preset "$shape" --type bf16 --size-only "$big")
    free=$(df -Pk "$dir" | awk 'NR == 2 { printf "%.0f\n", $4 * 1024 }')
    if [ $((2 * need + 1000000000)) -gt "$free" ]; then
        echo "bench_codec.sh: skipping the $shape file: it needs twice $need bytes, $free free"
        exit "$status"
    fi
    "$bin/mkmodel" --preset "$shape" --type bf16 "$big" > /dev/null
fi
coded="$dir/$shape-bf16.rans.gguf"
if "$bin/compress" "$big" "$coded" > "$tmp/table"; then
    echo "-- $shape shape, BF16 (random weights from mkmodel: uniform, not trained)"
    grep -E "^(coded|file)|^blk\.0\.(attn_q|ffn_down)" "$tmp/table"
else
    status=1
fi

echo
echo "== 3. --low-mem against the uncompressed file, 2 threads, $steps decode steps per row"
# the decode rows, the codec's line and the peak RSS (not the KV tables bench_batch adds)
rows='^(command|machine|commit|peak|codec)|^\| (N|1|16) \||^\|--:|2 threads, block'
"$bin/bench_batch" --concurrency 1,16 --decode "$steps" --kv 0 "$big" | grep -E "$rows" || status=$?
"$bin/bench_batch" --concurrency 1,16 --decode "$steps" --kv 0 --low-mem 1 "$coded" | grep -E "$rows" || status=$?
"$bin/bench_batch" --concurrency 1,16 --decode "$steps" --kv 0 --low-mem 2 "$coded" | grep -E "$rows" || status=$?
exit "$status"
