# notes/gdb/runtime.gdb - a stop string and the text held back for it
# (notes/runtime.md, "Stop strings and hold-back"), in a real run.
#
#   make && gdb -q -x notes/gdb/runtime.gdb
#
# "ROMEO:" greedy, at most 12 tokens, with the stop string "ll thee, a".
# Greedy would say "I'll tell thee, and I'll tell thee,"; the stop ends the
# text before "ll thee, a". At
# each call of emit it prints the new text and what was held back before it;
# at each call of stream, the text the reader gets; then the end the stop
# string asks the engine for. Strings are printed as C
# strings ("\n" is a newline). Lines the script prints start with "| ".
file build/infer
set pagination off
set confirm off
set debuginfod enabled off
set print address off
set print repeats unlimited
set print elements 200

break runtime.c:emit
commands
  silent
  printf "| emit "
  output s[0]@len
  printf ", held before: "
  if r->n_held > 0
    output r->held[0]@r->n_held
  else
    printf "nothing"
  end
  printf "\n"
  continue
end

break runtime.c:stream
commands
  silent
  if len > 0
    printf "|   stream "
    output s[0]@len
    printf "\n"
  end
  continue
end

break engine_finish
commands
  silent
  printf "| engine_finish #%d: ", q->id
  output why
  printf "\n"
  continue
end

run --model data/shakespeare.gguf --prompt "ROMEO:" -n 12 --temperature 0 --stop "ll thee, a" --clock steps --threads 1 > /dev/null 2>&1
