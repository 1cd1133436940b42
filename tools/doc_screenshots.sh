#!/bin/sh
# doc_screenshots.sh [--check | --write] [FILE.md ...] - the pictures of the
# --trace-html page in the documents, made from the page the code writes now
# (doc_excerpts.sh's sibling, for pictures).
#
# A picture is a marker line, then the Markdown that shows it:
#
#     <!-- screenshot: notes/img/trace-page.png preempt p sha256:HEX -->
#     ![the page at the first preemption](img/trace-page.png)
#
# The marker names the PNG (from the repository's root), the run below that
# writes the page, the keys pressed once it is open (comma-separated, as
# playwright names them: "p" goes to the first preemption), and the SHA-256
# of the page that run writes. The runs use the step clock, one thread and
# the plain-loop kernels, so the page is the same bytes on every machine.
#
#   --check (default)  exit 1, naming the file, when a marker's hash is not
#                      that of the page the code writes now, or its PNG is
#                      missing or was taken of another page or with other
#                      keys (tools/trace_screenshot.mjs writes both into the
#                      PNG's tEXt chunk "trace-page"). Needs no browser:
#                      tests/docs.sh runs it.
#   --write            take each picture again in chromium (playwright-core
#                      from build/browser, tools/browser_setup.sh) and
#                      rewrite the markers' hashes
# Files: README.md and notes/*.md unless named. INFER: the binary (default
# build/asan/infer, the build make test makes); CHROMIUM (/usr/bin/chromium).
mode=check
while [ $# -gt 0 ]; do
    case "$1" in
        --check) shift ;;
        --write) mode=write; shift ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
files=${*:-README.md notes/*.md}
INFER=${INFER:-build/asan/infer}
MODEL=data/shakespeare.gguf
export LLM_ISA=plain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# page RUN: the page RUN writes, once, in $tmp/RUN.html; its hash in $tmp/RUN.sha
page() {
    [ -f "$tmp/$1.sha" ] && return 0
    case "$1" in
        preempt) set -- "$1" --workload data/workload-preempt.jsonl --policy priority --kv-blocks 10 --max-seqs 4 ;;
        *) echo "doc_screenshots: no run named $1" >&2; exit 2 ;;
    esac
    name=$1; shift
    "$INFER" --model $MODEL --clock steps --threads 1 "$@" --trace-html "$tmp/$name.html" > /dev/null 2> "$tmp/$name.err" ||
        { echo "doc_screenshots: run $name failed: $(tail -1 "$tmp/$name.err")" >&2; exit 2; }
    sha256sum "$tmp/$name.html" | cut -c1-64 > "$tmp/$name.sha"
}

markers=$(cat $files 2>/dev/null | grep '^<!-- screenshot: ' | sort -u)
if [ $mode = write ]; then
    . tools/browser_setup.sh
    browser_setup build/browser || exit 2
    echo "$markers" | while read -r _ _ png run keys _; do
        [ -n "$png" ] || continue
        page "$run"
        sha=$(cat "$tmp/$run.sha")
        mkdir -p "$(dirname "$png")"
        node tools/trace_screenshot.mjs --playwright build/browser/node_modules/playwright-core/index.mjs \
            --chromium "${CHROMIUM:-/usr/bin/chromium}" --page "$tmp/$run.html" --keys "$keys" --out "$png" \
            --stamp "sha256:$sha keys:$keys" || exit 2
        for f in $files; do
            [ -f "$f" ] || continue
            sed "s#^<!-- screenshot: $png $run $keys sha256:[0-9a-f]* -->\$#<!-- screenshot: $png $run $keys sha256:$sha -->#" \
                "$f" > "$tmp/new.md"
            cmp -s "$f" "$tmp/new.md" || { cp "$tmp/new.md" "$f"; echo "doc_screenshots: rewrote $f"; }
        done
    done || exit 2
    exit 0
fi

status=0
for f in $files; do
    [ -f "$f" ] || continue
    grep '^<!-- screenshot: ' "$f" > "$tmp/marks" || continue
    while read -r _ _ png run keys hash _; do
        page "$run"
        sha=$(cat "$tmp/$run.sha")
        if [ "$hash" != "sha256:$sha" ]; then
            echo "doc_screenshots: $f: $png shows a page the code no longer writes (sh tools/doc_screenshots.sh --write)"
            status=1
        elif [ ! -f "$png" ]; then
            echo "doc_screenshots: $f: $png is missing (sh tools/doc_screenshots.sh --write)"
            status=1
        elif ! grep -aq "sha256:$sha keys:$keys" "$png"; then
            echo "doc_screenshots: $f: $png was not taken of this page with keys $keys (sh tools/doc_screenshots.sh --write)"
            status=1
        fi
    done < "$tmp/marks"
done
exit $status
