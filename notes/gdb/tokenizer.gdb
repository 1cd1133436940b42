# notes/gdb/tokenizer.gdb - streaming UTF-8 decoding (notes/tokenizer.md,
# "Decoding, one token at a time"), in a real run.
#
#   make && gdb -q -x notes/gdb/tokenizer.gdb
#
# The prompt "Café:" on the default model, one token generated greedily. The
# model's vocabulary, learned from plain ASCII Shakespeare, has no "é": the
# encoder spells it with its two bytes, C3 and A9, one token each, and the
# CLI echoes the prompt through the streaming decoder. At each call of
# utf8_drain it prints the bytes it is given (what was pending from the token
# before, then this token's) in hex, and how many of them were pending. The
# prompt is decoded twice: once by the runtime, which primes the request's
# decoder with it, once by the CLI, which echoes it. Lines the script prints
# start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

break tok_decode
commands
  silent
  set $id = id
  continue
end

break tokenizer.c:utf8_drain
commands
  silent
  printf "| token %4d -> utf8_drain: %d byte(s)", $id, n
  set $i = 0
  while $i < n
    printf " %02X", buf[$i]
    set $i = $i + 1
  end
  printf ", of which pending from the token before: %d\n", d->n_pending
  continue
end

run --model data/shakespeare.gguf --prompt "Café:" -n 1 --temperature 0 --clock steps --threads 1 > /dev/null 2>&1
