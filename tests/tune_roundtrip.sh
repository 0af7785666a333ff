#!/bin/sh
# eccl-tune end to end: a small sweep writes a rule table that the
# dispatcher takes without a single complaint, and a benchmark run under
# it passes its checks. Usage: tune_roundtrip.sh ECCL_TUNE ECCL_BENCH
set -eu
tune=$1 bench=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tune" --np 3 --coll allreduce,broadcast,alltoall -b 8 -e 64K -f 16 -n 2 -w 1 --repeat 1 \
    -o "$dir/tune.txt" --report "$dir/report.txt"
grep -q '^allreduce 1-4294967295 ' "$dir/tune.txt" || { echo "no all-reduce rule:"; cat "$dir/tune.txt"; exit 1; }
grep -q '^# held-out: tuned picks' "$dir/report.txt" || { echo "no held-out judgement:"; cat "$dir/report.txt"; exit 1; }
ECCL_TUNE_FILE="$dir/tune.txt" "$bench" --np 3 -b 8 -e 64K -f 16 -n 2 -w 1 >"$dir/bench.txt" 2>&1 ||
    { cat "$dir/bench.txt"; exit 1; }
if grep -q 'ECCL_TUNE' "$dir/bench.txt"; then cat "$dir/bench.txt"; exit 1; fi
echo "tune round trip: $(grep -vc '^#' "$dir/tune.txt") rules taken"
