# median.sh - sourced by the benchmark scripts: median, the median of the
# numbers on standard input, one a line (the mean of the middle two for an
# even count), printed as awk prints numbers.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
