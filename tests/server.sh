#!/bin/sh
# server.sh - build/asan/serve end to end over HTTP, driven by curl (and
# bench_serve), on the default model:
#  0. The command line's errors.
#  1. /health, /v1/models (with the chat template), /metrics.
#  2. Greedy text through the server equals infer's on the same prompt,
#     whole and streamed (SSE chunks joined, usage, data: [DONE]), and a
#     stop string ends it where infer's --stop does.
#  3. Chat, whole and streamed; n = 2 gives two choices; a priority reaches
#     the engine.
#  4. Errors as OpenAI error objects: 400 naming the field, 404 (path,
#     model), 405, 413 (body over --max-body), 503 (queue full).
#  5. 16 concurrent streamed clients all get the whole greedy text.
#  6. A client that closes its connection mid-stream cancels its request:
#     /metrics shows every KV block back and the request counted as
#     cancelled; the trace shows the connection's life beside the engine's.
#  7. A soak through HTTP (tools/soak_serve.sh): 400 requests from
#     bench_serve, some leaving mid-stream, a pool small enough to preempt;
#     then nothing held, nothing in flight, the RSS flat; and the servers
#     exit cleanly on SIGTERM (under ASan: no leak).
#  8. With ../shared/fixtures: a sentencepiece model's greedy text, streamed,
#     equals infer's.
#  8c. A server with --speculate 4: greedy text of a prompt it copies, whole
#     and streamed, equals infer's without speculation; a request's
#     "speculate": 0 turns it off; /metrics counts the guesses.
#  9-15. A low-memory server, bounded body buffering, SIGTERM with requests
#     open, connections (a cap, an idle timeout that never cuts a queued
#     request), the model file truncated under the server, a client served
#     within 1 s beside 2,500 idle and slowloris connections, and beside
#     1,000 held 1 MiB bodies with the RSS bounded (below, each with its own
#     server).
# curl and jq are needed (tools/deps.sh installs them): without them the
# test is skipped, and under CI that is a failure.
# Prints "server: N passed, N failed"; exits non-zero on any failure.
INFER=${INFER:-build/asan/infer}
BIN=$(dirname "$INFER")
MODEL=data/shakespeare.gguf
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', want '$3'"; fi; }

for tool in curl jq; do
    if ! command -v $tool >/dev/null 2>&1; then
        if [ "${CI:-}" = true ]; then echo "FAIL: $tool is missing, and under CI that is a failure"; exit 1; fi
        echo "server: skipped ($tool is not installed; tools/deps.sh installs it)"; exit 0
    fi
done
for b in serve infer bench_serve; do
    [ -x "$BIN/$b" ] || { echo "FAIL: $BIN/$b is not built"; exit 1; }
done

tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
# ASan keeps freed memory in a quarantine (256 MB by default): kept small
# here so that the RSS shows what the server itself holds.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8"
export OMP_NUM_THREADS=1

# start NAME ARGS...: a server on a free port; sets URL and PID
. tools/serve_start.sh
start() {
    name=$1; shift
    serve_start "$BIN" "$tmp/$name.err" --threads 1 "$@" || exit 1
    PID=$SERVE_PID; URL=$SERVE_URL
    pids="$pids $PID"
}
post() { curl -s -H 'Content-Type: application/json' "$URL$1" -d "$2"; }
metric() { curl -s "$URL/metrics" | sed -n "s/^$1 //p"; }
# sse_text FILE FIELD: the text of a stream's chunks joined (FIELD: .text or .delta.content)
sse_text() { sed -n 's/^data: //p' "$1" | grep -v '^\[DONE\]$' | jq -j ".choices[0]$2 // empty"; }

# the command line: one line naming the problem, exit status 2 (1 for a host that cannot be had)
cli() { out=$("$BIN/serve" "$@" 2>&1); echo "$? $out"; }
check "unknown option" "$(cli --model $MODEL --bogus 1)" "2 serve: unknown option --bogus (see --help)"
check "no model" "$(cli --port 1)" "2 serve: --model FILE is required (see --help)"
check "bad port" "$(cli --model $MODEL --port 70000)" "2 serve: --port: '70000' is not an integer in 0..65535"
check "trace-json" "$(cli --model $MODEL --trace-json x.json | cut -c1-37)" "2 serve: --trace-json and --trace-svg"
long=$(printf '%0300d' 0)
check "a model name past 255 bytes" "$(cli --model $MODEL --model-name $long)" "2 serve: --model-name: 300 bytes (want 1..255)"
check "an address not of this machine" "$(cli --model $MODEL --host 192.0.2.1)" \
    "1 serve: cannot listen on 192.0.2.1:8000 (in use, or not an address of this machine)"

start main --max-body 65536 --trace
A_PID=$PID

# 1. the simple endpoints
check "health" "$(curl -s "$URL/health" | jq -r .status)" ok
check "models" "$(curl -s "$URL/v1/models" | jq -r '.data[0].id + " " + .data[0].chat_template')" "shakespeare fallback"
curl -s -D "$tmp/h" -o /dev/null "$URL/v1/models"
grep -qi '^X-Chat-Template: fallback' "$tmp/h" && ok || bad "no X-Chat-Template header: $(cat "$tmp/h")"
curl -s "$URL/metrics" > "$tmp/m0"
grep -q '^# TYPE llm_time_to_first_token_seconds histogram$' "$tmp/m0" && grep -q '^llm_kv_blocks{state="free"} ' "$tmp/m0" &&
    ok || bad "/metrics is not what it should be: $(head -5 "$tmp/m0")"

# 2. greedy text equals infer's (infer echoes the prompt, then ends with a newline)
"$INFER" --model $MODEL --prompt "ROMEO:" -n 40 --temperature 0 --threads 1 > "$tmp/ref.full" 2>/dev/null
tail -c +7 "$tmp/ref.full" | head -c -1 > "$tmp/ref"
post /v1/completions '{"model": "shakespeare", "prompt": "ROMEO:", "max_tokens": 40, "temperature": 0}' > "$tmp/c.json"
jq -j '.choices[0].text' "$tmp/c.json" > "$tmp/c.txt"
cmp -s "$tmp/c.txt" "$tmp/ref" && ok || bad "greedy completion differs from infer's: $(cat "$tmp/c.txt") / $(cat "$tmp/ref")"
check "completion shape" "$(jq -r '[.object, .choices[0].index, .choices[0].finish_reason, .usage.prompt_tokens,
    .usage.completion_tokens, .usage.total_tokens, (.id | startswith("cmpl-")), (.created > 0)] | join(" ")' "$tmp/c.json")" \
    "text_completion 0 length 3 40 43 true true"
post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0, "stream": true,
    "stream_options": {"include_usage": true}}' > "$tmp/s.sse"
sse_text "$tmp/s.sse" .text > "$tmp/s.txt"
cmp -s "$tmp/s.txt" "$tmp/ref" && ok || bad "streamed greedy text differs from infer's: $(cat "$tmp/s.txt")"
check "stream ends with [DONE]" "$(tail -n 2 "$tmp/s.sse" | head -n 1)" "data: [DONE]"
check "stream usage" "$(sed -n 's/^data: //p' "$tmp/s.sse" | grep -v DONE | jq -r 'select(.usage != null) | .usage.completion_tokens')" 40
check "stream finish" "$(sed -n 's/^data: //p' "$tmp/s.sse" | grep -v DONE | jq -r '.choices[0].finish_reason // empty')" length
"$INFER" --model $MODEL --prompt "ROMEO:" -n 40 --temperature 0 --threads 1 --stop "," > "$tmp/stop.full" 2>/dev/null
tail -c +7 "$tmp/stop.full" | head -c -1 > "$tmp/stopref"
post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0, "stop": ","}' > "$tmp/stop.json"
jq -j '.choices[0].text' "$tmp/stop.json" > "$tmp/stop.txt"
cmp -s "$tmp/stop.txt" "$tmp/stopref" && ok || bad "a stop string ends the text elsewhere than infer: $(cat "$tmp/stop.txt")"
check "stop finish" "$(jq -r '.choices[0].finish_reason' "$tmp/stop.json")" stop
# an editor's completion request: 14 stop strings (13 that never occur, and ",")
stops='"\n\n\n", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>", "</code>", "```", "/src/", "#- coding",
       "\nfunction", "\nclass", "\ndef ", "\n// ", ","'
post /v1/completions "{\"prompt\": \"ROMEO:\", \"max_tokens\": 40, \"temperature\": 0, \"stop\": [$stops]}" > "$tmp/stop14.json"
jq -j '.choices[0].text' "$tmp/stop14.json" > "$tmp/stop14.txt"
cmp -s "$tmp/stop14.txt" "$tmp/stopref" && ok || bad "14 stop strings: $(cat "$tmp/stop14.json")"
# LibreChat's body: penalties, a user, no max_tokens: answered
check "LibreChat's default body" "$(curl -s -o "$tmp/lc.json" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/chat/completions" \
    -d '{"model": "shakespeare", "messages": [{"role": "user", "content": "Hail"}], "temperature": 1, "top_p": 1,
         "presence_penalty": 0, "frequency_penalty": 0, "user": "u-1", "stream": false}')/$(jq -r '.choices[0].finish_reason' "$tmp/lc.json")" 200/length
check "a presence penalty out of range refused" "$(curl -s -o "$tmp/err.json" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d '{"prompt": "a", "presence_penalty": 2.5}')/$(jq -r .error.param "$tmp/err.json")" 400/presence_penalty
# the penalties and logit_bias change greedy text (the sampler's own tests check by how much)
post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0, "frequency_penalty": 2}' | jq -j '.choices[0].text' > "$tmp/pen.txt"
cmp -s "$tmp/pen.txt" "$tmp/ref" && bad "a frequency penalty of 2 left greedy text as it was" || ok
post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 1, "temperature": 0}' | jq -j '.choices[0].text' > "$tmp/first.txt"
bias=$(post /tokenize "$(jq -Rs '{content: .}' "$tmp/first.txt")" | jq -c '[.tokens[] | {key: tostring, value: -100}] | from_entries')
post /v1/completions "{\"prompt\": \"ROMEO:\", \"max_tokens\": 1, \"temperature\": 0, \"logit_bias\": $bias}" |
    jq -j '.choices[0].text' > "$tmp/biased.txt"
[ -s "$tmp/first.txt" ] && ! cmp -s "$tmp/biased.txt" "$tmp/first.txt" && ok ||
    bad "logit_bias -100 on greedy's first token ($bias) left it: $(cat "$tmp/biased.txt")"
check "17 stop strings refused" "$(curl -s -o "$tmp/err.json" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/completions" -d "{\"prompt\": \"a\", \"stop\": [$stops, \"a\", \"b\", \"c\"]}")/$(jq -r .error.param "$tmp/err.json")" 400/stop

# 3. chat, whole and streamed; two samples
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Who art thou?"}], "max_tokens": 12, "seed": 3}' > "$tmp/chat.json"
check "chat shape" "$(jq -r '[.object, .choices[0].message.role, (.choices[0].message.content | length > 0),
    (.id | startswith("chatcmpl-"))] | join(" ")' "$tmp/chat.json")" "chat.completion assistant true true"
post /v1/chat/completions '{"messages": [{"role": "system", "content": "Speak."}, {"role": "user", "content": "Hail"}],
    "max_completion_tokens": 12, "stream": true}' > "$tmp/chat.sse"
check "chat stream role" "$(sed -n 's/^data: //p' "$tmp/chat.sse" | head -n 1 | jq -r '.object + " " + .choices[0].delta.role')" \
    "chat.completion.chunk assistant"
check "chat stream [DONE]" "$(tail -n 2 "$tmp/chat.sse" | head -n 1)" "data: [DONE]"
check "two samples" "$(post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 5, "n": 2, "seed": 1}' |
    jq -r '[.choices[].index] | join(",")')" "0,1"

check "priority" "$(post /v1/completions '{"prompt": "KING:", "max_tokens": 2, "priority": "high"}' | jq -r .object)" text_completion
grep -q 'arrived: 3 prompt tokens, priority high, max 2 new' "$tmp/main.err" && ok || bad "the trace does not show the high priority"

# 4. errors
code() { curl -s -o "$tmp/err.json" -w '%{http_code}' -H 'Content-Type: application/json' "$@"; }
check "400" "$(code "$URL/v1/completions" -d '{"prompt": "a", "temperature": -3}') $(jq -r '.error.param + " " + .error.type' "$tmp/err.json")" \
    "400 temperature invalid_request_error"
check "400 json" "$(code "$URL/v1/chat/completions" -d '{"messages": [')" 400
check "400 speculate" "$(code "$URL/v1/completions" -d '{"prompt": "a", "speculate": 17}') $(jq -r '.error.param' "$tmp/err.json")" \
    "400 speculate"
check "400 speculate type" "$(code "$URL/v1/completions" -d '{"prompt": "a", "speculate": "4"}') $(jq -r '.error.param' "$tmp/err.json")" \
    "400 speculate"
check "400 engine" "$(code "$URL/v1/completions" -d "{\"prompt\": \"$(head -c 3000 /dev/zero | tr '\0' x)\"}")" 400
jq -r .error.message "$tmp/err.json" | grep -q context && ok || bad "a prompt over the context: $(cat "$tmp/err.json")"
check "404 path" "$(code "$URL/v1/embeddings" -d '{}')" 404
check "404 model" "$(code "$URL/v1/completions" -d '{"model": "gpt-4", "prompt": "a"}') $(jq -r .error.param "$tmp/err.json")" "404 model"
check "405" "$(code "$URL/v1/completions")" 405
head -c 70000 /dev/zero | tr '\0' ' ' > "$tmp/big"
check "413" "$(code "$URL/v1/completions" --data-binary @"$tmp/big")" 413

# 4b. The HTTP layer's own refusals (src/front/http1.c) are OpenAI error
# objects too, each with its status: a request line too long (414), a head
# too large (431), an HTTP version not spoken (505), not HTTP at all (400), a
# transfer coding not known (501), a bad chunk size (400); a body over
# --max-body is refused at the header or chunk that passes it, before the
# client has sent it all (curl stops at the answer: far fewer bytes sent
# than the 20 MB offered). Chunked bodies, 100-continue and HTTP/1.0 are
# served.
# raw FILE: FILE's bytes sent as they are on one connection; prints what
# came back once the server closed it
raw() {
    URL=$URL node -e '
const u = new URL(process.env.URL), fs = require("fs");
const s = require("net").connect(+u.port, u.hostname, () => s.write(fs.readFileSync(process.argv[1])));
let got = Buffer.alloc(0);
s.on("data", d => got = Buffer.concat([got, d])); s.on("error", () => {});
s.on("close", () => process.stdout.write(got));
setTimeout(() => s.destroy(), 10000).unref();   /* a limit, not a wait: node exits at the close */' "$1"
}
# refused NAME STATUS FILE: FILE's answer is STATUS with an error object
refused() {
    raw "$3" > "$tmp/raw.out"
    got=$(head -1 "$tmp/raw.out" | cut -d' ' -f2)
    msg=$(sed '1,/^\r*$/d' "$tmp/raw.out" | jq -r .error.message 2>/dev/null)
    [ "$got" = "$2" ] && [ -n "$msg" ] && [ "$msg" != null ] && ok ||
        bad "$1: want $2 and an error object, got: $(head -c 300 "$tmp/raw.out")"
}
if command -v node > /dev/null 2>&1; then
    printf 'GET /health HTTP/2.0\r\nHost: x\r\n\r\n' > "$tmp/r1"; refused "HTTP/2.0" 505 "$tmp/r1"
    printf '\026\003\001\002\000\001\000\001\374\003\003' > "$tmp/r2"; refused "a TLS hello" 400 "$tmp/r2"
    printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxx' > "$tmp/r3"
    refused "Transfer-Encoding: gzip" 501 "$tmp/r3"
    printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n' > "$tmp/r4"
    refused "a bad chunk size" 400 "$tmp/r4"
    grep -q 'chunk size' "$tmp/raw.out" && ok || bad "the bad chunk's message: $(tail -1 "$tmp/raw.out")"
    printf 'GET /health HTTP/1.1\r\n\r\n' > "$tmp/r5"; refused "no Host" 400 "$tmp/r5"
    # two requests in one write, answered in turn on the one connection
    printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' > "$tmp/r6"
    check "pipelined requests" "$(raw "$tmp/r6" | grep -o 'HTTP/1.1 200 OK' | wc -l)" 2
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi
check "414" "$(code "$URL/$(head -c 9000 /dev/zero | tr '\0' a)") $(jq -r '.error.type' "$tmp/err.json")" "414 invalid_request_error"
check "431" "$(code -H "X-Big: $(head -c 40000 /dev/zero | tr '\0' b)" "$URL/health") $(jq -r '.error.type' "$tmp/err.json")" \
    "431 invalid_request_error"
for how in "Transfer-Encoding: chunked" "X-Length: known"; do
    r=$(head -c 20000000 /dev/zero | curl -s -o "$tmp/err.json" -w '%{http_code} %{size_upload}' -H "$how" \
        -H 'Content-Type: application/json' --data-binary @- "$URL/v1/completions")
    [ "${r% *}" = 413 ] && [ "${r#* }" -lt 10000000 ] && jq -r .error.message "$tmp/err.json" | grep -q -- --max-body &&
        ok || bad "20 MB offered ($how) against --max-body 65536: want 413 early, got '$r' $(cat "$tmp/err.json")"
done
check "a chunked body" "$(curl -s -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d '{"prompt": "ROMEO:", "max_tokens": 3, "temperature": 0}' | jq -r '.choices[0].finish_reason')" length
check "100-continue" "$(curl -s -H 'Expect: 100-continue' -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d '{"prompt": "ROMEO:", "max_tokens": 3, "temperature": 0}' | jq -r '.choices[0].finish_reason')" length
check "HTTP/1.0" "$(curl -s --http1.0 "$URL/health" | jq -r .status)" ok

# 5. 16 concurrent streamed clients, each the whole greedy text
"$INFER" --model $MODEL --prompt "ROMEO:" -n 48 --temperature 0 --threads 1 > "$tmp/ref48.full" 2>/dev/null
tail -c +7 "$tmp/ref48.full" | head -c -1 > "$tmp/ref48"
clients=""
for i in $(seq 16); do
    post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 48, "temperature": 0, "stream": true}' > "$tmp/p$i.sse" &
    clients="$clients $!"
done
for c in $clients; do wait $c; done
same=0
for i in $(seq 16); do
    sse_text "$tmp/p$i.sse" .text > "$tmp/p$i.txt"
    cmp -s "$tmp/p$i.txt" "$tmp/ref48" && grep -q '^data: \[DONE\]$' "$tmp/p$i.sse" && same=$((same + 1))
done
check "16 concurrent streams with the whole text" $same 16

# 6. a second server, one sequence at a time and no queue: a request of 16
# samples runs them one after another; the client leaves after its first
# text. Meanwhile a second request finds the queue full.
start one --max-seqs 1 --max-queue 0 --trace
ONE_PID=$PID
curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d '{"prompt": "ROMEO:", "max_tokens": 200, "n": 16, "ignore_eos": true, "stream": true}' > "$tmp/long.sse" &
CURL=$!
for _ in $(seq 300); do grep -q '^data: ' "$tmp/long.sse" && break; sleep 0.02; done
check "503" "$(code "$URL/v1/completions" -d '{"prompt": "a"}') $(jq -r .error.type "$tmp/err.json")" "503 server_error"
kill $CURL 2>/dev/null
held=""; for _ in $(seq 200); do
    held=$(metric 'llm_kv_blocks{state="held"}')
    [ "$held" = 0 ] && [ "$(metric llm_http_requests_in_flight)" = 0 ] && break
    sleep 0.05
done
check "KV blocks held after the client left" "$held" 0
cancelled=$(metric 'llm_requests_total{state="cancel"}')
[ "${cancelled:-0}" -ge 1 ] && ok || bad "no request was cancelled (cancel count '$cancelled'): the stream ended first?"
check "503 counted" "$(metric 'llm_requests_rejected_total{reason="queue_full"}')" 1
grep -q 'conn [0-9]*: client disconnected before the end, cancelling cmpl-' "$tmp/one.err" &&
    grep -q 'conn [0-9]*: cancelling #0' "$tmp/one.err" && grep -q 'conn [0-9]*: opened from 127.0.0.1:' "$tmp/one.err" &&
    grep -q 'conn [0-9]*: first byte of the stream sent' "$tmp/one.err" && ok ||
    bad "the trace does not show the connection's life: $(grep conn "$tmp/one.err" | head -8)"
# a client that half-closes (shuts down its sending side once the request
# is out) still gets the whole answer: end of file alone is not a client gone
if command -v node >/dev/null 2>&1; then
    URL=$URL node -e '
        const u = new URL(process.env.URL), body = JSON.stringify({prompt: "ROMEO:", max_tokens: 20, temperature: 0});
        const s = require("net").connect({host: u.hostname, port: u.port, allowHalfOpen: true}, () => {
            s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                    "Connection: close\r\nContent-Length: " + Buffer.byteLength(body) + "\r\n\r\n" + body);
            s.end();   /* FIN: nothing more to send, but reading on */
        });
        let got = "";
        const t = setTimeout(() => { process.stdout.write(got); process.exit(1); }, 20000);
        s.on("data", d => got += d);
        s.on("end", () => { clearTimeout(t); process.stdout.write(got); });' > "$tmp/half.txt"
    head -1 "$tmp/half.txt" | grep -q "200 OK" && sed '1,/^\r*$/d' "$tmp/half.txt" | jq -e '.choices[0].text | length > 0' \
        > /dev/null && ok || bad "a half-closed client: $(head -c 300 "$tmp/half.txt")"
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi
# a client's bytes cannot start a line of their own in the trace (%0A in the URL)
curl -s -o /dev/null "$URL/v1/nothing%0A%5B%20%20%20%20%20%200.0%20ms%5D%20forged" 2>/dev/null
sleep 0.3
if grep -q '^\[ *0.0 ms\] forged' "$tmp/main.err" "$tmp/one.err"; then bad "a URL with %0A forged a trace line"
elif grep -q '/v1/nothing?\[' "$tmp/main.err" "$tmp/one.err"; then ok
else bad "the request with %0A in its URL is not in the trace: $(grep nothing "$tmp/main.err" "$tmp/one.err")"; fi
# the trace's times never go back, HTTP lines (printed by the engine thread) included
for f in one main; do
    sed -n 's/^\[ *\([0-9.]*\) ms\].*/\1/p' "$tmp/$f.err" > "$tmp/times"
    [ -s "$tmp/times" ] && awk 'NR > 1 && $1 + 0 < prev + 0 { bad = 1 } { prev = $1 } END { exit bad }' "$tmp/times" && ok ||
        bad "the serve trace's times go back ($f): $(awk 'NR > 1 && $1 + 0 < prev + 0 { print prev " then " $1; exit } { prev = $1 }' "$tmp/times")"
done

# 7. the soak through HTTP, short (make soak runs 10,000)
SOAK_BIN=$BIN sh tools/soak_serve.sh 400 > "$tmp/soak" 2>&1 && ok || bad "tools/soak_serve.sh: $(cat "$tmp/soak")"
grep '^soak_serve: [0-9]* requests' "$tmp/soak"

# 8. a model with a sentencepiece tokenizer (byte fallback, U+2581 for
# spaces), from ../shared/fixtures when it is there: greedy text through the
# server, streamed, equals infer's
tiny=${FIXTURES:-../shared/fixtures}/tiny/tiny-f32.gguf
if [ -f "$tiny" ]; then
    "$INFER" --model "$tiny" --prompt "ROMEO:" -n 30 --temperature 0 --threads 1 > "$tmp/tiny.full" 2>/dev/null
    tail -c +7 "$tmp/tiny.full" | head -c -1 > "$tmp/tinyref"
    start tiny --model "$tiny"
    post /v1/completions '{"model": "tiny-f32", "prompt": "ROMEO:", "max_tokens": 30, "temperature": 0,
        "stream": true}' > "$tmp/tiny.sse"
    sse_text "$tmp/tiny.sse" .text > "$tmp/tiny.txt"
    cmp -s "$tmp/tiny.txt" "$tmp/tinyref" && ok || bad "tiny-f32: streamed greedy text differs from infer's: $(cat "$tmp/tiny.txt")"
    kill -TERM $PID; wait $PID
    check "tiny server exit status" $? 0
elif [ "${CI:-}" = true ]; then
    bad "$tiny is missing, and under CI that is a failure"
else
    echo "server: the sentencepiece model check skipped ($tiny not found: no ../shared here)"
fi

# 8b. real instruct vocabularies and chat templates (../shared/fixtures/chat):
# the server renders each model's own template as llama.cpp's /apply-template
# did, its /tokenize reads special texts as llama.cpp's does, and a chat
# request whose user typed the template's markup is fed the ids where that
# markup stays text (usage.prompt_tokens is their count); /detokenize spells
# both back to the same text
for case in llama3 qwen2.5; do
    dir=${FIXTURES:-../shared/fixtures}/chat/$case
    if [ ! -f "$dir/model.gguf" ]; then
        if [ "${CI:-}" = true ]; then bad "$dir/model.gguf is missing, and under CI that is a failure"
        else echo "server: the $case chat check skipped (no ../shared here)"; fi
        continue
    fi
    start "chat-$case" --model "$dir/model.gguf"
    for conv in single_user long_shakespeare injection; do
        body=$(jq -c --arg n $conv '.[] | select(.name == $n) | {messages, chat_template_kwargs}' "$dir/conversations.json")
        want=$(jq -c --arg n $conv 'select(.name == $n)' "$dir/expected.jsonl")
        post /apply-template "$body" | jq -j .prompt > "$tmp/prompt"
        printf '%s' "$want" | jq -j .prompt > "$tmp/prompt.want"
        cmp -s "$tmp/prompt" "$tmp/prompt.want" && ok || bad "$case/$conv: /apply-template differs from llama.cpp's"
        check "$case/$conv: /tokenize" "$(post /tokenize "$(jq -n --rawfile c "$tmp/prompt" '{content: $c, add_special: true}')" |
            jq -c .tokens)" "$(printf '%s' "$want" | jq -c .ids_parse_special)"
        safe=$(printf '%s' "$want" | jq -c '.ids_safe // .ids_parse_special')
        check "$case/$conv: prompt_tokens of a chat request" "$(post /v1/chat/completions "$(printf '%s' "$body" |
            jq -c '. + {max_tokens: 1, temperature: 0}')" | jq .usage.prompt_tokens)" "$(printf '%s' "$safe" | jq length)"
        [ $conv = injection ] && check "$case/$conv: both readings spell the same text" \
            "$(post /detokenize "{\"tokens\": $safe}" | jq -r .content | md5sum)" \
            "$(post /detokenize "{\"tokens\": $(printf '%s' "$want" | jq -c .ids_parse_special)}" | jq -r .content | md5sum)"
    done
    # every end-of-generation id of the vocabulary (eog.txt, the set llama.cpp uses) ends a
    # chat with "stop" when logit_bias forces it, and no marker text is streamed
    for id in $(grep -v '^#' "$dir/eog.txt" | cut -f1); do
        post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 5,
            \"logit_bias\": {\"$id\": 100}, \"stream\": true}" > "$tmp/eog.sse"
        check "$case: token $id forced ends the chat, its text unsent" \
            "$(sed -n 's/^data: {/{/p' "$tmp/eog.sse" | jq -j '.choices[0] | (.delta.content // "") + (.finish_reason // "")')" stop
    done
    check "$case: /tokenize with_pieces spells the text back" "$(post /tokenize \
        '{"content": "a<|im_end|> é", "with_pieces": true, "parse_special": false}' | jq -r '[.tokens[].piece] | join("")')" \
        "a<|im_end|> é"
    kill -TERM $PID; wait $PID
    check "$case server exit status" $? 0
done

# 8c. speculative decoding: the text is the same, only the steps are fewer
line="And, by the world, and Romeo's dead,"
copy="ROMEO:\\n$line\\n$line\\n$line"   # as JSON; the same text for infer below
"$INFER" --model $MODEL --prompt "$(printf "ROMEO:\n$line\n$line\n$line")" -n 60 --temperature 0 --threads 1 \
    > "$tmp/copy.full" 2>/dev/null
tail -c +$(($(printf "ROMEO:\n$line\n$line\n$line" | wc -c) + 1)) "$tmp/copy.full" | head -c -1 > "$tmp/copyref"
start spec --speculate 4
post /v1/completions "{\"prompt\": \"$copy\", \"max_tokens\": 60, \"temperature\": 0}" | jq -j '.choices[0].text' > "$tmp/copy.txt"
cmp -s "$tmp/copy.txt" "$tmp/copyref" && ok || bad "speculating, the greedy text differs from infer's: $(cat "$tmp/copy.txt")"
guessed=$(metric llm_spec_draft_tokens_total); accepted=$(metric llm_spec_accepted_tokens_total)
[ "${guessed:-0}" -gt 0 ] && [ "${accepted:-0}" -gt 0 ] && [ "$accepted" -lt "$guessed" ] && ok ||
    bad "/metrics: $guessed guesses, $accepted accepted"
post /v1/completions "{\"prompt\": \"$copy\", \"max_tokens\": 60, \"temperature\": 0, \"stream\": true}" > "$tmp/copy.sse"
sse_text "$tmp/copy.sse" .text > "$tmp/copys.txt"
cmp -s "$tmp/copys.txt" "$tmp/copyref" && ok || bad "speculating, the streamed text differs from infer's: $(cat "$tmp/copys.txt")"
before=$(metric llm_spec_draft_tokens_total)
post /v1/completions "{\"prompt\": \"$copy\", \"max_tokens\": 60, \"temperature\": 0, \"speculate\": 0}" |
    jq -j '.choices[0].text' > "$tmp/copy0.txt"
cmp -s "$tmp/copy0.txt" "$tmp/copyref" && ok || bad "speculate 0: the text differs: $(cat "$tmp/copy0.txt")"
check "speculate 0 guesses nothing" "$(metric llm_spec_draft_tokens_total)" "$before"
rate=$(metric llm_spec_acceptance_rate)
awk -v r="$rate" 'BEGIN { exit !(r > 0 && r < 1) }' && ok || bad "llm_spec_acceptance_rate is '$rate'"
kill -TERM $PID; wait $PID
check "spec server exit status" $? 0

# 9. --low-mem, a coded tensor damaged in the file while it is served (its
# mapping sees the change): the request ends in a 500 that names the decode,
# not "non-finite logits"; the file put back, the next request is whole
# again (a failed decode is not kept). And the same text as before.
if [ -x "$BIN/compress" ]; then
    "$BIN/compress" "$MODEL" "$tmp/low.gguf" > /dev/null 2>&1 || bad "compress for the low-mem server failed"
    start low --model "$tmp/low.gguf" --low-mem
    body='{"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0}'
    post /v1/completions "$body" | jq -r '.choices[0].text' > "$tmp/low.before"
    size=$(wc -c < "$tmp/low.gguf")
    dd if="$tmp/low.gguf" of="$tmp/low.saved" bs=1 skip=$((size - 2000)) count=4 2> /dev/null
    printf '\377\377\377\377' | dd of="$tmp/low.gguf" bs=1 seek=$((size - 2000)) conv=notrunc 2> /dev/null
    c=$(curl -s -o "$tmp/low.json" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/completions" -d "$body")
    msg=$(jq -r .error.message "$tmp/low.json")
    [ "$c" = 500 ] && echo "$msg" | grep -q "chunk\|damaged\|CRC" && ! echo "$msg" | grep -q "non-finite" && ok \
        || bad "a damaged coded tensor under --low-mem: $c $msg"
    dd if="$tmp/low.saved" of="$tmp/low.gguf" bs=1 seek=$((size - 2000)) conv=notrunc 2> /dev/null
    post /v1/completions "$body" | jq -r '.choices[0].text' > "$tmp/low.after"
    [ -s "$tmp/low.before" ] && cmp -s "$tmp/low.before" "$tmp/low.after" && ok \
        || bad "after the file was put back: '$(cat "$tmp/low.after")', before: '$(cat "$tmp/low.before")'"
    kill -TERM $PID; wait $PID
    check "low-mem server exit status" $? 0
else
    bad "$BIN/compress is not built"
fi

# 11. Bodies held while they arrive count against one bound for all clients
# (--max-buffered): two slow 200 KB uploads at once under a bound of 300 KB,
# and one of them is refused 503 naming it; once both are done the bytes are
# given back: a third such body is read whole (and refused for its length, 400).
start buf --max-buffered 300000
head -c 200000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt": "/; s/$/", "max_tokens": 1}/' > "$tmp/big.json"
for i in 1 2; do
    curl -s -o "$tmp/buf$i.json" -w '%{http_code}' --limit-rate 60k -H 'Content-Type: application/json' \
        "$URL/v1/completions" --data-binary @"$tmp/big.json" > "$tmp/buf$i.code" &
    eval "BUF$i=\$!"
    sleep 0.3
done
wait $BUF1 $BUF2
refused=0
for i in 1 2; do
    [ "$(cat "$tmp/buf$i.code")" = 503 ] && jq -r .error.message "$tmp/buf$i.json" | grep -q -- "--max-buffered" &&
        refused=$((refused + 1))
done
[ "$refused" -ge 1 ] && ok || bad "two slow bodies over --max-buffered: $(cat "$tmp/buf1.code") $(cat "$tmp/buf2.code")"
check "a body after them is read whole" "$(code "$URL/v1/completions" --data-binary @"$tmp/big.json")" 400
kill -TERM $PID; wait $PID
check "buffered-bytes server exit status" $? 0

# 12. Connections (--max-connections, --idle-timeout, --request-timeout): 4 sockets that send
# nothing fill a cap of 4, and a fifth connection is closed at once; the
# server closes the idle ones after the timeout (2 s), and then answers
# again. Waiting for the engine is not idle: 4 streams and a whole answer
# queued behind --max-seqs 1 with a timeout of 1 s all end in full (a
# stream waiting long gets ": keep-alive" comment lines meanwhile).
start conn --max-connections 4 --idle-timeout 2 --max-seqs 1
if command -v node > /dev/null 2>&1; then
    URL=$URL node -e '
const net = require("net"), http = require("http");
const url = new URL(process.env.URL), t0 = Date.now(), closed = [];
const get = () => new Promise(res => {
  const r = http.get({host: url.hostname, port: url.port, path: "/health", agent: false}, a => {
    a.resume(); a.on("end", () => res(String(a.statusCode))); });
  r.on("error", e => res("error " + e.code)); r.setTimeout(5000, () => { r.destroy(); res("timeout"); });
});
(async () => {
  for (let i = 0; i < 4; i++) {
    const s = net.connect(+url.port, url.hostname);
    s.on("close", () => closed.push(Date.now() - t0)); s.on("error", () => {});
  }
  await new Promise(r => setTimeout(r, 300));
  const over = await get();
  await new Promise(r => setTimeout(r, 4000));
  const after = await get();
  console.log([over.startsWith("error") ? "closed" : over, closed.length, Math.min(...closed) >= 1500 ? "late" : "early", after].join(" "));
})();' > "$tmp/conn.out" 2>&1
    check "a connection over the cap closed; the idle ones closed after the timeout, not before; then answered" \
        "$(cat "$tmp/conn.out")" "closed 4 late 200"
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi
kill -TERM $PID; wait $PID
check "connections server exit status" $? 0
start idle --idle-timeout 1 --max-seqs 1
curls=""
for i in 1 2 3 4 5; do
    stream=true; [ "$i" = 5 ] && stream=false
    curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" \
        -d "{\"prompt\": \"ROMEO:\", \"max_tokens\": 250, \"ignore_eos\": true, \"stream\": $stream}" \
        > "$tmp/idle$i.out" &
    curls="$curls $!"
done
t0=$(date +%s)
for c in $curls; do wait "$c"; done
full=0
for i in 1 2 3 4; do [ "$(grep '^data: ' "$tmp/idle$i.out" | tail -1)" = "data: [DONE]" ] && full=$((full + 1)); done
jq -e '.choices[0].finish_reason' "$tmp/idle5.out" > /dev/null 2>&1 && full=$((full + 1))
check "queued requests answered in full under a 1 s idle timeout ($(( $(date +%s) - t0 )) s in all)" "$full" 5
# the streams that waited were kept alive by SSE comment lines, which clients skip
cat "$tmp"/idle[1-4].out | grep -q '^: keep-alive$' && ok || bad "no stream waited long enough for a keep-alive line"
kill -TERM $PID; wait $PID
check "idle-timeout server exit status" $? 0
# The request deadline (--request-timeout 2): a client that trickles a
# header line every 0.3 s is never idle, nor is one that trickles its body;
# both are answered 408 (an error object) and closed once 2 s have passed
# without a whole request, not before.
# A keep-alive client whose two requests come 1.2 s apart has both answered.
start deadline --request-timeout 2 --idle-timeout 30
if command -v node > /dev/null 2>&1; then
    URL=$URL node -e '
const net = require("net"), http = require("http");
const url = new URL(process.env.URL), t0 = Date.now();
const trickle = (head, more) => new Promise(res => {
  const s = net.connect(+url.port, url.hostname);
  let timer, got = "";
  s.on("error", () => {});
  s.on("data", d => got += d);
  s.on("connect", () => { s.write(head); timer = setInterval(() => s.write(more), 300); });
  s.on("close", () => { clearInterval(timer); res([Date.now() - t0, got]); });
  setTimeout(() => s.destroy(), 10000).unref();
});
/* closed at the deadline, not before, with a 408 error object */
const cut = (what, [ms, got]) => {
  const body = got.split("\r\n\r\n")[1] || "";
  let msg = ""; try { msg = JSON.parse(body).error.message; } catch (e) {}
  return ms >= 1800 && ms < 5000 && got.startsWith("HTTP/1.1 408 ") && msg.includes("--request-timeout") ?
    what + "-cut" : what + " " + ms + " ms " + JSON.stringify(got.slice(0, 200));
};
(async () => {
  const [h, b] = await Promise.all([
    trickle("GET /health HTTP/1.1\r\nHost: x\r\n", "X-More: y\r\n"),
    trickle("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            "Content-Length: 1000\r\n\r\n", " ")]);
  const agent = new http.Agent({keepAlive: true, maxSockets: 1});
  const get = () => new Promise(res => {
    const r = http.get({host: url.hostname, port: url.port, path: "/health", agent}, a => {
      a.resume(); a.on("end", () => res(String(a.statusCode))); });
    r.on("error", e => res("error " + e.code));
  });
  const g1 = await get();
  await new Promise(r => setTimeout(r, 1200));
  const g2 = await get();
  agent.destroy();
  console.log([cut("headers", h), cut("body", b), g1, g2].join(" "));
})();' > "$tmp/deadline.out" 2>&1
    check "trickled headers and body closed at the request deadline; keep-alive requests answered" \
        "$(cat "$tmp/deadline.out")" "headers-cut body-cut 200 200"
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi
kill -TERM $PID; wait $PID
check "request-deadline server exit status" $? 0

# 14. Under load: 2,000 sockets that send nothing and 500 that send a header
# line every half second and never finish, all open at once (the default
# cap is 4,096), while a client's completion is answered within 1 s.
if command -v node > /dev/null 2>&1; then
    start load
    node tests/server_load.js sockets "$URL" > "$tmp/load.out" 2>&1
    grep -q "^2500 200 within 1 s" "$tmp/load.out" && ok || bad "a client under 2,500 idle and slow connections: $(cat "$tmp/load.out")"
    kill -TERM $PID; wait $PID
    check "loaded server exit status" $? 0
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi

# 15. 1,000 clients each send the headers of a 1 MiB body and all of it
# but its last byte, and hold it: the server keeps at most --max-buffered
# (64 MiB) of unfinished bodies and refuses the rest at once (503), so its
# RSS grows by at most that and 256 KiB a connection (threads, buffers:
# nearly all of it ASan's, 150 to 200 KiB a thread seen here, where the fast
# build grew 78 MB in all, 14 KiB a connection); meanwhile a
# client's small request, whole on arrival, is answered 200 within 1 s.
if command -v node > /dev/null 2>&1; then
    start held
    node tests/server_load.js bodies "$URL" "$PID" > "$tmp/held.out" 2>&1
    read -r before held refused other status ms < "$tmp/held.out"
    bound=$(( before + 65536 + 1000 * 256 ))
    [ "${held:-0}" -gt 0 ] && [ "$held" -le "$bound" ] && [ "${refused:-0}" -ge 900 ] && [ "$status" = 200 ] &&
        [ "${ms:-9999}" -lt 1000 ] && ok ||
        bad "1,000 held 1 MiB bodies: RSS $before -> $held kB (bound $bound), $refused refused 503, a client $status in $ms ms: $(cat "$tmp/held.out")"
    kill -TERM $PID; wait $PID
    check "held-bodies server exit status" $? 0
elif [ "${CI:-}" = true ]; then
    bad "node is missing, and under CI that is a failure"
fi

# 13. The model file truncated while the server has it mapped: no SIGBUS. The
# next request gets a 500 naming the file, a stream ends with an error event
# naming it, finish_reason "stop" and data: [DONE]; the server stays up and
# exits 0 on SIGTERM.
cp "$MODEL" "$tmp/trunc.gguf"
SERVE_MODEL="$tmp/trunc.gguf" start trunc
check "before the truncation" "$(post /v1/completions '{"prompt": "ROMEO:", "max_tokens": 4}' | jq -r '.choices[0].finish_reason')" length
truncate -s 100000 "$tmp/trunc.gguf"
c=$(code "$URL/v1/completions" -d '{"prompt": "ROMEO:", "max_tokens": 4}')
[ "$c" = 500 ] && jq -r .error.message "$tmp/err.json" | grep -q "trunc.gguf: the file changed while mapped (now 100000 bytes" \
    && ok || bad "after the truncation: $c $(cat "$tmp/err.json")"
curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" -d '{"prompt": "JULIET:", "max_tokens": 4, "stream": true}' \
    > "$tmp/trunc.sse"
[ "$(grep '^data: ' "$tmp/trunc.sse" | tail -1)" = "data: [DONE]" ] && grep -q '"finish_reason":"stop"' "$tmp/trunc.sse" &&
    grep '^data: {"error"' "$tmp/trunc.sse" | grep -q 'trunc.gguf: the file changed while mapped' \
    && ok || bad "a stream after the truncation: $(cat "$tmp/trunc.sse")"
check "health after the truncation" "$(curl -s "$URL/health" | jq -r .status)" ok
kill -TERM $PID; wait $PID
check "truncated-model server exit status" $? 0

# 10. SIGTERM with 16 streams open (4 running, 12 queued) and 4 whole
# answers waiting: a running stream gets its last chunk (a finish reason)
# and data: [DONE], a queued request a 503 error object; nobody is left with
# nothing or with a stream cut short. The server exits 0.
start term --max-seqs 4 --max-queue 32
curls=""
for i in $(seq 20); do
    stream=true; [ "$i" -gt 16 ] && stream=false
    curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" \
        -d "{\"prompt\": \"ROMEO:\", \"max_tokens\": 2000, \"ignore_eos\": true, \"stream\": $stream}" \
        > "$tmp/term$i.out" &
    curls="$curls $!"
done
for _ in $(seq 500); do [ "$(metric llm_http_requests_in_flight)" = 20 ] && break; sleep 0.02; done
for i in 1 2 3 4; do
    for _ in $(seq 500); do grep -q '^data: ' "$tmp/term$i.out" && break; sleep 0.02; done
done
kill -TERM $PID
for c in $curls; do wait "$c"; done
wait $PID
check "server exit status after SIGTERM with 20 requests open" $? 0
ended=0
for i in $(seq 20); do
    f="$tmp/term$i.out"
    if grep -q '^data: ' "$f"; then   # a stream: its last event [DONE], a finish reason before it
        [ "$(grep '^data: ' "$f" | tail -1)" = "data: [DONE]" ] &&
            grep '^data: {' "$f" | tail -1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason // .usage' \
                > /dev/null && ended=$((ended + 1))
    else                              # a whole answer, or an OpenAI error object
        jq -e '.choices[0].finish_reason // .error.message' "$f" > /dev/null 2>&1 && ended=$((ended + 1))
    fi
done
check "requests answered in full (or refused with an error object) at SIGTERM" "$ended" 20

# the servers stop on SIGTERM, cleanly (ASan's leak check runs at exit)
for p in $A_PID $ONE_PID; do
    kill -TERM "$p"
    wait "$p"; rc=$?
    check "server $p exit status" $rc 0
done
pids=""
grep -q 'serve: stopped (SIGTERM)' "$tmp/main.err" && ok || bad "main server's end: $(tail -3 "$tmp/main.err")"

echo "server: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
