#!/bin/sh
# cli.sh - the infer command line, end to end.
#  1. Greedy output on the tiny fixture is byte-identical to what llama2.c's
#     run.c printed (prompt echoed, then 64 tokens), from the llama2.c
#     checkpoint and from the GGUF file.
#  2. Bad input: one line on stderr naming the problem, nothing on stdout,
#     a non-zero exit, never a crash.
# Prints "N passed, N failed"; exits non-zero on any failure.
INFER=${INFER:-build/asan/infer}
FIX=${FIXTURES:-../shared/fixtures}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if [ -f "$FIX/tiny/tiny.bin" ]; then
    # prompt k is the k-th distinct prompt of the f32 reference rows
    awk -F'\t' '$1 == "f32" && $5 == "reference float64" { print $2 }' "$FIX/tiny/greedy.tsv" > "$tmp/prompts"
    k=0
    while IFS= read -r esc; do
        prompt=$(printf '%b' "$esc")
        for model in tiny.bin tiny-f32.gguf; do
            tok=; [ "$model" = tiny.bin ] && tok="--tokenizer $FIX/tiny/tokenizer.bin"
            # shellcheck disable=SC2086
            if "$INFER" --model "$FIX/tiny/$model" $tok --prompt "$prompt" \
                -n 64 --temperature 0 --threads 1 > "$tmp/out" 2> "$tmp/err" &&
               cmp -s "$tmp/out" "$FIX/tiny/runc/$k.txt"; then ok
            else bad "$model prompt $k: output differs from llama2.c's runc/$k.txt"; diff "$tmp/out" "$FIX/tiny/runc/$k.txt" | head -5; fi
        done
        grep -q "prompt .* tokens, generated 64" "$tmp/err" && ok || bad "summary line missing: $(cat "$tmp/err")"
        k=$((k + 1))
    done < "$tmp/prompts"
    [ "$k" -eq 4 ] && ok || bad "expected 4 prompts in greedy.tsv, found $k"
    # --trace: the lifecycle goes to stderr in order; stdout holds the same text as without it
    "$INFER" --model "$FIX/tiny/tiny-f32.gguf" --prompt "ROMEO:" -n 64 --temperature 0 --threads 1 \
        --trace > "$tmp/out" 2> "$tmp/err"
    order=$(grep -o 'arrived:\|admitted\|prefill \[\|first token\|finished' "$tmp/err" | tr '\n' ' ')
    [ "$order" = "arrived: admitted prefill [ first token finished " ] && ok || bad "trace events out of order: $order"
    cmp -s "$tmp/out" "$FIX/tiny/runc/0.txt" && ok || bad "--trace changed stdout"
    grep -q "finished (length): 64 tokens" "$tmp/err" && ok || bad "trace has no finish line: $(cat "$tmp/err")"
else
    if [ "$CI" = true ]; then bad "fixtures missing at $FIX (required under CI)"
    else echo "SKIP: $FIX/tiny not found; golden CLI comparisons skipped"; fi
fi

# expect_error WANT ARGS...: exit code non-zero, one stderr line containing WANT, empty stdout
# (under a timeout: a file that blocks the reader must fail the check, not hang the suite)
expect_error() {
    want=$1; shift
    timeout 10 "$INFER" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ]; then ok
    else bad "infer $* -> rc $rc, stderr: $(cat "$tmp/err")"; fi
}
expect_error "model FILE is required"
# bad values of the command line exit 2, like every other bad option
for args in "--stop ''" "--kv-mem 16000000"; do
    eval "timeout 20 \"\$INFER\" --model data/shakespeare.gguf --prompt a -n 2 $args" > /dev/null 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && ok || bad "infer $args -> rc $rc (want 2), $(cat "$tmp/err")"
done
expect_error "unknown option" --model x --frobnicate 1
expect_error "not an integer" --model x -n abc
expect_error "not an integer" --model x -n 0
expect_error "not a number" --model x --temperature warm
expect_error "speculate: '17' is not an integer in 0..16" --model x --speculate 17
expect_error "spec-limit: '-1' is not an integer" --model x --spec-limit -1
expect_error "missing value" --model
expect_error "cannot open" --model /nonexistent/model.gguf
printf 'GGUF\003\000\000\000' > "$tmp/short.gguf"
expect_error "truncated" --model "$tmp/short.gguf"
head -c 5000 /dev/urandom > "$tmp/noise.bin"
expect_error "$tmp/noise.bin" --model "$tmp/noise.bin"
# a directory or a FIFO where a file belongs: refused at once, never read or waited on
mkdir "$tmp/dir"; mkfifo "$tmp/fifo"
expect_error "$tmp/dir: is a directory" --model "$tmp/dir"
expect_error "$tmp/fifo: not a regular file (a FIFO)" --model "$tmp/fifo"
if [ -f "$FIX/tiny/tiny.bin" ]; then
    expect_error "$tmp/dir: is a directory" --model "$FIX/tiny/tiny.bin" --tokenizer "$tmp/dir"
    expect_error "$tmp/fifo: not a regular file (a FIFO)" --model "$FIX/tiny/tiny.bin" --tokenizer "$tmp/fifo"
fi
if [ -f "$FIX/tiny/tiny-f32.gguf" ]; then
    expect_error "temperature" --model "$FIX/tiny/tiny-f32.gguf" --temperature -1
    expect_error "top_p" --model "$FIX/tiny/tiny-f32.gguf" --top-p 1.5
    long=$(head -c 3000 /dev/zero | tr '\0' 'a')
    expect_error "context holds 256" --model "$FIX/tiny/tiny-f32.gguf" --prompt "$long"
fi
# -n at the largest int: the request's capacity is the context, not an
# overflowed sum (UBSan stops the run on the overflow); it ends when the context is full.
if [ -f data/shakespeare.gguf ]; then
    "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 2147483647 --temperature 0 > "$tmp/out" 2> "$tmp/err" &&
        grep -q "generated 254 (context full)" "$tmp/err" && ok || bad "-n 2147483647: $(cat "$tmp/err")"
fi
# Options: an unknown one (short or long) is named as unknown, a bad trace
# level is named, options of a single prompt are refused beside --workload,
# and --tokenizer beside a GGUF file (which carries its own vocabulary).
expect_error "unknown option -x" --model x -x 3
expect_error "unknown option -x" --model x -x
expect_error "unknown trace level 'bogus'" --model x --trace=bogus
printf '{"prompt": "a"}\n' > "$tmp/w1.jsonl"
expect_error "prompt is for a single --prompt" --model data/shakespeare.gguf --workload "$tmp/w1.jsonl" --prompt hi
expect_error "temperature is for a single --prompt" --model data/shakespeare.gguf --temperature 0.5 --workload "$tmp/w1.jsonl"
expect_error "carries its own vocabulary" --model data/shakespeare.gguf --tokenizer "$tmp/w1.jsonl"
# Output that cannot be written is an error: stdout, --trace-json and
# --out-dir on a full disk (/dev/full), and a FIFO as an output file.
if [ -w /dev/full ]; then
    "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 5 > /dev/full 2> "$tmp/err"
    [ $? -eq 1 ] && grep -q "stdout: cannot write: No space left on device" "$tmp/err" && ok \
        || bad "stdout on a full disk: $(cat "$tmp/err")"
    "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 5 --trace-json /dev/full > /dev/null 2> "$tmp/err"
    [ $? -eq 1 ] && grep -q "trace-json /dev/full: cannot write" "$tmp/err" && ok \
        || bad "--trace-json on a full disk: $(cat "$tmp/err")"
    "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 5 --trace-svg /dev/full > /dev/null 2> "$tmp/err"
    [ $? -eq 1 ] && grep -q "trace-svg /dev/full: cannot write" "$tmp/err" && ok \
        || bad "--trace-svg on a full disk: $(cat "$tmp/err")"
    mkdir -p "$tmp/outd" && ln -sf /dev/full "$tmp/outd/0.txt"
    "$INFER" --model data/shakespeare.gguf --workload "$tmp/w1.jsonl" --out-dir "$tmp/outd" > /dev/null 2> "$tmp/err"
    [ $? -eq 1 ] && grep -q "outd/0.txt: cannot write: No space left on device" "$tmp/err" && ok \
        || bad "--out-dir on a full disk: $(cat "$tmp/err")"
fi
"$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 5 --trace-svg "$tmp" > /dev/null 2> "$tmp/err"
[ $? -eq 1 ] && grep -q "trace-svg $tmp: is a directory" "$tmp/err" && ok || bad "--trace-svg to a directory: $(cat "$tmp/err")"
printf '{"prompt": "a"}\n' > "$tmp/w2.jsonl"; : > "$tmp/notadir"
"$INFER" --model data/shakespeare.gguf --workload "$tmp/w2.jsonl" --out-dir "$tmp/notadir" > /dev/null 2> "$tmp/err"
[ $? -eq 1 ] && grep -q "notadir/0.txt: cannot create" "$tmp/err" && ok || bad "--out-dir on a file: $(cat "$tmp/err")"
mkfifo "$tmp/fifo.json"
timeout 20 "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 5 --trace-json "$tmp/fifo.json" > /dev/null 2> "$tmp/err"
[ $? -eq 1 ] && grep -q "fifo.json: is a FIFO" "$tmp/err" && ok || bad "--trace-json to a FIFO: $(cat "$tmp/err")"

# --isa plain runs every kernel through its reference loop and gives the
# default path's greedy text: F32 and F16 fixtures, Q8_0 (the default model:
# the same activation rounding on both paths). A bad value is one line.
for model in "$FIX/tiny/tiny-f32.gguf" "$FIX/tiny/tiny-f16.gguf" data/shakespeare.gguf; do
    [ -f "$model" ] || continue
    "$INFER" --model "$model" --prompt "ROMEO:" -n 40 --temperature 0 > "$tmp/best" 2>/dev/null
    "$INFER" --model "$model" --prompt "ROMEO:" -n 40 --temperature 0 --isa plain > "$tmp/plain" 2>/dev/null
    cmp -s "$tmp/best" "$tmp/plain" && [ -s "$tmp/plain" ] && ok || bad "--isa plain differs from the default path on $model"
done
LLM_ISA=plain "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 40 --temperature 0 > "$tmp/env" 2>/dev/null
cmp -s "$tmp/env" "$tmp/plain" && ok || bad "LLM_ISA=plain differs from --isa plain"
expect_error "unknown instruction set 'fastest'" --model data/shakespeare.gguf --isa fastest
LLM_ISA=fastest "$INFER" --model data/shakespeare.gguf > "$tmp/out" 2> "$tmp/err"
[ $? -eq 2 ] && grep -q "LLM_ISA: unknown instruction set 'fastest'" "$tmp/err" && ok || bad "LLM_ISA=fastest: $(cat "$tmp/err")"
# LLM_DECODE_ROWS: one row or four at a time, the same greedy text (the F16
# fixture: a float tile); any other value is one line, exit 2.
if [ -f "$FIX/tiny/tiny-f16.gguf" ]; then
    for r in 1 4; do
        LLM_DECODE_ROWS=$r "$INFER" --model "$FIX/tiny/tiny-f16.gguf" --prompt "ROMEO:" -n 40 --temperature 0 > "$tmp/rows$r" 2>/dev/null
    done
    [ -s "$tmp/rows1" ] && cmp -s "$tmp/rows1" "$tmp/rows4" && ok || bad "LLM_DECODE_ROWS=1 and 4 gave different text"
fi
LLM_DECODE_ROWS=3 "$INFER" --model data/shakespeare.gguf > "$tmp/out" 2> "$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "LLM_DECODE_ROWS: '3' is not 1 or 4" "$tmp/err" && ok \
    || bad "LLM_DECODE_ROWS=3: $(cat "$tmp/err")"
# LLM_AMX: 0 or 1; any other value is one line, exit 2.
LLM_AMX=on "$INFER" --model data/shakespeare.gguf > "$tmp/out" 2> "$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "LLM_AMX: 'on' is not 0 or 1" "$tmp/err" && ok \
    || bad "LLM_AMX=on: $(cat "$tmp/err")"

# The default model shipped in data/ loads and generates.
if [ -f data/shakespeare.gguf ]; then
    "$INFER" --model data/shakespeare.gguf --prompt "ROMEO:" -n 30 --seed 1 > "$tmp/out" 2> "$tmp/err" &&
        grep -q "gguf Q8_0, prompt 3 tokens, generated 30" "$tmp/err" && [ "$(wc -c < "$tmp/out")" -gt 40 ] && ok \
        || bad "default model: $(cat "$tmp/err")"
else
    bad "data/shakespeare.gguf is missing"
fi
echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
