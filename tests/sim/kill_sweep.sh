#!/bin/sh
# The kill sweep: every moment of a small all-reduce's life, in the
# simulator. Runs FILE once without a kill (expect_survivors raised to
# `ranks`) to learn when the first all-reduce begins and when iteration 3
# ends (events.tsv), then POINTS more times with `kill = VICTIM @ T`, T
# spread evenly over that window, and fails unless each run exits 0 with
# its checks passing (every survivor ends every iteration with the right
# values; the survivors agree; someone saw the loss). Deterministic: the
# same seed, the same runs.
# Usage: kill_sweep.sh ECCL_SIM FILE OUTDIR VICTIM POINTS
set -u
[ $# -eq 5 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR VICTIM POINTS" >&2; exit 2; }
sim=$1 file=$2 out=$3 victim=$4 points=$5
mkdir -p "$out" || exit 1
ranks=$(awk -F'=' '$1 ~ /^ranks *$/ {gsub(/[ \t]|#.*/, "", $2); print $2}' "$file")
sed "s/^expect_survivors *=.*/expect_survivors = $ranks/" "$file" > "$out/base.scn"
"$sim" run "$out/base.scn" --out "$out/base" > "$out/base.log" 2>&1 || { echo "kill_sweep: the run without a kill failed"; cat "$out/base.log"; exit 1; }
window=$(awk -F'\t' 'NR > 1 && $3 == "begin" && (first == "" || $1 < first) { first = $1 }
                     NR > 1 && $3 == "ok" && $4 == 3 && $1 > last { last = $1 }
                     END { if (first != "" && last > first) printf "%s %s", first, last }' "$out/base/events.tsv")
[ -n "$window" ] || { echo "kill_sweep: no all-reduce window in $out/base/events.tsv"; exit 1; }
set -- $window
first=$1 last=$2
bad=0 i=0
while [ $i -lt "$points" ]; do
    t=$(awk -v a="$first" -v b="$last" -v i=$i -v n="$points" 'BEGIN { printf "%.9fs", a + (b - a) * (i + 1) / n }')
    { cat "$file"; echo "kill = $victim @ $t"; } > "$out/k.scn"
    if ! "$sim" run "$out/k.scn" --out "$out/k" > "$out/k.log" 2>&1 ||
        ! grep -q "^checks	pass$" "$out/k/summary.tsv"; then
        echo "kill_sweep: kill of rank $victim at $t failed:"
        grep -E "FAIL|error" "$out/k.log" | head -5
        bad=$((bad + 1))
    fi
    i=$((i + 1))
done
echo "kill_sweep: $points kills of rank $victim from $first s to $last s: $bad failed"
[ $bad -eq 0 ]
