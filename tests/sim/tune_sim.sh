#!/bin/sh
# eccl-tune on a simulated platform end to end: a small sweep of
# scenarios/tune/clos_4ppn.scn (4 ranks a host) through eccl-sim's bench
# workload writes rules that all name ppn=4 and a time table where the
# hierarchical all-reduce was measured; a second sweep prints the same table
# (the simulator is deterministic), and the built-in choice is judged.
# Usage: tune_sim.sh ECCL_TUNE ECCL_SIM SCENARIO
set -eu
tune=$1 sim=$2 scn=$3
. "$(dirname "$0")/../tune_checks.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for run in 1 2; do
    "$tune" --sim "$scn" --eccl-sim "$sim" --np 8 --coll allreduce,broadcast -b 1K -e 64K -f 8 -n 2 -w 1 \
        -o "$dir/tune$run.txt" --report "$dir/report$run.txt"
done
tune_rules_name_ppn "$dir/tune1.txt" 4
tune_measured "$dir/report1.txt" 8 hier
grep -q '^# held-out: the built-in choice' "$dir/report1.txt" || { cat "$dir/report1.txt"; exit 1; }
cmp "$dir/report1.txt" "$dir/report2.txt" || { echo "two sweeps differ"; diff "$dir/report1.txt" "$dir/report2.txt"; exit 1; }
echo "tune on a simulated platform: $(grep -vc '^#' "$dir/tune1.txt") rules, the same twice"
