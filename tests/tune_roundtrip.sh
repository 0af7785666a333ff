#!/bin/sh
# eccl-tune end to end: a small sweep writes a rule table that the
# dispatcher takes without a single complaint, and a benchmark run under
# it passes its checks; then the same on two emulated hosts, where the
# hierarchical all-reduce is measured and every rule names its ranks per
# host. Usage: tune_roundtrip.sh ECCL_TUNE ECCL_BENCH
set -eu
tune=$1 bench=$2
. "$(dirname "$0")/tune_checks.sh"
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

# Two emulated hosts of two ranks: ppn=2 on every rule, hier measured.
"$tune" --hosts 2 --np 4 --coll allreduce -b 256K -e 1M -f 4 -n 2 -w 1 --repeat 1 \
    -o "$dir/hosts.txt" --report "$dir/hosts_report.txt"
tune_rules_name_ppn "$dir/hosts.txt" 2
tune_measured "$dir/hosts_report.txt" 4 hier
ECCL_TUNE_FILE="$dir/hosts.txt" "$bench" --np 4 --hosts 2 -b 256K -e 1M -f 4 -n 2 -w 1 >"$dir/bench2.txt" 2>&1 ||
    { cat "$dir/bench2.txt"; exit 1; }
if grep -q 'ECCL_TUNE' "$dir/bench2.txt"; then cat "$dir/bench2.txt"; exit 1; fi
echo "tune round trip on 2 hosts: $(grep -vc '^#' "$dir/hosts.txt") rules taken"
