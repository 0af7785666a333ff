#!/bin/sh
# The NCCL 2.x baseline's all-gather, run message by message and replayed
# (scenarios/engine/sim_nccl2.h, eccl_nccl2_replay), must give every rank the same
# completion time within TOL seconds. FILE runs the messages (its default)
# and must check every table entry; a copy of it with
# `nccl2_allgather = replay` replays them. Both runs must pass.
# Usage: check_nccl2_replay.sh ECCL_SIM FILE OUTDIR TOL
set -u
[ $# -eq 4 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR TOL" >&2; exit 2; }
sim=$1 file=$2 out=$3 tol=$4
mkdir -p "$out" || exit 1
"$sim" run "$file" --out "$out/messages" >"$out/messages.out" 2>&1 ||
    { echo "check_nccl2_replay: the message run failed"; tail -5 "$out/messages.out"; exit 1; }
{ cat "$file"; echo "nccl2_allgather = replay"; } >"$out/replay.scn"
"$sim" run "$out/replay.scn" --out "$out/replay" >"$out/replay.out" 2>&1 ||
    { echo "check_nccl2_replay: the replay failed"; tail -5 "$out/replay.out"; exit 1; }
get() { awk -F '\t' -v k="$2" '$1 == k { print $2 }' "$1/summary.tsv"; }
ranks=$(get "$out/messages" ranks)
for m in messages replay; do
    [ "$(get "$out/$m" allgather)" = "$m" ] || { echo "check_nccl2_replay: $m run is not one"; exit 1; }
done
# The message run moved and checked every entry of every table.
[ "$(get "$out/messages" entries_checked)" = "$((ranks * ranks))" ] ||
    { echo "check_nccl2_replay: entries_checked $(get "$out/messages" entries_checked), want $((ranks * ranks))"; exit 1; }
# done_s is column 7 of ranks.tsv, one row per rank in rank order.
cut -f1,7 "$out/messages/ranks.tsv" | tail -n +2 >"$out/a"
cut -f1,7 "$out/replay/ranks.tsv" | tail -n +2 >"$out/b"
[ "$(wc -l <"$out/a")" -eq "$ranks" ] && [ "$(wc -l <"$out/b")" -eq "$ranks" ] ||
    { echo "check_nccl2_replay: want $ranks ranks in both ranks.tsv"; exit 1; }
paste "$out/a" "$out/b" | awk -v tol="$tol" '
    $1 != $3 || $2 == "-" || $4 == "-" { print "check_nccl2_replay: bad row: " $0; bad = 1; exit }
    { d = $2 - $4; if (d < 0) d = -d; if (d > max) { max = d; at = $1 } }
    END {
        if (bad) exit 1
        printf "check_nccl2_replay: %d ranks, largest difference %.9f s (rank %d), tolerance %s s\n", NR, max, at, tol
        exit !(max <= tol + 0)
    }'
