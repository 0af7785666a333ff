#!/bin/sh
# eccl-emu's refusals and its timeout: each case must end with the exit
# status it promises and say why; a run past --timeout must fail (exit 1)
# and leave no process behind.
# Usage: refusals.sh BINDIR SCENARIOS_DIR WORKDIR
set -u
bin=$1 scn=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail=0
# expect STATUS PATTERN ARGS...: eccl-emu ARGS exits STATUS, its output matches PATTERN.
expect() {
    want=$1 pattern=$2
    shift 2
    "$bin/eccl-emu" "$@" > "$work/out" 2>&1
    rc=$?
    if [ $rc -ne "$want" ] || ! grep -q -- "$pattern" "$work/out"; then
        echo "FAIL eccl-emu $*: exit $rc (want $want), output:"
        cat "$work/out"
        fail=1
    else
        echo "ok   eccl-emu $*: exit $rc: $(grep -m1 -- "$pattern" "$work/out")"
    fi
}
expect 2 "usage" run
expect 2 "one box holds tens" run "$scn/ci/scale10k.scn" --out "$work/a"
expect 2 "nccl2_bootstrap" run "$scn/ci/nccl2_64.scn" --out "$work/b"
expect 2 "buffers = cuda" run "$scn/ci/kill4_cuda.scn" --out "$work/c"
expect 2 "transport = ibv" run "$scn/ci/kill4_ibv.scn" --out "$work/d"
cat > "$work/nolink.scn" <<'SCN'
name = emu-no-link
platform = flat
hosts = 3
bandwidth = 1GBps
latency = 50us
ranks = 2
count = 1024
iters = 2
link_off = flat_link_9 @ 1s
SCN
expect 2 "no such link" run "$work/nolink.scn" --out "$work/e"
# Workers that cannot finish in time: 1000 steps of 100 ms against 3 s.
cat > "$work/slow.scn" <<'SCN'
name = emu-timeout
platform = flat
hosts = 3
bandwidth = 1GBps
latency = 50us
ranks = 2
count = 1024
iters = 1000
step = 100ms
SCN
expect 1 "passed --timeout" run "$work/slow.scn" --out "$work/f" --timeout 3
if ! grep -q "^checks	fail" "$work/f/summary.tsv" 2>/dev/null; then
    echo "FAIL the timed-out run's summary.tsv does not say checks fail"
    fail=1
fi
sleep 1
if pgrep -f "eccl-worker --master 127.77." > /dev/null || pgrep -f "eccl-master --listen 127.77." > /dev/null; then
    echo "FAIL processes left behind:"
    pgrep -af "127.77."
    fail=1
fi
[ $fail -eq 0 ] && echo "refusals: every case as promised"
exit $fail
