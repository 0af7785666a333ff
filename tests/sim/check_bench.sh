#!/bin/sh
# Runs an eccl-sim scenario of workload = bench and fails unless it exits 0
# and prints at least MINROWS rows in eccl-bench's format (size count type
# redop time(us) algbw(GB/s) busbw(GB/s) #wrong algo: 9 fields, the line
# eccl-tune reads), each with #wrong 0, a positive time and ALGO in its algo
# column, and bench.tsv holds the same rows.
# Usage: check_bench.sh ECCL_SIM FILE OUTDIR ALGO MINROWS
set -u
[ $# -eq 5 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR ALGO MINROWS" >&2; exit 2; }
sim=$1 file=$2 out=$3 algo=$4 minrows=$5
mkdir -p "$out" || exit 1
"$sim" run "$file" --out "$out" >"$out/stdout.txt"
rc=$?
cat "$out/stdout.txt"
[ "$rc" -eq 0 ] || { echo "check_bench: eccl-sim exit status $rc"; exit 1; }
awk -v algo="$algo" -v min="$minrows" '
    /^#/ { next }
    NF != 9 || $1 !~ /^[0-9]+$/ { print "check_bench: not a row: " $0; bad = 1; next }
    { rows++
      if ($8 != "0") { print "check_bench: #wrong " $8 " at size " $1; bad = 1 }
      if ($9 != algo) { print "check_bench: algo " $9 " at size " $1 ", want " algo; bad = 1 }
      if (!($5 + 0 > 0)) { print "check_bench: time " $5 " at size " $1; bad = 1 } }
    END { if (rows < min) { print "check_bench: " rows + 0 " rows, want at least " min; bad = 1 }
          if (!bad) print "check_bench: " rows " rows, #wrong 0, algo " algo
          exit bad }' "$out/stdout.txt" || exit 1
# bench.tsv: a header and the same rows (size, count, #wrong, algo).
a=$(awk '!/^#/ { print $1, $2, $8, $9 }' "$out/stdout.txt")
b=$(awk -F '\t' 'NR > 1 { print $1, $2, $8, $9 }' "$out/bench.tsv")
[ "$a" = "$b" ] || { echo "check_bench: bench.tsv differs from the printed rows"; exit 1; }
echo "check_bench: bench.tsv matches"
