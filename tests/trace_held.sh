#!/bin/sh
# eccl-trace analyze on two hand-written traces of the stall that kept the
# trace off by default (docs/trace.md, "The first stall it found"): rank 1
# waits for a token of tag 505 from rank 0, whose link to it is held on a
# 100 KB frame of tag 502, a call rank 1 has not made. The report must say
# so and name rank 0 as what rank 1 waits behind.
# Usage: trace_held.sh ECCL_TRACE
set -u
bin=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
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
out=$("$bin" analyze "$dir"); rc=$?
echo "$out"
fail=0
[ "$rc" -eq 1 ] || { echo "FAIL: exit status $rc, want 1"; fail=1; }
for want in "first call not completed everywhere: tag 505" \
    "rank 1 (peer 5): posted, still running; waiting on peer rank 0; its link from peer 6 holds a 100002-byte frame of tag 502" \
    "culprit: rank 0 (peer 6), which 1 rank(s) wait on, whose frames may sit behind a frame of a call"; do
    case "$out" in *"$want"*) ;; *) echo "FAIL: no \"$want\""; fail=1 ;; esac
done
exit $fail
