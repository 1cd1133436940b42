#!/bin/sh
# doc_excerpts.sh [--check | --write] [--gdb] [FILE.md ...] - the trace excerpts in
# the documents, made by the code itself.
#
# An excerpt in a Markdown file is a fenced block right after a marker line:
#
#     <!-- excerpt: RUN.err | sed -n '1,5p' -->
#     ```
#     ...what the filter printed...
#     ```
#
# RUN names one of the runs below (its .out is stdout, its .err stderr); the
# filter after "|" is a shell pipeline (optional) that picks the lines. Only
# the runs the files name are made.
# Lines longer than 150 characters are cut there and end with " ...". Every
# run uses the step clock (1 ms per engine step, see src/base/clock.h), one
# thread and the plain-loop kernels, so what it prints is the same on every
# machine and every time.
#
#   --check (default)  exit 1, showing the difference, when a block is not what
#                      the code prints now (tests/docs.sh runs this)
#   --write            rewrite the blocks in place
#   --gdb              the debugger walkthroughs instead: blocks after
#                      "<!-- gdb-excerpt: NAME | filter -->", where NAME is
#                      notes/gdb/NAME.gdb run with gdb -batch (GDB, default
#                      gdb); what it printed on lines that start with "| "
#                      is its output (tests/gdb.sh runs this). The scripts
#                      run the debug build, build/infer.
# Files: README.md and notes/*.md unless named. INFER: the binary (default
# build/asan/infer, the build `make test` makes).
mode=check
gdb_mode=0
while [ $# -gt 0 ]; do
    case "$1" in
        --check) shift ;;
        --write) mode=write; shift ;;
        --gdb) gdb_mode=1; shift ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
files=${*:-README.md notes/*.md}
INFER=${INFER:-build/asan/infer}
MODEL=data/shakespeare.gguf
export LLM_ISA=plain
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT

# run NAME ARGS...: the default model with ARGS on the step clock, one thread
run() {
    name=$1; shift
    "$INFER" --model $MODEL --clock steps --threads 1 "$@" > "$runs/$name.out" 2> "$runs/$name.err" ||
        { echo "doc_excerpts: run $name failed: $(tail -1 "$runs/$name.err")" >&2; exit 2; }
}
# readme_run NAME: the command README.md (or the file checked) shows in the sh block after
# "<!-- command: NAME -->", run as written (build/fast/infer, which make test
# builds; $INFER only where it is missing: on the plain path every build
# gives the same bits, which tests/docs.sh checks) but for this run's files
# in place of the two it writes in /tmp.
readme_run() {
    cmd=$(awk -v m="<!-- command: $1 -->" '$0 == m { on = 1; next } on && /^```sh/ { in_ = 1; next }
          in_ && /^```/ { exit } in_ { sub(/\\$/, ""); printf "%s ", $0 }' "$(grep -l "<!-- command: $1 -->" $files README.md | head -1)")
    [ -n "$cmd" ] || { echo "doc_excerpts: README.md shows no command named $1" >&2; exit 2; }
    fast=build/fast/infer
    [ -x "$fast" ] || fast=$INFER
    cmd=$(printf '%s' "$cmd" | sed "s#build/fast/infer#$fast#; s#2> */tmp/trace.txt#2> $runs/$1.err#; s#> */tmp/text.txt#> $runs/$1.out#")
    sh -c "$cmd" || { echo "doc_excerpts: the README's command $1 failed: $(tail -1 "$runs/$1.err")" >&2; exit 2; }
}
# gdb_run NAME: notes/gdb/NAME.gdb in gdb; keeps the lines it printed itself
gdb_run() {
    ${GDB:-gdb} -q -batch -nx -x "notes/gdb/$1.gdb" > "$runs/$1.all" 2>&1 ||
        { echo "doc_excerpts: notes/gdb/$1.gdb failed: $(tail -1 "$runs/$1.all")" >&2; exit 2; }
    grep '^| ' "$runs/$1.all" > "$runs/$1"
    [ -s "$runs/$1" ] ||
        { echo "doc_excerpts: notes/gdb/$1.gdb printed nothing (no breakpoint hit?): $(tail -3 "$runs/$1.all")" >&2; exit 2; }
}

if [ $gdb_mode = 1 ]; then
    mark=gdb-excerpt
    # only the scripts the files show (each run takes a second or more)
    for name in $(cat $files 2>/dev/null | sed -n 's/^<!-- gdb-excerpt: *\([A-Za-z0-9_-]*\).*/\1/p' | sort -u); do
        gdb_run "$name"
    done
else
    mark=excerpt
    # only the runs the files show
    needed=$(cat $files 2>/dev/null | sed -n 's/^<!-- excerpt: *\([A-Za-z0-9_-]*\)\..*/\1/p' | sort -u)
    wants() { echo "$needed" | grep -qx "$1"; }
    wants romeo && readme_run romeo
    wants preempt &&
        run preempt --workload data/workload-preempt.jsonl --policy priority --kv-blocks 10 --max-seqs 4 --trace
    wants shared && run shared --workload data/workload-shared-prefix.jsonl --trace
    wants shared-verbose && run shared-verbose --workload data/workload-shared-prefix.jsonl --trace=verbose
    wants spec && run spec --prompt "ROMEO:
And, by the world, and Romeo's dead,
And, by the world, and Romeo's dead,
And, by the world, and Romeo's dead,
" -n 24 --temperature 0 --speculate 4 --trace=verbose
fi

status=0
for f in $files; do
    [ -f "$f" ] || continue
    grep -q "^<!-- $mark: " "$f" || continue
    # rebuild the file: copy every line, but replace the body of each
    # marked block with what its run and filter print now
    awk -v runs="$runs" -v mark="$mark" '
        function trim(s) { return length(s) > 150 ? substr(s, 1, 150) " ..." : s }
        state == 0 && $0 ~ ("^<!-- " mark ": .* -->$") {
            print
            spec = substr($0, length("<!-- " mark ": ") + 1); sub(/ -->$/, "", spec)
            n = index(spec, "|")
            src = n ? substr(spec, 1, n - 1) : spec; filt = n ? substr(spec, n + 1) : "cat"
            gsub(/ /, "", src)
            cmd = "cd " runs " && cat " src " | " filt
            state = 1; next
        }
        state == 1 { print; state = 2; next }          # the opening fence
        state == 2 && /^```/ {                          # the closing fence: the new body, then it
            while ((cmd | getline line) > 0) print trim(line)
            close(cmd)
            print; state = 0; next
        }
        state == 2 { next }                             # the old body: dropped
        { print }
    ' "$f" > "$runs/new.md"
    if ! cmp -s "$f" "$runs/new.md"; then
        if [ $mode = write ]; then
            cp "$runs/new.md" "$f"
            echo "doc_excerpts: rewrote $f"
        else
            echo "doc_excerpts: $f differs from what the code prints now (tools/doc_excerpts.sh --write):"
            diff "$f" "$runs/new.md" | head -20
            status=1
        fi
    fi
done
exit $status
