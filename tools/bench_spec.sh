#!/bin/sh
# bench_spec.sh - what speculative decoding buys: decode speed with and
# without --speculate on a workload whose outputs copy from their prompts.
#
#   sh tools/bench_spec.sh [RUNS]            (make bench runs it)
#
# data/workload-copy.jsonl: 16 requests, each a line said three times and
# the speaker's name again, 96 tokens greedy; the default model goes on by
# copying (its own lines and the prompt's), which is where prompt lookup
# guesses well. One thread. Two batch sizes:
#   single stream   --max-seqs 1: the requests one after another, so every
#                   decode step is one sequence's
#   16 at once      --max-seqs 16: every request in every step
# and for each, the settings run in turns (off, then each K, then off again
# ...) so that a burst of other work on the machine spoils one sample of
# each rather than every sample of one. A figure is the median over RUNS
# (default 7) runs of what infer's totals line prints: TPOT p50 (the
# median request's time per output token after its first, pure decode) and
# output tok/s (every token over the whole run, prefill included), with
# the range of each; speed-up is off's median TPOT over the setting's. The
# acceptance rate is the share of guessed tokens the model kept (the same
# in every run: greedy, so the guesses are the same).
set -eu
runs=${1:-7}
bin=${BENCH_BIN:-build/fast}
model=${SPEC_MODEL:-data/shakespeare.gguf}
work=${SPEC_WORKLOAD:-data/workload-copy.jsonl}
[ -x "$bin/infer" ] || { echo "bench_spec.sh: $bin/infer is missing; run make fast first" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "bench_spec.sh: $model on $work, 1 thread, median of $runs runs per setting"
echo "command: sh tools/bench_spec.sh $runs"
echo "cpu: $cpu ($(nproc) cores online, load average $(cut -d' ' -f1-3 /proc/loadavg))"
# setting NAME: its infer options
setting() {
    case $1 in
        off) echo "--speculate 0" ;;
        k3) echo "--speculate 3" ;;
        k4) echo "--speculate 4" ;;
        k8) echo "--speculate 8" ;;
        k4-nolimit) echo "--speculate 4 --spec-limit 256" ;;
    esac
}
for i in $(seq "$runs"); do
    for seqs in 1 16; do
        for s in off k3 k4 k8 k4-nolimit; do
            [ "$seqs" = 1 ] && [ "$s" = k4-nolimit ] && continue   # one sequence never fills a step
            # shellcheck disable=SC2046
            "$bin/infer" --model "$model" --workload "$work" --max-seqs $seqs --threads 1 $(setting $s) \
                2> "$tmp/err" > /dev/null
            line=$(grep '^totals:' "$tmp/err")
            echo "$line" | sed -n 's/.*TPOT p50 \([0-9.]*\) ms.*/\1/p' >> "$tmp/tpot.$seqs.$s"
            echo "$line" | sed -n 's/.* \([0-9.]*\) output tok\/s.*/\1/p' >> "$tmp/tps.$seqs.$s"
            echo "$line" | sed -n 's/.*accepted (\([0-9]*\)%).*/\1%/p' > "$tmp/acc.$seqs.$s"
        done
    done
done
. tools/median.sh
spread() { sort -g "$1" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
printf '| %-13s | %-34s | %13s | %11s | %13s | %11s | %8s | %8s |\n' "requests" "setting" "TPOT p50 ms" "range" \
    "output tok/s" "range" "speed-up" "accepted"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "---" "---" "--:" "--:" "--:" "--:" "--:" "--:"
for seqs in 1 16; do
    base=$(median < "$tmp/tpot.$seqs.off")
    for s in off k3 k4 k8 k4-nolimit; do
        [ -f "$tmp/tpot.$seqs.$s" ] || continue
        m=$(median < "$tmp/tpot.$seqs.$s")
        acc=$(cat "$tmp/acc.$seqs.$s"); [ -n "$acc" ] || acc="-"
        name=$([ "$seqs" = 1 ] && echo "single stream" || echo "16 at once")
        printf '| %-13s | %-34s | %13s | %11s | %13s | %11s | %7.2fx | %8s |\n' "$name" "$(setting $s)" "$m" \
            "$(spread "$tmp/tpot.$seqs.$s")" "$(median < "$tmp/tps.$seqs.$s")" "$(spread "$tmp/tps.$seqs.$s")" \
            "$(echo "$base $m" | awk '{ print $1 / $2 }')" "$acc"
    done
done
