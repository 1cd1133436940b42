#!/bin/sh
# openai.sh - the official openai npm client (the version pinned in
# tests/openai/package-lock.json) against build/asan/serve: a completion
# equal to infer's greedy text, a streamed chat completion with usage, and
# an error (tests/openai/client.mjs). npm ci installs the client into
# build/openai once (again when the lock file changes). Without node and
# npm the test is skipped; under CI (CI=true) that is a failure.
INFER=${INFER:-build/asan/infer}
BIN=$(dirname "$INFER")
MODEL=data/shakespeare.gguf
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then echo "FAIL: node or npm is missing, and under CI that is a failure"; exit 1; fi
    echo "openai: skipped (node and npm are not installed)"; exit 0
fi
dir=build/openai
mkdir -p $dir
cp tests/openai/client.mjs $dir/
if ! cmp -s tests/openai/package-lock.json $dir/package-lock.json || [ ! -d $dir/node_modules/openai ]; then
    cp tests/openai/package.json tests/openai/package-lock.json $dir/
    if ! (cd $dir && npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
        echo "FAIL: npm ci in $dir: $(tail -5 $dir/npm.log)"; rm -f $dir/package-lock.json; exit 1
    fi
fi
tmp=$(mktemp -d)
"$INFER" --model $MODEL --prompt "ROMEO:" -n 40 --temperature 0 --threads 1 > "$tmp/ref.full" 2>/dev/null
tail -c +7 "$tmp/ref.full" | head -c -1 > "$tmp/ref"
. tools/serve_start.sh
export OMP_NUM_THREADS=1
serve_start "$BIN" "$tmp/serve.err" --threads 1 || exit 1
pid=$SERVE_PID
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
echo "openai: client $(node -p "require('./$dir/node_modules/openai/package.json').version") on node $(node --version)"
if BASE_URL=$SERVE_URL EXPECT="$tmp/ref" node $dir/client.mjs; then
    echo "openai: 1 passed, 0 failed"
else
    echo "openai: 0 passed, 1 failed"; exit 1
fi
