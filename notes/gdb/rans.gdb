# notes/gdb/rans.gdb - the frequency table of notes/rans.md's worked example,
# "abracadabra", from the codec itself.
#
#   make build/rans_bench && gdb -q -x notes/gdb/rans.gdb
#
# rans_bench encodes notes/gdb/abracadabra.txt (11 bytes) with 10-bit
# probabilities and one state, as the chapter does by hand (after a set of
# synthetic bytes it always measures first, made tiny here with --mib, and
# passed over: the breakpoints wait for the counts of abracadabra and for a
# chunk of 11 bytes). At rans_normalize it prints the counts; at encode_chunk
# (after the table is made) each symbol's frequency, its first slot (start)
# and the sum, which must be M = 1024. Lines the
# script prints start with "| ".
file build/rans_bench
set pagination off
set confirm off
set debuginfod enabled off
set print address off

tbreak rans_normalize if count[97] == 5 && count[114] == 2
commands
  silent
  printf "| rans_normalize: bits %d, M = %d; counts:", bits, 1 << bits
  set $s = 0
  while $s < 256
    if count[$s] > 0
      printf " %c %lu", $s, count[$s]
    end
    set $s = $s + 1
  end
  printf "\n"
  continue
end

tbreak encode_chunk if len == 11
commands
  silent
  set $sum = 0
  set $s = 0
  while $s < 256
    if freq[$s] > 0
      printf "|   %c  freq %4u  start %4u  slots %u .. %u\n", $s, freq[$s], start[$s], start[$s], start[$s] + freq[$s] - 1
      set $sum = $sum + freq[$s]
    end
    set $s = $s + 1
  end
  printf "|   sum %u\n", $sum
  continue
end

run --mib 0.001 --file notes/gdb/abracadabra.txt --bits 10 --states 1 --runs 1 --no-zstd > /dev/null 2>&1
