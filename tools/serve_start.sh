# serve_start.sh - sourced (". tools/serve_start.sh") by the scripts that
# start a server. serve_start BIN LOG [OPTIONS...] runs BIN/serve on
# $SERVE_MODEL (default: the default model) on a free port (--port 0), its
# stderr in LOG, waits for its
# "listening on" line, and sets SERVE_PID and SERVE_URL; it returns 1 after
# one line naming the problem if the server did not start within 30 s.
serve_start() {
    serve_bin=$1; serve_log=$2; shift 2
    : > "$serve_log"   # there before the first look at it
    "$serve_bin/serve" --model "${SERVE_MODEL:-data/shakespeare.gguf}" --port 0 "$@" 2> "$serve_log" &
    SERVE_PID=$!
    serve_port=""
    for _ in $(seq 300); do
        serve_port=$(sed -n 's/^serve: listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$serve_log")
        [ -n "$serve_port" ] && break
        sleep 0.1
    done
    if [ -z "$serve_port" ]; then
        echo "FAIL: $serve_bin/serve did not start: $(cat "$serve_log")"
        return 1
    fi
    SERVE_URL=http://127.0.0.1:$serve_port
}
