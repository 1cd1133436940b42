# notes/gdb/executor.gdb - a plan flattened into one batch (notes/executor.md,
# "From items to a batch"), as the model receives it.
#
#   make && gdb -q -x notes/gdb/executor.gdb
#
# The walkthroughs' workload (notes/gdb/workload.jsonl). In its third step
# three requests run together: #0 and #1 decode a token each, #2 computes
# the 12 tokens of its prompt that the prefix cache did not have (positions
# 16 to 27; its block 0 is #0's, shared). At that step's call of
# model_forward_batch it prints every row of the batch: the item it belongs
# to, token, position, and the slot its K/V go to (block * 16 + row, through
# the item's block table), then the rows whose logits are sampled. Lines the
# script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

set $calls = 0
break model_forward_batch
commands
  silent
  set $calls = $calls + 1
  if $calls == 3
    printf "| model_forward_batch: T = %d rows, %d sampled\n", b->T, b->n_logits
    set $t = 0
    while $t < b->T
      printf "|   row %2d  item %d  token %4d  pos %2d  slot %3d = block %d * 16 + %2d\n", $t, b->seq[$t], b->token[$t], b->pos[$t], b->slot[$t], b->slot[$t] / 16, b->slot[$t] % 16
      set $t = $t + 1
    end
    printf "|   logit rows:"
    set $i = 0
    while $i < b->n_logits
      printf " %d", b->logit_row[$i]
      set $i = $i + 1
    end
    printf "\n"
  end
  continue
end

run --model data/shakespeare.gguf --workload notes/gdb/workload.jsonl --policy priority --max-seqs 4 --kv-blocks 12 --clock steps --threads 1 > /dev/null 2>&1
