#!/bin/sh
# eccl-bench --out and eccl-churn --out write their results through
# results/src: bench.tsv with eccl-bench's columns and a row per size,
# events.tsv in eccl-sim's columns, summary.tsv naming the tool with its
# verdict, and the plot script.
# Usage: results_out.sh bench|churn TOOL OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 bench|churn TOOL OUTDIR" >&2; exit 2; }
kind=$1 tool=$2 out=$3
fail() { echo "results_out: $*"; exit 1; }
rm -rf "$out"
case $kind in
bench)
    # 2 ranks, 8 B .. 64 KiB by 8: 5 rows (8 .. 32 KiB).
    "$tool" --np 2 -b 8 -e 64K -f 8 -n 2 -w 1 --out "$out" || fail "eccl-bench failed"
    [ "$(head -1 "$out/bench.tsv")" = "$(printf 'size\tcount\ttype\tredop\ttime_us\talgbw_GBps\tbusbw_GBps\twrong\talgo')" ] ||
        fail "bench.tsv: unexpected header"
    awk -F '\t' 'NR > 1 && (NF != 9 || $8 != "0") { exit 1 }' "$out/bench.tsv" || fail "bench.tsv: a bad row"
    [ "$(awk 'END { print NR }' "$out/bench.tsv")" -eq 6 ] || fail "bench.tsv: want 5 rows"
    want_tool=eccl-bench
    ;;
churn)
    "$tool" --duration 3 --seed 1 --max-peers 4 --out "$out" >/dev/null 2>&1 || fail "eccl-churn failed"
    [ "$(head -1 "$out/events.tsv")" = "$(printf 'time_s\trank\tevent\titer\tworld\tms\thash')" ] ||
        fail "events.tsv: unexpected header"
    grep -q "	started	" "$out/events.tsv" || fail "events.tsv: no worker started"
    grep -q "	rev	" "$out/events.tsv" || fail "events.tsv: no revision"
    want_tool=eccl-churn
    ;;
*) fail "unknown kind $kind" ;;
esac
grep -q "^tool	$want_tool$" "$out/summary.tsv" || fail "summary.tsv: no tool row"
grep -q "^checks	pass$" "$out/summary.tsv" || fail "summary.tsv: checks not pass"
[ -s "$out/plot.gp" ] || fail "no plot.gp"
echo "results_out: $kind ok"
