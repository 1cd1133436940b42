# notes/gdb/model.gdb - paged attention with an online softmax
# (notes/executor.md, "Paged attention with an online softmax"), one query
# head, block by block.
#
#   make && gdb -q -x notes/gdb/model.gdb
#
# A prompt of 29 tokens (BOS included), greedy, two tokens. The second
# token's query, at position 29, attends to 30 positions: the 16 of its first
# block and the 14 of its second. For layer 0, head 2 (the third call of
# model_attend_paged with 30 positions: the calls go layer by layer, head by
# head) it prints the block table, then at each call of attend_rows the
# running state it starts from (max, sum: the online softmax's m and l) and
# the largest score among the block's keys, (q . k) * scale, computed here
# in the debugger. Lines the script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

set $calls = 0
set $left = 0
break model_attend_paged if n == 30
commands
  silent
  set $calls = $calls + 1
  if $calls == 3
    set $left = 2
    printf "| model_attend_paged: %d positions, blocks of %d, table [%d %d], head size %d, scale %.4f\n", n, BS, table[0], table[1], S, scale
  end
  continue
end

break model.c:attend_rows if $left > 0
commands
  silent
  set $left = $left - 1
  set $best = -1e30
  set $p = 0
  while $p < n
    set $dot = 0.0
    set $i = 0
    while $i < S
      set $dot = $dot + q[$i] * keys[$p * kvd + $i]
      set $i = $i + 1
    end
    if $dot * scale > $best
      set $best = $dot * scale
      set $at = $p
    end
    set $p = $p + 1
  end
  printf "|   attend_rows: %2d rows; state before: max %.4f, sum %.4f; largest score in the block %.4f (row %d)\n", n, st->max, st->sum, $best, $at
  continue
end

run --model data/shakespeare.gguf --prompt "KING RICHARD II: Now, my lord, what says the duke of York to this, and what his son? ROMEO:" -n 2 --temperature 0 --clock steps --threads 1 > /dev/null 2>&1
