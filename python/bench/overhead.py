"""Python's overhead over the C call: an 8-byte all-reduce between two
processes, timed in Python, next to the same call timed in C by eccl-bench.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/overhead.py \
        --bench build/bin/eccl-bench [--iters 20000] [--rounds 3]

Each round runs (1) two Python processes calling comm.all_reduce on 2
float32 values (8 bytes), blocking, in place, `iters` times; then the same
two processes calling it on 0 elements (no data moves: the binding plus the
C library's entry and exit); (2) eccl-bench --np 2 -b 8 -e 8 -n iters,
in-place float32 sum. Prints each round's microseconds per call and the
medians; the overhead is the median of the rounds' (Python 8 B minus
eccl-bench 8 B). Not a test: on a shared machine the numbers move by a few
microseconds.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import eccl
import eccl.launch


def peer(addr, iters):
    comm = eccl.Comm(addr, op_timeout_ms=60000)
    comm.connect()
    while comm.world_size < 2:
        if not comm.admit_pending():
            time.sleep(0.001)
    buf = np.ones(2, np.float32)   # 8 bytes
    empty = np.ones(0, np.float32)  # no data: the fixed cost of a call
    for _ in range(iters // 10):
        comm.all_reduce(buf)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.all_reduce(buf)
    t8 = (time.perf_counter() - t0) / iters
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.all_reduce(empty)
    t0b = (time.perf_counter() - t0) / iters
    comm.leave()
    comm.close()
    print("%.3f %.3f" % (t8 * 1e6, t0b * 1e6), flush=True)


def python_round(iters):
    eccl.launch.job_secret()  # the peers inherit it
    with eccl.Master("127.0.0.1:0") as master:
        procs = [subprocess.Popen([sys.executable, __file__, "--peer", master.address, "--iters", str(iters)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a Python peer failed")
    rows = [tuple(map(float, o.split())) for o in outs]
    return max(r[0] for r in rows), max(r[1] for r in rows)


def c_round(bench, iters):
    out = subprocess.run([bench, "--np", "2", "-b", "8", "-e", "8", "-n", str(iters), "-w", str(iters // 10),
                          "-c", "0", "-I", "1"], capture_output=True, text=True, timeout=600, check=True).stdout
    # nccl-tests style: the row starts with the size; the in-place time is
    # the column after size, count, type and redop.
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == "8":
            return float(fields[4]), line.strip()
    raise SystemExit("no 8-byte row in eccl-bench's output:\n" + out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bin/eccl-bench")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer")
    args = ap.parse_args()
    if args.peer:
        peer(args.peer, args.iters)
        return
    py8, py0, c8 = [], [], []
    for r in range(args.rounds):
        p8, p0 = python_round(args.iters)
        c, row = c_round(args.bench, args.iters)
        py8.append(p8)
        py0.append(p0)
        c8.append(c)
        print("round %d: python 8 B %.2f us/call, python 0 B %.2f us/call, eccl-bench 8 B %.2f us/call  [%s]"
              % (r + 1, p8, p0, c, row), flush=True)
    # Paired: each round's Python and C runs are back to back, so a change of
    # load on a shared machine moves both; the median of the rounds'
    # differences is steadier than the difference of the medians.
    diffs = [p - c for p, c in zip(py8, c8)]
    print("median: python 8 B %.2f us, eccl-bench 8 B %.2f us; overhead (median of the rounds' differences) "
          "%.2f us/call; python 0 B (binding + C entry, no data) %.2f us/call"
          % (statistics.median(py8), statistics.median(c8), statistics.median(diffs), statistics.median(py0)))


if __name__ == "__main__":
    main()
