#!/bin/sh
# Runs an eccl-sim scenario and fails unless it passes its checks and the
# number its summary.tsv gives under KEY (seconds) is at least MIN.
# Usage: check_summary_at_least.sh ECCL_SIM FILE OUTDIR KEY MIN
# (e.g. allreduce_min_s 0.02: no all-reduce of the WAN scenario is faster
# than the latency between its regions).
set -u
[ $# -eq 5 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR KEY MIN" >&2; exit 2; }
sim=$1 file=$2 out=$3 key=$4 min=$5
"$sim" run "$file" --out "$out" || { echo "check_summary_at_least: eccl-sim failed ($?)"; exit 1; }
val=$(awk -F '\t' -v k="$key" '$1 == k { print $2 }' "$out/summary.tsv")
[ -n "$val" ] || { echo "check_summary_at_least: no $key in $out/summary.tsv"; exit 1; }
if awk -v v="$val" -v m="$min" 'BEGIN { exit !(v + 0 >= m + 0) }'; then
    echo "check_summary_at_least: $key = $val >= $min"
else
    echo "check_summary_at_least: $key = $val, want at least $min"
    exit 1
fi
