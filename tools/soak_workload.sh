#!/bin/sh
# soak_workload.sh [REQUESTS] [SEED] [SPAN_MS] - a long workload for infer,
# mixed the way tools/soak.c mixes its requests, as JSON lines on stdout.
#
#   sh tools/soak_workload.sh 1200 1 9500 > /tmp/soak.jsonl
#   build/fast/infer --model data/shakespeare.gguf --workload /tmp/soak.jsonl \
#       --policy priority --kv-blocks 24 --max-seqs 8 --chunk 64 --clock steps ...
#
# Request i is a pure function of (SEED, i): a prompt from a fixed list of
# openings (several share their first lines, so the prefix cache finds
# them), max_tokens 1..64, n = 1 (7 in 10) or 2-4 samples, greedy (4 in 10)
# or temperature 0.5-1.2 with top-k and top-p, priority low, normal or high,
# in 3 of 10 one or two stop strings, arrivals spread evenly at random over
# SPAN_MS. With the pool above the run lasts about ten thousand steps of the
# step clock, with preemptions, resumes from the prefix cache, forks and
# copies on write all through it: the scale test of the page that
# --trace-html writes (tests/browser.sh). The random numbers are
# Park-Miller's (exact in awk's doubles), so every awk gives the same file.
n=${1:-1200}
seed=${2:-1}
span=${3:-9500}
awk -v maxt="${4:-64}" -v n="$n" -v seed="$seed" -v span="$span" '
function rnd() { state = (state * 16807) % 2147483647; return state }
function pick(k) { return rnd() % k }
BEGIN {
    state = (seed * 7919 + 12345) % 2147483647; if (state == 0) state = 1
    np = split("ROMEO:|JULIET:\\nO Romeo, Romeo!|KING RICHARD II:|MENENIUS:|LADY CAPULET:|" \
        "First Citizen:\\nBefore we proceed any further, hear me speak.|" \
        "First Citizen:\\nBefore we proceed any further, hear me speak.\\n\\nAll:\\nSpeak, speak.|" \
        "First Citizen:\\nBefore we proceed any further, hear me speak.\\n\\nSecond Citizen:|" \
        "GLOUCESTER:\\nNow is the winter of our discontent|" \
        "GLOUCESTER:\\nNow is the winter of our discontent\\nMade glorious summer|" \
        "DUKE VINCENTIO:|ISABELLA:\\nI am a woe|PETRUCHIO:\\nGood morrow, Kate|" \
        "KING HENRY VI:|QUEEN MARGARET:\\nThou art|LUCIO:|BRUTUS:\\nThe people|" \
        "CORIOLANUS:\\nWhat is the matter, you dissentious rogues|" \
        "CORIOLANUS:\\nWhat is the matter, you dissentious rogues,\\nThat, rubbing the poor itch|" \
        "Nurse:\\nNow, by my maidenhead|PROSPERO:|MIRANDA:\\nIf by your art|BUCKINGHAM:|" \
        "HASTINGS:\\nGood morrow|AUTOLYCUS:|LEONTES:\\nToo hot, too hot", prompts, "|")
    ns = split("\\n\\n|the|,|.|ROMEO|e |\\n|I|and|?", stops, "|")
    split("low|normal|high", prio, "|")
    for (i = 0; i < n; i++) arr[i] = pick(span * 1000) / 1000.0
    for (i = 0; i < n; i++) {
        line = sprintf("{\"prompt\": \"%s\", \"max_tokens\": %d", prompts[pick(np) + 1], 1 + pick(maxt))
        if (pick(10) >= 7) line = line sprintf(", \"n\": %d", 2 + pick(3))
        if (pick(10) >= 4)
            line = line sprintf(", \"temperature\": %.2f, \"top_k\": %d, \"top_p\": %.2f, \"seed\": %d",
                                0.5 + pick(71) / 100.0, pick(3) ? 20 + pick(100) : 0, 0.8 + pick(21) / 100.0, pick(1000000))
        line = line sprintf(", \"priority\": \"%s\"", prio[pick(3) + 1])
        if (pick(10) < 3) {
            line = line sprintf(", \"stop\": [\"%s\"", stops[pick(ns) + 1])
            if (pick(2)) line = line sprintf(", \"%s\"", stops[pick(ns) + 1])
            line = line "]"
        }
        printf "%s, \"arrival_ms\": %.3f}\n", line, arr[i]
    }
}'
