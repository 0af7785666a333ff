#!/bin/sh
# eccl-results compare on eccl-sim runs: ci/kill4.scn with seeds 1 and 2
# (the verdicts are the same, the times have a ratio, events.tsv's kinds
# are counted), ci/bench_bruck8.scn with seeds 1 and 2 (bench rows paired
# by size), and bad input, which must exit 2 naming what is wrong.
# Usage: check_results_compare.sh ECCL_SIM ECCL_RESULTS SCENARIO_DIR OUTDIR
set -u
[ $# -eq 4 ] || { echo "usage: $0 ECCL_SIM ECCL_RESULTS SCENARIO_DIR OUTDIR" >&2; exit 2; }
sim=$1 res=$2 scn=$3 out=$4
fail() { echo "check_results_compare: $*"; exit 1; }
rm -rf "$out" && mkdir -p "$out" || exit 1
for seed in 1 2; do
    "$sim" run "$scn/kill4.scn" --seed $seed --out "$out/kill4-$seed" >"$out/kill4-$seed.txt" 2>&1 ||
        fail "eccl-sim kill4 seed $seed failed"
    "$sim" run "$scn/bench_bruck8.scn" --seed $seed --out "$out/bench-$seed" >"$out/bench-$seed.txt" 2>&1 ||
        fail "eccl-sim bench_bruck8 seed $seed failed"
done

"$res" compare "$out/kill4-1" "$out/kill4-2" --out "$out/cmp" >"$out/table.txt"
rc=$?
cat "$out/table.txt"
[ "$rc" -eq 0 ] || fail "exit status $rc"
row() { grep -E "^$1 " "$out/table.txt"; }
for key in checks survivors killed joined; do
    row "$key" | grep -Eq ' same$' || fail "row $key: not 'same'"
done
# Numbers get B/A (column 4): the seed's is 2; a time's is a number.
[ "$(row seed | awk '{ print $4 }')" = 2 ] || fail "row seed: B/A is not 2"
row sim_time_s | awk '$4 !~ /^[0-9.e+-]+$/ { exit 1 }' || fail "row sim_time_s: no ratio"
row 'events:killed' | awk '$2 != 1 || $3 != 1 { exit 1 }' || fail "row events:killed: want 1 and 1"
[ "$(head -1 "$out/cmp/compare.tsv")" = "$(printf 'key\tsize\ta\tb\tb_over_a\tnote')" ] ||
    fail "compare.tsv: unexpected header"
grep -q "^checks	-	pass	pass	-	same$" "$out/cmp/compare.tsv" || fail "compare.tsv: no checks row"
[ -s "$out/cmp/compare.gp" ] || fail "no compare.gp"

"$res" compare "$out/bench-1" "$out/bench-2" >"$out/bench-table.txt" || fail "bench compare failed"
cat "$out/bench-table.txt"
rows=$(awk '/^bench rows by size/ { on = 1; next } on && $1 ~ /^[0-9]+$/ && $4 ~ /^[0-9.e+-]+$/ { n++ }
            END { print n + 0 }' "$out/bench-table.txt")
[ "$rows" -eq "$(($(wc -l <"$out/bench-1/bench.tsv") - 1))" ] || fail "bench: $rows rows paired by size"

# Bad input: exit 2 and a message naming the folder, or the file and line.
expect2() {
    what=$1; shift
    "$res" "$@" >"$out/bad.out" 2>"$out/bad.err"
    rc=$?
    [ "$rc" -eq 2 ] || fail "$what: exit status $rc, want 2"
    cat "$out/bad.err"
}
expect2 "usage" compare "$out/kill4-1"
expect2 "missing folder" compare "$out/kill4-1" "$out/no-such-run"
grep -q "no-such-run" "$out/bad.err" || fail "missing folder: not named"
mkdir -p "$out/empty"
expect2 "no summary" compare "$out/empty" "$out/kill4-1"
grep -q "empty/summary.tsv" "$out/bad.err" || fail "no summary: not named"
cp -r "$out/kill4-1" "$out/broken"
sed -i '3s/.*/no tab on this line/' "$out/broken/summary.tsv"
expect2 "malformed summary" compare "$out/kill4-1" "$out/broken"
grep -q "broken/summary.tsv:3:" "$out/bad.err" || fail "malformed summary: file and line not named"
echo "check_results_compare: ok"
