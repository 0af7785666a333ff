#!/bin/sh
# Runs a `buffers = cuda` scenario and its host twin (the same file with
# `buffers = host` and no device_copy_* keys) and fails unless
#  - both pass their checks;
#  - every rank's result hash of every iteration is the same in both (the
#    device path changes where the bytes live, never what they are);
#  - the fastest all-reduce with device buffers is the host one plus the two
#    staging copies, 2 x (latency + count x 4 / rate), from the device run's
#    summary.tsv, within 1% of that staging time (the ranks stage in
#    lockstep, so the copies add up exactly on a fault-free run).
# Usage: check_cuda_staging.sh ECCL_SIM FILE OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR" >&2; exit 2; }
sim=$1 file=$2 out=$3
mkdir -p "$out" || exit 1
sed -e 's/^buffers *= *cuda\b.*/buffers = host/' -e '/^device_copy_/d' "$file" >"$out/host.scn" || exit 1
"$sim" run "$file" --out "$out/cuda" >"$out/cuda.log" 2>&1 || { echo "check_cuda_staging: cuda run failed"; tail -5 "$out/cuda.log"; exit 1; }
"$sim" run "$out/host.scn" --out "$out/host" >"$out/host.log" 2>&1 || { echo "check_cuda_staging: host run failed"; tail -5 "$out/host.log"; exit 1; }
get() { awk -F '\t' -v k="$2" '$1 == k { print $2 }' "$1/summary.tsv"; }
[ "$(get "$out/cuda" buffers)" = cuda ] || { echo "check_cuda_staging: $file is not buffers = cuda"; exit 1; }
[ "$(get "$out/host" buffers)" = host ] || { echo "check_cuda_staging: twin is not buffers = host"; exit 1; }
awk -F '\t' '$3 == "ok" { print $2, $4, $5, $7 }' "$out/cuda/events.tsv" | sort >"$out/cuda.hashes"
awk -F '\t' '$3 == "ok" { print $2, $4, $5, $7 }' "$out/host/events.tsv" | sort >"$out/host.hashes"
if ! cmp -s "$out/cuda.hashes" "$out/host.hashes" || [ ! -s "$out/cuda.hashes" ]; then
    echo "check_cuda_staging: result hashes differ between device and host buffers:"
    diff "$out/cuda.hashes" "$out/host.hashes" | head -20
    exit 1
fi
echo "check_cuda_staging: $(wc -l <"$out/cuda.hashes") results, same hashes"
tc=$(get "$out/cuda" allreduce_min_s) th=$(get "$out/host" allreduce_min_s)
bps=$(get "$out/cuda" device_copy_Bps) lat=$(get "$out/cuda" device_copy_latency_s)
count=$(get "$out/cuda" count)
awk -v tc="$tc" -v th="$th" -v bps="$bps" -v lat="$lat" -v n="$count" 'BEGIN {
    stage = 2 * (lat + n * 4 / bps); d = tc - th;
    printf "check_cuda_staging: all-reduce %.9f s on device buffers, %.9f s on host: +%.9f s, two copies %.9f s\n", tc, th, d, stage;
    exit !(d >= 0.99 * stage && d <= 1.01 * stage) }' || { echo "check_cuda_staging: staging cost off by more than 1%"; exit 1; }
