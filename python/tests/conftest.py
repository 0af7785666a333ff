"""Shared pieces of the eccl Python tests.

The package under test is the one on PYTHONPATH (run_pytest.py points it at
the build tree). Multi-process tests run a real master in this process
(eccl.Master on 127.0.0.1, port 0) and start every peer as a fresh
interpreter (worker.py), never a fork of this process: the master's thread
runs here.
"""

import os
import subprocess
import sys

import pytest

import eccl
from eccl.launch import collect

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")


@pytest.fixture
def master():
    m = eccl.Master("127.0.0.1:0")
    yield m
    m.close()


def start_worker(scenario, addr, index, n, *extra):
    return subprocess.Popen([sys.executable, WORKER, scenario, addr, str(index), str(n)] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def run_workers(scenario, addr, n, timeout_s=60, extra=()):
    """[eccl.launch.Finished(rc, result, out, err)] of n workers, in start
    order; a worker past the deadline is killed and fails the test."""
    procs = [start_worker(scenario, addr, i, n, *extra) for i in range(n)]
    return collect(procs, timeout_s)


def assert_passed(results, indices=None):
    """Every listed worker exited 0 and reported no failed check."""
    problems = []
    for i, (rc, res, _, err) in enumerate(results):
        if indices is not None and i not in indices:
            continue
        if rc != 0 or res is None or res["failures"]:
            problems.append("worker %d: exit %s, failures %s\nstderr:\n%s"
                            % (i, rc, res and res["failures"], err[-3000:]))
    assert not problems, "\n\n".join(problems)
