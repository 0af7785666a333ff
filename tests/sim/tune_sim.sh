#!/bin/sh
# eccl-tune on a simulated platform end to end: a small sweep of
# scenarios/tune/clos_4ppn.scn (4 ranks a host) through eccl-sim's bench
# workload writes rules that all name ppn=4 and a time table where the
# hierarchical all-reduce was measured; a second sweep prints the same table
# (the simulator is deterministic), and the built-in choice is judged.
# Usage: tune_sim.sh ECCL_TUNE ECCL_SIM SCENARIO
set -eu
tune=$1 sim=$2 scn=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for run in 1 2; do
    "$tune" --sim "$scn" --eccl-sim "$sim" --np 8 --coll allreduce,broadcast -b 1K -e 64K -f 8 -n 2 -w 1 \
        -o "$dir/tune$run.txt" --report "$dir/report$run.txt"
done
if grep -v '^#' "$dir/tune1.txt" | grep -qv ' ppn=4$'; then echo "a rule without ppn=4:"; cat "$dir/tune1.txt"; exit 1; fi
grep -q '^allreduce 1-4294967295 .* ppn=4$' "$dir/tune1.txt" || { echo "no all-reduce rule:"; cat "$dir/tune1.txt"; exit 1; }
awk '/^# allreduce np 8: time/ { t = 1; next }
     t && /^# +bytes/ { for (i = 1; i <= NF; i++) if ($i == "hier") col = i - 1; next }
     t && /^# / { exit }
     t && col && $col + 0 > 0 { found = 1 } END { exit !found }' \
    "$dir/report1.txt" || { echo "hier not measured:"; cat "$dir/report1.txt"; exit 1; }
grep -q '^# held-out: the built-in choice' "$dir/report1.txt" || { cat "$dir/report1.txt"; exit 1; }
cmp "$dir/report1.txt" "$dir/report2.txt" || { echo "two sweeps differ"; diff "$dir/report1.txt" "$dir/report2.txt"; exit 1; }
echo "tune on a simulated platform: $(grep -vc '^#' "$dir/tune1.txt") rules, the same twice"
