"""python3 -m eccl.bench: a short sweep of every collective with a real
master and two rank processes comes back with every row and no wrong
value; the check that counts wrong values does count them."""

import sys

import numpy as np

from eccl import bench
from eccl.launch import run_group


def test_bench_rows_every_collective():
    p = run_group([sys.executable, "-m", "eccl.bench", "--np", "2", "-b", "1K", "-e", "64K", "-f", "8",
                   "-n", "2", "-w", "1", "--timeout", "60", "--json"], 90)
    assert p.rc == 0, p.err[-3000:]
    report = p.result
    assert report["world"] == 2
    got = [(r["coll"], r["size"]) for r in report["rows"]]
    assert got == [(c, s) for c in bench.COLLS for s in (1024, 8192, 65536)], got
    for r in report["rows"]:
        assert r["wrong"] == 0 and r["time_us"] > 0, r
        assert r["count"] * 4 == r["size"] and r["type"] == "float32"
        assert abs(r["busbw"] - r["algbw"] * bench.BUS_FACTOR[r["coll"]](2)) < 1e-9


def test_wrong_counts_differences():
    for coll in bench.COLLS:
        want = bench.expected(coll, 1, 3, 12, "sum")
        got = want.astype(np.float32)
        assert bench.wrong(got, want, "float32") == 0
        got[[0, 3]] += 1
        assert bench.wrong(got, want, "float32") == 2, coll
    # rank 1 of 3: all_to_all gets block 1 of each rank's input
    assert bench.expected("all_to_all", 1, 3, 6, "sum").tolist() == [3, 1, 1, 2, 2, 3]
    assert bench.expected("reduce_scatter", 0, 2, 4, "sum").tolist() == [3, 5]
