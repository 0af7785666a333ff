"""Failures from Python: a peer SIGKILLed mid all-reduce, a master that dies,
a master that is not there."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import eccl
from conftest import assert_passed, run_workers


def test_peer_killed_mid_all_reduce(master):
    """Three peers all-reduce 32 MiB in place; the third SIGKILLs itself
    5 ms into a call. The survivors get eccl.PeerLost, their buffers hold
    exactly what they held before the call, and the retry runs on the two
    of them, with bit-identical results."""
    n = 3
    results = run_workers("kill", master.address, n, timeout_s=90)
    victim_rc = results[n - 1][0]
    assert victim_rc == -signal.SIGKILL, "the victim was to die of SIGKILL: %s\n%s" % (victim_rc, results[n - 1].err)
    assert_passed(results, indices=range(n - 1))
    survivors = [res for _, res, _, _ in results[:n - 1]]
    for res in survivors:
        assert res["lost_at"] == 2, res  # the call the victim died in
        assert res["call_s"] > 0.1, res  # failed inside the call, not at its start
        assert res["error"] == {"class": "PeerLost", "code": int(eccl.Result.PEER_LOST), "call": "all_reduce",
                                "is_eccl_error": True}, res
        assert res["restored"], "buffer not restored bit for bit: %s" % res
        assert res["world_after"] == n - 1, res
        assert res["retry_close"], res
    assert len({res["retry_digest"] for res in survivors}) == 1, survivors


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_to_dead_master_raises_connect():
    comm = eccl.Comm("127.0.0.1:%d" % free_port(), connect_timeout_ms=300)
    t0 = time.monotonic()
    with pytest.raises(eccl.Connect) as info:
        comm.connect()
    assert time.monotonic() - t0 < 5  # bounded by connect_timeout_ms, not a hang
    e = info.value
    assert isinstance(e, eccl.Error) and isinstance(e, ConnectionError)
    assert e.code == int(eccl.Result.CONNECT) and e.call == "connect"
    assert "ECCL_ERR_CONNECT" in str(e)
    comm.close()


def start_master_module(*args):
    """python3 -m eccl.master --listen 127.0.0.1:0: its address from the
    line it prints."""
    p = subprocess.Popen([sys.executable, "-m", "eccl.master", "--listen", "127.0.0.1:0"] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("eccl-master listening on "), (line, p.stderr.read() if p.poll() is not None else "")
    return p, line.split()[-1]


def test_master_module_and_master_lost():
    """The master runs as `python3 -m eccl.master`; SIGKILLed, its peer's next
    call to it fails with eccl.MasterLost."""
    p, addr = start_master_module()
    try:
        with eccl.Comm(addr, peer_timeout_ms=1000, op_timeout_ms=5000) as comm:
            assert comm.world_size == 1 and comm.rank == 0
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            # The library's progress thread sees the connection close and
            # fails the communicator with MASTER_LOST. Until it has, a call
            # alone in its run answers TooFewPeers without touching the
            # master's socket.
            one = np.zeros(1, np.float32)
            with pytest.raises(eccl.MasterLost) as info:
                for _ in range(200):  # 10 s
                    try:
                        comm.all_reduce(one)
                    except eccl.TooFewPeers:
                        time.sleep(0.05)
            assert info.value.code == int(eccl.Result.MASTER_LOST) and info.value.call == "all_reduce"
            with pytest.raises(eccl.MasterLost):  # the master's own calls too, from now on
                comm.peers_pending()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def test_master_module_stops_on_sigterm():
    p, addr = start_master_module()
    with eccl.Comm(addr) as comm:
        assert comm.world_size == 1
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    p.stdout.close()
    p.stderr.close()


def test_elastic_admission_shared_state_topology_leave(master, tmp_path):
    """Two peers sync a model, admit a newcomer, sync again: the newcomer
    fetches the model into its own array and adopts the revision; then all
    three optimise the topology and leave together."""
    results = run_workers("elastic", master.address, 3, timeout_s=90, extra=(str(tmp_path),))
    assert_passed(results)
    for i, (_, res, _, _) in enumerate(results):
        assert res["world"] == 3, res
        sync = res["sync"]
        assert sync["revision"] == 2 and sync["model_ok"] and sync["step"] == 41, res
        assert sync["local"] == i, res  # unvoted: never replaced
        assert sync["keys_fetched"] == (2 if i == 2 else 0), res
        assert sync["rx_bytes"] == (4000 + 8 if i == 2 else 0), res
