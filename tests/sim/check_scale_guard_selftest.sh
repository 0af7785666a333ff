#!/bin/sh
# The scale guard must be able to fail: on a small scenario, a baseline made
# from its own summary passes, and one with a figure moved past its
# tolerance (up, then down), an unknown figure or a malformed line fails.
# Usage: check_scale_guard_selftest.sh ECCL_SIM FILE
set -u
[ $# -eq 2 ] || { echo "usage: $0 ECCL_SIM FILE" >&2; exit 2; }
sim=$1 file=$2
here=$(dirname "$0")
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$sim" run "$file" --out "$dir/ref" >/dev/null 2>&1 || { echo "selftest: eccl-sim failed"; exit 1; }
messages=$(awk -F '\t' '$1 == "messages" { print $2 }' "$dir/ref/summary.tsv")
ranks=$(awk -F '\t' '$1 == "ranks" { print $2 }' "$dir/ref/summary.tsv")
boot=$(awk -F '\t' '$1 == "bootstrap_s" { print $2 }' "$dir/ref/summary.tsv")
per_rank=$(awk -v m="$messages" -v r="$ranks" 'BEGIN { printf "%.6f", m / r }')
status=0
# expect WANT BASELINE-TEXT: the guard's exit status must be WANT (0 or 1).
expect() {
    printf '%s\n' "$2" >"$dir/baseline"
    sh "$here/check_scale_guard.sh" "$sim" "$file" "$dir/run" "$dir/baseline" >"$dir/log" 2>&1
    rc=$?
    if [ "$rc" -ne "$1" ]; then
        echo "selftest: want exit $1, got $rc, for baseline:"; cat "$dir/baseline"; tail -5 "$dir/log"
        status=1
    else
        echo "selftest: exit $rc as wanted: $(tail -1 "$dir/log")"
    fi
}
expect 0 "# matches
messages_per_rank $per_rank 1%
bootstrap_s $boot 1%
heap_per_rank 1000000 1000%"
expect 1 "messages_per_rank $(awk -v v="$per_rank" 'BEGIN { printf "%.6f", v * 0.95 }') 1%"
expect 1 "messages_per_rank $(awk -v v="$per_rank" 'BEGIN { printf "%.6f", v * 1.05 }') 1%"
expect 1 "no_such_figure_per_rank 1 1%"
expect 1 "messages_per_rank $per_rank"
exit $status
