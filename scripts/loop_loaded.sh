#!/bin/sh
# Runs a command N times beside two busy loops (a loaded 2-core box, as CI's
# is when tests run in parallel) and counts its failures: how a flaky test
# is reproduced, and how a fix is shown (the same loop before and after).
# The busy loops stop with the runs, or after 15 minutes at most.
# Usage: loop_loaded.sh N COMMAND [ARGS...]
#   e.g. loop_loaded.sh 30 sh tests/emu/check_emu_vs_sim.sh build/bin scenarios/emu/trace_partition8.scn /tmp/p8
set -u
n=$1; shift
busy() { end=$(( $(date +%s) + 900 )); while [ "$(date +%s)" -lt "$end" ]; do :; done; }
busy & b1=$!
busy & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT
fails=0
for i in $(seq "$n"); do
    if ! "$@" >/dev/null 2>&1; then
        fails=$((fails + 1))
        echo "run $i failed"
    fi
done
echo "failed $fails of $n"
[ "$fails" -eq 0 ]
