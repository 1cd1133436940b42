#!/bin/sh
# browser.sh - the page of infer --trace-html in a real browser: Debian's
# chromium, headless, driven by playwright-core (the version pinned in
# tests/browser/package-lock.json, installed by npm ci into build/browser
# once, and again when the lock file changes: tools/browser_setup.sh).
# tests/browser/check.mjs says what is checked: at the first preemption of
# data/workload-preempt.jsonl the page shows the KV map, the counts and
# every request's state that the text trace of the same run printed; the
# keys work; the console stays clean; a planted change to the page's KV map
# fails the comparison; a wall-clock run with samples draws their shared
# block and its copies on write. Then the scale:
# a run of about ten thousand steps (tools/soak_workload.sh, made with
# build/fast/infer) opens and steps without lag, and its size, load time and
# time per step are printed. About 15 s, most of it the long run.
# Without chromium, node or npm the test is skipped; under CI (CI=true,
# where .ci/run installs them) that is a failure.
INFER=${INFER:-build/asan/infer}
FAST=${FAST_INFER:-build/fast/infer}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
MODEL=data/shakespeare.gguf
missing() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and under CI that is a failure"; echo "browser: 0 passed, 1 failed"; exit 1
    fi
    echo "browser: skipped ($1)"; exit 0
}
broken() { echo "FAIL: $1"; echo "browser: 0 passed, 1 failed"; exit 1; }
[ -x "$CHROMIUM" ] || missing "no chromium at $CHROMIUM: apt-get install chromium"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing "node and npm are not installed"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=build/browser
. tools/browser_setup.sh
browser_setup $dir 2> "$tmp/npm.err" || broken "$(cat "$tmp/npm.err")"
cp tests/browser/check.mjs $dir/
export OMP_NUM_THREADS=1
"$INFER" --model $MODEL --workload data/workload-preempt.jsonl --policy priority --kv-blocks 10 --max-seqs 4 \
    --clock steps --threads 1 --trace --trace-html "$tmp/page.html" > /dev/null 2> "$tmp/trace.txt" ||
    broken "the traced run failed: $(tail -1 "$tmp/trace.txt")"
printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 12, "n": 3, "temperature": 0.9, "seed": 3}' > "$tmp/fork.jsonl"
"$INFER" --model $MODEL --workload "$tmp/fork.jsonl" --threads 1 --trace-html "$tmp/fork.html" > /dev/null 2> "$tmp/fork.err" ||
    broken "the run with samples failed: $(tail -1 "$tmp/fork.err")"
soak=""
if [ -x "$FAST" ]; then
    sh tools/soak_workload.sh 520 1 15000 64 > "$tmp/soak.jsonl"
    "$FAST" --model $MODEL --workload "$tmp/soak.jsonl" --policy priority --kv-blocks 8 --max-seqs 4 --chunk 64 \
        --clock steps --threads 1 --trace-html "$tmp/soak.html" > /dev/null 2> "$tmp/soak.err" ||
        broken "the long run failed: $(tail -1 "$tmp/soak.err")"
    steps=$(sed -n 's/.* in \([0-9]*\) steps of the step clock.*/\1/p' "$tmp/soak.err")
    soak="--soak $tmp/soak.html --soak-steps $steps"
elif [ "${CI:-}" = true ]; then
    broken "$FAST is not built (make test builds it): no scale test"
else
    echo "browser: the scale test skipped ($FAST is not built: make build/fast/infer)"
fi
timeout 300 node $dir/check.mjs --playwright $dir/node_modules/playwright-core/index.mjs --chromium "$CHROMIUM" \
    --page "$tmp/page.html" --trace "$tmp/trace.txt" --fork "$tmp/fork.html" $soak
