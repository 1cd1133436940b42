# notes/gdb/engine.gdb - the end of each engine step (notes/engine.md, "One
# step", 4. Output): every token appended, and who finishes why.
#
#   make && gdb -q -x notes/gdb/engine.gdb
#
# The walkthroughs' workload (notes/gdb/workload.jsonl: three short greedy
# requests, #2 sharing #0's first block) on the step clock. At each call of
# append it prints the step, the request, the token, and the three stop rules
# as append is about to check them; at each engine_finish, the reason. Lines
# the script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

break engine.c:append
commands
  silent
  # (an if, not ?: on two strings: gdb would have to put the strings in the
  # program's memory, calling into it, which some CPUs' register state stops;
  # for the same reason the end-of-generation set is read here, not ends_on
  # called: the default model's has one token, a chat model's a few)
  if (q->n_eog > 0 && token == q->eog[0]) || (q->n_eog > 1 && token == q->eog[1]) || (q->n_eog > 2 && token == q->eog[2])
    printf "| step %ld  #%d  token %4d  out %d of %d  tokens %d of cap %d  eos? yes\n", en->steps, q->id, token, q->n_out + 1, q->max_tokens, q->n_tokens + 1, q->cap
  else
    printf "| step %ld  #%d  token %4d  out %d of %d  tokens %d of cap %d  eos? no\n", en->steps, q->id, token, q->n_out + 1, q->max_tokens, q->n_tokens + 1, q->cap
  end
  continue
end

break engine_finish
commands
  silent
  printf "|   engine_finish #%d: ", q->id
  output why
  printf "\n"
  continue
end

run --model data/shakespeare.gguf --workload notes/gdb/workload.jsonl --policy priority --max-seqs 4 --kv-blocks 12 --clock steps --threads 1 > /dev/null 2>&1
