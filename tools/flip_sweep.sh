#!/bin/sh
# flip_sweep.sh FILE N [SEED] - every one of N bytes of FILE, chosen at random
# (seeded, so a run can be repeated), changed in turn in a copy: the copy must
# either be refused at load, with one line and status 1, or give the greedy
# text FILE gives. A copy that loads and gives other text (altered weights
# were used) or that ends otherwise (a crash, a signal) is a failure.
# INFER: the binary (default build/asan/infer). Prints the counts last:
# "flip_sweep: N flips: R refused, S the same text, A altered, C crashed";
# exits non-zero if any was altered or crashed.
FILE=$1; N=${2:-100}; SEED=${3:-1}
INFER=${INFER:-build/asan/infer}
[ -f "$FILE" ] || { echo "flip_sweep: no file $FILE"; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
size=$(wc -c < "$FILE")
greedy() { "$INFER" --model "$1" --prompt "ROMEO:" -n 8 --temperature 0 --threads 1 > "$tmp/out" 2> "$tmp/err"; }
greedy "$FILE" || { echo "flip_sweep: $FILE does not load: $(cat "$tmp/err")"; exit 2; }
cp "$tmp/out" "$tmp/ref"
refused=0; same=0; altered=0; crashed=0
# offsets: a linear congruential sequence from SEED, spread over the file
awk -v n="$N" -v size="$size" -v seed="$SEED" 'BEGIN { x = seed; for (i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648; print int(x / 2147483648 * size) } }' > "$tmp/offsets"
while read -r off; do
    cp "$FILE" "$tmp/flip.gguf"
    b=$(od -An -tu1 -j "$off" -N1 "$FILE" | tr -d ' ')
    nb=$(( (b + 1 + off % 255) % 256 ))   # another value, never the same
    printf "$(printf '\\%03o' "$nb")" | dd of="$tmp/flip.gguf" bs=1 seek="$off" conv=notrunc 2> /dev/null
    greedy "$tmp/flip.gguf"; rc=$?
    if [ $rc -eq 0 ]; then
        if cmp -s "$tmp/out" "$tmp/ref"; then same=$((same + 1))
        else altered=$((altered + 1)); echo "ALTERED: byte $off ($b -> $nb) loaded and gave: $(head -c 80 "$tmp/out")"; fi
    elif [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -le 1 ]; then refused=$((refused + 1))
    else crashed=$((crashed + 1)); echo "CRASHED: byte $off ($b -> $nb): status $rc: $(tail -2 "$tmp/err")"; fi
done < "$tmp/offsets"
echo "flip_sweep: $N flips: $refused refused, $same the same text, $altered altered, $crashed crashed"
[ $altered -eq 0 ] && [ $crashed -eq 0 ]
