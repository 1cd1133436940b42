#!/bin/sh
# bench_trace.sh - what tracing costs: decode speed with the trace off and on.
#
#   sh tools/bench_trace.sh [RUNS]            (make bench runs it)
#
# One prompt on the default model, 200 tokens greedy, one thread: the engine's
# smallest steps (about a millisecond), where a per-step cost would show most.
# Four settings, run in turns (off, --trace, --trace=verbose, --trace-json) so
# that a burst of other work on the machine spoils one sample of each rather
# than every sample of one; each figure is the median of RUNS (default 7) runs
# of the decode tok/s that infer prints in its summary line. The trace text
# goes to /dev/null: this measures the engine's work, not a terminal's.
set -eu
runs=${1:-7}
bin=${BENCH_BIN:-build/fast}
model=${TRACE_MODEL:-data/shakespeare.gguf}
[ -x "$bin/infer" ] || { echo "bench_trace.sh: $bin/infer is missing; run make fast first" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "bench_trace.sh: $model, 200 tokens greedy, 1 thread, median of $runs runs per setting"
echo "command: sh tools/bench_trace.sh $runs"
for i in $(seq "$runs"); do
    for mode in off on verbose json; do
        case $mode in
            off) set -- ;;
            on) set -- --trace ;;
            verbose) set -- --trace=verbose ;;
            json) set -- --trace-json /dev/null ;;
        esac
        "$bin/infer" --model "$model" --prompt "ROMEO:" -n 200 --temperature 0 --threads 1 "$@" \
            2> "$tmp/err" > /dev/null
        sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p' "$tmp/err" >> "$tmp/$mode"
    done
done
. tools/median.sh
spread() { sort -n "$1" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f-%.1f", lo, hi }'; }
base=$(median < "$tmp/off")
printf '%-22s %12s %14s %10s\n' "setting" "decode tok/s" "range" "vs off"
for mode in off on verbose json; do
    m=$(median < "$tmp/$mode")
    case $mode in off) name="trace off";; on) name="--trace";; verbose) name="--trace=verbose";; json) name="--trace-json";; esac
    printf '%-22s %12.1f %14s %9.1f%%\n' "$name" "$m" "$(spread "$tmp/$mode")" "$(echo "$m $base" | awk '{ printf "%.1f", ($1 / $2 - 1) * 100 }')"
done
