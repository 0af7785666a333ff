#!/bin/sh
# The scale guard: runs an eccl-sim scenario and fails unless it passes its
# checks and each figure its baseline names lies within the baseline's
# tolerance, above or below. The figures do not depend on the machine's
# speed (messages, connections and waits per rank, heap bytes per rank, the
# simulated bootstrap), so a move is a change in what the code does: a
# commit that moves one updates BASELINE with it and says why in its message.
# Usage: check_scale_guard.sh ECCL_SIM FILE OUTDIR BASELINE
#
# BASELINE: '#' comments, then one figure a line: NAME VALUE TOLERANCE%.
# NAME is a key of summary.tsv, or KEY_per_rank for that key divided by the
# scenario's ranks; heap_per_rank is (heap_peak_bytes + mmap_peak_bytes) /
# ranks. Every name must be known: a typo fails, it never passes unchecked.
set -u
[ $# -eq 4 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR BASELINE" >&2; exit 2; }
sim=$1 file=$2 out=$3 baseline=$4
[ -r "$baseline" ] || { echo "check_scale_guard: cannot read $baseline"; exit 1; }
"$sim" run "$file" --out "$out" || { echo "check_scale_guard: eccl-sim failed ($?)"; exit 1; }
awk -F '\t' -v base="$baseline" '
    FILENAME != base { v[$1] = $2; next }
    {
        line = $0
        sub(/#.*/, "", line)
        gsub(/^[ \t]+|[ \t]+$/, "", line)
        n = line == "" ? 0 : split(line, f, /[ \t]+/)
    }
    n == 0 { next }
    n != 3 || f[2] !~ /^[0-9.]+$/ || f[3] !~ /^[0-9.]+%$/ {
        printf "check_scale_guard: %s: bad line \"%s\" (want NAME VALUE TOLERANCE%%)\n", base, $0
        bad = 1; next
    }
    {
        name = f[1]; want = f[2] + 0; tol = substr(f[3], 1, length(f[3]) - 1) / 100
        ranks = v["ranks"] + 0
        if (name == "heap_per_rank" && ("heap_peak_bytes" in v) && ("mmap_peak_bytes" in v) && ranks > 0) {
            got = (v["heap_peak_bytes"] + v["mmap_peak_bytes"]) / ranks
        } else if (name ~ /_per_rank$/ && (substr(name, 1, length(name) - 9) in v) && ranks > 0) {
            got = v[substr(name, 1, length(name) - 9)] / ranks
        } else if ((name in v) && v[name] ~ /^[0-9.]+$/) {
            got = v[name] + 0
        } else {
            printf "check_scale_guard: %s: no figure \"%s\" in summary.tsv\n", base, name
            bad = 1; next
        }
        lo = want * (1 - tol); hi = want * (1 + tol)
        ok = got >= lo && got <= hi
        printf "check_scale_guard: %-18s %14.6f  baseline %14.6f +-%s  %s\n", name, got, want, f[3],
               ok ? "ok" : (got > hi ? "ABOVE" : "BELOW")
        if (!ok) moved = 1
    }
    END {
        if (moved)
            print "check_scale_guard: a figure moved out of its tolerance: find the change that moved it; " \
                  "if the move is meant, update " base " in the same commit and say why in its message"
        exit bad || moved
    }
' "$out/summary.tsv" "$baseline"
