#!/bin/sh
# browser_setup.sh - sourced by tests/browser.sh and tools/doc_screenshots.sh:
#   . tools/browser_setup.sh; browser_setup build/browser || exit 1
# puts playwright-core, the version pinned by tests/browser/package-lock.json,
# in DIR/node_modules: npm ci runs when it is missing or the lock file has
# changed since. Returns 1 with one line on stderr if npm fails. Chromium
# itself is Debian's (/usr/bin/chromium, tools/deps.sh): playwright-core
# downloads no browser.
browser_setup() {
    mkdir -p "$1"
    if ! cmp -s tests/browser/package-lock.json "$1/package-lock.json" || [ ! -d "$1/node_modules/playwright-core" ]; then
        cp tests/browser/package.json tests/browser/package-lock.json "$1/"
        if ! (cd "$1" && npm ci --no-audit --no-fund --loglevel=error > npm.log 2>&1); then
            rm -f "$1/package-lock.json"
            echo "npm ci in $1 failed: $(tail -3 "$1/npm.log" | tr '\n' ' ')" >&2
            return 1
        fi
    fi
    return 0
}
