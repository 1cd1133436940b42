#!/bin/sh
# bench_llamacpp.sh - the engine and llama.cpp side by side on the same
# files, on this machine, in one run: what `make bench` runs last.
#
#   sh tools/bench_llamacpp.sh                  TinyLlama-shaped files of build/bench-models
#   BENCH_LLAMACPP_TYPES="f32 q8_0" sh tools/bench_llamacpp.sh
#
# llama.cpp is the build that node-llama-cpp ships prebuilt for linux-x64,
# pinned by tools/llamacpp/package-lock.json and installed from it into
# build/llamacpp (the npm registry is the only download; npm install with
# --omit=optional, because npm ci insists on lock entries for the other
# platforms' binaries, which npm does not write). tools/llamacpp/
# decode.mjs times it as build/fast/bench and build/fast/bench_batch time the
# engine: an 8-token prompt, then decode steps, each computing the logits of
# every sequence and picking the greedy token.
#
# For each weight type, a row per run, each measured in ROUNDS rounds that
# alternate engine, llama.cpp, engine, llama.cpp (so a change in the
# machine's load hits both):
#   single   1 x 1 thread    one sequence, 1 thread: tok/s
#   single2  1 x 2 threads   one sequence, 2 threads
#   batch    16 x 2 threads  16 sequences decoding together, 2 threads
#   batch64  64 x 2 threads  64 sequences
#   prefill  prefill 128 x 2 threads: a 128-token prompt in one call
#            (build/fast/bench --prompt 128, decode.mjs ... 128)
# and the ratio of the medians (engine / llama.cpp).
#
# Environment (defaults in brackets):
#   BENCH_DIR             where the models are [build/bench-models]
#   BENCH_BIN             where bench and bench_batch are [build/fast]
#   BENCH_LLAMACPP_SHAPE  the mkmodel preset of the files [tinyllama]
#   BENCH_LLAMACPP_TYPES  weight types ["f32 q8_0 q4_0 q4_k q6_k"]
#   BENCH_LLAMACPP_STEPS  decode steps timed [16]
#   BENCH_LLAMACPP_ROUNDS rounds [2]
#   BENCH_LLAMACPP_RUNS   the rows of each type ["single batch"; all of
#                         them: "single single2 batch batch64 prefill"]
set -eu
dir=${BENCH_DIR:-build/bench-models}
bin=${BENCH_BIN:-build/fast}
shape=${BENCH_LLAMACPP_SHAPE:-tinyllama}
types=${BENCH_LLAMACPP_TYPES:-"f32 q8_0 q4_0 q4_k q6_k"}
steps=${BENCH_LLAMACPP_STEPS:-16}
rounds=${BENCH_LLAMACPP_ROUNDS:-2}
runs=${BENCH_LLAMACPP_RUNS:-"single batch"}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "bench_llamacpp.sh: skipped (node and npm are not installed)"; exit 0
fi
lib=build/llamacpp
mkdir -p $lib
cp tools/llamacpp/decode.mjs $lib/
if ! cmp -s tools/llamacpp/package-lock.json $lib/package-lock.json || [ ! -d $lib/node_modules/node-llama-cpp ]; then
    cp tools/llamacpp/package.json tools/llamacpp/package-lock.json $lib/
    echo "bench_llamacpp.sh: npm install in $lib (node-llama-cpp and its prebuilt llama.cpp for linux-x64)"
    if ! (cd $lib && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional --ignore-scripts --no-audit \
              --no-fund --loglevel=error >npm.log 2>&1); then
        echo "bench_llamacpp.sh: npm install failed: $(tail -3 $lib/npm.log)" >&2; rm -f $lib/package-lock.json; exit 1
    fi
    cp tools/llamacpp/package-lock.json $lib/   # as pinned, for the comparison next time
fi
version=$(node -p "require('./$lib/node_modules/node-llama-cpp/package.json').version")
release=$(node -p "require('./$lib/node_modules/node-llama-cpp/llama/llama.cpp.info.json').tag")
echo "bench_llamacpp.sh: engine at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), llama.cpp $release" \
     "as prebuilt by node-llama-cpp $version; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "bench_llamacpp.sh: BENCH_LLAMACPP_SHAPE=$shape BENCH_LLAMACPP_TYPES=\"$types\" BENCH_LLAMACPP_STEPS=$steps BENCH_LLAMACPP_ROUNDS=$rounds BENCH_LLAMACPP_RUNS=\"$runs\" sh tools/bench_llamacpp.sh"

. tools/median.sh

# ours_single MODEL THREADS; ours_batch MODEL SEQUENCES; ours_prefill MODEL PROMPT (2 threads)
ours_single() { "$bin/bench" --threads "$2" --prompt 8 --decode "$steps" --runs 1 "$1" 2>/dev/null |
                awk -F'|' '/^\| / && $3 ~ /[A-Z]/ && $10 + 0 > 0 { gsub(/ /, "", $10); print $10 }'; }
ours_batch() { "$bin/bench_batch" --threads 2 --concurrency "$2" --prompt 8 --decode "$steps" --ceilings 0 "$1" 2>/dev/null |
               awk -F'|' -v c="$2" '$2 + 0 == c && $3 ~ /^ 8 $/ { gsub(/ /, "", $5); print $5; exit }'; }
ours_prefill() { "$bin/bench" --threads 2 --prompt "$2" --decode 1 --runs 1 "$1" 2>/dev/null |
                 awk -F'|' '/^\| / && $3 ~ /[A-Z]/ && $7 + 0 > 0 { gsub(/ /, "", $7); print $7 }'; }
# theirs MODEL SEQUENCES THREADS [PROMPT]
theirs() { node $lib/decode.mjs "$1" "$2" "$steps" "$3" ${4:-} 2>/dev/null |
           awk '/tok\/s/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "tok/s,") print $i }'; }

echo "bench_llamacpp.sh: the $shape files (tools/mkmodel.c --preset $shape)"
printf '| type | run | engine tok/s | llama.cpp tok/s | engine / llama.cpp |\n|---|---|--:|--:|--:|\n'
for type in $types; do
    model="$dir/$shape-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "| $type | (no $model: make bench makes it) | | | |"; continue
    fi
    for run in $runs; do
        a=""; b=""
        r=0
        while [ $r -lt "$rounds" ]; do
            case $run in
            single) x=$(ours_single "$model" 1); y=$(theirs "$model" 1 1) ;;
            single2) x=$(ours_single "$model" 2); y=$(theirs "$model" 1 2) ;;
            batch) x=$(ours_batch "$model" 16); y=$(theirs "$model" 16 2) ;;
            batch64) x=$(ours_batch "$model" 64); y=$(theirs "$model" 64 2) ;;
            prefill) x=$(ours_prefill "$model" 128); y=$(theirs "$model" 1 2 128) ;;
            *) echo "bench_llamacpp.sh: unknown run '$run' in BENCH_LLAMACPP_RUNS" >&2; exit 2 ;;
            esac
            a="$a ${x:-nan}"; b="$b ${y:-nan}"
            r=$((r + 1))
        done
        ma=$(echo $a | tr ' ' '\n' | median); mb=$(echo $b | tr ' ' '\n' | median)
        case $run in
        single) label="1 x 1 thread" ;; single2) label="1 x 2 threads" ;; batch) label="16 x 2 threads" ;;
        batch64) label="64 x 2 threads" ;; prefill) label="prefill 128 x 2 threads" ;;
        esac
        printf '| %s | %s | %s (%s) | %s (%s) | %s |\n' "$type" "$label" "$ma" "$(echo $a | tr ' ' ',')" "$mb" \
            "$(echo $b | tr ' ' ',')" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')"
    done
done
