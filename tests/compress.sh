#!/bin/sh
# compress.sh - compressed model files end to end (tools/compress.c, src/codec/wcodec.c,
# src/codec/lowmem.c), on the default model and the fixture models:
#  1. compress, then compress --decode: the original file, byte for byte.
#  2. infer on the compressed file, and with --low-mem (BF16 on the fast tier,
#     and on the rANS tier with --low-mem=rans): the greedy text of the
#     original, token for token (both kernel paths); a batch of four requests
#     on the fast tier gives each the text it gets alone.
#  3. What it must refuse, with one line: --low-mem on an uncompressed file,
#     --low-mem=rans with --device cuda (the GPU keeps only the fast tier),
#     compressing a compressed file, a plain tensor with a flipped byte (every
#     tensor's CRC-32, compress --check), a coded tensor with a damaged payload (at
#     load, in either mode), --decode of a file that is not compressed.
# Under CI=true a missing fixture is a failure; elsewhere it is skipped.
# Prints "N passed, N failed"; exits non-zero on any failure.
INFER=${INFER:-build/asan/infer}
BIN=$(dirname "$INFER")
FIX=${FIXTURES:-../shared/fixtures}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

greedy() {   # MODEL [more infer options]: the greedy text of a fixed prompt
    m=$1; shift
    timeout 120 "$INFER" --model "$m" --prompt "ROMEO:" -n 24 --temperature 0 --threads 2 "$@" 2> "$tmp/err"
}

check_model() {   # NAME PATH
    name=$1; src=$2
    if ! "$BIN/compress" "$src" "$tmp/$name.rans.gguf" > "$tmp/table" 2> "$tmp/err"; then
        bad "$name: compress failed: $(cat "$tmp/err")"; return
    fi
    grep -q "^coded matrices" "$tmp/table" && ok || bad "$name: no summary in: $(tail -3 "$tmp/table")"
    if "$BIN/compress" --decode "$tmp/$name.rans.gguf" "$tmp/$name.back.gguf" > /dev/null 2> "$tmp/err" &&
       cmp -s "$src" "$tmp/$name.back.gguf"; then ok; else bad "$name: --decode did not restore the file: $(cat "$tmp/err")"; fi
    want=$(greedy "$src") || { bad "$name: infer on the original failed: $(cat "$tmp/err")"; return; }
    for mode in "" "--low-mem" "--low-mem --isa plain" "--low-mem=rans" "--low-mem --isa generic"; do
        got=$(greedy "$tmp/$name.rans.gguf" $mode) || { bad "$name $mode: infer failed: $(cat "$tmp/err")"; continue; }
        [ "$got" = "$want" ] && ok || bad "$name compressed $mode: '$got', the original gives '$want'"
    done
}

check_model shakespeare data/shakespeare.gguf
"$BIN/compress" --retype bf16 data/shakespeare.gguf "$tmp/bf16.gguf" > /dev/null 2>&1 \
    && check_model shakespeare-bf16 "$tmp/bf16.gguf" || bad "compress --retype bf16 failed"
# the Qwen files too: their biases and head norms stay uncoded beside the coded matrices
for f in tiny/tiny-f32 tiny/tiny-f16 tiny/tiny-bf16 tiny/tiny-q8_0 qwen/qwen2/qwen2-f32 qwen/qwen3/qwen3-q8_0; do
    if [ -f "$FIX/$f.gguf" ]; then
        check_model "${f##*/}" "$FIX/$f.gguf"
    elif [ "${CI:-}" = true ]; then
        bad "fixture $FIX/$f.gguf is missing, and under CI that is a failure"
    else
        echo "SKIP: fixture $FIX/$f.gguf not found (no ../shared here)"
    fi
done

# the fast tier is what BF16 gets with --low-mem, and says so; in a batch each
# request's greedy text is the one it gets alone (the products' bits do not
# depend on the batch)
greedy "$tmp/shakespeare-bf16.rans.gguf" --low-mem --trace > /dev/null
grep -q "BF16E" "$tmp/err" && ok || bad "--low-mem on a BF16 file did not run on the fast tier: $(tail -1 "$tmp/err")"
grep -q "codec: .*--low-mem, the fast tier (BF16E): rewritten at load into" "$tmp/err" && ok ||
    bad "the trace's codec line does not name the fast tier: $(grep 'codec:' "$tmp/err")"
printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 24, "temperature": 0}' '{"prompt": "JULIET:", "max_tokens": 20, "temperature": 0}' \
    '{"prompt": "KING HENRY:", "max_tokens": 16, "temperature": 0}' '{"prompt": "First Citizen:", "max_tokens": 24, "temperature": 0}' > "$tmp/four.jsonl"
if timeout 120 "$INFER" --model "$tmp/shakespeare-bf16.rans.gguf" --low-mem --threads 2 --workload "$tmp/four.jsonl" \
        > "$tmp/batch" 2> "$tmp/err"; then
    i=0
    for p in "ROMEO:" "JULIET:" "KING HENRY:" "First Citizen:"; do
        n=$(sed -n "$((i + 1))s/.*max_tokens\": \([0-9]*\).*/\1/p" "$tmp/four.jsonl")
        alone=$(timeout 120 "$INFER" --model "$tmp/shakespeare-bf16.rans.gguf" --low-mem --threads 2 --prompt "$p" -n "$n" \
                --temperature 0 2> /dev/null)
        got=$(printf '%s' "$p"; sed -n "s/^\[$i\] //p" "$tmp/batch")
        [ -n "$alone" ] && [ "$got" = "$alone" ] && ok || bad "fast tier, batched: '$got', alone: '$alone'"
        i=$((i + 1))
    done
else bad "fast tier, a workload of four: $(cat "$tmp/err")"; fi

# refusals: one line, non-zero status, no crash
one_line() {   # WHAT PATTERN: $tmp/err holds one line matching PATTERN
    [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "$2" "$tmp/err" && ok || bad "$1: $(cat "$tmp/err")"
}
greedy data/shakespeare.gguf --low-mem > /dev/null; [ $? -ne 0 ] && one_line "--low-mem, uncompressed" "needs a compressed" \
    || bad "--low-mem on an uncompressed file was accepted"
# the GPU keeps the fast tier coded, never the rANS tier: refused before any GPU is asked for
greedy "$tmp/shakespeare-bf16.rans.gguf" --low-mem=rans --device cuda > /dev/null
[ $? -ne 0 ] && one_line "--low-mem=rans --device cuda" "GPU takes the fast tier.*takes the rANS tier" \
    || bad "--low-mem=rans with --device cuda was accepted"
"$BIN/compress" "$tmp/shakespeare.rans.gguf" "$tmp/twice.gguf" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && one_line "compressing twice" "compressed already" || bad "a compressed file was compressed again"
"$BIN/compress" --decode data/shakespeare.gguf "$tmp/x.gguf" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && one_line "--decode of an uncompressed file" "rans.version" || bad "--decode accepted an uncompressed file"
# a byte in the middle of the last coded tensor's payload: found at load in both modes
size=$(wc -c < "$tmp/shakespeare.rans.gguf")
cp "$tmp/shakespeare.rans.gguf" "$tmp/damaged.gguf"
printf '\377\377\377\377' | dd of="$tmp/damaged.gguf" bs=1 seek=$((size - 2000)) conv=notrunc 2> /dev/null
for mode in "" "--low-mem"; do
    greedy "$tmp/damaged.gguf" $mode > /dev/null
    [ $? -ne 0 ] && one_line "damaged payload $mode" "chunk\|damaged\|CRC" || bad "a damaged file loaded ($mode)"
done
# the same in a BF16 file, whose --low-mem builds the fast tier from the payload
size=$(wc -c < "$tmp/shakespeare-bf16.rans.gguf")
cp "$tmp/shakespeare-bf16.rans.gguf" "$tmp/damaged16.gguf"
printf '\377\377\377\377' | dd of="$tmp/damaged16.gguf" bs=1 seek=$((size - 5000)) conv=notrunc 2> /dev/null
for mode in "--low-mem" "--low-mem=rans"; do
    greedy "$tmp/damaged16.gguf" $mode > /dev/null
    [ $? -ne 0 ] && one_line "damaged BF16 payload $mode" "chunk\|damaged\|CRC" || bad "a damaged BF16 file loaded ($mode)"
done
"$BIN/compress" --decode "$tmp/damaged.gguf" "$tmp/x.gguf" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && [ ! -e "$tmp/x.gguf" ] && one_line "--decode of a damaged file" "chunk\|damaged\|CRC" \
    || bad "--decode of a damaged file: $(cat "$tmp/err")"
# every tensor has a CRC-32, the ones stored as they were too: --check lists
# them; one byte changed in the middle of a plain tensor (a norm) is a refusal
# naming it, where before it loaded and gave other text
"$BIN/compress" --check "$tmp/shakespeare.rans.gguf" > "$tmp/check" 2> "$tmp/err" && tail -1 "$tmp/check" | grep -q "every CRC-32 matches" \
    && ok || bad "--check of a good file: $(tail -1 "$tmp/check") $(cat "$tmp/err")"
line=$(grep " as is " "$tmp/check" | tail -1)
name=$(echo "$line" | awk '{print $1}'); off=$(echo "$line" | awk '{print $5}'); len=$(echo "$line" | awk '{print $6}')
if [ -n "$name" ] && [ "$len" -gt 0 ]; then
    cp "$tmp/shakespeare.rans.gguf" "$tmp/plain.gguf"
    printf '\001' | dd of="$tmp/plain.gguf" bs=1 seek=$((off + len / 2)) conv=notrunc 2> /dev/null
    for mode in "" "--low-mem"; do
        greedy "$tmp/plain.gguf" $mode > /dev/null
        [ $? -ne 0 ] && one_line "a damaged plain tensor $mode" "'$name'.*damaged" || bad "a damaged plain tensor loaded ($mode)"
    done
    "$BIN/compress" --check "$tmp/plain.gguf" > "$tmp/check2" 2> "$tmp/err"
    [ $? -ne 0 ] && grep -q "^$name .*DAMAGED" "$tmp/check2" && [ "$(grep -c DAMAGED "$tmp/check2")" -eq 1 ] && ok \
        || bad "--check missed the damaged $name: $(grep DAMAGED "$tmp/check2")"
else bad "--check listed no tensor stored as it was"; fi
# the header too (key/value pairs, the tensor table): a byte changed there is
# refused; and bytes anywhere, at random: each refused or the same text, never
# altered weights loaded (tools/flip_sweep.sh; 5,000 in notes/rans.md)
cp "$tmp/shakespeare.rans.gguf" "$tmp/head.gguf"
printf 'Z' | dd of="$tmp/head.gguf" bs=1 seek=200 conv=notrunc 2> /dev/null
greedy "$tmp/head.gguf" > /dev/null
[ $? -ne 0 ] && one_line "a damaged header" "header.*damaged" || bad "a damaged header loaded"
INFER=$INFER sh tools/flip_sweep.sh "$tmp/shakespeare.rans.gguf" 60 1 > "$tmp/sweep" 2>&1 && ok || bad "$(cat "$tmp/sweep")"

echo "compress: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
