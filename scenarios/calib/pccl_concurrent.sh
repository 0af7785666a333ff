#!/bin/sh
# The PCCL Europe-West scenario (pccl_europe_west.scn, tcp_window as fitted)
# with K = 8, 16, 32, 64 concurrent all-reduces over K pooled connections
# (`pool = K`, `concurrent = K`), nothing else changed: the model's
# predictions (scenarios/calib/README.md). Prints one line per K: the time
# of a step (K all-reduces of 1 GiB) and the aggregate bandwidth.
# Usage: scenarios/calib/pccl_concurrent.sh ECCL_SIM OUTDIR [K...]
set -u
[ $# -ge 2 ] || { echo "usage: $0 ECCL_SIM OUTDIR [K...]" >&2; exit 2; }
sim=$1 out=$2
shift 2
[ $# -gt 0 ] || set -- 8 16 32 64
here=$(dirname "$0")
mkdir -p "$out" || exit 1
printf 'K\tstep_s\tagg_GBps\tagg_Gbps\tbusbw_GBps\n'
for k in "$@"; do
    sed -e "s/^pool = 1 .*/pool = $k/" -e "s/^iters = .*/iters = 1\nconcurrent = $k/" \
        "$here/pccl_europe_west.scn" >"$out/pccl_c$k.scn" || exit 1
    "$sim" run "$out/pccl_c$k.scn" --out "$out/c$k" >"$out/c$k.txt" || { cat "$out/c$k.txt"; exit 1; }
    awk -F '\t' -v k="$k" 'NR == 2 { printf "%s\t%.3f\t%.3f\t%.1f\t%s\n", k, $5 / 1e6, $6, $6 * 8, $7 }' \
        "$out/c$k/bench.tsv"
done
