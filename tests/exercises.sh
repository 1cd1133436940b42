#!/bin/sh
# exercises.sh - every exercise in exercises/ is proven to judge what it
# teaches: its handout (stub.c) fails every test it lists, its wrong answer
# (wrong.c) fails at least one, and the solution in src/ passes them all.
# Run by make test, which passes the test build's flags (see tools/exercise.sh).
# The lines it prints are the ones exercises/README.md shows (when every
# exercise could be judged): the README's block is this run's output.
start=$(date +%s)
out=$(mktemp); trap 'rm -f "$out"' EXIT
sh tools/exercise.sh check | tee "$out"
rc=$(grep -q '^exercises: .* 0 failed$' "$out" && echo 0 || echo 1)
echo "exercise-check took $(($(date +%s) - start)) s"
if ! grep -q '^skip ' "$out"; then
    awk '/^```$/ && on { exit } on { print } /^## Proof that the tests judge/ { sect = 1 } sect && /^```$/ { on = 1 }' \
        exercises/README.md > "$out.readme"
    if ! cmp -s "$out" "$out.readme"; then
        echo "FAIL: exercises/README.md shows other lines than make exercise-check prints now:"
        diff "$out.readme" "$out" | head -10
        rc=1
    fi
    rm -f "$out.readme"
fi
exit $rc
