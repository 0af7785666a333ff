#!/bin/sh
# The simulator computes what the real backend computes: for each rank
# count N, runs the worker loop (examples/worker_loop.c) as N eccl-worker
# processes over TCP on 127.0.0.1 with an eccl-master, and as N actors in
# eccl-sim with host buffers, with the same --count and --iters, and fails
# unless the per-iteration result hashes (the loop's FNV-1a over the f32
# result) are bit-identical between the two, every rank of each run agreeing.
# Control: the simulation with count + 1 must give different hashes, so a
# comparison that could not tell inputs apart fails too.
# Every wait is bounded (workers run under `timeout`); no timing is checked.
# Usage: check_sim_equals_real.sh ECCL_SIM ECCL_MASTER ECCL_WORKER OUTDIR COUNT ITERS N...
set -u
[ $# -ge 7 ] || { echo "usage: $0 ECCL_SIM ECCL_MASTER ECCL_WORKER OUTDIR COUNT ITERS N..." >&2; exit 2; }
sim=$1 master=$2 worker=$3 out=$4 count=$5 iters=$6
shift 6
rm -rf "$out" && mkdir -p "$out" || exit 1
mpid=
trap '[ -n "$mpid" ] && kill "$mpid" 2>/dev/null' EXIT

# "ITER HASH" lines, one per iteration, from event=ok lines on stdin (real
# workers' key=value lines, or sim events.tsv turned into them); fails
# (prints nothing, status 1) unless each of `ranks` ranks reported every
# iteration and all ranks agree.
collapse() { # ranks
    awk -v ranks="$1" -v iters="$iters" '
        { it = ""; h = ""
          for (i = 1; i <= NF; i++) {
              if ($i ~ /^iter=/) it = substr($i, 6)
              if ($i ~ /^hash=/) h = substr($i, 6) } }
        it != "" && h != "" {
            n[it]++
            if (!(it in hash)) hash[it] = h
            else if (hash[it] != h) { print "ranks disagree on iter " it > "/dev/stderr"; bad = 1 } }
        END {
            for (i = 0; i < iters; i++) {
                if (n[i] != ranks) { print "iter " i ": " n[i] + 0 " of " ranks " ranks" > "/dev/stderr"; bad = 1 }
                else out = out i " " hash[i] "\n" }
            if (bad) exit 1
            printf "%s", out }'
}

sim_hashes() { # N COUNT DIR
    cat >"$3.scn" <<SCN
name = sim-equals-real
platform = flat
hosts = $(($1 + 1))
bandwidth = 10GBps
latency = 5us
ranks = $1
count = $2
iters = $iters
buffers = host
SCN
    "$sim" run "$3.scn" --out "$3" >"$3.log" 2>&1 || { echo "eccl-sim failed: $3.log" >&2; return 1; }
    awk -F '\t' '$3 == "ok" { print "iter=" $4 " hash=" $7 }' "$3/events.tsv" | collapse "$1"
}

status=0
for n in "$@"; do
    d=$out/n$n
    mkdir -p "$d"
    # Real: a master on a free port, N worker processes.
    "$master" --listen 127.0.0.1:0 >"$d/master.out" 2>"$d/master.err" &
    mpid=$!
    addr=
    i=0
    while [ $i -lt 100 ] && [ -z "$addr" ]; do
        addr=$(sed -n 's/^eccl-master listening on //p' "$d/master.out")
        [ -n "$addr" ] || sleep 0.1
        i=$((i + 1))
    done
    [ -n "$addr" ] || { echo "check_sim_equals_real: master did not start"; exit 1; }
    pids=
    for r in $(seq 1 "$n"); do
        timeout 120 "$worker" --master "$addr" --count "$count" --iters "$iters" --start-world "$n" \
            >"$d/worker$r.out" 2>"$d/worker$r.err" &
        pids="$pids $!"
    done
    wfail=0
    for p in $pids; do wait "$p" || wfail=1; done
    kill "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; mpid=
    [ $wfail -eq 0 ] || { echo "check_sim_equals_real: N=$n: a worker failed"; cat "$d"/worker*.err | head -20; exit 1; }
    cat "$d"/worker*.out | collapse "$n" >"$d/real.txt" || { echo "check_sim_equals_real: N=$n: bad real run"; exit 1; }
    sim_hashes "$n" "$count" "$d/sim" >"$d/sim.txt" || { echo "check_sim_equals_real: N=$n: bad sim run"; exit 1; }
    sim_hashes "$n" $((count + 1)) "$d/control" >"$d/control.txt" ||
        { echo "check_sim_equals_real: N=$n: bad control run"; exit 1; }
    if cmp -s "$d/real.txt" "$d/sim.txt"; then
        echo "check_sim_equals_real: N=$n count=$count: real and sim agree on $(wc -l <"$d/real.txt") iterations:" $(cut -d' ' -f2 "$d/real.txt")
    else
        echo "check_sim_equals_real: FAIL N=$n count=$count: real vs sim hashes:"
        diff "$d/real.txt" "$d/sim.txt"
        status=1
    fi
    if cmp -s "$d/real.txt" "$d/control.txt"; then
        echo "check_sim_equals_real: FAIL N=$n: count $((count + 1)) gives the same hashes: the comparison cannot tell inputs apart"
        status=1
    else
        echo "check_sim_equals_real: N=$n: control (count $((count + 1))) differs, as it must"
    fi
done
exit $status
