# notes/gdb/kv_paged.gdb - the prefix cache (notes/kv_paged.md, "The prefix
# cache"): a block registered by one request, found by the next.
#
#   make && gdb -q -x notes/gdb/kv_paged.gdb
#
# The walkthroughs' workload (notes/gdb/workload.jsonl): #0 and #2 open with
# the same 28-token prompt but for the last word, so their first block (16
# tokens) is the same. At each admission (kv_seq_match_prefix) it prints how
# many full blocks the request could reuse; at each lookup (cache_find), the
# chained hash, the parent it asks for, and each registered block in the
# hash's bucket with whether it is the same block (same hash, same parent
# and generation, same tokens); at each registration, the block and its hash.
# Lines the script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

break kv_seq_match_prefix
commands
  silent
  set $lim = n < max_tokens ? n : max_tokens
  printf "| kv_seq_match_prefix: %d tokens, up to %d reusable: %d full block(s) of %d to look up\n", n, max_tokens, $lim / p->BS, p->BS
  continue
end

break kv_paged.c:cache_find
commands
  silent
  printf "|   cache_find: hash %016lx, parent %d (gen %u)\n", h, parent, parent_gen
  set $b = p->bucket[h & (p->n_buckets - 1)]
  if $b < 0
    printf "|     bucket empty: a miss\n"
  end
  while $b >= 0
    set $same = p->hash[$b] == h && p->parent[$b] == parent && p->parent_gen[$b] == parent_gen
    set $i = 0
    while $same && $i < p->BS
      set $same = p->tokens[$b * p->BS + $i] == tokens[$i]
      set $i = $i + 1
    end
    # (an if, not ?: on two strings, which gdb would put in the program's memory)
    if $same
      printf "|     block %d: hash %016lx, parent %d (gen %u): the same block, a hit\n", $b, p->hash[$b], p->parent[$b], p->parent_gen[$b]
    else
      printf "|     block %d: hash %016lx, parent %d (gen %u): another block\n", $b, p->hash[$b], p->parent[$b], p->parent_gen[$b]
    end
    set $b = p->chain[$b]
  end
  continue
end

break kv_paged.c:cache_register
commands
  silent
  printf "| cache_register: block %d, hash %016lx, parent %d (gen %u)\n", b, h, parent, parent_gen
  continue
end

run --model data/shakespeare.gguf --workload notes/gdb/workload.jsonl --policy priority --max-seqs 4 --kv-blocks 12 --clock steps --threads 1 > /dev/null 2>&1
