#!/bin/sh
# Runs an eccl-sim scenario twice with the same seed into two directories and
# fails unless both runs pass and their outputs are identical byte for byte
# (the TSVs, the generated platform and the plot script; plot.png is made by
# gnuplot and is not compared).
# Usage: check_scenario_determinism.sh ECCL_SIM FILE SEED
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE SEED" >&2; exit 2; }
sim=$1 file=$2 seed=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$sim" run "$file" --seed "$seed" --out "$dir/1" >"$dir/1.out" 2>&1; rc1=$?
"$sim" run "$file" --seed "$seed" --out "$dir/2" >"$dir/2.out" 2>&1; rc2=$?
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    echo "check_scenario_determinism: exit status $rc1 / $rc2"
    tail -20 "$dir/1.out"
    exit 1
fi
status=0
# workload = bench writes its rows (bench.tsv), a summary, the platform and
# a plot, no events or ranks; its console output, compared below, holds the
# rows too.
files="events.tsv summary.tsv ranks.tsv platform.xml plot.gp"
[ -f "$dir/1/bench.tsv" ] && files="bench.tsv summary.tsv platform.xml plot.gp"
# trace = 1: the ranks' traces and their analysis, file for file.
if [ -d "$dir/1/traces" ]; then
    files="$files trace_analysis.txt"
    for t in "$dir"/1/traces/*; do files="$files traces/${t##*/}"; done
fi
# malloc's peak (heap_peak_bytes, mmap_peak_bytes) is the allocator's
# accounting, not the simulation's: it moves by a few hundred bytes between
# two runs of one binary (address space layout), and the scale guard holds it
# within a tolerance instead. Everything else must match.
for r in 1 2; do
    [ -f "$dir/$r/summary.tsv" ] || continue
    grep -Ev '^(heap|mmap)_peak_bytes' "$dir/$r/summary.tsv" >"$dir/$r/summary.cmp"
    mv "$dir/$r/summary.cmp" "$dir/$r/summary.tsv"
done
for f in $files; do
    if ! cmp -s "$dir/1/$f" "$dir/2/$f"; then
        echo "check_scenario_determinism: $f differs:"
        diff "$dir/1/$f" "$dir/2/$f" | head -40
        status=1
    else
        echo "check_scenario_determinism: $f identical, $(wc -l <"$dir/1/$f") lines, md5 $(md5sum <"$dir/1/$f" | cut -c1-32)"
    fi
done
# The console output differs only in the output directory it names.
sed "s|$dir/1|DIR|g" "$dir/1.out" >"$dir/1.norm"
sed "s|$dir/2|DIR|g" "$dir/2.out" >"$dir/2.norm"
if ! cmp -s "$dir/1.norm" "$dir/2.norm"; then
    echo "check_scenario_determinism: console output differs:"
    diff "$dir/1.norm" "$dir/2.norm" | head -40
    status=1
fi
exit $status
