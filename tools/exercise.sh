#!/bin/sh
# exercise.sh - build an exercise and run the tests that judge it.
#
#   make exercise EX=NAME   (exercise.sh run NAME): exercises/NAME/mine.c if it
#                           exists, else the handout stub.c; prints each test
#                           it runs, and the failures in full
#   make exercise-check     (exercise.sh check [NAME ...]): for every exercise,
#                           the stub fails every listed test, wrong.c fails at
#                           least one, the solution (src/ as it is) passes all
#
# How a variant is built. The function an exercise hollows stands in src/
# between
#       #ifdef EXERCISE_NAME          (NAME in capitals)
#       #include EXERCISE_NAME
#       #else
#       ... the solution ...
#       #endif
# Only that one source file is compiled again, with -DEXERCISE_NAME="variant.c",
# so the variant takes the function's place inside its file: it sees the file's
# types and static helpers, and a static function stays static. Every other
# object comes from the test build (build/asan/obj, build/asan/tobj), so a
# variant costs one compile and a link per test binary. The solution is the
# test build itself. Make passes CC, EX_FLAGS (the test build's flags) and
# EX_LIBS; EX_TIMEOUT (seconds, default 120) bounds each test, since a
# handout may loop forever.
#
# exercises/NAME/tests.txt lists the tests that judge it, one per line:
# "BINARY TEST" (tests/BINARY.c, a cmocka test name); '#' starts a comment.
cd "$(dirname "$0")/.." || exit 2
CC=${CC:-cc}
EX_TIMEOUT=${EX_TIMEOUT:-120}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ -z "$EX_FLAGS" ]; then
    echo "exercise.sh: run it through make (make exercise EX=NAME, make exercise-check)" >&2
    exit 2
fi

die() { echo "exercise.sh: $*" >&2; exit 2; }

# The tests of exercise $1: "binary test" lines.
tests_of() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "exercises/$1/tests.txt"; }

# The source file that holds exercise $1's function.
source_of() {
    up=$(echo "$1" | tr 'a-z' 'A-Z')
    n=$(grep -l "^#ifdef EXERCISE_$up\$" src/*.c src/*/*.c | wc -l)
    [ "$n" -eq 1 ] || die "$n files in src/ hold '#ifdef EXERCISE_$up' (want 1)"
    grep -l "^#ifdef EXERCISE_$up\$" src/*.c src/*/*.c
}

# build NAME VARIANT_FILE: compile the hollowed source with the variant in its
# place and link every test binary the exercise lists into build/ex/NAME/V/.
# Prints that folder; the compiler's messages go to build/ex/NAME/V/build.log.
build() {
    name=$1; variant=$2; up=$(echo "$name" | tr 'a-z' 'A-Z')
    src=$(source_of "$name") || exit 2
    base=$(basename "$src" .c)
    dir=build/ex/$name/$(basename "$variant" .c)
    mkdir -p "$dir"
    others=""
    for f in src/*.c src/*/*.c; do
        rel=${f#src/}
        case "$f" in src/front/infer.c|src/front/serve.c|"$src") ;; *) others="$others build/asan/obj/${rel%.c}.o" ;; esac   # programs have a main
    done
    {
        $CC $EX_FLAGS "-DEXERCISE_$up=\"$PWD/$variant\"" -c "$src" -o "$dir/$base.o" || exit 1
        for bin in $(tests_of "$name" | awk '{ print $1 }' | sort -u); do
            $CC $EX_FLAGS "build/asan/tobj/$bin.o" "$dir/$base.o" $others -o "$dir/$bin" \
                $EX_LIBS -lcmocka || exit 1
        done
    } > "$dir/build.log" 2>&1 || return 1
    echo "$dir"
}

# run_one DIR BINARY TEST LOG: PASS, FAIL, TIMEOUT, MISSING (no such test), or
# SKIP (its fixture is absent: see tests/testutil.h).
run_one() {
    timeout -k 5 "$EX_TIMEOUT" "$1/$2" "$3" > "$4" 2>&1
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo TIMEOUT
    elif ! grep -q 'Running 1 test(s)' "$4"; then echo MISSING
    elif [ $rc -eq 0 ] && grep -q 'PASSED.* 1 test(s)' "$4"; then echo PASS
    elif [ $rc -eq 0 ] && grep -q 'SKIPPED.* 1 test(s)' "$4"; then echo SKIP
    else echo FAIL; fi
}

# explain LOG: what a failing test said, short: cmocka's messages up to the
# failure, the test's line that failed with its source, and the head of
# a sanitizer's report (a leak only when nothing else failed: a test that
# stops at a failed assertion leaks its fixture).
explain() {
    awk '/^\[ RUN/ { on = 1 } on && /^\[  FAILED  \]/ { exit } on && !/^\[ RUN/ { print }' "$1" |
        head -20 | sed 's/^/    | /'
    grep 'error: Failure' "$1" | grep -o 'tests/[a-z_]*\.c:[0-9]*' | head -1 | while IFS=: read -r f n; do
        printf '    | %s:%s: %s\n' "$f" "$n" "$(sed -n "${n}p" "$f" | sed 's/^ *//')"
    done
    if grep -q 'ERROR: AddressSanitizer\|runtime error' "$1"; then
        grep -m1 -A12 'ERROR: AddressSanitizer\|runtime error' "$1" | sed 's/^/    | /'
    elif ! grep -q 'FAILED.* 1 test(s)' "$1"; then
        grep -m1 -A8 'ERROR: LeakSanitizer' "$1" | sed 's/^/    | /'
    fi
}

# run_tests NAME DIR VERBOSE: run the exercise's tests with DIR's binaries;
# writes "passed failed missing skipped" to DIR/counts. VERBOSE=1 prints every
# result and the output of each failing test.
run_tests() {
    p=0; f=0; m=0; k=0
    log=$2/last.log
    tests_of "$1" > "$2/tests"
    while read -r bin t; do
        r=$(run_one "$2" "$bin" "$t" "$log")
        case $r in
            PASS) p=$((p + 1)) ;; MISSING) m=$((m + 1)) ;; SKIP) k=$((k + 1)) ;; *) f=$((f + 1)) ;;
        esac
        if [ "$3" = 1 ]; then
            printf '%-8s %s %s\n' "$r" "$bin" "$t"
            [ "$r" = PASS ] || [ "$r" = SKIP ] || explain "$log"
        fi
    done < "$2/tests"
    echo "$p $f $m $k" > "$2/counts"
}

cmd_run() {
    name=$1
    [ -n "$name" ] || die "which exercise? make exercise EX=NAME (ls exercises/)"
    [ -f "exercises/$name/tests.txt" ] || die "no exercise '$name' (ls exercises/)"
    variant=exercises/$name/mine.c
    [ -f "$variant" ] || variant=exercises/$name/stub.c
    echo "exercise $name: $(source_of "$name") built with $variant in place of the solution"
    if ! dir=$(build "$name" "$variant"); then
        cat "build/ex/$name/$(basename "$variant" .c)/build.log"
        echo "exercise $name: $variant does not compile"
        exit 1
    fi
    grep -E 'warning|error' "$dir/build.log" | grep -v "^In file" | head -20
    echo "running $(tests_of "$name" | wc -l) tests (each alone, at most ${EX_TIMEOUT}s):"
    run_tests "$name" "$dir" 1
    set -- $(cat "$dir/counts")
    n=$(($1 + $2 + $3 + $4))
    if [ "$4" -eq "$n" ]; then
        echo "exercise $name: cannot judge: all $n tests need fixtures that are absent (${FIXTURES:-../shared/fixtures})"
        exit 2
    fi
    skipped=""
    [ "$4" -eq 0 ] || skipped=" ($4 skipped: their fixtures are absent)"
    if [ "$2" -eq 0 ] && [ "$3" -eq 0 ]; then
        echo "exercise $name: all $(($1)) tests pass with $variant$skipped"
    else
        echo "exercise $name: $1 of $n tests pass with $variant$skipped"
        exit 1
    fi
}

# check NAME: the three variants; prints one line, returns 1 when a claim fails.
# variant NAME FILE: build exercises/NAME/FILE in the function's place and
# run the listed tests; sets vp and vf (passed, failed), or, if it does not
# compile, ok=0 with the reason added to why.
variant() {
    vp=0; vf=0
    if dir=$(build "$1" "exercises/$1/$2"); then
        run_tests "$1" "$dir" 0
        set -- $(cat "$dir/counts")
        vp=$1; vf=$2
    else
        ok=0; why="$why; $2 does not compile"
    fi
}

check_one() {
    name=$1; ok=1; why=""
    for f in README.md stub.c wrong.c tests.txt; do
        [ -f "exercises/$name/$f" ] || { ok=0; why="$why; exercises/$name/$f is missing"; }
    done
    [ $ok = 1 ] || { echo "FAIL $name$why"; return 1; }
    n=$(tests_of "$name" | wc -l)
    [ "$n" -gt 0 ] || { echo "FAIL $name: tests.txt lists no test"; return 1; }
    # Tests that all need absent fixtures can judge nothing: say so (a failure
    # under CI, where the fixtures must be there), rather than read the stub's
    # and wrong.c's silence as passing.
    mkdir -p "build/ex/$name/solution"
    ln -sf "$PWD"/build/asan/test_* "build/ex/$name/solution/"
    run_tests "$name" "build/ex/$name/solution" 0
    set -- $(cat "build/ex/$name/solution/counts")
    gp=$1; gf=$2; gm=$3; gs=$4
    if [ "$1" -eq 0 ] && [ "$2" -eq 0 ] && [ "$3" -eq 0 ] && [ "$4" -eq "$n" ]; then
        if [ "${CI:-}" = true ]; then echo "FAIL $name: all $n tests skipped: their fixtures are absent under CI"; return 1; fi
        echo "skip $name: all $n tests need fixtures that are absent (${FIXTURES:-../shared/fixtures}): not judged"
        return 0
    fi
    # The handout: every test that runs fails.
    variant "$name" stub.c
    sf=$vf
    [ "$vp" -eq 0 ] || { ok=0; why="$why; $vp pass with the stub"; }
    # The wrong answer: at least one fails.
    variant "$name" wrong.c
    wf=$vf
    [ "$wf" -ge 1 ] || { ok=0; why="$why; wrong.c passes every test"; }
    # The solution (the test build itself, run first above): all pass.
    skipped=""
    [ "$gm" -eq 0 ] || { ok=0; why="$why; $gm listed tests do not exist"; }
    [ "$gf" -eq 0 ] || { ok=0; why="$why; the solution fails $gf"; }
    [ "$gs" -eq 0 ] || skipped=" ($gs skipped: no fixtures)"
    line=$(printf '%-15s %2d listed, stub fails %2d, wrong.c fails %2d, solution passes %2d%s' \
        "$name" "$n" "$sf" "$wf" "$gp" "$skipped")
    if [ $ok = 1 ]; then echo "ok   $line"; else echo "FAIL $line$why"; return 1; fi
}

cmd_check() {
    [ $# -gt 0 ] || set -- $(ls exercises | while read -r d; do [ -d "exercises/$d" ] && echo "$d"; done)
    pass=0; fail=0
    for name in "$@"; do
        if check_one "$name"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    done
    echo "exercises: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

case $1 in
    run) shift; cmd_run "$@" ;;
    check) shift; cmd_check "$@" ;;
    *) die "usage: exercise.sh run NAME | check [NAME ...]" ;;
esac
