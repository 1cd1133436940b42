#!/bin/sh
# deps.sh - make sure the Debian packages the build needs are installed.
# As root it installs what is missing; otherwise it prints the command to run.
# chromium (tests/browser.sh) is wanted, not needed: as root it is installed
# too (so CI, root, has it), otherwise a note names it and the build goes on
# (the browser test says it skipped).
# deps.sh fuzz: also what make fuzz needs (clang, and libFuzzer, which Debian
# ships in libclang-rt-14-dev). make test never needs them.
need=""
if [ "$1" = fuzz ]; then
    command -v clang >/dev/null 2>&1 || need="$need clang"
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
        need="$need libclang-rt-14-dev"
fi
[ -f /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so ] || need="$need libopenblas-openmp-dev"
[ -f /usr/include/cmocka.h ] || need="$need libcmocka-dev"
[ -f /usr/include/pcre2.h ] || need="$need libpcre2-dev"
[ -f /usr/include/cjson/cJSON.h ] || need="$need libcjson-dev"
[ -f /usr/include/zstd.h ] || need="$need libzstd-dev"   # tools/rans_bench compares with zstd
command -v curl >/dev/null 2>&1 || need="$need curl"   # tests/server.sh drives the server with it
command -v jq >/dev/null 2>&1 || need="$need jq"       # ... and reads its JSON answers with jq
command -v gdb >/dev/null 2>&1 || need="$need gdb"     # tests/gdb.sh: the walkthroughs of notes/gdb
command -v node >/dev/null 2>&1 || need="$need nodejs" # tests/openai.sh: OpenAI's own Node client,
command -v npm >/dev/null 2>&1 || need="$need npm"     # fetched by npm ci
want=""
[ -x /usr/bin/chromium ] || want=" chromium"            # tests/browser.sh: the --trace-html page, headless
if [ "$(id -u)" = 0 ] && [ -n "$need$want" ]; then
    echo "deps: installing$need$want" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need $want >/dev/null || {
        echo "deps: apt-get install$need$want failed" >&2; exit 1; }
    exit 0
fi
[ -n "$want" ] && echo "deps: tests/browser.sh will be skipped without$want: sudo apt-get install -y$want" >&2
[ -z "$need" ] && exit 0
echo "deps: missing packages:$need. Run: sudo apt-get install -y$need" >&2
exit 1
