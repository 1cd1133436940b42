#!/bin/sh
# check_layers.sh [DIR] - the stage rules, checked on the sources in DIR
# (default src). Each rule is one line below; a break prints the file, the
# include and the rule, and the exit status is the number of breaks.
#
# The stages, top to bottom (notes/stages.md draws them):
#   infer/server -> runtime -> engine -> scheduler, executor -> model, kv_paged
# A stage includes only the headers of stages below it; the trace is told
# everything and includes no stage; sequence.h is a leaf of plain data.
dir=${1:-src}
fails=0

# includes FILE: the project headers FILE includes, one per line
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }

# forbid "FILES" "HEADERS" RULE: none of FILES may include any of HEADERS
forbid() {
    for f in $1; do
        [ -f "$dir/$f" ] || continue
        for h in $(includes "$dir/$f"); do
            for bad in $2; do
                if [ "$h" = "$bad" ]; then
                    echo "check_layers: $dir/$f includes $h: $3"
                    fails=$((fails + 1))
                fi
            done
        done
    done
}

STAGES="runtime.h engine.h scheduler.h executor.h model.h kv_paged.h sequence.h rans.h wcodec.h lowmem.h"
forbid "model.c model.h" "runtime.h engine.h scheduler.h executor.h" \
    "the model knows nothing of serving"
forbid "scheduler.c scheduler.h" "model.h executor.h runtime.h engine.h" \
    "the scheduler decides and never runs the model"
forbid "executor.c executor.h" "scheduler.h runtime.h engine.h" \
    "the executor gets everything in the step's plan"
forbid "engine.c engine.h" "runtime.h trace.h" "the engine reports upward, it never calls up"
forbid "sequence.h" "runtime.h engine.h scheduler.h executor.h model.h trace.h" \
    "sequence.h is a leaf of plain data"
forbid "trace.c trace.h" "$STAGES" "the trace is told, it never reaches into a stage"
forbid "rans.c rans.h wcodec.c wcodec.h lowmem.c lowmem.h" \
    "model.h runtime.h engine.h scheduler.h executor.h kv_paged.h sequence.h trace.h" \
    "the codec is told which bytes to decode; it knows no model"
# The front ends sit above everything: no library module includes the
# server or the command-line options (only the programs do).
forbid "$(cd "$dir" && ls *.c *.h 2>/dev/null | grep -v -x -e server.c -e server.h -e cli_opts.c -e cli_opts.h -e infer.c -e serve.c)" \
    "server.h cli_opts.h" "the front ends are on top: no stage includes them"
# The kernel wing (src/kernels/: the CUDA kernels and their C face, gpu.h)
# is told plain data by model.c: it includes no stage, trace or front end.
forbid "$(cd "$dir" && ls kernels/*.c kernels/*.h kernels/*.cu kernels/*.cuh 2>/dev/null)" \
    "$STAGES trace.h server.h cli_opts.h" "a wing is told plain data; it never reaches up into a stage"
# kv_paged includes only mem.h and err.h
for f in kv_paged.c kv_paged.h; do
    [ -f "$dir/$f" ] || continue
    for h in $(includes "$dir/$f"); do
        case "$h" in
            kv_paged.h|mem.h|err.h) ;;
            *) echo "check_layers: $dir/$f includes $h: kv_paged includes only mem.h and err.h"
               fails=$((fails + 1)) ;;
        esac
    done
done
# nothing includes a .c file (infer.c above all: it is a program, not a module)
for f in "$dir"/*.c "$dir"/*.h; do
    for h in $(includes "$f"); do
        case "$h" in
            *.c) echo "check_layers: $f includes $h: a .c file is never included"
                 fails=$((fails + 1)) ;;
        esac
    done
done

# No circles: module x (x.c and x.h) depends on module y when either
# includes y.h. Walk the graph depth-first from every module; meeting a
# module already on the path is a circle. A module's fast half in a file of
# its own (ops_avx512.c beside ops.c) is part of that module.
edges=$(for f in "$dir"/*.c "$dir"/*.h; do
    m=$(basename "$f"); m=${m%.*}; m=${m%_avx512}
    for h in $(includes "$f"); do
        t=${h%.h}; t=${t%_avx512}
        [ "$t" != "$m" ] && [ -f "$dir/$h" ] && echo "$m $t"
    done
done | sort -u)
circle=$(echo "$edges" | awk '
    NF == 2 { out[$1] = out[$1] " " $2; node[$1] = 1; node[$2] = 1 }
    function visit(n, path,    k, i, next_) {
        if (state[n] == 2) return ""
        if (state[n] == 1) return path " " n
        state[n] = 1
        k = split(out[n], next_, " ")
        for (i = 1; i <= k; i++) { c = visit(next_[i], path " " n); if (c != "") return c }
        state[n] = 2
        return ""
    }
    END { for (n in node) { c = visit(n, ""); if (c != "") { print c; exit } } }')
if [ -n "$circle" ]; then
    echo "check_layers: modules include each other in a circle:$circle"
    fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "check_layers: $dir: every stage rule holds"
exit "$fails"
