#!/bin/sh
# Runs an eccl-sim scenario (it must pass its checks) for the platform it
# generates, then sim_loopback on that platform.xml: the route from HOST to
# itself is its loopback of bandwidth BW (B/s) and latency LAT (s), and a send
# between two envs on HOST costs exactly that (see tests/sim/sim_loopback.c).
# With a ninth argument `latency`, sim_loopback checks the latency net model;
# with `small`, the flow model with small messages on the latency path.
# Usage: check_loopback.sh ECCL_SIM SIM_LOOPBACK FILE OUTDIR HOST OTHER BW LAT [latency|small]
set -u
[ $# -eq 8 ] || [ $# -eq 9 ] || {
    echo "usage: $0 ECCL_SIM SIM_LOOPBACK FILE OUTDIR HOST OTHER BW LAT [latency|small]" >&2; exit 2; }
sim=$1 probe=$2 file=$3 out=$4 host=$5 other=$6 bw=$7 lat=$8 model=${9:-}
"$sim" run "$file" --out "$out" >"$out.log" 2>&1 || {
    echo "check_loopback: eccl-sim failed ($?)"; tail -20 "$out.log"; exit 1; }
"$probe" "$out/platform.xml" "$host" "$other" "$bw" "$lat" $model
