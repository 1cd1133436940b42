#!/bin/sh
# bench_serve.sh - serving figures over HTTP: build/fast/serve on the
# default model, and tools/bench_serve.c at 1, 4 and 16 concurrent clients
# (streamed completions of BENCH_SERVE_TOKENS tokens, ignore_eos, prompts
# from the corpus). make bench runs it (BENCH_SERVE=0 skips it); the
# figures are vLLM's: TTFT, TPOT, ITL and E2EL, requests/s and output tok/s.
# Each concurrency draws its own prompts (--seed): with the same ones, the
# server's prefix cache would serve the later runs' prompts from the first's.
#
# Environment: BENCH_BIN [build/fast], SERVE_MODEL [data/shakespeare.gguf],
# BENCH_SERVE_CLIENTS ["1 4 16"],
# BENCH_SERVE_REQUESTS per concurrency [64], BENCH_SERVE_TOKENS [128],
# BENCH_SERVE_THREADS kernel threads of the server [2].
set -eu
bin=${BENCH_BIN:-build/fast}
clients=${BENCH_SERVE_CLIENTS:-"1 4 16"}
requests=${BENCH_SERVE_REQUESTS:-64}
tokens=${BENCH_SERVE_TOKENS:-128}
threads=${BENCH_SERVE_THREADS:-2}
for tool in serve bench_serve; do
    [ -x "$bin/$tool" ] || { echo "bench_serve.sh: $bin/$tool is missing; run make fast first" >&2; exit 1; }
done
tmp=$(mktemp -d)
. tools/serve_start.sh
serve_start "$bin" "$tmp/serve.err" --threads "$threads" || exit 1
pid=$SERVE_PID
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
echo "bench_serve.sh: $(head -n 1 "$tmp/serve.err"), $threads kernel threads"
status=0
for c in $clients; do
    echo
    "$bin/bench_serve" --url "$SERVE_URL" --concurrency "$c" --requests "$requests" \
        --max-tokens "$tokens" --ignore-eos --seed "$c" || status=$?
done
exit "$status"
