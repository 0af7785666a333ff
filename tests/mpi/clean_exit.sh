#!/bin/sh
# Runs a job that must succeed RUNS times in a row beside BUSY busy loops
# (a loaded CI machine: shutdown races show only when ranks are descheduled
# at the wrong moment). Every run must exit 0 and write nothing on stderr:
# a clean job's shutdown is not a failure, so nothing may say it is.
# The busy loops are this script's own, each bounded by `timeout`, and
# killed when it ends.
# Usage: clean_exit.sh RUNS BUSY COMMAND [ARGS...]
set -u
runs=$1 busy=$2
shift 2
err=$(mktemp) || exit 1
loops=""
cleanup() {
    for pid in $loops; do kill "$pid" 2>/dev/null; done
    rm -f "$err"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
i=0
while [ "$i" -lt "$busy" ]; do
    timeout 300 sh -c 'while :; do :; done' &
    loops="$loops $!"
    i=$((i + 1))
done
failed=0 run=1
while [ "$run" -le "$runs" ]; do
    "$@" >/dev/null 2>"$err"
    rc=$?
    if [ "$rc" -ne 0 ] || [ -s "$err" ]; then
        failed=$((failed + 1))
        echo "clean_exit: run $run: exit status $rc, stderr:"
        head -20 "$err"
    fi
    run=$((run + 1))
done
if [ "$failed" -ne 0 ]; then
    echo "clean_exit: $failed of $runs runs failed or wrote on stderr (beside $busy busy loops)"
    exit 1
fi
echo "clean_exit: $runs runs, each exit status 0 and nothing on stderr (beside $busy busy loops)"
