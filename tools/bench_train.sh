#!/bin/sh
# bench_train.sh - training throughput: tools/train.c against PyTorch on one small Llama.
#
#   make fast && sh tools/bench_train.sh                  2 and 1 threads, 3 runs each
#   BENCH_TRAIN_THREADS=2 sh tools/bench_train.sh         2 threads only
#
# Both sides train the same shape (dim 128, FFN 352, 4 layers, 8 heads, 2 KV
# heads, vocab 512, context 256, tied classifier, 771,200 parameters) on
# batches of 8 x 256 tokens, with the same step: forward, cross-entropy,
# backward, gradient clipping at 1.0, AdamW (lr 1e-3, betas 0.9/0.99, weight
# decay 0.1), float32. notes/bench.md says how each side counts tokens/s.
#
# Environment (defaults in brackets):
#   BENCH_TRAIN_THREADS  thread counts, each its own pair of rows ["2 1"]
#   BENCH_TRAIN_RUNS     runs per row; the median is reported [3]
#   BENCH_DIR            where the tokenizer is made and reused [build/bench-models]
#   BENCH_BIN            where train and bpe_train are [build/fast]
#   BENCH_CORPUS         text the tokenizer and the C trainer read
#                        [../shared/corpus/tinyshakespeare.txt]
#   BENCH_PYTHON         Python interpreters to try for torch ["python3 /usr/bin/python3"]
#
# Builds nothing: run `make fast` first (`make bench` does). When PyTorch is
# missing and this runs as root with apt-get, it installs Debian's python3-torch;
# otherwise it says how, and prints the C figures alone.
set -eu

threads=${BENCH_TRAIN_THREADS:-"2 1"}
runs=${BENCH_TRAIN_RUNS:-3}
dir=${BENCH_DIR:-build/bench-models}
bin=${BENCH_BIN:-build/fast}
corpus=${BENCH_CORPUS:-../shared/corpus/tinyshakespeare.txt}
pythons=${BENCH_PYTHON:-"python3 /usr/bin/python3"}

say() { echo "bench_train.sh: $*"; }
load1() { cut -d' ' -f1 /proc/loadavg; }
. tools/median.sh
# 1234567.8 -> 1,234,568
commas() { awk -v n="$1" 'BEGIN { s = sprintf("%.0f", n)
                                  while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s)
                                  print s }'; }

say "BENCH_TRAIN_THREADS=\"$threads\" BENCH_TRAIN_RUNS=$runs" \
    "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} sh tools/bench_train.sh"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "none")
if [ "$commit" != none ] && [ -n "$(git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit + uncommitted changes"
fi
say "commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"

for tool in train bpe_train; do
    if [ ! -x "$bin/$tool" ]; then
        say "$bin/$tool is missing; run make fast first" >&2
        exit 1
    fi
done
if [ ! -f "$corpus" ]; then
    say "skipping the training benchmark: the corpus $corpus is absent (set BENCH_CORPUS)"
    exit 0
fi

mkdir -p "$dir"
tok=$dir/tok512.gguf
if [ -f "$tok" ]; then
    say "reusing $tok"
else
    "$bin/bpe_train" --input "$corpus" --vocab 512 --out "$tok" > "$dir/bpe_train.log" 2>&1 ||
        { cat "$dir/bpe_train.log" >&2; exit 1; }
    say "made $tok (512 tokens) from $corpus"
fi

# ---- PyTorch: find it, or install Debian's build when we may.
find_torch() {
    for py in $pythons; do
        if command -v "$py" > /dev/null 2>&1 && "$py" -c 'import torch' > /dev/null 2>&1; then
            echo "$py"
            return 0
        fi
    done
    return 1
}
py=$(find_torch || true)
if [ -z "$py" ] && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null 2>&1; then
    say "PyTorch not found; running: apt-get install -y python3-torch (log in $dir/apt-torch.log)"
    if ! apt-get install -y python3-torch > "$dir/apt-torch.log" 2>&1; then
        say "that failed; running: apt-get update && apt-get install -y python3-torch"
        { apt-get update && apt-get install -y python3-torch; } >> "$dir/apt-torch.log" 2>&1 || true
    fi
    py=$(find_torch || true)
    [ -n "$py" ] || { say "torch still does not import in any of: $pythons (BENCH_PYTHON);" \
                          "the last lines of $dir/apt-torch.log:"; tail -n 3 "$dir/apt-torch.log"; }
fi
if [ -z "$py" ]; then
    say "PyTorch is not available: C figures only. To add it, as root: apt-get install -y python3-torch"
fi

# ---- Measure: for each thread count, the C trainer, then PyTorch.
cargs="--dim 128 --hidden 352 --layers 4 --heads 8 --kv-heads 2 --ctx 256 --batch 8 --steps 33"
cargs="$cargs --warmup 3 --no-eval --f32 --dropout 0 --lr 1e-3 --wd 0.1 --beta2 0.99 --clip 1.0"
ccmd="$bin/train --tokenizer $tok --corpus $corpus --out $dir/train-bench.gguf $cargs"
say "C:       $ccmd --threads N"
[ -z "$py" ] || say "PyTorch: $py tools/bench_train.py --threads N --runs $runs"

nl='
'
table=""
for n in $threads; do
    c_load=$(load1)
    say "tools/train.c, $n threads, $runs runs of 33 steps (load average before: $c_load)"
    rates=""
    i=0
    while [ "$i" -lt "$runs" ]; do
        i=$((i + 1))
        # shellcheck disable=SC2086  # $cargs is options without spaces, split on purpose
        if ! "$bin/train" --tokenizer "$tok" --corpus "$corpus" --out "$dir/train-bench.gguf" \
                $cargs --threads "$n" > "$dir/train-bench.log" 2>&1; then
            cat "$dir/train-bench.log" >&2
            exit 1
        fi
        line=$(grep '^train: [0-9]* steps in ' "$dir/train-bench.log")
        echo "  $line"
        rates="$rates $(echo "$line" | sed 's/.*, \([0-9.]*\) tokens\/s$/\1/')"
    done
    rm -f "$dir/train-bench.gguf"
    c_med=$(for r in $rates; do echo "$r"; done | median)
    c_runs=$(for r in $rates; do commas "$r"; done | paste -sd' ')
    c_row="| tools/train.c | $n | $(commas "$c_med") | $c_runs | 33, from the first | $c_load |"

    ratio="" p_row=""
    if [ -n "$py" ]; then
        p_load=$(load1)
        say "PyTorch, $n threads, 3 warm-up steps then $runs runs of 30 steps (load average before: $p_load)"
        if pline=$("$py" tools/bench_train.py --threads "$n" --runs "$runs" 2> "$dir/bench_train_py.log"); then
            sed 's/^/  /' "$dir/bench_train_py.log"
            echo "  $pline"
            # "pytorch VER, N threads: 1,234 tokens/s (median of R runs of 30 steps after 3 warm-up steps: a, b, c)"
            p_ver=$(echo "$pline" | sed 's/^pytorch \([^,]*\),.*/\1/')
            p_med=$(echo "$pline" | sed 's/.*threads: \([0-9,]*\) tokens\/s.*/\1/' | tr -d ,)
            p_runs=$(echo "$pline" | sed 's/.*steps: \(.*\))$/\1/; s/, / /g')
            ratio=$(awk -v c="$c_med" -v p="$p_med" 'BEGIN { printf "%.2f", c / p }')
            p_row="| PyTorch $p_ver | $n | $(commas "$p_med") | $p_runs | 30, after 3 warm-up | $p_load | |"
        else
            cat "$dir/bench_train_py.log" >&2
            say "the PyTorch run failed; C figures only for $n threads"
        fi
    fi
    table="$table$c_row $ratio |$nl"
    [ -z "$p_row" ] || table="$table$p_row$nl"
done

echo
echo "| engine | threads | tokens/s (median) | runs | steps timed per run | load avg before | C / PyTorch |"
echo "|---|--:|--:|---|---|--:|--:|"
printf '%s' "$table"
