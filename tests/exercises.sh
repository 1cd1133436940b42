#!/bin/sh
# exercises.sh - every exercise in exercises/ is proven to judge what it
# teaches: its handout (stub.c) fails every test it lists, its wrong answer
# (wrong.c) fails at least one, and the solution in src/ passes them all.
# Run by make test, which passes the test build's flags (see tools/exercise.sh).
start=$(date +%s)
sh tools/exercise.sh check
rc=$?
echo "exercise-check took $(($(date +%s) - start)) s"
exit $rc
