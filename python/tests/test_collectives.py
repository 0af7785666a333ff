"""Every wrapped collective on every dtype, multi-process against a real
master: numpy (every dtype numpy and eccl share) with three peers, torch
(every dtype torch and eccl share) with two. The checks themselves run in
the workers (worker.py), against values computed there in numpy."""

import importlib.util

import pytest

import eccl
from conftest import assert_passed, run_workers

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def numpy_run():
    """One three-peer run of worker.py's "collectives" scenario, shared by
    the tests below (each asserts on its own part of it)."""
    m = eccl.Master("127.0.0.1:0")
    try:
        yield run_workers("collectives", m.address, 3, timeout_s=90)
    finally:
        m.close()


def test_numpy_collectives_every_dtype(numpy_run):
    assert_passed(numpy_run)
    # The checks ran (a worker that skipped them would pass vacuously).
    assert all(res["checks"] > 300 for _, res, _, _ in numpy_run), [res["checks"] for _, res, _, _ in numpy_run]
    assert sorted(res["rank"] for _, res, _, _ in numpy_run) == [0, 1, 2]


def test_gil_released_during_blocking_call(numpy_run):
    """Rank 0 waits ~0.6 s in a barrier that the others enter late; a Python
    thread of its own must make progress all along, which it could not if
    the call held the GIL."""
    gil = [res["gil"] for _, res, _, _ in numpy_run if res and "gil" in res]
    assert gil, "rank 0 reported no GIL measurement"
    assert gil[0]["barrier_s"] > 0.4, gil
    assert gil[0]["stamps_inside"] > 10, gil


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (python3-torch)")
def test_torch_collectives_every_dtype(master):
    results = run_workers("torch", master.address, 2, timeout_s=90)
    assert_passed(results)
    assert all(res["checks"] > 250 for _, res, _, _ in results), [res["checks"] for _, res, _, _ in results]
