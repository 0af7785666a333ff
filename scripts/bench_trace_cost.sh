#!/bin/sh
# What the always-on observability costs a collective (docs/trace.md,
# "Cost"): eccl-bench at one size, with the trace records, the late-rank
# detector and the call counts off (ECCL_TRACE_RECORDS=0 ECCL_LATE_MS=0
# ECCL_STATS_MS=0) and on (the defaults), one run of each per round,
# interleaved so that the box's drift hits both alike; optionally a third
# binary (an older build) in the same rounds. Prints each run's µs, then the
# median and minimum of each. A benchmark: nothing is asserted.
# Usage: bench_trace_cost.sh BINDIR SIZE ITERS WARMUP [ROUNDS [OLD_BINDIR]]
#   e.g. bench_trace_cost.sh /tmp/rel/bin 8 20000 2000 20
set -u
bin=$1 size=$2 iters=$3 warm=$4 rounds=${5:-10} old=${6:-}
run() { # label, then the environment and binary
    label=$1; shift
    us=$(env "$@" --np 4 -b "$size" -e "$size" -n "$iters" -w "$warm" -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ { print $5 }')
    echo "$label $us"
}
out=$(mktemp) && trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
    [ -n "$old" ] && run old "$old/eccl-bench" >>"$out"
    run off ECCL_TRACE_RECORDS=0 ECCL_LATE_MS=0 ECCL_STATS_MS=0 "$bin/eccl-bench" >>"$out"
    run on "$bin/eccl-bench" >>"$out"
done
cat "$out"
for label in old off on; do
    grep "^$label " "$out" | awk '{ print $2 }' | sort -n | awk -v l="$label" '
        { v[NR] = $1 }
        END { if (NR) printf "%s: median %.2f us, min %.2f us, %d runs\n", l,
                  NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], NR }'
done
