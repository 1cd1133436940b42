#!/bin/sh
# gdb.sh - the debugger walkthroughs (notes/gdb/*.gdb) print what their
# chapters show. tools/doc_excerpts.sh --gdb runs each script with gdb -batch
# on the debug build (build/infer, build/rans_bench: make test builds them)
# and compares the lines it prints with the gdb-excerpt block in notes/; the
# check is proven to fail when a printed value in a chapter is edited.
# Without gdb the test is skipped, loudly; under CI=true that is a failure.
GDB=${GDB:-gdb}
export GDB
if ! command -v "$GDB" > /dev/null 2>&1; then
    if [ "$CI" = true ]; then
        echo "FAIL: $GDB not found, and CI=true: the walkthroughs in notes/gdb must be checked"
        exit 1
    fi
    echo "gdb: SKIPPED: $GDB not found, so notes/gdb/*.gdb and their excerpts are not checked"
    exit 0
fi
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

for b in build/infer build/rans_bench; do
    [ -x "$b" ] && ok || bad "$b is missing (make $b)"
done
# Every stage has a script, and every script is shown in a chapter.
n=0
for g in notes/gdb/*.gdb; do
    name=$(basename "$g" .gdb)
    n=$((n + 1))
    grep -q "^<!-- gdb-excerpt: $name[ |]" notes/*.md && ok || bad "notes/gdb/$name.gdb is shown in no chapter"
done
[ "$n" -ge 10 ] && ok || bad "only $n walkthroughs in notes/gdb"

if sh tools/doc_excerpts.sh --gdb --check > "$tmp/check" 2>&1; then ok
else bad "a chapter shows values its gdb walkthrough no longer prints:"; cat "$tmp/check"; fi

# Edit one printed value (the first digit of the first line of an excerpt,
# one more, modulo 10): the check must fail and name the file.
awk 'seen == 1 && /^\| / && !done {
         i = match($0, /[0-9]/); d = substr($0, i, 1)
         $0 = substr($0, 1, i - 1) ((d + 1) % 10) substr($0, i + 1); done = 1 }
     /^<!-- gdb-excerpt: / { seen = 1 } { print }' notes/sampler.md > "$tmp/edited.md"
if cmp -s notes/sampler.md "$tmp/edited.md"; then bad "could not plant an edit"
elif sh tools/doc_excerpts.sh --gdb --check "$tmp/edited.md" > "$tmp/out" 2>&1; then
    bad "an edited value in a gdb excerpt passed the check"
elif grep -q "edited.md differs" "$tmp/out"; then ok
else bad "the failed check did not name the file: $(cat "$tmp/out")"; fi
# An edit outside every excerpt is prose: the check passes.
sed 's/^The first token is the newline/The first token is the line break/' notes/sampler.md > "$tmp/prose.md"
if cmp -s notes/sampler.md "$tmp/prose.md"; then bad "could not plant a prose edit"
elif sh tools/doc_excerpts.sh --gdb --check "$tmp/prose.md" > "$tmp/out" 2>&1; then ok
else bad "an edit to prose failed the check: $(cat "$tmp/out")"; fi

echo "gdb: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
