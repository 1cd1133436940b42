#!/bin/sh
# train.sh - the training tool end to end, on a very small model.
#  1. The same seed gives the same model file, byte for byte.
#  2. A run killed (SIGKILL) after a checkpoint and resumed with --resume
#     ends with exactly the model of a run that was never stopped.
#  3. The exported file loads in the engine and generates.
# Prints "N passed, N failed"; exits non-zero on any failure.
TRAIN=${TRAIN:-build/asan/train}
INFER=${INFER:-build/asan/infer}
FIX=${FIXTURES:-../shared/fixtures}
CORPUS=${CORPUS_DIR:-$(dirname "$FIX")/corpus}/tinyshakespeare.txt
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
if [ ! -f "$FIX/tiny/tiny-f32.gguf" ] || [ ! -f "$CORPUS" ]; then
    if [ "$CI" = true ]; then echo "FAIL: fixtures or corpus missing (required under CI)"; echo "train: 0 passed, 1 failed"; exit 1; fi
    echo "SKIP: $FIX or $CORPUS not found; training tests skipped"; echo "train: 0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A small model; the tokenizer is the tiny fixture's (512 pieces).
args="--tokenizer $FIX/tiny/tiny-f32.gguf --corpus $CORPUS --dim 32 --hidden 64 --layers 2 --heads 4
      --kv-heads 2 --ctx 32 --batch 4 --steps 60 --warmup 5 --eval-every 1000 --dropout 0.1
      --threads 2 --f32 --seed 5 --no-eval"

$TRAIN $args --out "$tmp/a.gguf" 2> "$tmp/a.err" || bad "training run a failed: $(tail -1 "$tmp/a.err")"
$TRAIN $args --out "$tmp/b.gguf" 2> "$tmp/b.err" || bad "training run b failed"
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" && ok || bad "two runs with the same seed wrote different files"
$TRAIN $args --seed 6 --out "$tmp/c.gguf" 2> /dev/null
cmp -s "$tmp/a.gguf" "$tmp/c.gguf" && bad "a different seed wrote the same file" || ok

# Kill a run as soon as its first checkpoint is on disk, then resume it.
$TRAIN $args --out "$tmp/k.gguf" --checkpoint "$tmp/k.ckpt" --checkpoint-every 5 2> /dev/null &
pid=$!
i=0
while [ ! -f "$tmp/k.ckpt" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
if kill -9 $pid 2> /dev/null; then
    wait $pid 2> /dev/null
    [ -f "$tmp/k.gguf" ] && bad "the killed run still wrote its model"
    $TRAIN $args --out "$tmp/k.gguf" --checkpoint "$tmp/k.ckpt" --checkpoint-every 5 --resume 2> "$tmp/k.err"
    grep -q "resumed from" "$tmp/k.err" && ok || bad "the second run did not resume: $(cat "$tmp/k.err")"
    cmp -s "$tmp/a.gguf" "$tmp/k.gguf" && ok || bad "killed and resumed run differs from the uninterrupted one"
else
    bad "the run finished before it could be killed; make it longer"
fi

# With validation: the trainer's figure and the engine's on the written file
# agree; a finished run resumed after its file was removed writes it again.
ev="--tokenizer $FIX/tiny/tiny-f32.gguf --corpus $CORPUS --dim 32 --hidden 64 --layers 1 --heads 4
    --kv-heads 2 --ctx 32 --batch 4 --steps 10 --eval-every 100 --f32 --threads 2 --seed 5
    --out $tmp/v.gguf --checkpoint $tmp/v.ckpt"
$TRAIN $ev 2> "$tmp/v.err"
line=$(grep "holds the best" "$tmp/v.err")
t=$(echo "$line" | sed -n 's/.*validation \([0-9.]*\) nats\/char in training.*/\1/p')
g=$(echo "$line" | sed -n 's/.*its validation loss is \([0-9.]*\) nats\/char.*/\1/p')
[ -n "$t" ] && [ "$t" = "$g" ] && ok || bad "trainer and engine validation differ: $(tail -1 "$tmp/v.err")"
rm -f "$tmp/v.gguf"
$TRAIN $ev --resume 2> "$tmp/v2.err"
grep -q "is missing; writing the weights of step 10" "$tmp/v2.err" && [ -f "$tmp/v.gguf" ] && ok \
    || bad "a resumed finished run did not rewrite its model: $(tail -1 "$tmp/v2.err")"

"$INFER" --model "$tmp/a.gguf" --prompt "ROMEO:" -n 20 --seed 1 > "$tmp/out" 2> "$tmp/err" && [ -s "$tmp/out" ] && ok \
    || bad "the engine cannot run the trained model: $(cat "$tmp/err")"
echo "train: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
