#!/bin/sh
# bench.sh - make the benchmark models (once) and measure them: what `make bench` runs.
#
#   make bench                                     every shape and type below, 1 and 2 threads
#   BENCH_SHAPES=stories15M BENCH_THREADS=1 make bench          a quick subset
#   BENCH_SHAPES="stories110M" BENCH_TYPES=q8_0 sh tools/bench.sh
#   BENCH_TRAIN=0 BENCH_BATCH=0 make bench                      single-stream only
#
# Steps: the machine's ceilings (build/fast/ceilings: the best of several read
# loops, the FMA and VNNI peaks, the CPU kind), the training benchmark
# (tools/bench_train.sh), the single-stream
# forward pass (build/fast/bench), then batched decode through the serving
# engine (build/fast/bench_batch) on the same models; the default model
# served over HTTP (build/fast/serve, build/fast/bench_serve); last, the
# engine beside llama.cpp on the TinyLlama-shaped files, then on the Qwen ones.
#
# Environment (defaults in brackets):
#   BENCH_SHAPES   mkmodel presets ["stories15M stories110M tinyllama"]
#   BENCH_TYPES    weight types ["f32 q8_0 q4_0 q4_k q6_k"]
#   BENCH_QWEN     Qwen presets measured too, beside llama.cpp at the end
#                  ["qwen2.5-0.5b qwen3-0.6b"; "" skips them]
#   BENCH_QWEN_TYPES  their weight types ["q8_0"]
#   BENCH_THREADS  thread counts ["1 2"]
#   BENCH_DIR      where models are kept and reused [build/bench-models]
#   BENCH_BIN      where mkmodel, bench and bench_batch are [build/fast]
#   BENCH_ARGS     more options for bench, e.g. "--runs 5 --decode 64" []
#   BENCH_BATCH    0 skips the batched benchmark (tools/bench_batch.c) [1]
#   BENCH_BATCH_THREADS  its thread counts ["2"]
#   BENCH_BATCH_ARGS     more options for bench_batch, e.g. "--concurrency 1,16" []
#   BENCH_TRACE    0 skips the cost of tracing (tools/bench_trace.sh) [1]
#   BENCH_SPEC     0 skips speculative decoding on the copying workload (tools/bench_spec.sh) [1]
#   BENCH_CODEC    0 skips the weight codec's figures (tools/bench_codec.sh) [1]
#   BENCH_SERVE    0 skips serving over HTTP at 1, 4 and 16 clients (tools/bench_serve.sh) [1]
#   BENCH_LLAMACPP 0 skips llama.cpp side by side on the TinyLlama-shaped files
#                  (tools/bench_llamacpp.sh; needs node and npm) [1]
#
# Models are random-weight files from tools/mkmodel.c, made once and reused
# (delete BENCH_DIR to remake them). Before writing one, the free disk space is
# checked against the exact size mkmodel will write; before measuring one, the
# free memory is checked against its size, since a model that does not fit in
# memory would be re-read from disk and the benchmark would time the disk.
set -eu

shapes=${BENCH_SHAPES:-"stories15M stories110M tinyllama"}
types=${BENCH_TYPES:-"f32 q8_0 q4_0 q4_k q6_k"}
qwen=${BENCH_QWEN-"qwen2.5-0.5b qwen3-0.6b"}
qwen_types=${BENCH_QWEN_TYPES:-"q8_0"}
threads=${BENCH_THREADS:-"1 2"}
dir=${BENCH_DIR:-build/bench-models}
bin=${BENCH_BIN:-build/fast}
extra=${BENCH_ARGS:-}
batch=${BENCH_BATCH:-1}
batch_threads=${BENCH_BATCH_THREADS:-"2"}
batch_extra=${BENCH_BATCH_ARGS:-}

tools="mkmodel bench"
if [ "$batch" != 0 ]; then tools="$tools bench_batch"; fi
for tool in $tools; do
    if [ ! -x "$bin/$tool" ]; then
        echo "bench.sh: $bin/$tool is missing; run make fast first" >&2
        exit 1
    fi
done

gb() { awk -v b="$1" 'BEGIN { printf "%.2f GB", b / 1e9 }'; }

commit=$(git rev-parse --short HEAD 2>/dev/null || echo "none")
if [ "$commit" != none ] && [ -n "$(git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit + uncommitted changes"
fi
echo "bench.sh: BENCH_SHAPES=\"$shapes\" BENCH_TYPES=\"$types\" BENCH_QWEN=\"$qwen\" BENCH_QWEN_TYPES=\"$qwen_types\"" \
     "BENCH_THREADS=\"$threads\"" \
     "BENCH_ARGS=\"$extra\" BENCH_BATCH=$batch BENCH_BATCH_THREADS=\"$batch_threads\"" \
     "BENCH_BATCH_ARGS=\"$batch_extra\" OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} sh tools/bench.sh"
echo "bench.sh: commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC')"

mkdir -p "$dir"
mem_avail=$(awk '/^MemAvailable:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
echo "bench.sh: $(gb "$(df -Pk "$dir" | awk 'NR == 2 { printf "%.0f\n", $4 * 1024 }')") free on disk in $dir," \
     "$(gb "$mem_avail") of memory available"

models=""
for shape in $shapes $qwen; do
    shape_types=$types
    case " $qwen " in *" $shape "*) shape_types=$qwen_types ;; esac
    for type in $shape_types; do
        path="$dir/$shape-$type.gguf"
        if [ -f "$path" ]; then
            echo "bench.sh: reusing $path ($(gb "$(wc -c < "$path")"))"
        else
            # a shape the type cannot hold (K formats want widths that are multiples of 256)
            if ! need=$("$bin/mkmodel" --preset "$shape" --type "$type" --size-only "$path" 2>&1); then
                echo "bench.sh: skipping $shape $type: $need"
                continue
            fi
            free=$(df -Pk "$dir" | awk 'NR == 2 { printf "%.0f\n", $4 * 1024 }')
            # Keep 1 GB spare so the disk is never filled to the last byte.
            if [ $((need + 1000000000)) -gt "$free" ]; then
                echo "bench.sh: skipping $shape $type: it needs $(gb "$need"), $(gb "$free") free"
                continue
            fi
            "$bin/mkmodel" --preset "$shape" --type "$type" "$path"
        fi
        size=$(wc -c < "$path")
        if [ "$size" -gt "$mem_avail" ]; then
            echo "bench.sh: skipping $path: $(gb "$size") is more than the $(gb "$mem_avail") of free memory"
            continue
        fi
        models="$models $path"
    done
done
if [ -z "$models" ]; then
    echo "bench.sh: no model to measure" >&2
    exit 1
fi

# the machine's ceilings, with the CPU kind (bench measures its read ceiling the same way)
if [ -x "$bin/ceilings" ]; then "$bin/ceilings" || echo "bench.sh: $bin/ceilings failed" >&2; echo; fi
if [ "${BENCH_TRAIN:-1}" != 0 ]; then sh tools/bench_train.sh || echo "bench.sh: tools/bench_train.sh failed" >&2; echo; fi
echo
# $extra, $batch_extra and $models are word-split on purpose: options and paths
# without spaces. Both benchmarks run even if the first fails; the script fails
# if either did.
status=0
# shellcheck disable=SC2086
"$bin/bench" --threads "$(echo $threads | tr ' ' ',')" $extra $models || status=$?
if [ "$batch" != 0 ]; then
    echo
    # shellcheck disable=SC2086
    "$bin/bench_batch" --threads "$(echo $batch_threads | tr ' ' ',')" $batch_extra $models || status=$?
fi
if [ "${BENCH_CODEC:-1}" != 0 ]; then
    echo
    BENCH_BIN="$bin" BENCH_DIR="$dir" sh tools/bench_codec.sh || status=$?
fi
if [ "${BENCH_TRACE:-1}" != 0 ]; then
    echo
    BENCH_BIN="$bin" sh tools/bench_trace.sh || status=$?
fi
if [ "${BENCH_SPEC:-1}" != 0 ]; then
    echo
    BENCH_BIN="$bin" sh tools/bench_spec.sh || status=$?
fi
if [ "${BENCH_SERVE:-1}" != 0 ]; then
    echo
    BENCH_BIN="$bin" sh tools/bench_serve.sh || status=$?
fi
if [ "${BENCH_LLAMACPP:-1}" != 0 ]; then
    echo
    BENCH_BIN="$bin" BENCH_DIR="$dir" sh tools/bench_llamacpp.sh || status=$?
    for shape in $qwen; do
        echo
        BENCH_BIN="$bin" BENCH_DIR="$dir" BENCH_LLAMACPP_SHAPE=$shape BENCH_LLAMACPP_TYPES="$qwen_types" \
            sh tools/bench_llamacpp.sh || status=$?
    done
fi
exit "$status"
