#!/bin/sh
# workload.sh - infer --workload, end to end, on the default model.
#  1. Each request's text (greedy) equals what the single-prompt CLI prints
#     after its prompt echo, both on stdout ("[id] " lines) and in --out-dir.
#  2. The telemetry table has one row per request and a totals line.
#  3. A request the pool can never hold is refused with its reason; the
#     others are still served.
#  4. Bad workload files: one line naming file, line and field; exit non-zero.
# Prints "N passed, N failed"; exits non-zero on any failure.
INFER=${INFER:-build/asan/infer}
MODEL=data/shakespeare.gguf
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/w.jsonl" <<'JSON'
{"prompt": "ROMEO:", "max_tokens": 24}
# comments and blank lines are skipped

{"prompt": "JULIET:\nO Romeo", "max_tokens": 16, "arrival_ms": 20, "priority": "high"}
{"prompt": "First Citizen:", "max_tokens": 20, "arrival_ms": 10, "priority": "low"}
JSON
# single-prompt references: stdout minus the echoed prompt (and the final newline)
i=0
for p in "ROMEO:" "First Citizen:" "$(printf 'JULIET:\nO Romeo')"; do
    n=24; [ $i -eq 1 ] && n=20; [ $i -eq 2 ] && n=16
    "$INFER" --model $MODEL --prompt "$p" -n $n --temperature 0 > "$tmp/ref$i.full" 2>/dev/null
    # the echo is the prompt itself for this byte-level BPE model
    plen=$(printf '%s' "$p" | wc -c)
    tail -c +$((plen + 1)) "$tmp/ref$i.full" | head -c -1 > "$tmp/ref$i"
    i=$((i + 1))
done

# On the step clock a trace repeats byte for byte: two runs of the preempting
# example (with the pool its header names) give the same stdout and stderr,
# and the trace really shows preemption and a resume.
for k in 1 2; do
    "$INFER" --model $MODEL --workload data/workload-preempt.jsonl --policy priority --kv-blocks 10 \
        --max-seqs 4 --clock steps --trace > "$tmp/steps$k.out" 2> "$tmp/steps$k.err" || bad "step-clock run $k failed"
done
if cmp -s "$tmp/steps1.err" "$tmp/steps2.err" && cmp -s "$tmp/steps1.out" "$tmp/steps2.out" &&
   grep -q "preempted: the pool ran out" "$tmp/steps1.err" && grep -q "resumed in slot" "$tmp/steps1.err"; then ok
else bad "two step-clock traces differ or show no preemption: $(diff "$tmp/steps1.err" "$tmp/steps2.err" | head -5)"; fi
# and no wall-clock figure leaks into it (stage times, RSS, tok/s)
if grep -q -e "ms/step" -e "schedule 0" -e "peak RSS" -e "resident" -e "tok/s" "$tmp/steps1.err"; then
    bad "a step-clock trace prints wall-clock figures: $(grep -m1 -e "ms/step" -e "schedule 0" -e "peak RSS" -e "tok/s" "$tmp/steps1.err")"
else ok; fi

"$INFER" --model $MODEL --workload "$tmp/w.jsonl" --max-seqs 4 --chunk 4 > "$tmp/out" 2> "$tmp/err"
[ $? -eq 0 ] && ok || bad "workload run failed: $(cat "$tmp/err")"
# ids follow arrival order: 0 ROMEO (0 ms), 1 First Citizen (10 ms), 2 JULIET (20 ms)
for id in 0 1 2; do
    grep "^\[$id\] " "$tmp/out" | sed "s/^\[$id\] //" > "$tmp/got$id"
    # the reference as lines (the sink prints whole lines, one per newline)
    awk 1 "$tmp/ref$id" > "$tmp/want$id"
    cmp -s "$tmp/got$id" "$tmp/want$id" && ok || { bad "request $id: workload text differs from the single-prompt run"; diff "$tmp/got$id" "$tmp/want$id" | head -5; }
done
rows=$(grep -c '^ *[0-9][0-9]* *[0-9][0-9]* \(low\|normal\|high\) ' "$tmp/err")
[ "$rows" -eq 3 ] && ok || bad "expected 3 telemetry rows, found $rows: $(cat "$tmp/err")"
grep -q "^totals: 3 requests served, 0 refused" "$tmp/err" && ok || bad "totals line: $(grep totals "$tmp/err")"

# --out-dir: each request's text in its own file, byte for byte
"$INFER" --model $MODEL --workload "$tmp/w.jsonl" --out-dir "$tmp/outdir" > "$tmp/out2" 2> "$tmp/err2"
for id in 0 1 2; do
    head -c -1 "$tmp/outdir/$id.txt" > "$tmp/file$id"   # the file ends with a newline
    cmp -s "$tmp/file$id" "$tmp/ref$id" && ok || bad "--out-dir $id.txt differs from the single-prompt text"
done
[ ! -s "$tmp/out2" ] && ok || bad "--out-dir still wrote to stdout"

# a request larger than the whole pool is refused; the other is served
printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 100}' '{"prompt": "ROMEO:", "max_tokens": 8}' > "$tmp/big.jsonl"
"$INFER" --model $MODEL --workload "$tmp/big.jsonl" --kv-blocks 4 > "$tmp/out3" 2> "$tmp/err3"
grep -q "big.jsonl:1: request refused: .*whole pool has 4 blocks" "$tmp/err3" && ok || bad "no refusal: $(cat "$tmp/err3")"
grep -q "^totals: 1 requests served, 1 refused" "$tmp/err3" && ok || bad "refusal not counted: $(grep totals "$tmp/err3")"

# tracing: every request's text unchanged, the trace on stderr ends with the memory report,
# the JSON and SVG files are written (their content is checked in test_trace.c)
# (the example with every arrival at 0, so that requests overlap and the pool
# runs out on a machine of any speed)
sed 's/"arrival_ms": [0-9]*/"arrival_ms": 0/' data/workload-preempt.jsonl > "$tmp/preempt.jsonl"
"$INFER" --model $MODEL --workload "$tmp/preempt.jsonl" --policy priority --kv-blocks 10 \
    --max-seqs 4 > "$tmp/plain" 2> /dev/null
"$INFER" --model $MODEL --workload "$tmp/preempt.jsonl" --policy priority --kv-blocks 10 \
    --max-seqs 4 --trace --trace-json "$tmp/t.json" --trace-svg "$tmp/t.svg" > "$tmp/traced" 2> "$tmp/terr"
# each request's lines in order (requests interleave differently from run to run)
sort -s -t']' -k1,1 "$tmp/plain" > "$tmp/plain.sorted"
sort -s -t']' -k1,1 "$tmp/traced" > "$tmp/traced.sorted"
cmp -s "$tmp/plain.sorted" "$tmp/traced.sorted" && ok || bad "--trace changed a request's text"
grep -q "preempted: " "$tmp/terr" && grep -q "resumed in slot" "$tmp/terr" && ok || bad "the preempt example preempted nothing"
grep -q "^memory: .*allocations after start-up: 0 inside engine steps" "$tmp/terr" && ok || bad "memory report: $(grep '^memory' "$tmp/terr")"
head -c 40 "$tmp/t.json" | grep -q '"traceEvents"' && tail -c 4 "$tmp/t.json" | grep -q ']}' && ok || bad "--trace-json file incomplete"
[ "$(grep -c '<g class="request"' "$tmp/t.svg")" -eq 6 ] && ok || bad "--trace-svg: expected 6 request rows"
"$INFER" --model $MODEL --prompt "ROMEO:" -n 4 --trace-json /nonexistent/dir/t.json > "$tmp/o" 2> "$tmp/e"
[ $? -ne 0 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "trace-json /nonexistent/dir/t.json: cannot create" "$tmp/e" && ok \
    || bad "unwritable --trace-json: $(cat "$tmp/e")"

# An arrival the step clock reaches exactly (4007 ms: 4.007 s times 1e3 is an
# ulp short of 4007) is served, not waited for forever.
printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 2, "arrival_ms": 4007}' '{"prompt": "a", "max_tokens": 1, "arrival_ms": 9013}' \
    > "$tmp/r12.jsonl"
timeout 30 "$INFER" --model $MODEL --workload "$tmp/r12.jsonl" --clock steps > /dev/null 2> "$tmp/r12.err"
rc=$?
[ $rc -eq 0 ] && grep -q "^totals: 2 requests served" "$tmp/r12.err" && ok \
    || bad "a workload arriving at 4007 ms on the step clock: exit $rc (124: it hung)"

# The step clock counts whole microseconds: a request arriving at 1007 ms
# while the engine is busy is submitted after step 1007, at 1007.0 ms, as
# clock.h's rule says (summing 1e-3 a step in floating point left the clock
# an ulp short of 1007 ms there, and the request waited for step 1008).
for p in ROMEO JULIET KING QUEEN HAMLET; do
    echo "{\"prompt\": \"$p:\", \"max_tokens\": 250, \"arrival_ms\": 0}"
done > "$tmp/r12b.jsonl"
echo '{"prompt": "a", "max_tokens": 1, "arrival_ms": 1007}' >> "$tmp/r12b.jsonl"
"$INFER" --model $MODEL --workload "$tmp/r12b.jsonl" --clock steps --max-seqs 1 --trace --threads 1 2> "$tmp/r12b.err" > /dev/null
grep -q '^\[ *1007\.0 ms\] #5 arrived' "$tmp/r12b.err" && grep -q '^\[ *1008\.0 ms\] step 1008: ' "$tmp/r12b.err" && ok \
    || bad "an arrival at 1007 ms on a busy step clock: $(grep -E '#5 arrived|step 1008:' "$tmp/r12b.err")"

# "n": samples of one prompt fork from the first; each is the request alone with seed + i
printf '%s\n' '{"prompt": "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?", "max_tokens": 12, "n": 3, "temperature": 0.8, "seed": 5}' > "$tmp/n.jsonl"
"$INFER" --model $MODEL --workload "$tmp/n.jsonl" --trace > "$tmp/nout" 2> "$tmp/nerr"
grep -q '^totals: 3 requests served (from 1 workload line: "n" made the other 2), 0 refused' "$tmp/nerr" && ok \
    || bad "the totals do not say what n expanded to: $(grep totals "$tmp/nerr")"
[ "$(grep -c 'forked from #0' "$tmp/nerr")" -eq 2 ] && grep -q 'copy-on-write: position' "$tmp/nerr" && ok \
    || bad "no forks in the trace of n = 3: $(grep -E 'forked|copy' "$tmp/nerr")"
for i in 0 1 2; do
    "$INFER" --model $MODEL --prompt "$(printf 'JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?')" -n 12 \
        --temperature 0.8 --top-p 1 --seed $((5 + i)) 2>/dev/null | tail -c +$(printf 'JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?' | wc -c | awk '{ print $1 + 1 }') \
        | head -c -1 | awk 1 > "$tmp/nref$i"
    grep "^\[$i\] " "$tmp/nout" | sed "s/^\[$i\] //" > "$tmp/ngot$i"
    cmp -s "$tmp/ngot$i" "$tmp/nref$i" && ok || { bad "sample $i differs from the prompt alone with seed $((5 + i))"; diff "$tmp/ngot$i" "$tmp/nref$i" | head -4; }
done

# bad files: one line, naming file:line and the field
expect_error() {
    want=$1; shift
    printf '%s\n' "$@" > "$tmp/bad.jsonl"
    "$INFER" --model $MODEL --workload "$tmp/bad.jsonl" > "$tmp/o" 2> "$tmp/e"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q -- "$want" "$tmp/e" && [ ! -s "$tmp/o" ]; then ok
    else bad "workload $* -> rc $rc, stderr: $(cat "$tmp/e")"; fi
}
expect_error "bad.jsonl:2: not valid JSON" '{"prompt": "a"}' '{"prompt": "a",'
expect_error 'bad.jsonl:1: unknown field "max_token"' '{"prompt": "a", "max_token": 3}'
expect_error 'field "priority": unknown value "urgent"' '{"prompt": "a", "priority": "urgent"}'
expect_error 'field "max_tokens" is 0' '{"prompt": "a", "max_tokens": 0}'
expect_error 'field "temperature" must be a number' '{"prompt": "a", "temperature": "hot"}'
expect_error 'field "prompt" is missing' '{"max_tokens": 3}'
expect_error 'field "n" is 65' '{"prompt": "a", "n": 65}'
expect_error 'field "speculate" is 17' '{"prompt": "a", "speculate": 17}'
expect_error 'field "speculate" is 2.5' '{"prompt": "a", "speculate": 2.5}'
expect_error "no request in the file" '# nothing'
expect_error 'bad.jsonl:1: field "prompt" contains .u0000' '{"prompt": "ROMEO\u0000 and JULIET"}'
expect_error 'bad.jsonl:1: duplicate field "max_tokens"' '{"prompt": "a", "max_tokens": 3, "max_tokens": 5}'
# a directory or a FIFO as the workload: refused at once (the timeout keeps a regression from hanging)
mkdir "$tmp/wdir"; mkfifo "$tmp/wfifo"
for f in wdir wfifo; do
    timeout 10 "$INFER" --model $MODEL --workload "$tmp/$f" > "$tmp/o" 2> "$tmp/e"
    rc=$?
    want="$tmp/$f: is a directory"; [ $f = wfifo ] && want="$tmp/$f: not a regular file (a FIFO)"
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -qF "$want" "$tmp/e" && ok \
        || bad "workload $f -> rc $rc, stderr: $(cat "$tmp/e")"
done
"$INFER" --model $MODEL --workload /nonexistent.jsonl > "$tmp/o" 2> "$tmp/e"
[ $? -ne 0 ] && grep -q "/nonexistent.jsonl: cannot open" "$tmp/e" && ok || bad "missing workload file: $(cat "$tmp/e")"
echo "workload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
