#!/usr/bin/env bash
# Side-by-side all-reduce on loopback: Open MPI (TCP BTL over lo), Gloo
# (AllreduceRingChunked over lo) and eccl-bench, run one after the other on
# this machine, then a table of 8-byte latency and 64 MiB bus bandwidth.
# Needs ../shared/peers (the anchors' sources); installs openmpi and gloo on
# first use. Usage: scripts/bench_vs_peers.sh [N...]   (default: 2 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
peers=${ECCL_PEERS_DIR:-../shared/peers}
ns=("${@:-2 4}")
[ $# -eq 0 ] && ns=(2 4)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cmake -S . -B build -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build -j2 --target eccl-bench >/dev/null

for n in "${ns[@]}"; do
    "$peers/run_peers.sh" "$n" >"$out/peers-$n.txt" 2>/dev/null
    build/bin/eccl-bench --np "$n" -b 8 -e 8 -n 5000 -w 500 -c 0 >"$out/lat-$n.txt" 2>/dev/null
    build/bin/eccl-bench --np "$n" -b 64M -e 64M -n 20 -w 3 -c 0 >"$out/bw-$n.txt" 2>/dev/null
done

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
printf '%-4s %-10s %12s %18s\n' N library "8 B (us)" "64 MiB busbw GB/s"
for n in "${ns[@]}"; do
    for lib in mpi gloo; do
        lat=$(grep "^$lib n=$n bytes=8 " "$out/peers-$n.txt" | field time_us)
        bw=$(grep "^$lib n=$n bytes=67108864 " "$out/peers-$n.txt" | field busbw_GBs)
        printf '%-4s %-10s %12s %18s\n' "$n" "$lib" "${lat:--}" "${bw:--}"
    done
    lat=$(awk '!/^#/ && $1 == 8 {print $5}' "$out/lat-$n.txt")
    bw=$(awk '!/^#/ && $1 == 67108864 {print $7}' "$out/bw-$n.txt")
    printf '%-4s %-10s %12s %18s\n' "$n" eccl "${lat:--}" "${bw:--}"
done
