#!/bin/sh
# A job that succeeds leaves nothing on stderr (issue 25): eccl-bench's
# ranks leave together (eccl_comm_leave), so no ring re-forms among ranks
# that are going and nobody dials a rank already gone ("W connect to ...:
# Connection refused" at exit, in most --np 8 runs before). Three runs of
# eight ranks; any line on stderr fails.
# Usage: bench_quiet_exit.sh ECCL_BENCH
set -u
[ $# -eq 1 ] || { echo "usage: $0 ECCL_BENCH" >&2; exit 2; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
for run in 1 2 3; do
    "$1" --np 8 -b 8 -e 64 -f 8 -n 20 -w 2 > /dev/null 2> "$err"
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$err" ]; then
        echo "bench_quiet_exit: run $run: exit $rc, stderr:"
        cat "$err"
        exit 1
    fi
done
echo "bench_quiet_exit: 3 runs of 8 ranks, nothing on stderr"
