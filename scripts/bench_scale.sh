#!/usr/bin/env bash
# The scale benchmark: eccl-sim's own wall time and peak RSS on the 96K-GPU
# layout (scenarios/scale/clos_96k_gpu8.scn: 8 ranks a server, relays about
# sqrt(N), membership + 3 checked 8-byte all-reduces), at the sizes given,
# one run at a time. Not a test: wall and RSS depend on the machine and its
# load; its rows go in notes. CI guards the deterministic figures instead
# (tests/sim/check_scale_guard.sh on scenarios/ci/clos2k_gpu8.scn).
#
#   scripts/bench_scale.sh [--build DIR] [--model latency|flow] [--share S --fanout F] [RANKS ...]
#
# Relays: about sqrt(N), all under the master, by default; --share S gives
# one relay per S ranks instead, and --fanout F hangs them under a tree of
# relays with at most F children each (relay_fanout: scenarios/README.md,
# "Relays"), so that no coordinator's fan-out grows with N.
#
# RANKS defaults to 10000 32000 96000; 250000 and 1000000 work too (about
# 40 KB a rank of memory: 1M needs some 40 GB). Prints one row a size: ranks,
# relays, wall, user CPU time (steadier than wall on a shared machine), peak
# RSS, the simulated bootstrap and all-reduce mean, and
# the guard's per-rank figures (messages, connections, waits, heap bytes).
# Runs go to /tmp/eccl-bench-scale/N (kept for inspection).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build model=latency share=0 fanout=0 sizes=()
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --share) share=$2; shift 2 ;;
        --fanout) fanout=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) sizes+=("$1"); shift ;;
    esac
done
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 32000 96000)
sim=$build/bin/eccl-sim
[ -x "$sim" ] || { echo "bench_scale: no $sim (build first: cmake -S . -B $build && cmake --build $build)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_scale: needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 2; }

root=/tmp/eccl-bench-scale
mkdir -p "$root"
printf '%-9s %-6s %-5s %9s %9s %9s %12s %12s %10s %8s %8s %10s\n' ranks relays model wall_s user_s rss_MB \
    bootstrap_s allreduce_s msgs/rank conns/r waits/r heap_KB/r
for n in "${sizes[@]}"; do
    if [ "$share" -gt 0 ]; then relays=$(( (n + share - 1) / share ))
    else relays=$(awk -v n="$n" 'BEGIN { printf "%d", sqrt(n) + 0.5 }'); fi
    # Racks grow with N past the 96K platform's 12,288 hosts.
    hosts=$(( (n + 7) / 8 + 1 ))
    per_rack=$(( hosts > 12288 ? (hosts + 383) / 384 : 32 ))
    scn=$root/clos_${n}_gpu8.scn
    sed -e "s/^name = .*/name = clos_${n}_gpu8/" -e "s/^ranks = .*/ranks = $n/" \
        -e "s/^relays = .*/relays = $relays/" -e "s/^hosts_per_rack = .*/hosts_per_rack = $per_rack/" \
        -e "s/^net_model = .*/net_model = $model/" scenarios/scale/clos_96k_gpu8.scn >"$scn"
    if [ "$fanout" -gt 0 ]; then echo "relay_fanout = $fanout" >>"$scn"; fi
    out=$root/$n
    rm -rf "$out"
    if ! /usr/bin/time -f "%e %U %M" -o "$root/$n.time" "$sim" run "$scn" --out "$out" >"$root/$n.log" 2>&1; then
        echo "bench_scale: $n ranks failed; see $root/$n.log" >&2
        tail -5 "$root/$n.log" >&2
        continue
    fi
    read -r wall user rss_kb <"$root/$n.time"
    awk -F '\t' -v n="$n" -v relays="$relays" -v model="$model" -v wall="$wall" -v user="$user" -v rss="$rss_kb" '
        { v[$1] = $2 }
        END {
            printf "%-9d %-6d %-5s %9.1f %9.1f %9.0f %12s %12s %10.3f %8.3f %8.3f %10.1f\n", n, relays, model,
                   wall, user, rss / 1024, v["bootstrap_s"], v["allreduce_mean_s"], v["messages"] / n,
                   v["conns"] / n, v["waits"] / n, (v["heap_peak_bytes"] + v["mmap_peak_bytes"]) / n / 1024
        }' "$out/summary.tsv"
done
