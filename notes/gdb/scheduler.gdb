# notes/gdb/scheduler.gdb - ranks (notes/scheduler.md, "Rank: FCFS, or
# priority with aging") as the scheduler asks for them.
#
#   make && gdb -q -x notes/gdb/scheduler.gdb
#
# The walkthroughs' workload (notes/gdb/workload.jsonl) under the priority
# policy with aging every 2 steps (--aging 2), so that the low request #1
# rises while it runs. At each call of sched_rank it prints the step being
# decided (the scheduler counts from 0: its step 2 is the trace's step 3),
# the request, its priority level (low 0, normal 1, high 2), the step it
# arrived at, and the rank worked out as the chapter does: the level plus
# one for every aging_steps steps waited since. A step asks once for each
# comparison it makes. Lines the script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off

break sched_rank
commands
  silent
  printf "| step %ld  #%d  level %d  arrived at step %ld  rank %d + (%ld - %ld) / %d = %ld\n", s->step, q->id, q->priority, q->arrival_step, q->priority, s->step, q->arrival_step, s->cfg.aging_steps, q->priority + (s->step - q->arrival_step) / s->cfg.aging_steps
  continue
end

run --model data/shakespeare.gguf --workload notes/gdb/workload.jsonl --policy priority --aging 2 --max-seqs 4 --kv-blocks 12 --clock steps --threads 1 > /dev/null 2>&1
