#!/bin/sh
# cuda_check.sh - the whole GPU verification in one command, on a machine with
# an NVIDIA GPU (Hopper, CUDA 13 driver), after `make cuda`:
#
#   tools/cuda_check.sh [quick|coded]
#
#   1. kcheck: every kernel against its C reference (random inputs, several shapes)
#   2. compute-sanitizer memcheck over kcheck --quick and one model check
#   3. gpucheck --model on the fixtures: prefill and 64 teacher-forced steps,
#      GPU logits against the CPU's, argmax disagreements certified as near
#      ties or failed; again with every product through cuBLAS (LLM_CUDA_GEMM_T=1)
#   4. greedy text through `infer --device cuda` against `--device cpu`
#   5. a batched workload (8 requests, chunked prefill) against each request
#      alone, and forked samples (n: 3) against each sample alone, on the GPU
#   6. benchmarks: TinyLlama-shaped F16 and Q8_0 (made by mkmodel): decode of
#      one sequence as a share of the copy bandwidth, prefill of 512 tokens,
#      kernels per token; the same decode under each launch setting
#      (LLM_CUDA_PDL, _EARLY, _FUSE_ROPE, _ONE_PASS, _DEEP, _SWIGLU_EPI, _SPLIT_MIN, _L2_AHEAD, _FLAGS), and with
#      each stage left out in turn (LLM_CUDA_OMIT: what a stage costs in the
#      overlapped step, a difference of two runs); batched decode at 1, 16 and 64
#      sequences ("quick" skips this part)
#   7. where ncu is: its view of ten kernels of a decode step, into $OUT
#   8. coded weights (--low-mem: the fast tier, BF16E, kept coded on the GPU,
#      built there from the file's rANS planes, or on the host with
#      LLM_CUDA_REST=0): logits against the CPU's fast tier, greedy text
#      against the BF16 file on the GPU and on the CPU, a batch against each
#      request alone, memcheck; TinyLlama BF16 against it kept coded (text,
#      decode at 1, 16 and 64 sequences, alternated; the tier's build time
#      on the GPU and on the host); the rANS and BF16E decoders and the tier
#      built from a blob are in kcheck (1); with "coded", only kcheck --coded
#      and this step
#
# On a machine with a driver but none of the libraries or fixtures, run it
# from the pack tools/cuda_pack.sh makes (its header says how).
#
# Environment: BIN (default build/cuda), FIXTURES (../shared/fixtures), NO_NCU=1 (skip 7), NO_CODED=1 (skip 8), OUT
# (a folder for the log and the models; default a temporary one). Prints
# "cuda_check: N passed, N failed" last; exits non-zero on any failure.
BIN=${BIN:-build/cuda}
FIXTURES=${FIXTURES:-../shared/fixtures}
OUT=${OUT:-$(mktemp -d)}
MODELS=${MODELS:-/tmp/cuda-check-models}
mkdir -p "$OUT" "$MODELS"
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
step() { echo; echo "== $* ($(date +%T))"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Coded weights: a small BF16 model (rows of whole blocks of 64, which the
# fast tier needs; the tiny fixture's are not) compressed, then checked with
# --low-mem on the GPU against the CPU and against the BF16 file. $1 = coded
# runs this alone, then the TinyLlama rows.
coded_check() {
    step "8. coded weights: the fast tier (BF16E) kept coded on the GPU"
    S="$MODELS/small-bf16.gguf"; SC="$MODELS/small-bf16.rans.gguf"
    "$BIN/mkmodel" --dim 256 --hidden 704 --layers 4 --heads 4 --kv-heads 2 --vocab 512 --ctx 256 --type bf16 --seed 3 "$S" > /dev/null &&
        "$BIN/compress" "$S" "$SC" > /dev/null || bad "mkmodel and compress of the small BF16 model"
    for cfg in LLM_CUDA_DEFAULTS=1 LLM_CUDA_REST=0 LLM_CUDA_CODED_OVERLAP=0 LLM_CUDA_GEMM_T=1 LLM_CUDA_DEEP=0 LLM_CUDA_PDL=0; do
        if env $cfg timeout 120 "$BIN/gpucheck" --model "$SC" --low-mem 1 --prompt "ROMEO:" --steps 64 > "$tmp/gc" 2>&1; then
            ok "$SC --low-mem against the CPU's fast tier, $cfg: $(grep -m1 'rows:' "$tmp/gc")"
        else bad "$SC --low-mem against the CPU's fast tier, $cfg"; cat "$tmp/gc"; fi
    done
    timeout 60 "$BIN/infer" --model "$S" --prompt "ROMEO:" -n 64 --temperature 0 --device cuda > "$tmp/t-bf16" 2>/dev/null
    for d in cuda cpu; do
        timeout 60 "$BIN/infer" --model "$SC" --low-mem --prompt "ROMEO:" -n 64 --temperature 0 --device $d > "$tmp/t-$d" 2> "$tmp/t-$d.err"
        if [ -s "$tmp/t-bf16" ] && cmp -s "$tmp/t-bf16" "$tmp/t-$d"; then ok "greedy text, --low-mem --device $d: the BF16 file's on the GPU"
        else bad "greedy text, --low-mem --device $d differs from the BF16 file's on the GPU"; tail -2 "$tmp/t-$d.err"; fi
    done
    LLM_CUDA_REST=0 timeout 60 "$BIN/infer" --model "$SC" --low-mem --prompt "ROMEO:" -n 64 --temperature 0 --device cuda \
        > "$tmp/t-host" 2> "$tmp/t-host.err"
    if [ -s "$tmp/t-bf16" ] && cmp -s "$tmp/t-bf16" "$tmp/t-host"; then ok "greedy text, --low-mem --device cuda, the tier built on the host: the BF16 file's"
    else bad "greedy text, --low-mem --device cuda, LLM_CUDA_REST=0, differs from the BF16 file's"; tail -2 "$tmp/t-host.err"; fi
    # a batch against each request alone, kept coded (chunked prefill, decodes of several sequences a step)
    i=0; : > "$tmp/wc.jsonl"
    for p in "ROMEO:" "JULIET:" "First Citizen:" "KING RICHARD III:" "Now is the winter" "To be, or not"; do
        echo "{\"prompt\": \"$p\", \"max_tokens\": 24, \"arrival_ms\": $((i * 3))}" >> "$tmp/wc.jsonl"
        timeout 60 "$BIN/infer" --model "$SC" --low-mem --prompt "$p" -n 24 --temperature 0 --device cuda > "$tmp/ca$i" 2>/dev/null
        i=$((i + 1))
    done
    mkdir -p "$tmp/cb"
    if timeout 120 "$BIN/infer" --model "$SC" --low-mem --workload "$tmp/wc.jsonl" --device cuda --max-seqs 6 --chunk 8 \
        --token-budget 32 --out-dir "$tmp/cb" > /dev/null 2> "$tmp/cb.err"; then
        i=0; same=0
        for p in "ROMEO:" "JULIET:" "First Citizen:" "KING RICHARD III:" "Now is the winter" "To be, or not"; do
            tail -c +$(( $(printf '%s' "$p" | wc -c) + 1 )) "$tmp/ca$i" > "$tmp/cr$i"
            cmp -s "$tmp/cb/$i.txt" "$tmp/cr$i" && same=$((same + 1))
            i=$((i + 1))
        done
        [ $same -eq 6 ] && ok "kept coded: 6 batched requests equal each alone" || bad "kept coded: $same of 6 batched requests equal each alone"
    else bad "kept coded: batched workload failed: $(tail -2 "$tmp/cb.err")"; fi
    if timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/gpucheck" --model "$SC" --low-mem 1 --steps 8 \
        > "$tmp/ms4" 2>&1; then ok "memcheck gpucheck --low-mem 1: $(tail -1 "$tmp/ms4")"
    else bad "memcheck gpucheck --low-mem 1"; tail -20 "$tmp/ms4"; fi
    # TinyLlama-shaped BF16 against the same file compressed and kept coded:
    # decode of one sequence, and batches of 16 and 64 through the engine
    T="$MODELS/tinyllama-bf16.gguf"; TC="$MODELS/tinyllama-bf16.rans.gguf"
    [ -f "$T" ] || "$BIN/mkmodel" --preset tinyllama --type bf16 "$T" > /dev/null || bad "mkmodel tinyllama bf16"
    t0=$(date +%s)
    [ -f "$TC" ] || "$BIN/compress" "$T" "$TC" > "$tmp/tc" || bad "compress tinyllama bf16"
    echo "compress: $(tail -1 "$tmp/tc" 2>/dev/null) in $(( $(date +%s) - t0 )) s"
    for f in "$T" "$TC"; do
        lm=0; [ "$f" = "$TC" ] && lm=1
        timeout 60 "$BIN/infer" --model "$f" $( [ $lm = 1 ] && echo --low-mem ) --prompt "ROMEO:" -n 32 --temperature 0 \
            --device cuda > "$tmp/tl$lm" 2>/dev/null
        timeout 200 "$BIN/gpucheck" --bench "$f" --low-mem $lm --prompt-len 512 --decode 64 --runs 3 | grep -e "^| /" -e "scratch"
    done
    LLM_CUDA_CODED_OVERLAP=0 timeout 200 "$BIN/gpucheck" --bench "$TC" --low-mem 1 --prompt-len 16 --decode 64 --runs 3 |
        grep -e "^| /" | sed 's/^/LLM_CUDA_CODED_OVERLAP=0: /'
    [ -s "$tmp/tl0" ] && cmp -s "$tmp/tl0" "$tmp/tl1" && ok "TinyLlama: greedy text kept coded = BF16, on the GPU" ||
        bad "TinyLlama: greedy text kept coded differs from BF16 on the GPU"
    # the two side by side, twice, alternated (one bench_batch process each)
    for round in 1 2; do
        timeout 300 "$BIN/bench_batch" --device cuda --threads 1 --concurrency 1,16,64 --prompt 32 --decode 64 "$T" |
            grep -e "^| [0-9]" -e "^gpu:" | sed "s/^/round $round, BF16: /" || bad "bench_batch bf16"
        timeout 300 "$BIN/bench_batch" --device cuda --threads 1 --concurrency 1,16,64 --prompt 32 --decode 64 --low-mem 1 "$TC" |
            grep -e "^| [0-9]" -e "^gpu:" -e "^codec:" | sed "s/^/round $round, kept coded: /" || bad "bench_batch bf16 kept coded"
    done
    LLM_CUDA_CODED_OVERLAP=0 timeout 300 "$BIN/bench_batch" --device cuda --threads 1 --concurrency 1,16,64 --prompt 32 \
        --decode 64 --low-mem 1 "$TC" | grep -e "^| [0-9]" | sed "s/^/kept coded, LLM_CUDA_CODED_OVERLAP=0: /"
    # the tier's build at load: on the GPU (the default) and on 16 of the host's cores, the same file
    for cfg in LLM_CUDA_REST=1 LLM_CUDA_REST=0; do
        env $cfg timeout 300 "$BIN/bench_batch" --device cuda --threads 16 --concurrency 1 --prompt 8 --decode 8 --low-mem 1 \
            "$TC" | grep -e "^codec:" | sed "s/^/$cfg: /" || bad "bench_batch kept coded, $cfg"
    done
    LLM_CUDA_REST=0 timeout 60 "$BIN/infer" --model "$TC" --low-mem --prompt "ROMEO:" -n 32 --temperature 0 \
        --device cuda > "$tmp/tl2" 2>/dev/null
    [ -s "$tmp/tl0" ] && cmp -s "$tmp/tl0" "$tmp/tl2" && ok "TinyLlama: greedy text kept coded, the tier built on the host = BF16" ||
        bad "TinyLlama: greedy text kept coded, LLM_CUDA_REST=0, differs from BF16 on the GPU"
}
if [ "$1" = coded ]; then
    timeout 300 "$BIN/kcheck" --coded > "$tmp/kq" 2>&1 && ok "kcheck --coded" || { bad "kcheck --coded"; cat "$tmp/kq"; }
    grep -e BF16E -e rANS -e "from rest" -e "at rest" "$tmp/kq"
    coded_check
    echo "cuda_check: $pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit
fi

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | head -3
grep -m1 "model name" /proc/cpuinfo

step "1. kernels against their C references"
if timeout 300 "$BIN/kcheck"; then ok "kcheck"; else bad "kcheck"; fi
if LLM_CUDA_EARLY=0 LLM_CUDA_PDL=0 LLM_CUDA_FUSE_ROPE=0 LLM_CUDA_ONE_PASS=0 LLM_CUDA_DEEP=0 timeout 300 "$BIN/kcheck" > "$tmp/k0" 2>&1; then
    ok "kcheck, every launch setting off"
else bad "kcheck, every launch setting off"; grep -i fail "$tmp/k0"; fi
# the deep pipeline (mv_deep_kernel) at the other depths, and off (the register pipeline, mv_kernel)
for d in 0 2 3 6; do
    q=--quick; [ $d = 0 ] && q=
    if LLM_CUDA_DEEP=$d timeout 300 "$BIN/kcheck" $q > "$tmp/kd" 2>&1; then ok "kcheck $q, LLM_CUDA_DEEP=$d"
    else bad "kcheck $q, LLM_CUDA_DEEP=$d"; grep -i fail "$tmp/kd"; fi
    [ $d = 0 ] && grep "GB/s" "$tmp/kd" | sed 's/^/LLM_CUDA_DEEP=0: /'
done
for f in tiny/tiny-f16.gguf tiny/tiny-q8_0.gguf llama3/llama3-q8_0.gguf; do
    for cfg in LLM_CUDA_SWIGLU_APART=0 LLM_CUDA_READY_T=1 LLM_CUDA_SWIGLU_EPI=0 LLM_CUDA_FLAGS=1; do
        if env $cfg timeout 120 "$BIN/gpucheck" --model "$FIXTURES/$f" --prompt "ROMEO:" --steps 64 > "$tmp/ga" 2>&1; then
            ok "$f, $cfg"; else bad "$f, $cfg"; cat "$tmp/ga"; fi
    done
done
for f in tiny/tiny-f16.gguf tiny/tiny-q8_0.gguf; do
    if LLM_CUDA_FUSE_ROPE=0 LLM_CUDA_PDL=0 LLM_CUDA_ONE_PASS=0 LLM_CUDA_DEEP=0 LLM_CUDA_SWIGLU_APART=0 LLM_CUDA_SWIGLU_EPI=0 timeout 120 "$BIN/gpucheck" --model "$FIXTURES/$f" --prompt "ROMEO:" --steps 16 \
        > "$tmp/g0" 2>&1; then ok "$f, every launch setting off"; else bad "$f, every launch setting off"; cat "$tmp/g0"; fi
done

step "2. compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
    if timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/kcheck" --quick > "$tmp/ms1" 2>&1; then
        ok "memcheck kcheck --quick: $(tail -1 "$tmp/ms1")"
    else bad "memcheck kcheck --quick"; tail -20 "$tmp/ms1"; fi
    if LLM_CUDA_DEEP=0 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/kcheck" --quick > "$tmp/ms3" 2>&1; then
        ok "memcheck kcheck --quick, LLM_CUDA_DEEP=0: $(tail -1 "$tmp/ms3")"
    else bad "memcheck kcheck --quick, LLM_CUDA_DEEP=0"; tail -20 "$tmp/ms3"; fi
    if timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/gpucheck" --model "$FIXTURES/tiny/tiny-q8_0.gguf" \
        --steps 8 > "$tmp/ms2" 2>&1; then ok "memcheck gpucheck tiny-q8_0: $(tail -1 "$tmp/ms2")"
    else bad "memcheck gpucheck"; tail -20 "$tmp/ms2"; fi
    if LLM_CUDA_FLAGS=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/gpucheck" \
        --model "$FIXTURES/tiny/tiny-f16.gguf" --steps 8 > "$tmp/ms5" 2>&1; then ok "memcheck gpucheck tiny-f16, LLM_CUDA_FLAGS=1: $(tail -1 "$tmp/ms5")"
    else bad "memcheck gpucheck, LLM_CUDA_FLAGS=1"; tail -20 "$tmp/ms5"; fi
else bad "compute-sanitizer is not installed"; fi

step "3. logits on the GPU against the CPU's, teacher-forced"
FIX="tiny/tiny-f32.gguf tiny/tiny-f16.gguf tiny/tiny-bf16.gguf tiny/tiny-q8_0.gguf tiny/tiny.bin rand/rand-f32.gguf
rand/rand-f16.gguf quant/quant-q4_0.gguf quant/quant-q4_k_m.gguf quant/quant-q6_k.gguf llama3/llama3-q8_0.gguf"
for f in $FIX; do
    [ -f "$FIXTURES/$f" ] || { bad "$f: missing fixture"; continue; }
    if timeout 120 "$BIN/gpucheck" --model "$FIXTURES/$f" --prompt "ROMEO:" --steps 64; then ok "$f"; else bad "$f"; fi
done
for f in tiny/tiny-f32.gguf tiny/tiny-f16.gguf tiny/tiny-q8_0.gguf rand/rand-f16.gguf llama3/llama3-q8_0.gguf; do
    if LLM_CUDA_DEEP=0 timeout 120 "$BIN/gpucheck" --model "$FIXTURES/$f" --prompt "ROMEO:" --steps 64 > "$tmp/gd" 2>&1; then
        ok "$f, LLM_CUDA_DEEP=0"; else bad "$f, LLM_CUDA_DEEP=0"; cat "$tmp/gd"; fi
done
for f in tiny/tiny-f16.gguf tiny/tiny-q8_0.gguf rand/rand-f32.gguf; do
    if LLM_CUDA_GEMM_T=1 timeout 120 "$BIN/gpucheck" --model "$FIXTURES/$f" --prompt "ROMEO:" --steps 16; then
        ok "$f, every float product through cuBLAS (Q8_0 stays on the kernels)"
    else bad "$f, every float product through cuBLAS"; fi
done

# Texts in $tmp/cpu.txt and $tmp/cuda.txt: equal, or apart from a token where
# gpucheck, teacher-forced along the CPU's choices, certifies every argmax
# disagreement as a near tie (the two devices' sums round differently there).
same_or_tie() {
    if [ -s "$tmp/cuda.txt" ] && cmp -s "$tmp/cpu.txt" "$tmp/cuda.txt"; then ok "$1: the same $2 tokens"; return; fi
    where=$(cmp "$tmp/cpu.txt" "$tmp/cuda.txt" 2>&1 | head -1)
    if timeout 120 "$BIN/gpucheck" --model "$1" --prompt "ROMEO:" --steps "$2" > "$tmp/tie" 2>&1 && grep -q "certified near ties" "$tmp/tie" \
        && ! grep -q "(0 certified" "$tmp/tie"; then
        ok "$1: text parts at a certified near tie ($where): $(grep -m1 'a near tie' "$tmp/tie")"
    else bad "$1: text differs ($where) and no near tie explains it"; cat "$tmp/tie"; fi
}

step "4. greedy text: --device cuda against --device cpu"
for deep in "" 0 flags; do
[ "$deep" = 0 ] && { export LLM_CUDA_DEEP=$deep; echo "(again with LLM_CUDA_DEEP=$deep)"; }
[ "$deep" = flags ] && { unset LLM_CUDA_DEEP; export LLM_CUDA_FLAGS=1; echo "(again with LLM_CUDA_FLAGS=1)"; }
for f in tiny/tiny-f32.gguf tiny/tiny-f16.gguf tiny/tiny-bf16.gguf tiny/tiny-q8_0.gguf rand/rand-f32.gguf \
         quant/quant-q4_k_m.gguf; do
    for d in cpu cuda; do
        timeout 60 "$BIN/infer" --model "$FIXTURES/$f" --prompt "ROMEO:" -n 64 --temperature 0 --isa plain --device $d \
            > "$tmp/$d.txt" 2> "$tmp/$d.err" || echo "(infer --device $d failed: $(tail -1 "$tmp/$d.err"))"
    done
    same_or_tie "$FIXTURES/$f" 64
done
M=data/shakespeare.gguf
for d in cpu cuda; do
    timeout 60 "$BIN/infer" --model $M --prompt "ROMEO:" -n 300 --temperature 0 --isa plain --device $d > "$tmp/$d.txt" 2>/dev/null
done
same_or_tie $M 300
done
unset LLM_CUDA_DEEP LLM_CUDA_FLAGS

step "5. a batch against each request alone, on the GPU"
i=0
: > "$tmp/w.jsonl"
for p in "ROMEO:" "JULIET:" "First Citizen:" "KING RICHARD III:" "Now is the winter" "To be, or not" "MENENIUS:" "O Romeo"; do
    echo "{\"prompt\": \"$p\", \"max_tokens\": 40, \"arrival_ms\": $((i * 3))}" >> "$tmp/w.jsonl"
    timeout 60 "$BIN/infer" --model $M --prompt "$p" -n 40 --temperature 0 --device cuda > "$tmp/alone$i" 2>/dev/null
    i=$((i + 1))
done
mkdir -p "$tmp/b"
if timeout 120 "$BIN/infer" --model $M --workload "$tmp/w.jsonl" --device cuda --max-seqs 8 --chunk 8 --token-budget 48 \
    --out-dir "$tmp/b" > /dev/null 2> "$tmp/b.err"; then
    i=0; same=0
    for p in "ROMEO:" "JULIET:" "First Citizen:" "KING RICHARD III:" "Now is the winter" "To be, or not" "MENENIUS:" "O Romeo"; do
        plen=$(printf '%s' "$p" | wc -c)
        tail -c +$((plen + 1)) "$tmp/alone$i" > "$tmp/ref$i"   # the text after the prompt's echo
        if cmp -s "$tmp/b/$i.txt" "$tmp/ref$i"; then same=$((same + 1)); else diff "$tmp/b/$i.txt" "$tmp/ref$i" | head -4; fi
        i=$((i + 1))
    done
    [ $same -eq 8 ] && ok "8 batched requests equal each alone" || bad "$same of 8 batched requests equal each alone"
else bad "batched workload failed: $(tail -2 "$tmp/b.err")"; fi
echo '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0.8, "seed": 5, "n": 3}' > "$tmp/n.jsonl"
timeout 60 "$BIN/infer" --model $M --workload "$tmp/n.jsonl" --device cuda --trace > "$tmp/nout" 2> "$tmp/nerr"
grep -q 'copy-on-write: position' "$tmp/nerr" || echo "(no copy-on-write in the trace of n = 3)"
same=0
for s in 0 1 2; do
    timeout 60 "$BIN/infer" --model $M --prompt "ROMEO:" -n 30 --temperature 0.8 --top-p 1 --seed $((5 + s)) \
        --device cuda 2>/dev/null | tail -c +7 | head -c -1 | awk 1 > "$tmp/nref"
    grep "^\[$s\] " "$tmp/nout" | sed "s/^\[$s\] //" > "$tmp/ngot"
    if cmp -s "$tmp/ngot" "$tmp/nref"; then same=$((same + 1)); else diff "$tmp/ngot" "$tmp/nref" | head -4; fi
done
[ $same -eq 3 ] && ok "3 forked samples (copy-on-write on the GPU) equal each alone" || bad "$same of 3 forked samples equal each alone"
# preempted and resumed (recomputed) against the same workload in a pool that never preempts
# (each request's text compared: stdout interleaves them in the order they stream)
for pool in 10 1000; do
    mkdir -p "$tmp/pre$pool"
    timeout 120 "$BIN/infer" --model $M --workload data/workload-preempt.jsonl --policy priority --kv-blocks $pool \
        --max-seqs 4 --clock steps --trace --device cuda --out-dir "$tmp/pre$pool" > /dev/null 2> "$tmp/pre$pool.err"
done
if grep -q "preempted: the pool ran out" "$tmp/pre10.err" && ! grep -q "preempted: the pool ran out" "$tmp/pre1000.err" &&
   [ -s "$tmp/pre10/0.txt" ] && diff -r "$tmp/pre10" "$tmp/pre1000" > /dev/null; then
    ok "preemption and resume on the GPU: every request's text as without preemption"
else bad "preempting workload on the GPU: text differs from the run without preemption, or it did not preempt"
     diff -r "$tmp/pre10" "$tmp/pre1000" | head -6; fi

[ "$1" = quick ] && { echo "cuda_check: $pass passed, $fail failed"; [ $fail -eq 0 ]; exit; }

step "6. benchmarks"
for t in f16 q8_0; do
    "$BIN/mkmodel" --preset tinyllama --type $t "$MODELS/tinyllama-$t.gguf" > /dev/null || bad "mkmodel $t"
done
for t in f16 q8_0; do
    timeout 200 "$BIN/gpucheck" --bench "$MODELS/tinyllama-$t.gguf" --prompt-len 512 --decode 128 --runs 5 || bad "bench $t"
done
# the launch settings side by side (and, where they were carried along,
# earlier builds' gpucheck-* beside this one's): each setting off in turn
for t in f16 q8_0; do
    for base in "$BIN"/gpucheck-*; do
        [ -x "$base" ] && timeout 100 "$base" --bench "$MODELS/tinyllama-$t.gguf" --prompt-len 16 --decode 128 --runs 5 \
            | grep -e "^| /" | cut -d'|' -f3,6-9 | sed "s|^|$(basename "$base"): |"
    done
    for cfg in LLM_CUDA_DEFAULTS=1 LLM_CUDA_FLAGS=1 LLM_CUDA_L2_AHEAD=0 LLM_CUDA_L2_AHEAD=32 LLM_CUDA_SWIGLU_EPI=0 LLM_CUDA_DEEP=0 LLM_CUDA_DEEP=3 LLM_CUDA_DEEP=6 \
               LLM_CUDA_SPLIT_MIN=1 LLM_CUDA_ONE_PASS=0 LLM_CUDA_FUSE_ROPE=0 LLM_CUDA_EARLY=0 LLM_CUDA_PDL=0 \
               "LLM_CUDA_PDL=0 LLM_CUDA_EARLY=0 LLM_CUDA_FUSE_ROPE=0 LLM_CUDA_ONE_PASS=0 LLM_CUDA_DEEP=0 LLM_CUDA_SWIGLU_APART=0 LLM_CUDA_SWIGLU_EPI=0 LLM_CUDA_L2_AHEAD=0" \
               LLM_CUDA_OMIT=1 LLM_CUDA_OMIT=2 LLM_CUDA_OMIT=4 LLM_CUDA_OMIT=8 LLM_CUDA_OMIT=16 LLM_CUDA_OMIT=32 LLM_CUDA_DEFAULTS=2; do
        env $cfg timeout 100 "$BIN/gpucheck" --bench "$MODELS/tinyllama-$t.gguf" --prompt-len 16 --decode 128 --runs 5 \
            | grep -e "^| /" | cut -d'|' -f3,6-9 | sed "s/^/$cfg: /"
    done
done
LLM_CUDA_GEMM_T=0 timeout 100 "$BIN/gpucheck" --bench "$MODELS/tinyllama-f16.gguf" --prompt-len 512 --decode 16 --runs 3 \
    | grep -e "^| /" | sed 's/^/prefill without cuBLAS: /'
LLM_CUDA_GRAPHS=0 timeout 100 "$BIN/gpucheck" --bench "$MODELS/tinyllama-f16.gguf" --prompt-len 512 --decode 128 --runs 3 \
    | grep -e "^| /" -e "graphs" | sed 's/^/without CUDA graphs: /'
for t in f16 q8_0; do
    timeout 200 "$BIN/bench_batch" --device cuda --threads 1 --concurrency 1,16,64 --prompt 32 --decode 64 \
        "$MODELS/tinyllama-$t.gguf" || bad "bench_batch $t"
done

# 7. where the time goes: ncu on ten consecutive products and attentions of a
# decode step (two layers), F16 and Q8_0, the full report into $OUT
if [ -z "$NO_NCU" ] && command -v ncu > /dev/null; then
    step "7. ncu: two layers of a decode step"
    for t in f16 q8_0; do
        timeout 150 ncu --clock-control none -k 'regex:mv_|attn_' --launch-skip 400 --launch-count 10 \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            "$BIN/gpucheck" --bench "$MODELS/tinyllama-$t.gguf" --prompt-len 16 --decode 24 --runs 1 > "$OUT/ncu-$t.txt" 2>&1
        grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per" "$OUT/ncu-$t.txt" | head -30 \
            | sed "s/^/ncu $t: /"
    done
fi
[ -z "$NO_CODED" ] && coded_check
echo "cuda_check: $pass passed, $fail failed"
[ $fail -eq 0 ]
