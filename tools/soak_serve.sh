#!/bin/sh
# soak_serve.sh [REQUESTS] - the soak through HTTP: build/fast/serve (or
# SOAK_BIN's) on the default model with a KV pool small enough to preempt,
# then bench_serve: a warm-up of 100 requests, then REQUESTS more (default
# 10000), half completions and half chat, 8 clients at a time, every 9th
# leaving after its first text. Checked at the end: every request answered
# (none failed), no KV block held, nothing in flight, the RSS within 16 MB
# of what it was after the warm-up, and a clean exit on SIGTERM (under ASan
# that includes the leak check). make soak runs it; tests/server.sh runs a
# short one on the ASan build.
# Prints "soak_serve: N passed, N failed"; exits non-zero on any failure.
BIN=${SOAK_BIN:-build/fast}
N=${1:-10000}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
. tools/serve_start.sh
export OMP_NUM_THREADS=1
serve_start "$BIN" "$tmp/serve.err" --threads 1 --max-seqs 8 --kv-blocks 24 || exit 1
pid=$SERVE_PID
URL=$SERVE_URL
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
metric() { curl -s "$URL/metrics" | sed -n "s/^$1 //p"; }
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$pid/status; }
bench() { "$BIN/bench_serve" --url "$URL" --concurrency 8 --max-tokens 24 --prompt-chars 120 "$@"; }

bench --requests 100 > "$tmp/warm" 2>&1 || bad "the warm-up: $(cat "$tmp/warm")"
rss0=$(rss)
half=$((N / 2))
for kind in completion chat; do
    flag=""; [ $kind = chat ] && flag=--chat
    n=$half; [ $kind = chat ] && n=$((N - half))
    cut=$((n / 9))
    bench --requests $n --disconnect-every 9 --seed 7 $flag > "$tmp/$kind" 2>&1 || bad "$kind: $(cat "$tmp/$kind")"
    grep -q "^completed $((n - cut)), failed 0, disconnected on purpose $cut\$" "$tmp/$kind" && ok ||
        bad "$kind: $(grep -e completed -e failed "$tmp/$kind")"
done
rss1=$(rss)
for _ in $(seq 100); do [ "$(metric llm_http_requests_in_flight)" = 0 ] && break; sleep 0.05; done
held=$(metric 'llm_kv_blocks{state="held"}')
[ "$held" = 0 ] && ok || bad "$held KV blocks still held"
[ "$(metric llm_http_requests_in_flight)" = 0 ] && ok || bad "requests still in flight"
ended=$(curl -s "$URL/metrics" | awk '/^llm_requests_total\{/ { n += $2 } END { print n }')
[ "$ended" -eq $((N + 100)) ] && ok || bad "$ended requests counted as ended, want $((N + 100))"
growth=$((rss1 - rss0))
echo "soak_serve: $((N + 100)) requests, $(metric llm_preemptions_total) preemptions, $(metric 'llm_requests_total{state="cancel"}') cancelled;" \
     "RSS ${rss0} kB after the warm-up, ${rss1} kB at the end (growth ${growth} kB, bound 16384 kB)"
[ "$growth" -lt 16384 ] && ok || bad "the RSS grew by $growth kB"
kill -TERM $pid
wait $pid; rc=$?
[ $rc -eq 0 ] && ok || bad "the server exited with status $rc: $(tail -5 "$tmp/serve.err")"
echo "soak_serve: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
