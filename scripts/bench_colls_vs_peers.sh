#!/usr/bin/env bash
# Every collective on loopback, side by side: Open MPI (TCP BTL over lo, and
# its shared-memory BTL, vader), Gloo (TCP over lo) and, where available,
# eccl-bench, one run after the other on this machine; then a summary table
# per collective and N. "best peer" is the faster of the TCP peers (Open MPI
# over TCP, Gloo); Open MPI's shared-memory times have columns of their own.
#
# Usage: scripts/bench_colls_vs_peers.sh [-o OUTDIR] [-c COLLS] [-b MIN] [-e MAX] [N...]
#   N...      rank counts (default: 2 4 8)
#   -o DIR    output directory (default: a new mktemp -d, printed at the end)
#   -c LIST   collectives, comma-separated (default: allreduce,allgather,
#             reduce_scatter,broadcast,reduce,alltoall,barrier)
#   -b, -e    smallest and largest size, K/M/G allowed (default 8 and 256M;
#             factor 2 between sizes)
#   -s        only (re)write OUTDIR/summary.md from OUTDIR/raw (needs -o)
# Environment:
#   PEERS_TIMEOUT  seconds per (library, collective, N) run (default 900)
#   PEERS_ARGS     extra options for both peer programs, e.g. "-t 1" (the
#                  per-size time budget) or "-n 50 -w 5" (fixed counts)
#   PEERS_BUILD    where the peer programs are built (default OUTDIR/bin)
#   PEERS_LIBS     which peers run (default "mpi mpishm gloo": Open MPI over
#                  TCP, Open MPI over shared memory, Gloo; e.g. "mpi" for a
#                  small-message sweep, where Gloo is 5-50x slower than both)
#   ECCL_BENCH     eccl's own rows: a command taking eccl-bench's options
#                  (see "ECCL JOIN POINT" below); default build/bin/eccl-bench,
#                  built with cmake; "none": peers only
#   ECCL_BENCH_ARGS  extra options for it (e.g. "-n 50 -w 5"; eccl-bench's
#                  defaults are 20 timed and 5 warm-up calls per size)
#   ECCL_BENCH_COLLS the collectives it has (default: read from its --help)
#
# Writes, under OUTDIR:
#   raw/LIB-COLL-N.txt   the programs' own lines (LIB = mpi, gloo, eccl),
#                        raw/*.err their stderr, status.txt one line per run
#                        (rc 124: timed out; lines printed before it are kept)
#   meta.txt             date, machine, package versions, load averages
#   summary.md           an overview (smallest size, 64 MiB, 256 MiB), the best
#                        peer per collective with N side by side, and per
#                        collective and N: size, mpi and gloo time, best peer,
#                        its time and busbw (and eccl's, when measured)
# The peers' line formats are described in tools/peers/README.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
repo=$(pwd)

out="" colls=allreduce,allgather,reduce_scatter,broadcast,reduce,alltoall,barrier
minb=8 maxb=256M summary_only=0
while getopts "o:c:b:e:sh" opt; do
    case $opt in
    o) out=$OPTARG ;;
    s) summary_only=1 ;;
    c) colls=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
ns=("$@")
[ ${#ns[@]} -eq 0 ] && ns=(2 4 8)
IFS=, read -r -a coll_list <<<"$colls"
if [ "$summary_only" = 1 ] && [ ! -d "$out/raw" ]; then
    echo "bench_colls_vs_peers: -s needs -o DIR of an earlier run" >&2
    exit 2
fi
[ -n "$out" ] || out=$(mktemp -d /tmp/eccl-colls-XXXXXX)
mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
bin=${PEERS_BUILD:-$out/bin}
limit=${PEERS_TIMEOUT:-900}
read -r -a peer_args <<<"${PEERS_ARGS:-}"
read -r -a eccl_args <<<"${ECCL_BENCH_ARGS:-}"

# ---- packages and build ------------------------------------------------------
need() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' && return
    local sudo=()
    [ "$(id -u)" -ne 0 ] && sudo=(sudo)
    echo "installing $1" >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "$1" >/dev/null 2>&1 ||
        { echo "bench_colls_vs_peers: cannot install $1 (apt-get install $1)" >&2; exit 1; }
}

build() {
    need openmpi-bin
    need libopenmpi-dev
    need libgloo-dev
    mkdir -p "$bin"
    mpicc -O2 -Wall -Wextra "$repo/tools/peers/mpi_colls.c" -o "$bin/mpi_colls" ||
        { echo "bench_colls_vs_peers: mpi_colls does not build" >&2; exit 1; }
    g++ -O2 -std=c++17 -Wall -Wextra "$repo/tools/peers/gloo_colls.cc" -o "$bin/gloo_colls" -lgloo -lpthread ||
        { echo "bench_colls_vs_peers: gloo_colls does not build" >&2; exit 1; }
}

# ---- eccl rows ---------------------------------------------------------------
# >>> ECCL JOIN POINT. eccl's rows come from ECCL_BENCH (default: build/bin/eccl-bench, built here with cmake as
# scripts/bench_vs_peers.sh does; ECCL_BENCH=none: no eccl rows), run for each collective it knows as
#       $ECCL_BENCH --np N --coll COLL -b MIN -e MAX -f 2 $ECCL_BENCH_ARGS
# The collectives it knows are ECCL_BENCH_COLLS if set, else the names on the "--coll" line of its --help.
# It may print either
#   (a) eccl-bench's nccl-tests-style table: a "#  size ... time(us) ... busbw(GB/s) ..." header line, then rows
#       whose first field is the size in bytes (columns are found by the header's names), or
#   (b) lines "eccl coll=COLL n=N bytes=B time_us=T busbw_GBs=X".
# Both are normalised to (b) in raw/eccl-COLL-N.txt and joined on bytes, so it must use the peers' size convention
# (allgather: the output buffer; reduce_scatter and alltoall: the whole send buffer), as eccl-bench does.
eccl="" eccl_colls=""
find_eccl() {
    eccl=${ECCL_BENCH:-}
    if [ "$eccl" = none ]; then
        eccl=""
        return
    fi
    if [ -z "$eccl" ]; then
        if ! { cmake -S . -B build -DCMAKE_C_COMPILER=gcc >/dev/null &&
            cmake --build build -j2 --target eccl-bench >/dev/null; }; then
            echo "bench_colls_vs_peers: eccl-bench does not build; no eccl rows" >&2
            return
        fi
        eccl=build/bin/eccl-bench
    fi
    # shellcheck disable=SC2086 # ECCL_BENCH is a command line
    eccl_colls=${ECCL_BENCH_COLLS:-$($eccl --help 2>&1 | grep -A1 -e '--coll' |
        grep -o -w -E 'allreduce|allgather|reduce_scatter|broadcast|reduce|alltoall|barrier' | sort -u | tr '\n' ' ')}
    if [ -z "$eccl_colls" ]; then
        echo "bench_colls_vs_peers: $eccl --help lists no --coll; no eccl rows" >&2
        eccl=""
    fi
}

run_eccl() { # COLL N
    local c=$1 n=$2 f="$out/raw/eccl-$1-$2" rc
    case " $eccl_colls " in
    *" $c "*) ;;
    *) echo "eccl $c $n skipped (not among: $eccl_colls)" >>"$out/status.txt"; return ;;
    esac
    # shellcheck disable=SC2086 # ECCL_BENCH is a command line
    timeout -k 10 "$limit" $eccl --np "$n" --coll "$c" -b "$minb" -e "$maxb" -f 2 "${eccl_args[@]}" \
        >"$f.out" 2>"$f.err"
    rc=$?
    awk -v c="$c" -v n="$n" '
        /^eccl coll=/ { print; next }
        /busbw/ && !bw { o = ($1 == "#") ? 1 : 0
                         for (i = 1; i <= NF; i++) { if ($i ~ /^time/) t = i - o; if ($i ~ /^busbw/) bw = i - o;
                                                     if ($i ~ /wrong/) w = i - o }
                         next }
        bw && $1 ~ /^[0-9]+$/ {
            printf "eccl coll=%s n=%s bytes=%s time_us=%s busbw_GBs=%s\n", c, n, $1, $(t), $(bw)
            if (w && $(w) ~ /^[0-9]+$/ && $(w) > 0)
                printf "eccl CHECK FAILED coll=%s n=%s bytes=%s wrong=%s\n", c, n, $1, $(w) > "/dev/stderr"
        }
    ' "$f.out" >"$f.txt" 2>>"$f.err"
    echo "eccl $c $n rc=$rc load=$(loadavg)" >>"$out/status.txt"
}
# <<< ECCL JOIN POINT

# ---- runs --------------------------------------------------------------------
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

run_mpi() { # COLL N
    local f="$out/raw/mpi-$1-$2"
    timeout -k 10 "$limit" mpirun --allow-run-as-root --oversubscribe -np "$2" --mca pml ob1 \
        --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$bin/mpi_colls" "${peer_args[@]}" "$1" "$minb" "$maxb" >"$f.txt" 2>"$f.err"
    echo "mpi $1 $2 rc=$? load=$(loadavg)" >>"$out/status.txt"
}

run_mpishm() { # COLL N: Open MPI's shared-memory BTL, its lines labelled mpishm
    local f="$out/raw/mpishm-$1-$2"
    timeout -k 10 "$limit" mpirun --allow-run-as-root --oversubscribe -np "$2" --mca pml ob1 \
        --mca btl self,vader "$bin/mpi_colls" "${peer_args[@]}" "$1" "$minb" "$maxb" 2>"$f.err" |
        sed 's/^mpi /mpishm /' >"$f.txt"
    echo "mpishm $1 $2 rc=${PIPESTATUS[0]} load=$(loadavg)" >>"$out/status.txt"
}

run_gloo() { # COLL N: ranks 1..N-1 in the background, rank 0 prints
    local f="$out/raw/gloo-$1-$2" st r rc
    st=$(mktemp -d "$out/store-XXXXXX")
    : >"$f.err"
    for r in $(seq 1 $(($2 - 1))); do
        timeout -k 10 "$limit" "$bin/gloo_colls" "${peer_args[@]}" "$r" "$2" "$st" "$1" "$minb" "$maxb" \
            >/dev/null 2>>"$f.err" &
    done
    timeout -k 10 "$limit" "$bin/gloo_colls" "${peer_args[@]}" 0 "$2" "$st" "$1" "$minb" "$maxb" \
        >"$f.txt" 2>>"$f.err"
    rc=$?
    wait
    rm -rf "$st"
    echo "gloo $1 $2 rc=$rc load=$(loadavg)" >>"$out/status.txt"
}

run_all() {
    {
        echo "command: scripts/bench_colls_vs_peers.sh -o $out -c $colls -b $minb -e $maxb ${ns[*]}"
        echo "PEERS_ARGS=${PEERS_ARGS:-} PEERS_TIMEOUT=$limit ECCL_BENCH=${eccl:-(none)} ECCL_BENCH_ARGS=${ECCL_BENCH_ARGS:-}"
        echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)," \
            "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
        echo "packages: $(dpkg-query -W -f='${Package} ${Version}; ' openmpi-bin libgloo-dev)"
        echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git log -1 --format=%s 2>/dev/null | cut -c1-60)"
        echo "load before: $(loadavg)"
    } >"$out/meta.txt"
    : >"$out/status.txt"
    local n c
    for n in "${ns[@]}"; do
        for c in "${coll_list[@]}"; do
            echo "== N=$n $c (load $(loadavg))" >&2
            case " ${PEERS_LIBS:-mpi mpishm gloo} " in *" mpi "*) run_mpi "$c" "$n" ;; esac
            case " ${PEERS_LIBS:-mpi mpishm gloo} " in *" mpishm "*) run_mpishm "$c" "$n" ;; esac
            case " ${PEERS_LIBS:-mpi mpishm gloo} " in *" gloo "*) run_gloo "$c" "$n" ;; esac
            [ -n "$eccl" ] && run_eccl "$c" "$n"
        done
    done
    echo "date after: $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >>"$out/meta.txt"
    echo "load after: $(loadavg)" >>"$out/meta.txt"
}

# ---- summary -----------------------------------------------------------------
# time_us is the max over ranks of the mean per-call time; best = the faster of
# mpi and gloo at that size. A time marked "!" failed its correctness check.
summarize() {
    cat "$out"/raw/*.txt "$out"/raw/*.err 2>/dev/null | awk -v colls="$colls" -v nlist="${ns[*]}" '
    function kv(line, key) { return match(line, " " key "=[^ ]*") ? substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 2) : "" }
    function cell(v) { return v == "" ? "-" : v }
    function mark(lib, k) { return ((lib, k) in bad) ? "!" : "" }
    function best_of(k) {
        tm = t["mpi", k]; tg = t["gloo", k]
        if (tm != "" && (tg == "" || tm + 0 <= tg + 0)) return "mpi"
        return tg != "" ? "gloo" : ""
    }
    function sorted_sizes(key, out_arr,   m, p, q, x) {
        m = split(sizes[key], out_arr, " ")
        for (p = 1; p <= m; p++) for (q = p + 1; q <= m; q++) if (out_arr[q] + 0 < out_arr[p] + 0) { x = out_arr[p]; out_arr[p] = out_arr[q]; out_arr[q] = x }
        return m
    }
    /CHECK FAILED/ {
        lib = ($1 ~ /^mpishm/) ? "mpishm" : ($1 ~ /^mpi/) ? "mpi" : (($1 ~ /^gloo/) ? "gloo" : "eccl")
        bad[lib, kv($0, "coll") SUBSEP kv($0, "n") SUBSEP kv($0, "bytes")] = 1; nbad++; next
    }
    $2 ~ /^coll=/ {
        lib = $1; c = kv($0, "coll"); n = kv($0, "n"); b = kv($0, "bytes")
        k = c SUBSEP n SUBSEP b
        t[lib, k] = kv($0, "time_us"); bw[lib, k] = kv($0, "busbw_GBs")
        if (!((c, n, b) in seen)) { seen[c, n, b] = 1; sizes[c, n] = sizes[c, n] " " b; allsz[c] = allsz[c] " " b }
        if (lib == "eccl") have_eccl = 1
    }
    END {
        nc = split(colls, cl, ","); nn = split(nlist, nl, " ")

        print "## Overview: best peer per collective and N\n"
        print "Smallest size measured (8 B; allgather, reduce_scatter and alltoall: 4N B), 64 MiB and 256 MiB;"
        print "`time` in µs, `busbw` in GB/s, the faster library in brackets.\n"
        print "| collective | N | smallest: bytes | time | 64 MiB: time | busbw | 256 MiB: time | busbw |"
        print "|:---|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nc; i++) for (j = 1; j <= nn; j++) {
            c = cl[i]; n = nl[j]
            m = sorted_sizes(c SUBSEP n, sz)
            if (m == 0) continue
            line = sprintf("| %s | %s | %s |", c, n, sz[1])
            k = c SUBSEP n SUBSEP sz[1]; b0 = best_of(k)
            line = line sprintf(" %s |", b0 == "" ? "-" : t[b0, k] mark(b0, k) " (" b0 ")")
            for (q = 0; q < 2; q++) {
                k = c SUBSEP n SUBSEP (q ? 268435456 : 67108864); b0 = best_of(k)
                line = line (b0 == "" ? " - | - |" : sprintf(" %s%s | %s (%s) |", t[b0, k], mark(b0, k), bw[b0, k], b0))
            }
            print line
        }
        print ""

        print "## Best peer per collective, N side by side\n"
        print "`time` in µs (max over ranks of the mean per call), `busbw` in GB/s, `lib` the faster library.\n"
        for (i = 1; i <= nc; i++) {
            c = cl[i]
            printf "### %s\n\n| bytes |", c
            for (j = 1; j <= nn; j++) printf " N=%s time | busbw | lib |", nl[j]
            printf "\n|---:|"
            for (j = 1; j <= nn; j++) printf "---:|---:|:---|"
            print ""
            sizes["all", c] = allsz[c]
            m = sorted_sizes("all" SUBSEP c, sz)
            for (p = 1; p <= m; p++) {
                if (p > 1 && sz[p] == sz[p - 1]) continue
                line = "| " sz[p] " |"
                for (j = 1; j <= nn; j++) {
                    k = c SUBSEP nl[j] SUBSEP sz[p]; b0 = best_of(k)
                    line = line (b0 == "" ? " - | - | - |" : sprintf(" %s%s | %s | %s |", t[b0, k], mark(b0, k), bw[b0, k], b0))
                }
                print line
            }
            print ""
        }

        print "## Per collective and N: every peer\n"
        print "`mpishm`: Open MPI over its shared-memory BTL (vader); best peer: the faster over TCP.\n"
        for (i = 1; i <= nc; i++) for (j = 1; j <= nn; j++) {
            c = cl[i]; n = nl[j]
            printf "### %s, N=%s\n\n", c, n
            printf "| bytes | mpi time_us | gloo time_us | best peer | best time_us | best busbw_GBs | mpishm time_us |%s\n",
                   have_eccl ? " eccl time_us | eccl busbw_GBs | eccl / best time | eccl / mpishm time |" : ""
            printf "|---:|---:|---:|:---|---:|---:|---:|%s\n", have_eccl ? "---:|---:|---:|---:|" : ""
            m = sorted_sizes(c SUBSEP n, sz)
            if (m == 0) { print "| (no rows) | | | | | |\n"; continue }
            for (p = 1; p <= m; p++) {
                k = c SUBSEP n SUBSEP sz[p]; b0 = best_of(k)
                line = sprintf("| %s | %s%s | %s%s | %s | %s | %s | %s%s |", sz[p], cell(t["mpi", k]), mark("mpi", k),
                               cell(t["gloo", k]), mark("gloo", k), cell(b0),
                               b0 == "" ? "-" : t[b0, k] mark(b0, k), b0 == "" ? "-" : bw[b0, k],
                               cell(t["mpishm", k]), mark("mpishm", k))
                if (have_eccl) {
                    te = t["eccl", k]; ts = t["mpishm", k]
                    ratio = (te != "" && b0 != "" && t[b0, k] > 0) ? sprintf("%.2f", te / t[b0, k]) : "-"
                    rshm = (te != "" && ts != "" && ts > 0) ? sprintf("%.2f", te / ts) : "-"
                    line = line sprintf(" %s%s | %s | %s | %s |", cell(te), mark("eccl", k), cell(bw["eccl", k]), ratio, rshm)
                }
                print line
            }
            print ""
        }
        if (nbad) print "`!`: that call returned wrong results in the correctness check (see raw/*.err).\n"
    }' >"$out/summary.md"
}

# ---- main --------------------------------------------------------------------
if [ "$summary_only" = 0 ]; then
    build
    find_eccl
    run_all
fi
summarize
if grep -q "CHECK FAILED" "$out"/raw/*.err 2>/dev/null; then
    echo "bench_colls_vs_peers: correctness check failures:" >&2
    grep -h "CHECK FAILED" "$out"/raw/*.err >&2
fi
if grep -v -e "rc=0" -e skipped "$out/status.txt" >&2; then
    echo "bench_colls_vs_peers: some runs failed or timed out (see $out/status.txt)" >&2
fi
echo "bench_colls_vs_peers: raw lines in $out/raw, summary in $out/summary.md" >&2
cat "$out/summary.md"
