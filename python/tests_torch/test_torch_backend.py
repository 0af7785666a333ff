"""torch.distributed with backend="eccl" (eccl._torch): multi-process runs
on 127.0.0.1, each rank a fresh interpreter (torch_worker.py), the group
formed through a FileStore in the test's tmp_path.

- every collective on float32/float64/int32/int64, element by element, with
  2 ranks (rank 0 hosts the master; env:// init, a TCPStore) and 3 ranks (an external eccl.Master
  through ECCL_MASTER_ADDR, staggered starts so that eccl's admission order
  is not c10d's rank order and the rank table is used);
- DDP trained K steps with backend "eccl" and with "gloo" from one seed:
  identical parameters bit for bit (2 ranks: sums of two are order-free);
- a peer SIGKILLed mid-training, and one gone mid all_reduce: the
  survivor's wait raises a RuntimeError naming the eccl error, well within
  the timeout, never a hang; a peer lost between two calls of 3 ranks: the
  survivors' next call raises instead of returning their two-rank result.
"""

import os
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

import eccl
from eccl.launch import collect  # [Finished(rc, result, out, err)]; kills what outlives the deadline

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")


def start(scenario, rank, world, store, *extra, env=None):
    # Only what the test sets chooses the rendezvous and the master.
    base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "ECCL_MASTER_ADDR")}
    return subprocess.Popen([sys.executable, WORKER, scenario, str(rank), str(world), store] + [str(e) for e in extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(base, PYTHONUNBUFFERED="1", **(env or {})))


def assert_passed(results, ranks=None):
    problems = []
    for i, (rc, res, out, err) in enumerate(results):
        if ranks is not None and i not in ranks:
            continue
        if rc != 0 or res is None or res["failures"]:
            problems.append("rank %d: exit %s, failures %s\nstdout:\n%s\nstderr:\n%s"
                            % (i, rc, res and res["failures"], out[-2000:], err[-3000:]))
    assert not problems, "\n\n".join(problems)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_collectives_two_ranks(tmp_path):
    # env:// as torchrun sets it up: the c10d Store is a TCPStore here
    store = str(tmp_path / "store")
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    results = collect([start("collectives", r, 2, store, env=env) for r in range(2)], 120)
    assert_passed(results)


def test_collectives_three_ranks_rank_table(tmp_path):
    master = eccl.Master("127.0.0.1:0")
    try:
        store = str(tmp_path / "store")
        env = {"ECCL_MASTER_ADDR": master.address}
        results = collect([start("collectives", r, 3, store, 1.5, env=env) for r in range(3)], 120)
    finally:
        master.close()
    assert_passed(results)
    tables = [res["eccl_ranks"] for _, res, _, _ in results]
    assert tables[0] == tables[1] == tables[2]
    # Staggered starts (rank 2 first): eccl's numbering differs from c10d's,
    # so the layouts above went through the rank table.
    assert tables[0] != [0, 1, 2], "admission order matched c10d's: the rank table went untested"


def test_ddp_eccl_matches_gloo(tmp_path):
    store = str(tmp_path / "store")
    results = collect([start("ddp", r, 2, store, 12) for r in range(2)], 120)
    assert_passed(results)
    res = [r for _, r, _, _ in results]
    assert res[0]["digest_eccl"] == res[1]["digest_eccl"], "ranks disagree on the eccl-trained parameters"
    assert res[0]["digest_eccl"] == res[0]["digest_gloo"], "eccl and gloo trained different parameters"
    assert res[0]["loss_eccl"] == res[0]["loss_gloo"]


def read_until(proc, marker, timeout_s):
    """Reads proc's stdout line by line until a line starts with marker."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(marker):
            return seen
    raise AssertionError("no %r from the worker within %.0f s; it said:\n%s" % (marker, timeout_s, "".join(seen)))


@pytest.mark.parametrize("victim", [1, 0], ids=["rank1", "rank0-with-the-master"])
def test_peer_killed_mid_training(tmp_path, victim):
    store = str(tmp_path / "store")
    procs = [start("ddp_kill", r, 2, store, 100000) for r in range(2)]
    try:
        read_until(procs[victim], "step 5", 90)
    except AssertionError:
        for p in procs:
            p.kill()
        raise
    procs[victim].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    survivor = procs[1 - victim]
    results = collect([survivor], 30)  # a hang is killed at 30 s and fails below
    rc, res, out, err = results[0]
    assert res is not None and not res["failures"], "survivor: exit %s\n%s\n%s" % (rc, out[-2000:], err[-3000:])
    # rank 1 lost: ECCL_ERR_PEER_LOST, or ECCL_ERR_TOO_FEW_PEERS where the
    # loss fell between two calls; rank 0 lost: the master went with it
    assert any(name in res["error"] for name in ("ECCL_ERR_PEER_LOST", "ECCL_ERR_MASTER_LOST",
                                                 "ECCL_ERR_TOO_FEW_PEERS")), res["error"]
    assert res["t_error"] - t_kill < 20, "the survivor took %.1f s to notice" % (res["t_error"] - t_kill)
    procs[victim].wait()


def test_peer_lost_mid_allreduce(tmp_path):
    store = str(tmp_path / "store")
    results = collect([start("allreduce_kill", r, 2, store) for r in range(2)], 90)
    assert results[1][0] == -signal.SIGKILL, "the victim did not die by SIGKILL: %s" % (results[1][3][-2000:],)
    assert_passed(results, ranks=[0])
    assert results[0][1]["waited_s"] < 20


def test_peer_lost_between_calls_three_ranks(tmp_path):
    # libeccl runs the next call on the two survivors (elastic); the c10d
    # group of three must refuse that result instead of returning it.
    store = str(tmp_path / "store")
    results = collect([start("between_kill", r, 3, store) for r in range(3)], 90)
    assert results[2][0] == -signal.SIGKILL, "the victim did not die by SIGKILL: %s" % (results[2][3][-2000:],)
    assert_passed(results, ranks=[0, 1])


def test_world_size_one(tmp_path):
    results = collect([start("solo", 0, 1, str(tmp_path / "store"))], 60)
    assert_passed(results)
