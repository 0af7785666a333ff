#!/bin/sh
# net_shm's twin in the simulator (backends/sim/env_sg.h,
# eccl_sg_world_set_shm; scenarios/README.md, `shm_bandwidth`) on a bench
# scenario FILE of all-reduce rows between two ranks of one host, whose
# loopback is 5GBps. Runs it as given and with `shm_bandwidth = 20GBps`.
# Fails unless
#   - every row is faster through memory (messages below 256 KiB go through
#     the peer's inbox: two copies at 20GBps against one pass at 5GBps);
#   - rows of at most 256 KiB, whose messages pay the loopback latency
#     either way, take more than a third of the loopback time;
#   - rows of 4 MiB and more (bandwidth-bound) take at most a third of the
#     time (4x the bandwidth, less the two control latencies a message pays);
#   - every row is right (#wrong 0).
# The simulator is deterministic: the bounds leave room only for the
# latencies, not for noise.
# Usage: check_shm_twin.sh ECCL_SIM FILE OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR" >&2; exit 2; }
sim=$1 file=$2 out=$3
mkdir -p "$out" || exit 1
grep -q '^loopback_bandwidth = 5GBps' "$file" || { echo "check_shm_twin: $file: want loopback_bandwidth = 5GBps"; exit 2; }
run() { # NAME SED-ARGS...: runs a variant of FILE into OUTDIR/NAME
    name=$1
    shift
    sed "$@" "$file" >"$out/$name.scn" || exit 1
    "$sim" run "$out/$name.scn" --out "$out/$name" >"$out/$name.txt" || {
        echo "check_shm_twin: $name: eccl-sim failed" >&2
        cat "$out/$name.txt" >&2
        return 1
    }
}
run loopback -e 's/^loopback_bandwidth = 5GBps/loopback_bandwidth = 5GBps/' || exit 1
run shm -e 's/^loopback_bandwidth = 5GBps/loopback_bandwidth = 5GBps\nshm_bandwidth = 20GBps/' || exit 1
# bench.tsv: size count type redop time_us algbw busbw wrong algo, one header line.
paste "$out/loopback/bench.tsv" "$out/shm/bench.tsv" | awk -F '\t' '
    NR == 1 { next }
    {
        rows++
        size = $1; lo = $5 + 0; sh = $14 + 0
        printf "check_shm_twin: %10d bytes: loopback %10.2f us, shm %10.2f us\n", size, lo, sh
        if ($10 != size) { print "check_shm_twin: the runs have different rows"; bad = 1 }
        if ($8 != 0 || $17 != 0) { print "check_shm_twin: wrong values at " size; bad = 1 }
        if (size <= 262144 && !(3 * sh > lo)) { print "check_shm_twin: " size " bytes: the inbox cannot beat the loopback latency"; bad = 1 }
        if (size >= 4194304 && !(3 * sh <= lo)) { print "check_shm_twin: " size " bytes: want at most a third of the loopback time"; bad = 1 }
        if (!(sh < lo)) { print "check_shm_twin: " size " bytes not faster through memory"; bad = 1 }
    }
    END {
        if (rows < 4) { print "check_shm_twin: only " rows " rows"; bad = 1 }
        if (!bad) print "check_shm_twin: host-mates'"'"' messages at memory speed, small ones still paying the latency"
        exit bad
    }'
