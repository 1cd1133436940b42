#!/bin/sh
# seeds.sh - how the seed corpora in tests/fuzz/<target>/ were made. Run from
# the repository root after make fast; it rewrites the seeds (the inputs
# that once found a bug, named crash-*, leak-*, ... are left alone). Every
# seed is small (the largest a few tens of KB), so that libFuzzer's mutations
# stay fast and the replay in make test takes seconds.
#
#   fuzz_gguf       tiny models: mkmodel (sentencepiece vocabulary, F32, F16,
#                   Q8_0), train (a byte-level BPE vocabulary from bpe_train,
#                   Q8_0 and F32), and the BPE vocabulary alone (no tensors)
#   fuzz_llama2c    checkpoint + tokenizer.bin pairs (tools/mkcorpus)
#   fuzz_tokenizer  llama.cpp's tokenizer test strings, corpus lines, bad UTF-8
#   fuzz_workload   the example workloads and lines with every field
#   fuzz_request    request bodies: every field, chat in each form, refusals
#   fuzz_rans       streams the encoder wrote (tools/mkcorpus)
#   fuzz_wcodec     coded tensors of each layout (tools/mkcorpus)
#   fuzz_jinja      small chat templates written by hand in the shapes real
#                   ones have (kept as they are: this script leaves them)
set -e
B=${BIN:-build/fast}
FX=${FIXTURES:-../shared/fixtures}
CORPUS=${CORPUS:-../shared/corpus/tinyshakespeare.txt}
D=tests/fuzz
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# --- fuzz_gguf
mkdir -p $D/fuzz_gguf
$B/mkmodel --dim 8 --hidden 16 --layers 1 --heads 2 --kv-heads 1 --vocab 300 --ctx 8 \
    --type f32 --seed 1 $D/fuzz_gguf/spm-f32.gguf
$B/mkmodel --dim 16 --hidden 24 --layers 2 --heads 4 --kv-heads 2 --vocab 270 --ctx 16 \
    --type f16 --seed 2 $D/fuzz_gguf/spm-f16-gqa.gguf
$B/mkmodel --dim 32 --hidden 32 --layers 1 --heads 2 --kv-heads 2 --vocab 260 --ctx 8 \
    --type q8_0 --seed 3 $D/fuzz_gguf/spm-q8_0.gguf
head -c 20000 "$CORPUS" > $tmp/text.txt
$B/bpe_train --input $tmp/text.txt --vocab 300 --out $D/fuzz_gguf/bpe-300-vocab-only.gguf > /dev/null
for t in q8_0 f32; do
    flag=; [ $t = f32 ] && flag=--f32
    $B/train --tokenizer $D/fuzz_gguf/bpe-300-vocab-only.gguf --corpus $tmp/text.txt \
        --out $D/fuzz_gguf/bpe-$t.gguf --dim 32 --hidden 32 --layers 1 --heads 2 --kv-heads 1 \
        --ctx 16 --steps 1 --batch 1 --warmup 1 --no-eval --threads 1 $flag > /dev/null
done

# --- fuzz_llama2c, fuzz_rans, fuzz_wcodec
$B/mkcorpus --tokenizer $FX/tiny/tokenizer.bin $D > /dev/null

# --- fuzz_tokenizer: each test string of llama.cpp's tokenizer tests, a few
# corpus passages, and text that is not UTF-8
mkdir -p $D/fuzz_tokenizer
awk -v dir=$D/fuzz_tokenizer 'BEGIN { RS = "\n__ggml_vocab_test__\n" }
    { f = sprintf("%s/llama-test-%02d.txt", dir, NR); printf "%s", $0 > f; close(f) }' \
    $FX/tokenizers/llama-spm.inp
sed -n '1,12p' "$CORPUS" > $D/fuzz_tokenizer/corpus-opening.txt
sed -n '2000,2030p' "$CORPUS" > $D/fuzz_tokenizer/corpus-middle.txt
printf 'ab\377cd \303(\342\202 \355\240\200 \300\257 \364\220\200\200 \360\237\246' \
    > $D/fuzz_tokenizer/ill-formed-utf8.txt
printf '   leading spaces\tand\ttabs\n\n\n  \r\n' > $D/fuzz_tokenizer/whitespace.txt

# --- fuzz_request: a byte (bit 0: chat; the rest: the template, modulo 5),
# then the body
mkdir -p $D/fuzz_request
seed() { printf "$2" > "$D/fuzz_request/$1"; }
seed every-field.json '\000{"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 3, "n": 2, "stop": ["\\n", "END"], "stream": true, "stream_options": {"include_usage": true}, "priority": "high"}'
seed chat-plain.json '\001{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]}'
seed chat-llama2-systems.json '\005{"messages": [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}, {"role": "user", "content": "U"}, {"role": "system", "content": "S3"}]}'
seed chat-chatml.json '\003{"messages": [{"role": "developer", "content": "Rhyme."}, {"role": "user", "content": "Of love"}], "max_completion_tokens": 5}'
seed refused-huge-number.json '\000{"prompt": "a", "max_tokens": 1e400}'
seed refused-bad-utf8-model.json '\000{"model": "m\377\376", "prompt": "a"}'
seed refused-bad-role.json '\001{"messages": [{"role": "us\200er", "content": "a"}]}'
seed refused-nul.json '\000{"prompt": "a\\u0000b"}'
seed refused-trailing.json '\000{"prompt": "a"} trailing'
seed refused-not-json.json '\000not json'
seed refused-empty-stop.json '\000{"prompt": "a", "stop": ["", "x"]}'
seed refused-top-p.json '\000{"prompt": "a", "top_p": 0}'

# --- fuzz_workload
mkdir -p $D/fuzz_workload
cp data/workload-preempt.jsonl data/workload-shared-prefix.jsonl $D/fuzz_workload/
cat > $D/fuzz_workload/every-field.jsonl <<'EOF'
# a comment, then a blank line

{"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 7, "priority": "high", "stop": ["\n\n", "JULIET"], "n": 3, "arrival_ms": 250}
{"prompt": "a\tb\u00e9\ud83e\udd99", "stop": "x", "priority": "low", "arrival_ms": 0}
{"prompt": "", "max_tokens": 1, "arrival_ms": 250}
EOF
# one refused line per file (a load stops at its first error)
cat > $tmp/errors.jsonl <<'EOF'
{"prompt": "a", "max_tokens": 0}
{"prompt": "a", "prompt": "b"}
{"prompt": "a\u0000b"}
{"prompt": "a", "stop": ["1", "2", "3", "4", "5"]}
{"prompt": 5}
{"prompt": "a", "colour": "red"}
[1, 2]
{"prompt": "a", "n": 65}
{"prompt": "a", "priority": "urgent"}
{"prompt": "a", "temperature": -1}
{"prompt": "a", "top_p": 1.5, "arrival_ms": -3}
{"prompt": "a"
EOF
awk -v dir=$D/fuzz_workload '{ f = sprintf("%s/refused-%02d.jsonl", dir, NR); print > f; close(f) }' \
    $tmp/errors.jsonl
printf '{"prompt": "a"}\r\n{"prompt": "b", "arrival_ms": 1e9}\n{"prompt": "c", "arrival_ms": 0.5}' \
    > $D/fuzz_workload/crlf-no-final-newline.jsonl
du -sh $D
