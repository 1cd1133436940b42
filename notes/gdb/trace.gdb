# notes/gdb/trace.gdb - the KV map (notes/tracing.md, "Reading the text
# trace"), worked out from the pool at each step, as trace_kv_map does.
#
#   make && gdb -q -x notes/gdb/trace.gdb
#
# The walkthroughs' workload (notes/gdb/workload.jsonl) with a pool of 12
# blocks and the map drawn after every step (--trace --kv-map 1). At each
# call of trace_kv_map (told the pool as plain data, src/base/kv_view.h) it prints, for each of the 12 blocks, its refcount
# (how many sequences hold it) and whether the prefix cache can find it
# (registered), and the character the map will draw: refcount 2 or more '*',
# 1 the holder's id, 0 and registered '+', else '.'. Lines the script prints
# start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

break trace_kv_map
commands
  silent
  set $p = v
  up-silently
  set $step = rep->step
  down-silently
  printf "| step %ld  refcount   ", $step
  set $b = 0
  while $b < $p->n_blocks
    printf "%d", $p->refcount[$b]
    set $b = $b + 1
  end
  printf "\n|          registered "
  set $b = 0
  while $b < $p->n_blocks
    printf "%d", $p->registered[$b]
    set $b = $b + 1
  end
  printf "\n|          map        "
  set $b = 0
  while $b < $p->n_blocks
    if $p->refcount[$b] > 1
      printf "*"
    else
      if $p->refcount[$b] == 1
        set $who = -1
        set $s = 0
        while $s < $p->n_seqs
          set $j = 0
          while $j < $p->seqs[$s].n_blocks
            if $p->seqs[$s].table[$j] == $b
              set $who = $p->seqs[$s].id
            end
            set $j = $j + 1
          end
          set $s = $s + 1
        end
        printf "%d", $who
      else
        if $p->registered[$b]
          printf "+"
        else
          printf "."
        end
      end
    end
    set $b = $b + 1
  end
  printf "\n"
  continue
end

run --model data/shakespeare.gguf --workload notes/gdb/workload.jsonl --policy priority --max-seqs 4 --kv-blocks 12 --clock steps --threads 1 --trace --kv-map 1 > /dev/null 2>&1
