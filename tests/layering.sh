#!/bin/sh
# layering.sh - the stage rules hold on src/, and the checker catches each
# kind of break (a checker that cannot fail proves nothing): it is run on
# copies of src/ with one break planted in each.
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "!! $1"; }

if sh tools/check_layers.sh src >/tmp/layers.out 2>&1; then ok; else cat /tmp/layers.out; bad "src/ breaks a stage rule"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# plant FILE LINE WHAT: copy src/, add an include line to FILE, expect a failure naming WHAT
plant() {
    rm -rf "$tmp/src"; cp -r src "$tmp/src"
    printf '%s\n' "$2" >>"$tmp/src/$1"
    out=$(sh tools/check_layers.sh "$tmp/src" 2>&1)
    if [ $? -ne 0 ] && echo "$out" | grep -q "$3"; then ok; else bad "planted '$2' in $1: not caught ($out)"; fi
}
plant executor.c '#include "scheduler.h"' "executor.c includes scheduler.h"
plant executor.h '#include "runtime.h"' "executor.h includes runtime.h"
plant trace/trace.c '#include "engine.h"' "trace/trace.c includes engine.h"
plant trace/trace.h '#include "sequence.h"' "trace/trace.h includes sequence.h"
plant model.c '#include "engine.h"' "model.c includes engine.h"
plant kv_paged.c '#include "kernels/ops.h"' "kv_paged includes only"
plant scheduler.c '#include "executor.h"' "scheduler.c includes executor.h"
plant engine.c '#include "runtime.h"' "engine.c includes runtime.h"
plant codec/lowmem.c '#include "model.h"' "codec/lowmem.c includes model.h"
plant runtime.c '#include "infer.c"' "a .c file is never included"
plant runtime.c '#include "front/server.h"' "runtime.c includes front/server.h"
plant engine.h '#include "front/cli_opts.h"' "engine.h includes front/cli_opts.h"
# a wing including a stage above it, or a wing beside it that it may not see
plant text/sampler.c '#include "scheduler.h"' "text/sampler.c includes scheduler.h"
plant base/mem.c '#include "kernels/ops.h"' "base/mem.c includes kernels/ops.h"
plant load/gguf.c '#include "train/gguf_write.h"' "load/gguf.c includes train/gguf_write.h"
plant chat/jinja_eval.c '#include "text/tokenizer.h"' "chat/jinja_eval.c includes text/tokenizer.h"
plant kernels/gpu_model.cu '#include "model.h"' "kernels/gpu_model.cu includes model.h"
plant kernels/gpu.h '#include "kv_paged.h"' "kernels/gpu.h includes kv_paged.h"
# a front end, or the runtime, reading the fields of the stages below the one it calls
plant front/infer.c 'static long preempted(const Runtime *rt) { return rt->en.sched.n_preemptions; }' "front/infer.c:.*rt_stats"
plant runtime.c 'static int blocks(const Engine *en) { return en->pool.NB; }' "runtime.c:.*engine_stats"
# a kernel leaf including the dispatch
plant kernels/tiles_avx512.c '#include "kernels/ops.h"' "kernels/tiles_avx512.c includes kernels/ops.h"
plant kernels/rows.h '#include "kernels/ops.h"' "kernels/rows.h includes kernels/ops.h"
# a circle between two modules no other rule names
rm -rf "$tmp/src"; cp -r src "$tmp/src"
echo '#include "text/tokenizer.h"' >>"$tmp/src/text/sampler.h"
echo '#include "text/sampler.h"' >>"$tmp/src/text/tokenizer.c"
out=$(sh tools/check_layers.sh "$tmp/src" 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q "circle"; then ok; else bad "a sampler <-> tokenizer circle was not caught ($out)"; fi

echo "layering: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
