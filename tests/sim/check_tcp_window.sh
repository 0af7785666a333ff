#!/bin/sh
# The WAN TCP model (scenarios/README.md, "WAN TCP model") on a bench
# scenario FILE of one row that sets `tcp_window = 1M` and no `pool` or
# `concurrent`. Runs it four times: as given, with the window doubled, with
# `concurrent = 4` over `pool = 4`, and with `concurrent = 4` over one
# connection. Fails unless
#   - as given, the row's time is at least MIN_US (what the window allows:
#     the bytes a rank sends / (its streams x window / RTT));
#   - doubling the window halves the time (ratio in [1.9, 2.1]);
#   - 4 all-reduces at once over 4 pooled connections take at most 1.1 x the
#     time of one (each has its own streams), over one connection at least
#     3.8 x (they share its streams).
# The simulator is deterministic, so the bounds only leave room for the
# latency and the pipeline's fill, not for noise.
# Usage: check_tcp_window.sh ECCL_SIM FILE OUTDIR MIN_US
set -u
[ $# -eq 4 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR MIN_US" >&2; exit 2; }
sim=$1 file=$2 out=$3 min_us=$4
mkdir -p "$out" || exit 1
grep -q '^tcp_window = 1M' "$file" || { echo "check_tcp_window: $file does not set tcp_window = 1M"; exit 2; }
# One run of a variant; prints its row's time in us.
run() {
    name=$1
    shift
    sed "$@" "$file" >"$out/$name.scn" || exit 1
    "$sim" run "$out/$name.scn" --out "$out/$name" >"$out/$name.txt" || {
        echo "check_tcp_window: $name: eccl-sim failed" >&2
        cat "$out/$name.txt" >&2
        return 1
    }
    awk -F '\t' 'NR == 2 { print $5 }' "$out/$name/bench.tsv"
}
t1=$(run window1m -e 's/^tcp_window = 1M/tcp_window = 1M/') || exit 1
t2=$(run window2m -e 's/^tcp_window = 1M/tcp_window = 2M/') || exit 1
tp=$(run pool4 -e 's/^tcp_window = 1M/tcp_window = 1M\nconcurrent = 4\npool = 4/') || exit 1
ts=$(run shared4 -e 's/^tcp_window = 1M/tcp_window = 1M\nconcurrent = 4/') || exit 1
echo "check_tcp_window: time(us) window 1M $t1, 2M $t2; 4 at once: pool 4 $tp, pool 1 $ts"
awk -v t1="$t1" -v t2="$t2" -v tp="$tp" -v ts="$ts" -v min="$min_us" 'BEGIN {
    bad = 0
    if (!(t1 + 0 >= min + 0)) { print "check_tcp_window: " t1 " us, faster than the window allows (" min " us)"; bad = 1 }
    r = t1 / t2
    if (!(r >= 1.9 && r <= 2.1)) { print "check_tcp_window: doubling the window: time ratio " r ", want 2"; bad = 1 }
    if (!(tp <= 1.1 * t1)) { print "check_tcp_window: 4 over 4 connections: " tp " us, want at most 1.1 x " t1; bad = 1 }
    if (!(ts >= 3.8 * t1)) { print "check_tcp_window: 4 over 1 connection: " ts " us, want at least 3.8 x " t1; bad = 1 }
    if (!bad) print "check_tcp_window: the window caps each stream, the pool multiplies them"
    exit bad }'
