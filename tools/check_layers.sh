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
    hs=" $(echo $2) "
    for f in $1; do
        [ -f "$dir/$f" ] || continue
        for h in $(includes "$dir/$f"); do
            case "$hs" in
                *" $h "*) echo "check_layers: $dir/$f includes $h: $3"
                          fails=$((fails + 1)) ;;
            esac
        done
    done
}

# Every source file, as a path under dir: the stages on top, the wings one
# folder down (notes/stages.md, "The house").
all_files=$(cd "$dir" && ls *.c *.h */*.c */*.h */*.cu */*.cuh 2>/dev/null)
in_wing() { (cd "$dir" && ls "$1"/*.c "$1"/*.h "$1"/*.cu "$1"/*.cuh 2>/dev/null); }

STAGES="runtime.h engine.h scheduler.h executor.h model.h kv_paged.h sequence.h rans.h"
forbid "model.c model.h" "runtime.h engine.h scheduler.h executor.h" \
    "the model knows nothing of serving"
forbid "scheduler.c scheduler.h" "model.h executor.h runtime.h engine.h" \
    "the scheduler decides and never runs the model"
forbid "executor.c executor.h" "scheduler.h runtime.h engine.h" \
    "the executor gets everything in the step's plan"
forbid "engine.c engine.h" "runtime.h trace/trace.h" "the engine reports upward, it never calls up"
forbid "sequence.h" "runtime.h engine.h scheduler.h executor.h model.h trace/trace.h" \
    "sequence.h is a leaf of plain data"
forbid "rans.c rans.h" "$(in_wing codec) model.h runtime.h engine.h scheduler.h executor.h kv_paged.h sequence.h trace/trace.h" \
    "the codec is told which bytes to decode; it knows no model"
# The front ends and the trainer sit above everything: no stage, and no
# wing but their own, includes them.
forbid "$(cd "$dir" && ls *.c *.h 2>/dev/null) $(in_wing base) $(in_wing kernels) $(in_wing text) $(in_wing trace) $(in_wing codec) $(in_wing load) $(in_wing chat)" \
    "$(in_wing front) $(in_wing train)" "the front ends are on top: no stage includes them"

# The wings: a file in a folder includes only headers of the folders (and
# the stages) that folder may see. A wing is told plain data by the stage
# that calls it; it never reaches up into a stage.
#   folder   may include
sees() {
    case "$1" in
        base)    echo "base" ;;
        kernels) echo "base kernels" ;;
        text)    echo "base text load/gguf.h" ;;
        chat)    echo "base chat" ;;
        trace)   echo "base trace" ;;
        codec)   echo "base kernels codec rans.h" ;;
        load)    echo "base kernels codec text load model.h rans.h" ;;
        train)   echo "base kernels codec text train load model.h rans.h" ;;
        *)       echo "*" ;;
    esac
}
for f in $all_files; do
    case "$f" in */*) ;; *) continue ;; esac
    wing=${f%%/*}
    allowed=$(sees "$wing")
    [ "$allowed" = "*" ] && continue
    for h in $(includes "$dir/$f"); do
        ok=0
        for a in $allowed; do
            case "$h" in "$a"/*|"$a") ok=1 ;; esac
        done
        case "$h" in */*) ;; *) [ -f "$dir/$h" ] || ok=1 ;; esac   # a system header
        if [ $ok = 0 ]; then
            echo "check_layers: $dir/$f includes $h: a wing is told plain data; $wing/ sees only: $allowed"
            fails=$((fails + 1))
        fi
    done
done
# The kernel wing is a tree: formats.h, then rows.h, then the leaves that
# compute. Only the dispatch (ops.c) and the references it hands the
# plain path to (ref.c) include ops.h; a tile or a block-format kernel
# that did could call back into the dispatch.
forbid "$(cd "$dir" && ls kernels/tiles_*.c kernels/quant*.c kernels/rows.h kernels/formats.c kernels/formats.h 2>/dev/null)" \
    "kernels/ops.h" "a kernel leaf never includes the dispatch"
# kv_paged includes only base/mem.h and base/err.h
for f in kv_paged.c kv_paged.h; do
    [ -f "$dir/$f" ] || continue
    for h in $(includes "$dir/$f"); do
        case "$h" in
            kv_paged.h|base/mem.h|base/err.h) ;;
            *) echo "check_layers: $dir/$f includes $h: kv_paged includes only base/mem.h and base/err.h"
               fails=$((fails + 1)) ;;
        esac
    done
done
# Snapshots, not fields (notes/stages.md, "Snapshots"): outside a stage's
# own file, nothing reads the fields of the stages it owns. The runtime owns
# the engine (rt->en); the engine owns the scheduler, the pool and the
# executor (en->sched, en->pool, en->exec) and the clock. Above them, the
# figures come from rt_stats, engine_stats, sched_stats and kv_stats, and
# the pool itself from rt_kv_view. Also checked: the programs in tools/
# beside DIR, when there are any.
reach() {   # FILE: the lines of FILE that reach past the stage below
    f=$1; base=${f##*/}
    [ "$base" != runtime.c ] &&
        grep -nE '\brt(->|\.)(en|model)\b|(->|\.)en(->|\.)(sched|pool|exec|clock)\b' "$f" |
            sed "s#^#$f:#; s#\$#: the runtime's engine is read through rt_stats/rt_kv_view#"
    [ "$base" != engine.c ] &&
        grep -nE '\ben(->|\.)(sched|pool|exec|clock)\b' "$f" |
            sed "s#^#$f:#; s#\$#: the engine's stages are read through engine_stats/engine_kv_view#"
    return 0
}
reached=$(for f in $(cd "$dir" && ls *.c */*.c 2>/dev/null); do reach "$dir/$f"; done
          [ -d "$dir/../tools" ] && for f in "$dir"/../tools/*.c; do [ -f "$f" ] && reach "$f"; done)
if [ -n "$reached" ]; then
    echo "$reached" | sed 's/^/check_layers: field read past the stage below: /'
    fails=$((fails + $(echo "$reached" | wc -l)))
fi

# nothing includes a .c file (infer.c above all: it is a program, not a module)
for f in $all_files; do
    for h in $(includes "$dir/$f"); do
        case "$h" in
            *.c) echo "check_layers: $dir/$f includes $h: a .c file is never included"
                 fails=$((fails + 1)) ;;
        esac
    done
done

# No circles: module x (x.c and x.h) depends on module y when either
# includes y.h. Walk the graph depth-first from every module; meeting a
# module already on the path is a circle. A module's fast half in a file of
# its own (tiles_avx512.c beside ops.c) is part of that module, and so is its
# private header (tokenizer_internal.h, what tokenizer.c shares with the
# files beside it).
edges=$(for f in $all_files; do
    m=${f%.*}; m=${m%_avx512}; m=${m%_internal}
    for h in $(includes "$dir/$f"); do
        t=${h%.h}; t=${t%_avx512}; t=${t%_internal}
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
