#!/bin/sh
# hops.sh - tools/count_hops.sh runs (so it cannot rot) and the decode step
# it follows goes down the stages in their order: the runtime, the engine,
# the scheduler, the executor, the model; the walk and its count of file
# changes are printed (notes/stages.md, "One step, file by file").
out=$(sh tools/count_hops.sh 3 2>&1)
rc=$?
echo "$out" | sed 's/^/  /'
if [ $rc -ne 0 ]; then echo "hops: FAIL: tools/count_hops.sh exited $rc"; exit 1; fi
n=$(echo "$out" | sed -n 's/^file changes in step 3 (rt_step): \([0-9]*\)$/\1/p')
if [ -z "$n" ] || [ "$n" -lt 5 ]; then echo "hops: FAIL: no count of file changes (or fewer than the 5 stages)"; exit 1; fi
# the order in which the step first enters each stage's file
order=$(echo "$out" | awk '$2 != "(back)" && !seen[$1]++ { print $1 }' |
        grep -x -e runtime.c -e engine.c -e scheduler.c -e executor.c -e model.c | tr '\n' ' ')
want="runtime.c engine.c scheduler.c executor.c model.c "
if [ "$order" != "$want" ]; then echo "hops: FAIL: the step enters the stages as '$order', want '$want'"; exit 1; fi
echo "hops: 1 passed, 0 failed ($n file changes in a decode step)"
