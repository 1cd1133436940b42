#!/bin/sh
# docs.sh - the trace excerpts in README.md and notes/ are what the code
# prints now (tools/doc_excerpts.sh regenerates each one from a step-clock
# run), and the check really fails when an excerpt is edited by hand; so are
# the pictures of the --trace-html page (tools/doc_screenshots.sh).
INFER=${INFER:-build/asan/infer}
# The excerpts come from the plain path on the step clock, which gives the
# same bits in every build flavour (checked at the end of this file): they
# are made with the optimised build where it is there (make test builds it),
# six times faster than the sanitizer build, which the other suites run.
EXCERPT_INFER=$INFER
[ -x build/fast/infer ] && EXCERPT_INFER=build/fast/infer
export INFER
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

n=$(grep -c '^<!-- excerpt: ' README.md notes/*.md | awk -F: '{ s += $2 } END { print s }')
[ "$n" -ge 10 ] && ok || bad "only $n excerpts are marked in README.md and notes/"
if INFER=$EXCERPT_INFER sh tools/doc_excerpts.sh --check > "$tmp/check" 2>&1; then ok
else bad "a document shows a trace the code no longer prints:"; cat "$tmp/check"; fi

# Edit one line inside an excerpt: the check must fail and name the file.
cp notes/scheduler.md "$tmp/edited.md"
awk 'seen == 1 && /^\[/ && !done { sub(/ms\]/, "ms] (edited)"); done = 1 }
     /^<!-- excerpt: / { seen = 1 } { print }' notes/scheduler.md > "$tmp/edited.md"
if cmp -s notes/scheduler.md "$tmp/edited.md"; then bad "could not plant an edit"
elif INFER=$EXCERPT_INFER sh tools/doc_excerpts.sh --check "$tmp/edited.md" > "$tmp/out" 2>&1; then bad "an edited excerpt passed the check"
elif grep -q "edited.md differs" "$tmp/out"; then ok
else bad "the failed check did not name the file: $(cat "$tmp/out")"; fi
# An edit outside every excerpt is prose: the check passes.
sed 's/^What happened, step by step/What happened, one step at a time/' notes/scheduler.md > "$tmp/prose.md"
INFER=$EXCERPT_INFER sh tools/doc_excerpts.sh --check "$tmp/prose.md" > "$tmp/out" 2>&1 && ok || bad "an edit to prose failed the check: $(cat "$tmp/out")"

# The README's excerpts come from the README's own command: change the
# command (another seed) and its excerpts no longer match.
sed 's/--seed 42 --clock steps --isa plain/--seed 43 --clock steps --isa plain/' README.md > "$tmp/readme.md"
if cmp -s README.md "$tmp/readme.md"; then bad "could not change the README's command"
elif INFER=$EXCERPT_INFER sh tools/doc_excerpts.sh --check "$tmp/readme.md" > "$tmp/out" 2>&1; then bad "the excerpts matched another command"
else ok; fi

# The pictures of the --trace-html page are of the page the code writes now
# (tools/doc_screenshots.sh: a hash of the page in each marker and in its
# PNG; no browser needed), and the check fails when a marker is not.
n=$(grep -c '^<!-- screenshot: ' README.md notes/*.md | awk -F: '{ s += $2 } END { print s }')
[ "$n" -ge 2 ] && ok || bad "only $n pictures of the page are marked in README.md and notes/"
if INFER=$EXCERPT_INFER sh tools/doc_screenshots.sh --check > "$tmp/shots" 2>&1; then ok
else bad "a picture of the page is stale:"; cat "$tmp/shots"; fi
sed 's/^\(<!-- screenshot: .* sha256:\)[0-9a-f]\{8\}/\100000000/' notes/tracing.md > "$tmp/shot.md"
if cmp -s notes/tracing.md "$tmp/shot.md"; then bad "could not plant a stale picture"
elif INFER=$EXCERPT_INFER sh tools/doc_screenshots.sh --check "$tmp/shot.md" > "$tmp/out" 2>&1; then bad "a stale picture passed the check"
elif grep -q "shot.md: notes/img/trace-page.png shows a page the code no longer writes" "$tmp/out"; then ok
else bad "the failed picture check did not name the file: $(cat "$tmp/out")"; fi

# The plain path gives the same bits in every build flavour (notes/model.md):
# 120 greedy tokens of the default model, and 64 of fixture models of each
# weight format family, from each build that is there (make test builds the
# debug one and this one; make run and make fast add build/fast).
FIX=${FIXTURES:-../shared/fixtures}
models="data/shakespeare.gguf:120"
for f in tiny/tiny-f32 tiny/tiny-f16 tiny/tiny-bf16 tiny/tiny-q8_0 quant/quant-q4_k_m quant/quant-q6_k qwen/qwen3/qwen3-q8_0; do
    if [ -f "$FIX/$f.gguf" ]; then models="$models $FIX/$f.gguf:64"
    elif [ "${CI:-}" = true ]; then bad "fixture $FIX/$f.gguf is missing, and under CI that is a failure"
    else echo "SKIP: fixture $FIX/$f.gguf not found (no ../shared here)"; fi
done
for mn in $models; do
    m=${mn%:*}; n_tok=${mn##*:}; n=0
    for b in build/infer build/fast/infer "$INFER"; do
        [ -x "$b" ] || continue
        n=$((n + 1))
        "$b" --model "$m" --prompt "ROMEO:" -n "$n_tok" --temperature 0 --isa plain > "$tmp/flavour$n" 2>/dev/null
        if [ $n -gt 1 ]; then
            [ -s "$tmp/flavour1" ] && cmp -s "$tmp/flavour1" "$tmp/flavour$n" && ok \
                || bad "$m: the plain path's text differs between build/infer and $b"
        fi
    done
    [ $n -ge 2 ] || bad "fewer than two build flavours to compare"
done

echo "docs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
