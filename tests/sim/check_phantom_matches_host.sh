#!/bin/sh
# Phantom buffers change what is carried, not when: runs the host-buffer
# scenario FILE (buffers = host) and the same file with buffers = phantom,
# and fails unless both pass their checks and their events.tsv agree on
# every column but the last (the host run's result hashes, "phantom" in the
# other), i.e. every event at the same simulated nanosecond, kills and
# recoveries included. Also fails if the host run has no hashes to compare
# (a vacuous match) or the phantom run reports real values.
# Usage: check_phantom_matches_host.sh ECCL_SIM FILE OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR" >&2; exit 2; }
sim=$1 file=$2 out=$3
mkdir -p "$out" || exit 1
grep -q '^buffers *= *host' "$file" || { echo "check_phantom_matches_host: $file: want buffers = host"; exit 1; }
sed 's/^buffers *= *host/buffers = phantom/' "$file" >"$out/phantom.scn" || exit 1
for m in host phantom; do
    f=$file
    [ $m = phantom ] && f=$out/phantom.scn
    "$sim" run "$f" --out "$out/$m" >"$out/$m.log" 2>&1 ||
        { echo "check_phantom_matches_host: $m run failed"; tail -20 "$out/$m.log"; exit 1; }
done
ok_host=$(awk -F '\t' '$3 == "ok" && $7 ~ /^[0-9a-f]+$/' "$out/host/events.tsv" | wc -l)
ok_ph=$(awk -F '\t' '$3 == "ok" && $7 == "phantom"' "$out/phantom/events.tsv" | wc -l)
ok_all=$(awk -F '\t' '$3 == "ok"' "$out/phantom/events.tsv" | wc -l)
echo "check_phantom_matches_host: ok events: $ok_host hashed (host), $ok_ph phantom of $ok_all (phantom)"
if [ "$ok_host" -eq 0 ] || [ "$ok_ph" -ne "$ok_all" ] || [ "$ok_ph" -ne "$ok_host" ]; then
    echo "check_phantom_matches_host: FAIL: want the same number of ok events, hashed in host mode"
    exit 1
fi
cut -f 1-6 "$out/host/events.tsv" >"$out/host.cut"
cut -f 1-6 "$out/phantom/events.tsv" >"$out/phantom.cut"
if ! cmp -s "$out/host.cut" "$out/phantom.cut"; then
    echo "check_phantom_matches_host: FAIL: event times differ:"
    diff "$out/host.cut" "$out/phantom.cut" | head -20
    exit 1
fi
echo "check_phantom_matches_host: pass: $(wc -l <"$out/host.cut") events at identical simulated times"
