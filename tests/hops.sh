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
# notes/stages.md shows this walk (the block after "<!-- hops: step 3 -->")
# and counts its changes between stage files: both must be what it prints now
shown=$(awk '$0 == "<!-- hops: step 3 -->" { on = 1; next } on && /^```/ { if (in_) exit; in_ = 1; next }
             in_ { print }' notes/stages.md)
if [ "$shown" != "$out" ]; then
    echo "hops: FAIL: notes/stages.md shows another walk than tools/count_hops.sh prints now:"
    printf '%s\n' "$shown" > /tmp/hops.shown.$$; printf '%s\n' "$out" | diff /tmp/hops.shown.$$ - | head -20
    rm -f /tmp/hops.shown.$$; exit 1
fi
between=$(echo "$out" | awk '{ s = ($1 ~ /^(runtime|engine|scheduler|kv_paged|executor|model)\.c$/) }
                             NR > 1 && s && prev { n++ } { prev = s } END { print n + 0 }')
if ! grep -q "$between of the $n changes are between stage files" notes/stages.md; then
    echo "hops: FAIL: notes/stages.md should say \"$between of the $n changes are between stage files\""; exit 1
fi
echo "hops: 1 passed, 0 failed ($n file changes in a decode step, $between between stage files)"
