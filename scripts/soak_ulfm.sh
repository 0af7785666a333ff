#!/bin/bash
# A soak of MPI's fault tolerance (mpi/README.md, "A rank lost in the middle
# of a call"): RUNS runs of mpi_ulfm on 5 ranks, each killing 1 to 3 random
# ranks at random times in the first 40 ms (RANK~MICROSECONDS), beside BUSY
# busy loops. A run must print "all checks passed"; one still going after
# 15 s is a hang: its ranks get SIGUSR1 (ECCL_TRACE_SIGNAL) so that each
# writes its collective trace, and its directory is kept for eccl-trace
# analyze. Bounded: every run stops by 15 s, the busy loops with the soak.
# Usage: soak_ulfm.sh BINDIR [RUNS [BUSY [OUTDIR [FLAGS]]]]
#   e.g. soak_ulfm.sh build/bin 100 3 /tmp/soak-ulfm "-i -r"
#   FLAGS, mpi_ulfm's: -i the step's collectives are nonblocking, -r a
#   survivor whose step failed revokes the communicators first
set -u
bin=$(cd "$1" && pwd) runs=${2:-100} busy=${3:-3} out=${4:-/tmp/soak-ulfm} mode=${5:-}
mkdir -p "$out"
for _ in $(seq "$busy"); do (end=$((SECONDS + 3600)); while [ $SECONDS -lt $end ]; do :; done) & done
trap 'kill $(jobs -p) 2>/dev/null' EXIT
hangs=0 bad=0
for i in $(seq "$runs"); do
    d=$out/run$i
    rm -rf "$d" && mkdir -p "$d"
    args="" used=" "
    for _ in $(seq $((RANDOM % 3 + 1))); do
        while :; do v=$((RANDOM % 5)); case "$used" in *" $v "*) ;; *) break ;; esac; done
        used="$used$v " args="$args $v~$((RANDOM % 40000))"
    done
    ECCL_TRACE_SIGNAL=USR1 ECCL_TRACE_DIR=$d \
        "$bin/eccl-run" --keep-going -np 5 --timeout 40 "$bin/mpi_ulfm" $mode 30 $args >"$d/out" 2>&1 &
    pid=$!
    for _ in $(seq 150); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    if kill -0 $pid 2>/dev/null; then
        pkill -USR1 -P $pid -x mpi_ulfm
        sleep 3
        pkill -KILL -P $pid -x mpi_ulfm
        wait $pid
        hangs=$((hangs + 1))
        echo "run $i hung (kills:$args): traces in $d"
        continue
    fi
    wait $pid
    if grep -q "all checks passed" "$d/out"; then
        rm -rf "$d"
    else
        bad=$((bad + 1))
        echo "run $i failed (kills:$args): $d/out"
    fi
done
echo "soak_ulfm: $hangs hung, $bad failed, of $runs runs"
[ $hangs -eq 0 ] && [ $bad -eq 0 ]
