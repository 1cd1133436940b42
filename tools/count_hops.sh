#!/bin/sh
# count_hops.sh [STEP] - how many times one engine step changes source file,
# measured, not counted by hand.
#
# Builds the CLI with -finstrument-functions (every function's entry and exit
# logged by tools/hops/hook.c), generates a few tokens from the default model
# on one thread and the plain kernels, and follows step STEP (default 3: a
# decode step): the file of the innermost running function is tracked through
# every call and return, and each change of file is counted. The kernel and
# base wings (src/kernels/, src/base/) are folded into their caller, so the
# count is about stages, not arithmetic. Prints the walk (one line per visit) and the
# count. tests/hops.sh runs it in make test. Run it on another checkout to
# compare designs:
#   sh tools/count_hops.sh            # this tree
#   (cd ../old && sh /path/to/tools/count_hops.sh)
set -eu
step=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
inc="-I/usr/include/x86_64-linux-gnu/openblas-openmp"
libs="-L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lpcre2-8 -lcjson -lm -lpthread"
# the library and the CLI's main: every source but the server's main (in a
# tree of one flat folder, src/*.c is all there is)
srcs=$(ls src/*.c src/*/*.c 2>/dev/null | grep -v -e '/serve\.c$')
# shellcheck disable=SC2086
gcc -std=gnu11 -D_GNU_SOURCE -fopenmp $inc -Isrc -O0 -g -no-pie -finstrument-functions \
    -finstrument-functions-exclude-file-list=kernels/,base/,ops,mem.c,err.c,clock.h \
    $srcs "$here/hops/hook.c" -o "$out/infer" $libs
# top: the function that is one step in this design (rt_step, or engine_step
# in a design where the runtime does not drive the loop)
if grep -q "rt_step" src/runtime.h 2>/dev/null; then top=rt_step; else top=engine_step; fi
HOPS_LOG="$out/log" LLM_ISA=plain OMP_NUM_THREADS=1 "$out/infer" --model data/shakespeare.gguf \
    --prompt "ROMEO:" -n $((step + 2)) --temperature 0 --threads 1 > /dev/null 2>&1
awk '{ print $2 }' "$out/log" | sort -u > "$out/addrs"
addr2line -f -s -e "$out/infer" $(cat "$out/addrs") | paste - - | paste "$out/addrs" - > "$out/names"
awk -v top="$top" -v want="$step" '
    NR == FNR { split($3, f, ":"); fn[$1] = $2; file[$1] = f[1]; next }
    {
        a = $2; name = fn[a]
        if ($1 == ">") {
            if (name == top) { seen++; if (seen == want) on = 1 }
            if (on) {
                sp++; stack[sp] = file[a]
                if (stack[sp] != cur) { if (cur != "") hops++; print sprintf("%-14s %s", stack[sp], name); cur = stack[sp] }
            }
        } else if (on) {
            sp--
            if (sp == 0) { on = 0; exit }
            if (stack[sp] != cur) { hops++; print sprintf("%-14s (back)", stack[sp]); cur = stack[sp] }
        }
    }
    END { print "file changes in step " want " (" top "): " hops }
' "$out/names" "$out/log"
