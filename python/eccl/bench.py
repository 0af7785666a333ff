"""python3 -m eccl.bench: nccl-tests-style rows for eccl's collectives, from Python.

    python3 -m eccl.bench --np 4 [-b 1K] [-e 16M] [-f 4] [-n 10] [-w 3] [-d float32] [-o sum]
                          [--colls all_reduce,all_gather,reduce_scatter,broadcast,all_to_all]

Starts an eccl master in this process (127.0.0.1, a free port) and --np
local rank processes (fresh interpreters of this module); they admit each
other, then run each collective over the size sweep: --warmup_iters
untimed calls, a barrier, --iters timed calls back to back, out of place,
on numpy arrays. Each row's time is the slowest rank's mean per call; the
row's #wrong counts, over every rank, the output elements of the last call
that differ from the expected values (exact for integers, within the
dtype's rounding for floats). Exit status 1 if any value was wrong.

Columns and bandwidths follow nccl-tests (and eccl-bench): size is the
bytes of the whole buffer (all_gather's output, reduce_scatter's input,
all_to_all's buffer; counts rounded down to a multiple of the rank count),
algbw = size / time, busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter and all_to_all, 1 for broadcast. It measures the
binding and the C library together; tools/eccl-bench measures the C library
alone with the same rows.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
REDUCING = {"all_reduce", "reduce_scatter"}
BUS_FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0}
BLOCKED = {"all_gather", "reduce_scatter", "all_to_all"}  # the buffer is n blocks
DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]
TOLERANCE = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def sizes(a):
    """The sweep's sizes in bytes, minbytes to maxbytes by stepfactor."""
    size = a.minbytes
    while size <= a.maxbytes:
        yield size
        size *= a.stepfactor


def values(rank, count, op):
    """Rank ``rank``'s input: small integers, so that sums over the ranks
    are exact in every dtype (products: ones and twos)."""
    i = np.arange(count)
    return (1 + (i + rank) % 2) if op == "prod" else (1 + (i + rank) % 3)


def reduce_over(arrays, op):
    stack = np.stack([a.astype(np.float64) for a in arrays])
    return {"sum": stack.sum(0), "avg": stack.mean(0), "prod": stack.prod(0), "min": stack.min(0),
            "max": stack.max(0)}[op]


def expected(coll, rank, n, count, op):
    """What ``rank``'s output holds after the call (float64)."""
    if coll == "all_reduce":
        return reduce_over([values(r, count, op) for r in range(n)], op)
    c = count // n
    if coll == "all_gather":
        return np.concatenate([values(r, c, op) for r in range(n)]).astype(np.float64)
    if coll == "reduce_scatter":
        return reduce_over([values(r, count, op)[rank * c:(rank + 1) * c] for r in range(n)], op)
    if coll == "all_to_all":
        return np.concatenate([values(r, count, op)[rank * c:(rank + 1) * c] for r in range(n)]).astype(np.float64)
    return values(0, count, op).astype(np.float64)  # broadcast from root 0


def wrong(got, want, dtype):
    got = got.astype(np.float64)
    if dtype in TOLERANCE:
        return int(np.count_nonzero(np.abs(got - want) > TOLERANCE[dtype] * np.maximum(1.0, np.abs(want))))
    return int(np.count_nonzero(got != np.trunc(want)))  # integer AVG: the C library truncates


def rank_main(a):
    import eccl
    comm = eccl.Comm(a.master, connect_timeout_ms=int(a.timeout * 1000), op_timeout_ms=int(a.op_timeout * 1000))
    comm.connect()
    comm.admit_until(a.np, a.timeout)
    n, rank = comm.world_size, comm.rank
    op = getattr(eccl.Op, a.op.upper())
    dtype = np.dtype(a.datatype)
    elem = dtype.itemsize
    rows = []
    stat = np.zeros(2, np.float64)  # [time, wrong], reduced MAX and SUM across ranks
    # Every call gets its own tag, the same sequence on every rank: a rank
    # that finished a call may start the next before a slower one has
    # finished it, and frames of two calls with one tag would meet.
    tags = iter(range(1, 1 << 62))
    for coll in a.colls:
        for size in sizes(a):
            count = size // elem
            if coll in BLOCKED:
                count = count // n * n
            if count == 0:
                continue
            c = count // n
            send = values(rank, c if coll == "all_gather" else count, a.op).astype(dtype)
            recv = np.zeros(c if coll == "reduce_scatter" else count, dtype)
            if coll == "all_reduce":
                call = lambda: comm.all_reduce(send, recv, op=op, tag=next(tags))  # noqa: E731
            elif coll == "reduce_scatter":
                call = lambda: comm.reduce_scatter(send, recv, op=op, tag=next(tags))  # noqa: E731
            elif coll == "broadcast":
                call = lambda: comm.broadcast(send, recv, root=0, tag=next(tags))  # noqa: E731
            else:
                call = (lambda f: lambda: f(send, recv, tag=next(tags)))(getattr(comm, coll))
            for _ in range(a.warmup_iters):
                call()
            comm.barrier(tag=next(tags))
            t0 = time.perf_counter()
            for _ in range(a.iters):
                call()
            per_call = (time.perf_counter() - t0) / a.iters
            bad = wrong(recv, expected(coll, rank, n, count, a.op), a.datatype) if a.check else 0
            stat[0] = per_call
            comm.all_reduce(stat[:1], op=eccl.MAX, tag=next(tags))  # the slowest rank's time
            stat[1] = bad
            comm.all_reduce(stat[1:], op=eccl.SUM, tag=next(tags))  # wrong values over every rank
            size_row = count * elem
            algbw = size_row / stat[0] / 1e9
            rows.append({"coll": coll, "size": size_row, "count": count, "type": a.datatype,
                         "redop": a.op if coll in REDUCING else "none", "time_us": stat[0] * 1e6,
                         "algbw": algbw, "busbw": algbw * BUS_FACTOR[coll](n), "wrong": int(stat[1])})
    comm.leave()
    comm.close()
    if rank == 0:
        print(json.dumps({"world": n, "rows": rows}), flush=True)


def print_rows(a, report):
    print("# eccl.bench: %d ranks on 127.0.0.1, %s, iters %d, warmup %d, out of place, check %s"
          % (report["world"], a.datatype, a.iters, a.warmup_iters, "on" if a.check else "off"))
    header = "%12s %12s %8s %6s %12s %12s %12s %8s" % ("size", "count", "type", "redop", "time(us)", "algbw(GB/s)",
                                                     "busbw(GB/s)", "#wrong")
    wrong_total = 0
    for coll in a.colls:
        rows = [r for r in report["rows"] if r["coll"] == coll]
        print("#\n# %s\n#%s" % (coll, header[1:]))
        for r in rows:
            print("%12d %12d %8s %6s %12.1f %12.3f %12.3f %8d" % (r["size"], r["count"], r["type"], r["redop"],
                                                                r["time_us"], r["algbw"], r["busbw"], r["wrong"]))
            wrong_total += r["wrong"]
        if rows:
            print("# %s: avg busbw %.3f GB/s" % (coll, sum(r["busbw"] for r in rows) / len(rows)))
    print("# wrong values: %d %s" % (wrong_total, "OK" if not wrong_total else "FAILED"))
    return wrong_total


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m eccl.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=2, help="local rank processes (default 2)")
    ap.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"), help="smallest size (1K)")
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("16M"), help="largest size (16M)")
    ap.add_argument("-f", "--stepfactor", type=int, default=4, help="size multiplier between rows (4)")
    ap.add_argument("-n", "--iters", type=int, default=10, help="timed calls per size (10)")
    ap.add_argument("-w", "--warmup_iters", type=int, default=3, help="untimed calls per size (3)")
    ap.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="count wrong values (1)")
    ap.add_argument("-d", "--datatype", default="float32", choices=DTYPES)
    ap.add_argument("-o", "--op", default="sum", choices=["sum", "avg", "prod", "min", "max"])
    ap.add_argument("--colls", default=",".join(COLLS), help="comma-separated, of %s" % ", ".join(COLLS))
    ap.add_argument("--timeout", type=float, default=600, help="the whole run's deadline, s (600)")
    ap.add_argument("--op-timeout", type=float, default=60, help="one call's limit, s (60)")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line instead")
    ap.add_argument("--master", help=argparse.SUPPRESS)  # a rank process's own arguments
    a = ap.parse_args(argv)
    a.colls = [c.strip() for c in a.colls.split(",") if c.strip()]
    unknown = set(a.colls) - set(COLLS)
    if unknown or a.np < 2 or a.stepfactor < 2 or a.minbytes < 1 or a.iters < 1:
        ap.error("wants --colls among %s, --np >= 2, -f >= 2, -b >= 1, -n >= 1" % COLLS)
    if a.master:
        rank_main(a)
        return 0

    import eccl
    from .launch import collect, job_secret, kill_all
    job_secret()  # the ranks inherit it
    argv = [sys.executable, "-m", "eccl.bench"] + [x for x in (argv if argv is not None else sys.argv[1:])
                                                   if x != "--json"]
    with eccl.Master("127.0.0.1:0") as master:
        procs = [subprocess.Popen(argv + ["--master", master.address], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
                 for _ in range(a.np)]
        try:
            done = collect(procs, a.timeout)
        finally:
            kill_all(procs)
    failed = [(i, d) for i, d in enumerate(done) if d.rc != 0]
    if failed:
        for i, d in failed:
            print("eccl.bench: rank process %d: exit %s\n%s" % (i, d.rc, d.err[-3000:]), file=sys.stderr)
        return 2
    report = next(d.result for d in done if d.result)
    if a.json:
        print(json.dumps(report))
        return 1 if any(r["wrong"] for r in report["rows"]) else 0
    return 1 if print_rows(a, report) else 0


if __name__ == "__main__":
    sys.exit(main())
