#!/bin/sh
# eccl-run interrupted stops its ranks and exits 128 + the signal, at once.
# SIGINT is the telling one: a shell starts background jobs with it
# ignored, so only eccl-run's own handler can act on it (SIGTERM's default
# would end eccl-run anyway, and its ranks with it).
# Usage: signal_stop.sh ECCL_RUN MPI_FAULTS
set -u
fail() { echo "signal_stop: $*"; exit 1; }
"$1" -np 2 --timeout 30 "$2" hang &
pid=$!
# Signal once the ranks run: eccl-run's handler is in by then.
tries=0
until [ -n "$(pgrep -P "$pid")" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 100 ] || { kill -KILL "$pid"; fail "no rank started within 10 s"; }
    sleep 0.1
done
start=$(date +%s)
kill -INT "$pid"
wait "$pid"
rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -eq 130 ] || fail "exit status $rc, want 130 (128 + SIGINT)"
[ "$took" -le 10 ] || fail "took $took s to stop"
echo "signal_stop: exit status 130 after $took s: as expected"
