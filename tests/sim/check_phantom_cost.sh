#!/bin/sh
# Proves phantom all-reduces pay the simulated reduction kernel: runs the
# scenario FILE as given (it sets reduce_rate) and again without its
# reduce_rate line (reductions free: the network's time alone, T0), and
# fails unless the fastest all-reduce T of the first run satisfies
#     max(T0, R) <= T <= T0 + R
# where R = (ranks - 1) / ranks x count x 4 bytes / reduce_rate is the
# reduction work of one rank in one ring all-reduce (each rank reduces
# N-1 of the N chunks of the f32 buffer). The lower bound fails if the
# reduction is not charged (or is charged less), the upper one if it is
# charged more than once. Simulated time only: deterministic, not a timing.
# Usage: check_phantom_cost.sh ECCL_SIM FILE OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR" >&2; exit 2; }
sim=$1 file=$2 out=$3
mkdir -p "$out" || exit 1
grep -q '^reduce_rate' "$file" || { echo "check_phantom_cost: $file sets no reduce_rate"; exit 1; }
grep -v '^reduce_rate' "$file" >"$out/free.scn" || exit 1
"$sim" run "$file" --out "$out/rate" >"$out/rate.log" 2>&1 ||
    { echo "check_phantom_cost: eccl-sim failed on $file"; tail -20 "$out/rate.log"; exit 1; }
"$sim" run "$out/free.scn" --out "$out/free" >"$out/free.log" 2>&1 ||
    { echo "check_phantom_cost: eccl-sim failed without reduce_rate"; tail -20 "$out/free.log"; exit 1; }
get() { awk -F '\t' -v k="$2" '$1 == k { print $2 }' "$1/summary.tsv"; }
T=$(get "$out/rate" allreduce_min_s) T0=$(get "$out/free" allreduce_min_s)
n=$(get "$out/rate" ranks) count=$(get "$out/rate" count) rate=$(get "$out/rate" reduce_rate_Bps)
buffers=$(get "$out/rate" buffers)
for v in "$T" "$T0" "$n" "$count" "$rate"; do
    case $v in '' | -) echo "check_phantom_cost: missing summary values"; exit 1 ;; esac
done
[ "$buffers" = phantom ] || { echo "check_phantom_cost: buffers = $buffers, want phantom"; exit 1; }
awk -v T="$T" -v T0="$T0" -v n="$n" -v c="$count" -v rate="$rate" 'BEGIN {
    R = (n - 1) / n * c * 4 / rate
    lo = T0 > R ? T0 : R
    hi = T0 + R
    printf "check_phantom_cost: network alone T0 = %.6f s, reduction R = %.6f s, all-reduce T = %.6f s\n", T0, R, T
    printf "check_phantom_cost: want %.6f <= T <= %.6f (overlap %.0f%% of R)\n", lo, hi, 100 * (hi - T) / R
    # 1 ns of slack: summary times are truncated to whole ns.
    exit !(T + 1e-9 >= lo && T <= hi + 1e-9)
}' || { echo "check_phantom_cost: FAIL"; exit 1; }
echo "check_phantom_cost: pass"
