#!/bin/sh
# eccl-trace analyze on hand-written traces, one case per stall the
# analyzer must name (exit status 1: a call did not complete everywhere).
# Usage: trace_analyze.sh ECCL_TRACE
set -u
bin=$1
root=$(mktemp -d) || exit 1
trap 'rm -rf "$root"' EXIT
fail=0

# check CASE WANT...: the report on $root/CASE has every WANT, exit status
# $want_rc (1 unless set: a call did not complete everywhere).
want_rc=1
check() {
    out=$("$bin" analyze "$root/$1"); rc=$?
    echo "== $1"; echo "$out"
    [ "$rc" -eq "$want_rc" ] || { echo "FAIL $1: exit status $rc, want $want_rc"; fail=1; }
    c=$1; shift
    for want in "$@"; do
        case "$out" in *"$want"*) ;; *) echo "FAIL $c: no \"$want\""; fail=1 ;; esac
    done
}

# The stall that kept the trace off by default (docs/trace.md, "The first
# stall it found"): rank 1 waits for a token of tag 505 from rank 0, whose
# link to it is held on a 100 KB frame of tag 502, a call rank 1 has not
# made. The report must say so and name rank 0 as what rank 1 waits behind.
dir=$root/held; mkdir "$dir"
cat >"$dir/eccl-trace-5-100-1.txt" <<'END'
eccl-trace 1
comm peer=5 rank=1 world=2 epoch=2 now_ns=20000000000 records=2 dropped=0 why=asked:tag_505_timed_out
epoch seq=1 epoch=2 rank=1 world=2 at_ns=9000000000
call seq=2 tag=505 coll=allreduce algo=recursive bytes=4 dtype=i32 epoch=2 rank=1 world=2 posted_ns=10000000000 started_us=0 first_us=5 data_us=- end_us=- result=running
wait tag=505 epoch=2 role=peer rank=0 peer=6 returned=0
link peer=6 role=peer rank=0 queued=0 lazy=0 early=3 held_tag=502 held_bytes=100002
end
END
cat >"$dir/eccl-trace-6-101-1.txt" <<'END'
eccl-trace 1
comm peer=6 rank=0 world=2 epoch=2 now_ns=20000000000 records=3 dropped=0 why=asked:tag_505_timed_out
epoch seq=1 epoch=2 rank=0 world=2 at_ns=9000000000
call seq=2 tag=505 coll=allreduce algo=recursive bytes=4 dtype=i32 epoch=2 rank=0 world=2 posted_ns=10000000100 started_us=0 first_us=5 data_us=20 end_us=- result=running
call seq=3 tag=502 coll=allreduce algo=recursive bytes=100002 dtype=bf16 epoch=2 rank=0 world=2 posted_ns=10000001000 started_us=0 first_us=- data_us=- end_us=- result=running
wait tag=505 epoch=2 role=peer rank=1 peer=5 returned=1
wait tag=502 epoch=2 role=peer rank=1 peer=5 returned=0
end
END
check held "first call not completed everywhere: tag 505" \
    "rank 1 (peer 5): posted, still running; waiting on peer rank 0; its link from peer 6 holds a 100002-byte frame of tag 502" \
    "culprit: rank 0 (peer 6), which 1 rank(s) wait on, whose frames may sit behind a frame of a call"

# A partition (scenarios/emu/trace_partition8): ranks 0, 2 and 3 lose the
# master, rank 2 in the call, rank 3 between calls (its communicator
# failed in a membership step, before it posted tag 12), rank 0 after it
# completed the call; rank 1 fails the call with the lost peers, rank 4
# wrote no trace. The cut-off side is named, not the rank that never posted.
dir=$root/cut; mkdir "$dir"
cat >"$dir/eccl-trace-10-199-1.txt" <<'END'
eccl-trace 1
comm peer=10 rank=0 world=5 epoch=2 now_ns=3000000000 records=2 dropped=0 why=comm_failed:master_lost
call seq=1 tag=11 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=0 world=5 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
call seq=2 tag=12 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=0 world=5 posted_ns=1100000000 started_us=0 first_us=5 data_us=800 end_us=900 result=ok
end
END
cat >"$dir/eccl-trace-11-200-1.txt" <<'END'
eccl-trace 1
comm peer=11 rank=1 world=5 epoch=2 now_ns=3000000000 records=2 dropped=0 why=failed
call seq=1 tag=11 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=1 world=5 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
call seq=2 tag=12 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=1 world=5 posted_ns=1100000000 started_us=0 first_us=5 data_us=- end_us=1900000 result=peer_lost
end
END
cat >"$dir/eccl-trace-12-201-1.txt" <<'END'
eccl-trace 1
comm peer=12 rank=2 world=5 epoch=2 now_ns=3000000000 records=2 dropped=0 why=failed
call seq=1 tag=11 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=2 world=5 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
call seq=2 tag=12 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=2 world=5 posted_ns=1100000000 started_us=0 first_us=5 data_us=- end_us=1900000 result=master_lost
end
END
cat >"$dir/eccl-trace-13-202-1.txt" <<'END'
eccl-trace 1
comm peer=13 rank=3 world=5 epoch=2 now_ns=3000000000 records=1 dropped=0 why=comm_failed:master_lost
call seq=1 tag=11 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=3 world=5 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
end
END
check cut "first call not completed everywhere: tag 12" \
    "rank 0 (peer 10): ok after 0.900 ms; then lost the master" \
    "rank 3 (peer 13): lost the master before it posted it" "rank 4: no trace" \
    "culprit: rank(s) 0 (peer 10), 2 (peer 12), 3 (peer 13) lost the master"

# The same partition between calls: every call completed, then ranks 2 and
# 3 lost the master (in a membership step): they are named.
dir=$root/between; mkdir "$dir"
for r in 2 3; do
cat >"$dir/eccl-trace-1$r-400-1.txt" <<END
eccl-trace 1
comm peer=1$r rank=$r world=4 epoch=2 now_ns=3000000000 records=1 dropped=0 why=comm_failed:master_lost
call seq=1 tag=11 coll=allreduce algo=tree bytes=65536 dtype=f32 epoch=2 rank=$r world=4 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
end
END
done
check between "every traced call completed on every rank that wrote a trace" \
    "but rank(s) 2 (peer 12), 3 (peer 13) lost the master between calls" "culprit: rank(s) above, cut off"

# The same partition, with the survivors' dumps written in motion (CI's
# emu_vs_sim_trace_partition8 under load): the master named a slow link
# while tag 112 ran, rank 1 had not its result yet and rank 0 had posted
# tag 113 already. Neither is a stall: the cut-off side is still named.
dir=$root/motion; mkdir "$dir"
cp "$root"/between/* "$dir"/
cat >"$dir/eccl-trace-41-600-1.txt" <<'END'
eccl-trace 1
comm peer=41 rank=0 world=2 epoch=3 now_ns=5000000000 records=2 dropped=0 why=slow_link
call seq=1 tag=112 coll=allreduce algo=recursive bytes=65536 dtype=f32 epoch=3 rank=0 world=2 posted_ns=4000000000 started_us=0 first_us=5 data_us=600 end_us=- result=running
call seq=2 tag=113 coll=allreduce algo=recursive bytes=65536 dtype=f32 epoch=3 rank=0 world=2 posted_ns=4001000000 started_us=0 first_us=- data_us=- end_us=- result=running
wait tag=113 epoch=3 role=peer rank=1 peer=42 returned=0
end
END
cat >"$dir/eccl-trace-42-601-1.txt" <<'END'
eccl-trace 1
comm peer=42 rank=1 world=2 epoch=3 now_ns=5000000000 records=1 dropped=0 why=slow_link
call seq=1 tag=112 coll=allreduce algo=recursive bytes=65536 dtype=f32 epoch=3 rank=1 world=2 posted_ns=4000000100 started_us=0 first_us=5 data_us=- end_us=- result=running
wait tag=112 epoch=3 role=peer rank=0 peer=41 returned=1
end
END
check motion "every traced call completed on every rank that wrote a trace" \
    "but rank(s) 2 (peer 12), 3 (peer 13) lost the master between calls" "culprit: rank(s) above, cut off"

# A call that did stall (rank 0 timed out in tag 30, waiting on rank 1),
# where rank 1's one dump of the epoch was written mid-job, before it
# posted the call: it did not answer the failure, so it is not "alive and
# elsewhere" but silent.
dir=$root/stale; mkdir "$dir"
cat >"$dir/eccl-trace-51-700-1.txt" <<'END'
eccl-trace 1
comm peer=51 rank=0 world=2 epoch=4 now_ns=9000000000 records=2 dropped=0 why=failed
call seq=1 tag=29 coll=allreduce algo=ring bytes=4096 dtype=f32 epoch=4 rank=0 world=2 posted_ns=4800000000 started_us=0 first_us=5 data_us=90 end_us=100 result=ok
call seq=2 tag=30 coll=allreduce algo=ring bytes=4096 dtype=f32 epoch=4 rank=0 world=2 posted_ns=5000000000 started_us=0 first_us=- data_us=- end_us=3000000 result=timeout
wait tag=30 epoch=4 role=next rank=1 peer=52 returned=0
end
END
cat >"$dir/eccl-trace-52-701-1.txt" <<'END'
eccl-trace 1
comm peer=52 rank=1 world=2 epoch=4 now_ns=4900000000 records=1 dropped=0 why=slow_link
call seq=1 tag=29 coll=allreduce algo=ring bytes=4096 dtype=f32 epoch=4 rank=1 world=2 posted_ns=4800000000 started_us=0 first_us=5 data_us=90 end_us=100 result=ok
end
END
check stale "first call not completed everywhere: tag 30" \
    "rank 1 (peer 52): no trace since one written mid-job (a slow link), before it posted it" \
    "culprit: rank 1 (peer 52) wrote no trace"

# Every rank lost the master: the master went, no rank is to blame.
dir=$root/master; mkdir "$dir"
for r in 0 1; do
cat >"$dir/eccl-trace-2$r-300-1.txt" <<END
eccl-trace 1
comm peer=2$r rank=$r world=2 epoch=1 now_ns=3000000000 records=1 dropped=0 why=failed
call seq=1 tag=7 coll=allreduce algo=ring bytes=4 dtype=f32 epoch=1 rank=$r world=2 posted_ns=1000000000 started_us=0 first_us=- data_us=- end_us=1900000 result=master_lost
end
END
done
check master "first call not completed everywhere: tag 7" "culprit: none among the ranks: every rank lost the master"
# A slow link (emu/slowlink4.scn): every call completed; the ranks' link
# lines carry their links' rates in (the last window told to the master,
# else since the link opened). The link from peer 32 to peer 33 does 5 MB/s
# where the others do 100: named; the link with too few bytes is not judged.
dir=$root/slowlink; mkdir "$dir"
for r in 0 1 2 3; do
    from=$(( 30 + (r + 3) % 4 )) us=20000
    [ $r -eq 3 ] && us=400000
    cat >"$dir/eccl-trace-3$r-500-1.txt" <<END
eccl-trace 1
comm peer=3$r rank=$r world=4 epoch=1 now_ns=3000000000 records=1 dropped=0 why=slow_link
call seq=1 tag=9 coll=allreduce algo=ring bytes=1048576 dtype=f32 epoch=1 rank=$r world=4 posted_ns=1000000000 started_us=0 first_us=5 data_us=900 end_us=1000 result=ok
link peer=$from role=prev rank=$(( (r + 3) % 4 )) queued=0 lazy=0 early=0 held_tag=- rx_bytes=9000000 rx_us=90000 win_bytes=2000000 win_us=$us
link peer=99 role=peer rank=9 queued=0 lazy=0 early=0 held_tag=- rx_bytes=65536 rx_us=60000 win_bytes=0 win_us=0
end
END
done
want_rc=0
check slowlink "every traced call completed on every rank that wrote a trace" \
    "slow link: peer 32 -> peer 33: 5e+06 B/s where the links do 1e+08 B/s (upper quartile of 4)"
case "$out" in *"peer 99"*) echo "FAIL slowlink: a link of 64 KiB judged"; fail=1 ;; esac
exit $fail
