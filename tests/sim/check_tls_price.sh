#!/bin/sh
# net_tls's price in the simulator (backends/sim/env_sg.h,
# eccl_sg_world_set_tls; scenarios/README.md, `tls_rate`) on a bench
# scenario FILE of two-rank all-reduce rows (a ring: each rank sends and
# receives a row's bytes once). Runs it as given and with `tls_rate = 2GBps`.
# Fails unless every row is right (#wrong 0) and each row of 1 MiB or more
# takes longer by between S/rate and 3 S/rate (S its bytes: each rank
# encrypts S and decrypts S on its one progress actor, 2 S/rate, most of it
# on the critical path), and no row got faster. Deterministic: the bounds
# leave room for the overlap, not for noise.
# Usage: check_tls_price.sh ECCL_SIM FILE OUTDIR
set -u
[ $# -eq 3 ] || { echo "usage: $0 ECCL_SIM FILE OUTDIR" >&2; exit 2; }
sim=$1 file=$2 out=$3
mkdir -p "$out" || exit 1
run() { # NAME SED-ARGS...: runs a variant of FILE into OUTDIR/NAME
    name=$1
    shift
    sed "$@" "$file" >"$out/$name.scn" || exit 1
    "$sim" run "$out/$name.scn" --out "$out/$name" >"$out/$name.txt" || {
        echo "check_tls_price: $name: eccl-sim failed" >&2
        cat "$out/$name.txt" >&2
        return 1
    }
}
run clear -e 's/^iters = /iters = /' || exit 1
run tls -e 's/^iters = /tls_rate = 2GBps\niters = /' || exit 1
paste "$out/clear/bench.tsv" "$out/tls/bench.tsv" | awk -F '\t' '
    NR == 1 { next }
    {
        rows++
        size = $1; cl = $5 + 0; tl = $14 + 0; per = size / 2e9 * 1e6
        printf "check_tls_price: %10d bytes: clear %10.2f us, TLS %10.2f us (+%.2f; S/rate %.2f)\n", size, cl, tl, tl - cl, per
        if ($10 != size) { print "check_tls_price: the runs have different rows"; bad = 1 }
        if ($8 != 0 || $17 != 0) { print "check_tls_price: wrong values at " size; bad = 1 }
        if (tl < cl) { print "check_tls_price: " size " bytes faster with TLS"; bad = 1 }
        if (size >= 1048576 && !(tl - cl >= per && tl - cl <= 3 * per)) {
            print "check_tls_price: " size " bytes: want S/rate..3 S/rate more"; bad = 1
        }
    }
    END {
        if (rows < 4) { print "check_tls_price: only " rows " rows"; bad = 1 }
        if (!bad) print "check_tls_price: each byte encrypted and decrypted at tls_rate"
        exit bad
    }'
