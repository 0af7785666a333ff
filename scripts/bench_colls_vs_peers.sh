#!/usr/bin/env bash
# Every collective on loopback, side by side: Open MPI (TCP BTL over lo),
# Gloo (TCP over lo) and, where available, eccl-bench, one run after the
# other on this machine; then a summary table per collective and N.
#
# Usage: scripts/bench_colls_vs_peers.sh [-o OUTDIR] [-c COLLS] [-b MIN] [-e MAX] [N...]
#   N...      rank counts (default: 2 4 8)
#   -o DIR    output directory (default: a new mktemp -d, printed at the end)
#   -c LIST   collectives, comma-separated (default: allreduce,allgather,
#             reduce_scatter,broadcast,reduce,alltoall,barrier)
#   -b, -e    smallest and largest size, K/M/G allowed (default 8 and 256M;
#             factor 2 between sizes)
# Environment:
#   PEERS_TIMEOUT  seconds per (library, collective, N) run (default 900)
#   PEERS_ARGS     extra options for both peer programs, e.g. "-t 1" (the
#                  per-size time budget) or "-n 50 -w 5" (fixed counts)
#   PEERS_BUILD    where the peer programs are built (default OUTDIR/bin)
#   ECCL_BENCH     eccl's own rows: a command taking eccl-bench's options
#                  (see "eccl rows" below); default build/bin/eccl-bench when
#                  its --help lists --coll, else no eccl rows
#   ECCL_BENCH_ARGS  extra options for it (e.g. "-n 50 -w 5")
#
# Writes, under OUTDIR:
#   raw/LIB-COLL-N.txt   the programs' own lines (LIB = mpi, gloo, eccl),
#                        raw/*.err their stderr, status.txt one line per run
#                        (rc 124: timed out; lines printed before it are kept)
#   meta.txt             date, machine, package versions, load averages
#   summary.md           per collective and N: size, mpi and gloo time, best
#                        peer, its time and busbw (and eccl's, when measured)
# The peers' line formats are described in tools/peers/README.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

out= colls=allreduce,allgather,reduce_scatter,broadcast,reduce,alltoall,barrier
minb=8 maxb=256M
while getopts "o:c:b:e:h" opt; do
    case $opt in
    o) out=$OPTARG ;;
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
[ -n "$out" ] || out=$(mktemp -d /tmp/eccl-colls-XXXXXX)
mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
bin=${PEERS_BUILD:-$out/bin}
mkdir -p "$bin"
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
need openmpi-bin; need libopenmpi-dev; need libgloo-dev

mpicc -O2 -Wall -Wextra "$repo/tools/peers/mpi_colls.c" -o "$bin/mpi_colls" ||
    { echo "bench_colls_vs_peers: mpi_colls does not build" >&2; exit 1; }
g++ -O2 -std=c++17 -Wall -Wextra "$repo/tools/peers/gloo_colls.cc" -o "$bin/gloo_colls" -lgloo -lpthread ||
    { echo "bench_colls_vs_peers: gloo_colls does not build" >&2; exit 1; }

# ---- eccl rows ---------------------------------------------------------------
# >>> ECCL JOIN POINT. eccl's rows come from ECCL_BENCH, run as
#       $ECCL_BENCH --np N --coll COLL -b MIN -e MAX -f 2 $ECCL_BENCH_ARGS
# and may print either
#   (a) eccl-bench's nccl-tests-style table: a "#  size ... time(us) ...
#       busbw(GB/s) ..." header line, then rows whose first field is the size
#       in bytes (columns are found by the header's names), or
#   (b) lines "eccl coll=COLL n=N bytes=B time_us=T busbw_GBs=X".
# Both are normalised to (b) in raw/eccl-COLL-N.txt and joined on bytes,
# so eccl-bench must use the same size convention as the peers (allgather:
# the output buffer; reduce_scatter and alltoall: the whole send buffer).
eccl=${ECCL_BENCH:-}
if [ -z "$eccl" ] && [ -x build/bin/eccl-bench ] && build/bin/eccl-bench --help 2>&1 | grep -q -- '--coll'; then
    eccl=build/bin/eccl-bench
fi

run_eccl() { # COLL N
    local c=$1 n=$2 f="$out/raw/eccl-$1-$2"
    # shellcheck disable=SC2086 # ECCL_BENCH is a command line
    timeout -k 10 "$limit" $eccl --np "$n" --coll "$c" -b "$minb" -e "$maxb" -f 2 "${eccl_args[@]}" \
        >"$f.out" 2>"$f.err"
    local rc=$?
    awk -v c="$c" -v n="$n" '
        /^eccl coll=/ { print; next }
        /busbw/ && !bw { o = ($1 == "#") ? 1 : 0
                         for (i = 1; i <= NF; i++) { if ($i ~ /^time/) t = i - o; if ($i ~ /^busbw/) bw = i - o }
                         next }
        bw && $1 ~ /^[0-9]+$/ { printf "eccl coll=%s n=%s bytes=%s time_us=%s busbw_GBs=%s\n", c, n, $1, $(t), $(bw) }
    ' "$f.out" >"$f.txt"
    echo "eccl $c $n rc=$rc" >>"$out/status.txt"
}
# <<< ECCL JOIN POINT

# ---- runs --------------------------------------------------------------------
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
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

mpirun_lo=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self
    --mca btl_tcp_if_include lo)
for n in "${ns[@]}"; do
    for c in "${coll_list[@]}"; do
        echo "== N=$n $c (load $(loadavg))" >&2
        f="$out/raw/mpi-$c-$n"
        timeout -k 10 "$limit" "${mpirun_lo[@]}" -np "$n" "$bin/mpi_colls" "${peer_args[@]}" "$c" "$minb" "$maxb" \
            >"$f.txt" 2>"$f.err"
        echo "mpi $c $n rc=$? load=$(loadavg)" >>"$out/status.txt"

        f="$out/raw/gloo-$c-$n"
        st=$(mktemp -d "$out/store-XXXXXX")
        for r in $(seq 1 $((n - 1))); do
            timeout -k 10 "$limit" "$bin/gloo_colls" "${peer_args[@]}" "$r" "$n" "$st" "$c" "$minb" "$maxb" \
                >/dev/null 2>>"$f.err" &
        done
        timeout -k 10 "$limit" "$bin/gloo_colls" "${peer_args[@]}" 0 "$n" "$st" "$c" "$minb" "$maxb" \
            >"$f.txt" 2>>"$f.err"
        rc=$?
        wait
        rm -rf "$st"
        echo "gloo $c $n rc=$rc load=$(loadavg)" >>"$out/status.txt"

        [ -n "$eccl" ] && run_eccl "$c" "$n"
    done
done
echo "load after: $(loadavg)" >>"$out/meta.txt"

# ---- summary -----------------------------------------------------------------
# One table per collective and N. time_us is the max over ranks of the mean
# per-call time; best = the faster of mpi and gloo at that size.
cat "$out"/raw/*.txt 2>/dev/null | awk -v colls="$colls" -v nlist="${ns[*]}" '
    function kv(line, key,   m) { return match(line, " " key "=[^ ]*") ? substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 2) : "" }
    {
        lib = $1; c = kv($0, "coll"); n = kv($0, "n"); b = kv($0, "bytes")
        k = c SUBSEP n SUBSEP b
        t[lib, k] = kv($0, "time_us"); bw[lib, k] = kv($0, "busbw_GBs")
        if (!((c, n, b) in seen)) { seen[c, n, b] = 1; sizes[c, n] = sizes[c, n] " " b }
        if (lib == "eccl") have_eccl = 1
    }
    function cell(v) { return v == "" ? "-" : v }
    END {
        nc = split(colls, cl, ","); nn = split(nlist, nl, " ")
        for (i = 1; i <= nc; i++) for (j = 1; j <= nn; j++) {
            c = cl[i]; n = nl[j]
            printf "### %s, N=%s\n\n", c, n
            printf "| bytes | mpi time_us | gloo time_us | best peer | best time_us | best busbw_GBs |%s\n",
                   have_eccl ? " eccl time_us | eccl busbw_GBs | eccl / best time |" : ""
            printf "|---:|---:|---:|:---|---:|---:|%s\n", have_eccl ? "---:|---:|---:|" : ""
            m = split(sizes[c, n], sz, " ")
            if (m == 0) { print "| (no rows) | | | | | |\n"; continue }
            # sizes in ascending order
            for (p = 1; p <= m; p++) for (q = p + 1; q <= m; q++) if (sz[q] + 0 < sz[p] + 0) { x = sz[p]; sz[p] = sz[q]; sz[q] = x }
            for (p = 1; p <= m; p++) {
                k = c SUBSEP n SUBSEP sz[p]
                tm = t["mpi", k]; tg = t["gloo", k]; best = ""
                if (tm != "" && (tg == "" || tm + 0 <= tg + 0)) best = "mpi"
                else if (tg != "") best = "gloo"
                line = sprintf("| %s | %s | %s | %s | %s | %s |", sz[p], cell(tm), cell(tg), cell(best),
                               best == "" ? "-" : t[best, k], best == "" ? "-" : bw[best, k])
                if (have_eccl) {
                    te = t["eccl", k]
                    ratio = (te != "" && best != "" && t[best, k] > 0) ? sprintf("%.2f", te / t[best, k]) : "-"
                    line = line sprintf(" %s | %s | %s |", cell(te), cell(bw["eccl", k]), ratio)
                }
                print line
            }
            print ""
        }
    }' >"$out/summary.md"

if grep -q "CHECK FAILED" "$out"/raw/*.err 2>/dev/null; then
    echo "bench_colls_vs_peers: correctness check failures:" >&2
    grep -h "CHECK FAILED" "$out"/raw/*.err >&2
fi
grep -v "rc=0" "$out/status.txt" >&2 && echo "bench_colls_vs_peers: some runs failed or timed out (see $out/status.txt)" >&2
echo "bench_colls_vs_peers: raw lines in $out/raw, summary in $out/summary.md" >&2
cat "$out/summary.md"
