#!/bin/sh
# fuzz.sh SECONDS TARGET... - run each libFuzzer target (build/fuzz/TARGET)
# for SECONDS over its working corpus, one after the other, and print a line
# per target: execs, coverage, corpus size. Called by make fuzz.
#
# The working corpus build/fuzz/corpus/TARGET starts as a copy of the seeds
# in tests/fuzz/TARGET/ and keeps what each run adds, so runs build on each
# other (make clean starts over). A crash, leak, timeout or out-of-memory
# stops that target: its input is saved in build/fuzz/artifacts/ and the
# script goes on with the others, then exits 1. To keep the input as a
# regression test once the bug is fixed, move it into tests/fuzz/TARGET/,
# where make test replays it (tests/fuzz.sh).
#
#   cov   edges of the code reached (libFuzzer's "cov")
#   ft    features: edges with hit-count buckets, what decides that an input
#         is new (libFuzzer's "ft")
#   corpus files in the working corpus at the start -> at the end
secs=${1:?usage: fuzz.sh SECONDS TARGET...}
shift
export OMP_NUM_THREADS=1
# Leaks are findings too; an input that takes more than 20 s is a hang, and
# one that makes the code ask for more than 256 MB at once is a finding (a
# few bytes of header must not cost that much before the file is checked).
opts="-max_total_time=$secs -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=256"
mkdir -p build/fuzz/corpus build/fuzz/artifacts build/fuzz/logs
status=0
printf '%-15s %6s %11s %8s %6s %7s %15s  %s\n' target seconds execs exec/s cov ft "corpus files" result
for t in "$@"; do
    corpus=build/fuzz/corpus/$t
    mkdir -p "$corpus"
    for f in tests/fuzz/$t/*; do
        case $(basename "$f") in README*) continue ;; esac
        [ -f "$f" ] && cp "$f" "$corpus/"
    done
    before=$(ls "$corpus" | wc -l)
    log=build/fuzz/logs/$t.log
    build/fuzz/$t $opts -artifact_prefix=build/fuzz/artifacts/$t- "$corpus" > "$log" 2>&1
    rc=$?
    after=$(ls "$corpus" | wc -l)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    # the last status line libFuzzer printed: "#N  DONE  cov: X ft: Y corp: ..."
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    if [ $rc -eq 0 ]; then
        result=ok
    else
        status=1
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        what=$(grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|broken promise|ALARM|out-of-memory' "$log")
        result="FAILED (rc $rc): ${art:-no artifact}; see $log"
        [ -n "$what" ] && result="$result
    $what"
    fi
    printf '%-15s %6s %11s %8s %6s %7s %15s  %s\n' "$t" "$secs" "${execs:-?}" "${rate:-?}" \
        "${cov:-?}" "${ft:-?}" "$before -> $after" "$result"
done
exit $status
