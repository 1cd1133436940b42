# notes/gdb/sampler.gdb - the nucleus of notes/sampler.md, in a real run.
#
#   make && gdb -q -x notes/gdb/sampler.gdb
#
# "ROMEO:" sampled at temperature 0.8, top-p 0.9, seed 42, three tokens, on
# the debug build (-O0, plain loops) and the step clock: the same numbers on
# every machine. At each call of nucleus_size it prints the candidates that
# survived the cut-off (sorted, best first), the best four with their
# running sum, and works out the nucleus the way the chapter does: the target
# is top_p of what the candidates hold, and the token that crosses it is in.
# Lines the script prints start with "| " (tools/doc_excerpts.sh --gdb keeps
# those; notes/sampler.md shows them).
file build/infer
set pagination off
set confirm off
set debuginfod enabled off

break sampler.c:nucleus_size
commands
  silent
  set $kept = 0.0
  set $i = 0
  while $i < n
    set $kept = $kept + c[$i].prob
    set $i = $i + 1
  end
  printf "| nucleus_size: %d candidates hold %.4f; top_p %.2f of that is %.4f\n", n, $kept, top_p, top_p * $kept
  set $cum = 0.0
  set $i = 0
  set $in = 0
  while $in == 0 && $i < n
    set $cum = $cum + c[$i].prob
    if $cum > top_p * $kept
      set $in = $i + 1
    end
    if $i < 4
      printf "|   c[%d]  token %4d  p %.4f  sum %.4f\n", $i, c[$i].id, c[$i].prob, $cum
    end
    set $i = $i + 1
  end
  if $in == 0
    set $in = n
  end
  printf "|   the nucleus: the first %d (the sum passes %.4f at c[%d])\n", $in, top_p * $kept, $in - 1
  continue
end

run --model data/shakespeare.gguf --prompt "ROMEO:" -n 3 --temperature 0.8 --top-p 0.9 --seed 42 --clock steps --threads 1 > /dev/null 2>&1
