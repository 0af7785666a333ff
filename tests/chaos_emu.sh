#!/bin/sh
# chaos_emu.sh BIN_DIR: real processes through the chaos net (chaos/).
# Four eccl-worker processes on four emulated hosts, 127.0.0.11-14, in two
# regions 10 ms apart (one way); the plan kills the fourth host's worker at
# its 20th DATA frame, in the middle of an all-reduce after every worker has begun (a worker that has not would wait for the starting world of 4). The three survivors
# must finish every iteration with correct values, must have seen the loss
# (a failed step or a smaller world), and no all-reduce that spanned both
# regions can have taken less than the plan's latency. Exit 0 when all hold.
set -u
bin=$1
dir=$(mktemp -d)
master_pid=
cleanup() {
    [ -n "$master_pid" ] && kill "$master_pid" 2>/dev/null
    for p in $(cat "$dir"/pids 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
fail() {
    echo "chaos_emu: FAIL: $*"
    for f in "$dir"/w*.log; do echo "--- $f"; tail -5 "$f"; done
    exit 1
}

cat >"$dir/plan" <<'EOF'
seed = 3
# region A: .11 .12; region B: .13 .14
link 127.0.0.11 127.0.0.13 latency=10ms
link 127.0.0.11 127.0.0.14 latency=10ms
link 127.0.0.12 127.0.0.13 latency=10ms
link 127.0.0.12 127.0.0.14 latency=10ms
kill 127.0.0.14 after=DATA:20
EOF

"$bin/eccl-master" --listen 127.0.0.1:0 >"$dir/master.log" 2>&1 &
master_pid=$!
addr=
for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$dir/master.log" | head -1)
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || fail "the master did not say where it listens"

for h in 11 12 13 14; do ECCL_LOG_LEVEL=${ECCL_LOG_LEVEL:-warn}; export ECCL_LOG_LEVEL
    ECCL_CHAOS="$dir/plan" ECCL_CHAOS_SELF=127.0.0.$h ECCL_P2P_HOST=127.0.0.$h \
        timeout 120 "$bin/eccl-worker" --master "$addr" --count 65536 --iters 6 --start-world 4 \
        --world-min 2 >"$dir/w$h.log" 2>&1 &
    echo $! >>"$dir/pids"
done
i=0
for p in $(cat "$dir/pids"); do
    i=$((i + 1))
    wait "$p"
    echo $? >"$dir/rc$i"
done

[ "$(cat "$dir/rc4")" -eq 137 ] || fail "the plan's victim exited $(cat "$dir/rc4"), not by SIGKILL (137)"
grep -q 'event=ok' "$dir/w14.log" || fail "the victim died before its first step: the test wants it mid-run"
grep -q 'event=ok .* iter=5 ' "$dir/w14.log" && fail "the victim finished: its kill never came"
saw=0
for h in 11 12 13; do
    log="$dir/w$h.log"
    n=$((h - 10))
    [ "$(cat "$dir/rc$n")" -eq 0 ] || fail "survivor 127.0.0.$h exited $(cat "$dir/rc$n")"
    grep -q 'event=ok .* iter=5 ' "$log" || fail "survivor 127.0.0.$h did not finish iteration 5"
    if grep 'event=ok' "$log" | grep -qv ' wrong=0 '; then fail "survivor 127.0.0.$h got wrong values"; fi
    if grep -q 'event=peer_lost\|event=ok .* world=3 ' "$log"; then saw=1; fi
done
[ "$saw" -eq 1 ] || fail "no survivor saw the victim go"
# Every all-reduce spans both regions: none can beat one crossing (10 ms).
fast=$(cat "$dir"/w1[123].log | sed -n 's/^.*event=ok .* ms=\([0-9.]*\) .*$/\1/p' |
    awk '$1 < 10 { n++ } END { print n + 0 }')
[ "$fast" -eq 0 ] || fail "$fast all-reduces took under the 10 ms the plan puts between the regions"
echo "chaos_emu: pass (victim killed mid all-reduce; 3 survivors, 6 iterations each, values right," \
    "no all-reduce under 10 ms)"
