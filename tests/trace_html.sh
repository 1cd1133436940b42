#!/bin/sh
# trace_html.sh - infer --trace-html from the command line, without a browser
# (tests/browser.sh opens the page; tests/test_trace_page.c checks its
# records step by step against the engine): the page of a step-clock run is
# the same bytes every time and wherever it is written; adding it changes
# neither stdout nor the text trace; it holds a record for every step,
# arrival, finish, token and preemption the run's own summary counts, its
# data parses as JSON (jq), and it fetches nothing; a single prompt works; a
# workload line the runtime refuses is noted in it; a path that cannot be
# written is a one-line error. Prints "trace_html: N passed, N failed".
INFER=${INFER:-build/asan/infer}
BIN=$(dirname "$INFER")
MODEL=data/shakespeare.gguf
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
W="--workload data/workload-preempt.jsonl --policy priority --kv-blocks 10 --max-seqs 4 --clock steps --threads 1"
records() { grep -c "^\[\"$1\"" "$2"; }   # records of a kind in a page (one a line)
events() { awk '/id="trace-events">\[$/ { on = 1; print "["; next } on && /^\]<\/script>/ { print "]"; exit } on' "$1"; }

# the same run, twice, to two places; and once without the page
mkdir -p "$tmp/sub"
"$INFER" --model $MODEL $W --trace --trace-html "$tmp/a.html" > "$tmp/a.out" 2> "$tmp/a.err" || bad "the traced run failed: $(tail -1 "$tmp/a.err")"
"$INFER" --model $MODEL $W --trace --trace-html "$tmp/sub/b.html" > /dev/null 2>&1
cmp -s "$tmp/a.html" "$tmp/sub/b.html" && ok || bad "two step-clock runs wrote different pages"
"$INFER" --model $MODEL $W --trace > "$tmp/c.out" 2> "$tmp/c.err"
cmp -s "$tmp/a.out" "$tmp/c.out" && ok || bad "--trace-html changed stdout"
cmp -s "$tmp/a.err" "$tmp/c.err" && ok || bad "--trace-html changed the text trace: $(diff "$tmp/a.err" "$tmp/c.err" | head -3)"

# what the run's own summary counts is in the page, a record each
steps=$(sed -n 's/.* in \([0-9]*\) steps of the step clock.*/\1/p' "$tmp/a.err")
tokens=$(sed -n 's/.*: \([0-9]*\) output tokens.*/\1/p' "$tmp/a.err")
preempted=$(sed -n 's/.* \([0-9]*\) preemptions.*/\1/p' "$tmp/a.err")
[ -n "$steps" ] && [ "$(records S "$tmp/a.html")" -eq "$steps" ] && ok || bad "the page holds $(records S "$tmp/a.html") steps, the run $steps"
[ "$(records A "$tmp/a.html")" -eq 6 ] && [ "$(records X "$tmp/a.html")" -eq 6 ] && [ "$(records Q "$tmp/a.html")" -eq 6 ] && ok ||
    bad "the page does not hold 6 arrivals, prompts and finishes"
[ -n "$tokens" ] && [ "$(records T "$tmp/a.html")" -eq "$tokens" ] && ok || bad "the page holds $(records T "$tmp/a.html") tokens, the run $tokens"
[ -n "$preempted" ] && [ "$preempted" -gt 0 ] && [ "$(records P "$tmp/a.html")" -eq "$preempted" ] && ok ||
    bad "the page holds $(records P "$tmp/a.html") preemptions, the run $preempted"
[ "$(events "$tmp/a.html" | jq length 2>/dev/null)" -gt "$steps" ] && ok || bad "the page's records do not parse as one JSON array"
grep -q 'totals: 6 requests served' "$tmp/a.html" && grep -q 'memory: weights' "$tmp/a.html" && ok ||
    bad "the page lacks the closing line or the memory report"
if grep -n -e 'src=' -e 'href=' -e 'http' "$tmp/a.html" > "$tmp/net"; then bad "the page may fetch something: $(head -2 "$tmp/net")"; else ok; fi
tail -c 8 "$tmp/a.html" | grep -q '</html>' && ok || bad "the page does not end with </html>"

# one prompt
"$INFER" --model $MODEL --prompt "ROMEO:" -n 12 --temperature 0 --clock steps --threads 1 --trace-html "$tmp/one.html" \
    > "$tmp/one.out" 2> "$tmp/one.err" || bad "a single prompt's page failed: $(cat "$tmp/one.err")"
[ "$(records S "$tmp/one.html")" -eq 12 ] && [ "$(records T "$tmp/one.html")" -eq 12 ] && [ "$(records A "$tmp/one.html")" -eq 1 ] &&
    grep -q '"closing":"infer: ' "$tmp/one.html" && ok || bad "a single prompt's page does not hold its 12 steps and tokens"

# a refused line is noted, and the rest goes on
printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 4}' '{"prompt": "JULIET:", "max_tokens": 4, "top_k": 100000}' > "$tmp/r.jsonl"
"$INFER" --model $MODEL --workload "$tmp/r.jsonl" --clock steps --threads 1 --trace-html "$tmp/r.html" > /dev/null 2>&1
grep -q '^\["N",[0-9.]*,"line 2 refused: top_k' "$tmp/r.html" && [ "$(records X "$tmp/r.html")" -eq 1 ] && ok ||
    bad "a refused line is not noted in the page: $(grep '^\["N"' "$tmp/r.html")"

# errors: one line, naming the option and the path
"$INFER" --model $MODEL --prompt "x" -n 2 --trace-html /nonexistent/dir/p.html > /dev/null 2> "$tmp/e"
[ $? -eq 1 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "trace-html /nonexistent/dir/p.html: cannot create" "$tmp/e" && ok ||
    bad "unwritable --trace-html: $(cat "$tmp/e")"
"$INFER" --model $MODEL --prompt "x" -n 2 --trace-html "$tmp" > /dev/null 2> "$tmp/e"
[ $? -eq 1 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "is a directory" "$tmp/e" && ok || bad "--trace-html DIR: $(cat "$tmp/e")"
"$INFER" --model $MODEL --prompt "x" --trace-html > /dev/null 2> "$tmp/e"
[ $? -eq 2 ] && grep -q "trace-html: missing value" "$tmp/e" && ok || bad "--trace-html without a file: $(cat "$tmp/e")"
if [ -e /dev/full ]; then
    "$INFER" --model $MODEL --prompt "x" -n 2 --trace-html /dev/full > /dev/null 2> "$tmp/e"
    [ $? -eq 1 ] && [ "$(grep -c trace-html "$tmp/e")" -eq 1 ] && grep -q "trace-html /dev/full: cannot write" "$tmp/e" && ok ||
        bad "--trace-html on a full disk: $(cat "$tmp/e")"
fi
"$INFER" --help | grep -q -- '--trace-html FILE' && ok || bad "--help does not list --trace-html"
if [ -x "$BIN/serve" ]; then   # a server's run never ends: the page is infer's alone
    "$BIN/serve" --model $MODEL --trace-html "$tmp/s.html" > /dev/null 2> "$tmp/e"
    [ $? -ne 0 ] && grep -q "unknown option --trace-html" "$tmp/e" && ok || bad "serve --trace-html: $(cat "$tmp/e")"
fi
echo "trace_html: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
