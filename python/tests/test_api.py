"""The binding on its own, in one process: exception classes, buffer
checks, a one-peer communicator (where every collective answers
TooFewPeers, so a TypeError/ValueError instead proves the check ran before
the C call), Master and Relay."""

import gc
import importlib.util

import numpy as np
import pytest

import eccl
import eccl.launch

HAS_TORCH = importlib.util.find_spec("torch") is not None

C_CODES = ["INVALID_ARG", "NO_MEMORY", "SYSTEM", "CONNECT", "TIMEOUT", "PEER_LOST", "TOO_FEW_PEERS",
           "PROTOCOL", "KICKED", "MASTER_LOST", "BUSY", "NOT_CONNECTED", "AGAIN", "CLOSED", "UNSUPPORTED",
           "DEVICE", "AUTH"]


def test_one_exception_class_per_code():
    classes = set()
    for name in C_CODES:
        code = int(getattr(eccl.Result, name))
        cls = eccl.error_class(code)
        assert cls is eccl.ERRORS[code]
        assert issubclass(cls, eccl.Error) and cls is not eccl.Error
        assert cls.code == code and cls.c_name == "ECCL_ERR_" + name
        assert cls.__name__ == "".join(p.capitalize() for p in name.split("_"))
        assert getattr(eccl, cls.__name__) is cls
        classes.add(cls)
    assert len(classes) == len(C_CODES) == len(eccl.ERRORS)
    assert eccl.PeerLost.code == 6 and eccl.TooFewPeers.code == 7 and eccl.MasterLost.code == 10
    # Built-in meanings, for generic handlers.
    assert issubclass(eccl.InvalidArg, ValueError) and issubclass(eccl.Timeout, TimeoutError)
    assert issubclass(eccl.Connect, ConnectionError) and issubclass(eccl.NoMemory, MemoryError)
    assert eccl.error_class(999) is eccl.Error


NUMPY_TO_ECCL = {"int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16", "int32": "I32", "uint32": "U32",
                 "int64": "I64", "uint64": "U64", "float16": "F16", "float32": "F32", "float64": "F64",
                 "longlong": "I64", "ulonglong": "U64", "intc": "I32"}


@pytest.mark.parametrize("np_dtype", sorted(NUMPY_TO_ECCL))
def test_numpy_dtypes(np_dtype):
    assert eccl.buffer_dtype(np.zeros(3, np_dtype)) == getattr(eccl.Dtype, NUMPY_TO_ECCL[np_dtype])


@pytest.mark.parametrize("bad", [np.zeros(3, bool), np.zeros(3, np.complex64), np.zeros(3, ">f4"),
                                 np.zeros(3, object), np.zeros(3, "U4")])
def test_numpy_dtypes_eccl_lacks_are_type_errors(bad):
    with pytest.raises(TypeError, match="no type for"):
        eccl.buffer_dtype(bad)


def test_other_buffer_objects():
    import array
    assert eccl.buffer_dtype(bytearray(4)) == eccl.Dtype.U8
    assert eccl.buffer_dtype(array.array("d", [1.0])) == eccl.Dtype.F64
    assert eccl.buffer_dtype(memoryview(np.zeros(2, np.int16))) == eccl.Dtype.I16
    with pytest.raises(TypeError, match="numpy array, a torch tensor"):
        eccl.buffer_dtype([1.0, 2.0])


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (python3-torch)")
def test_torch_dtypes():
    import torch
    want = {torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
            torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64"}
    for dt, name in want.items():
        assert eccl.buffer_dtype(torch.zeros(3, dtype=dt)) == getattr(eccl.Dtype, name), dt
    for dt in (torch.bool, torch.complex64):
        with pytest.raises(TypeError, match="no type for"):
            eccl.buffer_dtype(torch.zeros(3, dtype=dt))
    with pytest.raises(ValueError, match="not contiguous"):
        eccl.buffer_dtype(torch.zeros(4, 4).t())


@pytest.fixture
def solo(master):
    """A connected communicator alone in its run (world size 1)."""
    with eccl.Comm(master.address, op_timeout_ms=5000) as comm:
        yield comm


def test_solo_attributes_and_too_few_peers(solo):
    assert (solo.rank, solo.world_size) == (0, 1)
    assert solo.epoch >= 1 and solo.peer_id >= 0 and solo.p2p_pool_size >= 1
    assert solo.get_attr(eccl.Attr.WORLD_SIZE) == 1
    assert solo.slow_peer == 0 and solo.get_attr(eccl.Attr.SLOW_PEER) == 0
    assert solo.slow_link is None and solo.get_attr(eccl.Attr.SLOW_LINK_TO) == 0
    assert solo.connected and not solo.closed
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(eccl.TooFewPeers) as info:
        solo.all_reduce(a)
    e = info.value
    assert e.code == int(eccl.Result.TOO_FEW_PEERS) and e.call == "all_reduce"
    assert isinstance(e.info, eccl.ReduceInfo) and e.info.world_size == 1
    assert "ECCL_ERR_TOO_FEW_PEERS" in str(e)
    np.testing.assert_array_equal(a, np.arange(4, dtype=np.float32))
    assert solo.admit_pending() == 0


def test_async_request_reports_at_wait_and_test(solo):
    a = np.ones(8, np.float64)
    req = solo.all_reduce_async(a, tag=3)
    del a
    gc.collect()  # the request holds the array
    with pytest.raises(eccl.TooFewPeers):
        req.wait()
    assert req.done
    with pytest.raises(eccl.TooFewPeers):  # asked again, the same answer
        req.test()


# Each wrong call must raise TypeError/ValueError, where the C call would
# have answered TooFewPeers: the check ran first, nothing was sent.
def f32(n):
    return np.zeros(n, np.float32)


WRONG_CALLS = [
    ("dtypes differ", TypeError, lambda c: c.all_reduce(f32(4), np.zeros(4, np.float64))),
    ("sizes differ", ValueError, lambda c: c.all_reduce(f32(4), f32(5))),
    ("not contiguous", ValueError, lambda c: c.all_reduce(np.zeros((4, 4), np.float32)[:, 0])),
    ("read-only output", ValueError, lambda c: c.all_reduce(f32(4), np.frombuffer(bytes(16), np.float32))),
    ("read-only in place", ValueError, lambda c: c.broadcast(np.frombuffer(bytes(16), np.float32))),
    ("not a buffer", TypeError, lambda c: c.all_reduce([1.0, 2.0])),
    ("bool", TypeError, lambda c: c.all_reduce(np.zeros(4, bool))),
    ("async dtypes differ", TypeError, lambda c: c.all_reduce_async(f32(4), np.zeros(4, np.int32))),
    ("all_gather size", ValueError, lambda c: c.all_gather(f32(4), f32(5))),
    ("all_to_allv in place, send layout", ValueError,
     lambda c: c.all_to_allv(f32(4), None, sendcounts=[4], recvcounts=[4])),
    ("reduce_scatter size", ValueError, lambda c: c.reduce_scatter(f32(4), f32(3))),
    ("all_gatherv counts", ValueError, lambda c: c.all_gatherv(f32(2), f32(4), [2, 2])),
    ("all_gatherv past end", ValueError, lambda c: c.all_gatherv(f32(2), f32(4), [5])),
    ("reduce_scatterv sum", ValueError, lambda c: c.reduce_scatterv(f32(5), f32(4), [4])),
    ("all_to_allv counts", ValueError, lambda c: c.all_to_allv(f32(4), f32(4), sendcounts=[4, 0],
                                                                 recvcounts=[4, 0])),
    ("send dtype", TypeError, lambda c: c.send(np.zeros(2, np.complex128), 1)),
    ("recv read-only", ValueError, lambda c: c.recv(np.frombuffer(bytes(8), np.float32), 1)),
    ("sync key", ValueError, lambda c: c.sync_shared_state(eccl.SharedState({"": f32(2)}))),
    ("sync state type", TypeError, lambda c: c.sync_shared_state({"w": f32(2)})),
]


@pytest.mark.parametrize("what,exc,call", WRONG_CALLS, ids=[w for w, _, _ in WRONG_CALLS])
def test_wrong_arguments_raise_before_the_call(solo, what, exc, call):
    with pytest.raises(exc) as info:
        call(solo)
    assert not isinstance(info.value, eccl.Error), info.value


def test_c_argument_errors_map_to_invalid_arg(solo):
    with pytest.raises(eccl.InvalidArg) as info:
        solo.barrier(tag=1 << 63)  # reserved tags
    assert isinstance(info.value, ValueError)
    with pytest.raises(eccl.InvalidArg):
        eccl.Comm(solo.master_addr, p2p_pool_size=65)
    with pytest.raises(TypeError):
        eccl.Comm(solo.master_addr, no_such_param=1)


def test_closed_comm_raises_closed(master):
    comm = eccl.Comm(master.address)
    comm.connect()
    comm.close()
    comm.close()  # idempotent
    assert comm.closed
    with pytest.raises(eccl.Closed):
        comm.barrier()
    with pytest.raises(eccl.Closed):
        comm.rank


def test_context_manager_closes(master):
    with eccl.Comm(master.address) as comm:
        assert comm.connected
    assert comm.closed


def test_master_and_relay():
    with eccl.Master("127.0.0.1:0") as m:
        host, port = m.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0 and m.running
        with eccl.Relay("127.0.0.1:0", m.address) as relay:
            with eccl.Comm(relay.address, connect_timeout_ms=5000) as comm:
                assert comm.world_size == 1
        m.stop()
        assert not m.running
    with pytest.raises(eccl.Error):
        eccl.Master("256.0.0.1:0")


def test_wrong_or_missing_secret(monkeypatch):
    """A communicator whose secret differs from the master's is refused with
    eccl.Auth; without any secret one cannot even be made (ECCL_AUTH=0
    aside); eccl.launch.job_secret() makes one up only where none is set."""
    with eccl.Master("127.0.0.1:0") as m:
        monkeypatch.setenv("ECCL_AUTH_SECRET", "not-the-job-secret-at-all")
        with pytest.raises(eccl.Auth):
            with eccl.Comm(m.address, connect_timeout_ms=5000):
                pass
        monkeypatch.delenv("ECCL_AUTH_SECRET")
        monkeypatch.delenv("ECCL_AUTH_SECRET_FILE", raising=False)
        monkeypatch.delenv("ECCL_AUTH", raising=False)
        with pytest.raises(eccl.Auth):
            eccl.Master("127.0.0.1:0")
        env = {}
        assert len(eccl.launch.job_secret(env)["ECCL_AUTH_SECRET"]) == 64
        assert eccl.launch.job_secret({"ECCL_AUTH_SECRET": "kept"}) == {"ECCL_AUTH_SECRET": "kept"}
        assert eccl.launch.job_secret({"ECCL_AUTH": "0"}) == {"ECCL_AUTH": "0"}


def test_trace_dump_and_master_metrics(tmp_path, monkeypatch):
    """A rank's collective trace on request, and the master's metrics
    (docs/trace.md)."""
    monkeypatch.setenv("ECCL_TRACE_DIR", str(tmp_path))
    with eccl.Master("127.0.0.1:0") as m:
        with eccl.Comm(m.address) as comm:
            comm.trace_dump("pytest")
            files = list(tmp_path.glob("eccl-trace-*.txt"))
            assert len(files) == 1
            text = files[0].read_text()
            assert text.startswith("eccl-trace 1\ncomm peer=") and " why=pytest\n" in text
            assert text.endswith("end\n")
            m.trace_all()  # every member: this one again
            import time
            for _ in range(200):
                if len(list(tmp_path.glob("eccl-trace-*.txt"))) == 2:
                    break
                time.sleep(0.01)
            assert len(list(tmp_path.glob("eccl-trace-*.txt"))) == 2
            metrics = m.metrics()
            assert 'eccl_master_peers{state="accepted"} 1' in metrics.splitlines()
            assert "eccl_master_trace_asks_total 1" in metrics.splitlines()
        m.stop()
        with pytest.raises(eccl.Closed):
            m.trace_all()


def test_close_fails_ops_in_flight_with_closed(master):
    """Two peers in this process (the second connects from a thread while
    the first admits it: both calls block with the GIL released). An op the
    other peer never joins is in flight when its communicator closes: its
    request raises eccl.Closed, and its buffer holds what it held."""
    import threading
    a = eccl.Comm(master.address, op_timeout_ms=10000)
    a.connect()
    b = eccl.Comm(master.address, op_timeout_ms=10000)
    joined = threading.Thread(target=b.connect)
    joined.start()
    for _ in range(2000):
        if a.admit_pending():
            break
    joined.join(10)
    assert b.connected and a.world_size == 2 and b.world_size == 2
    x = np.arange(1 << 16, dtype=np.float32)
    before = x.copy()
    req = a.all_reduce_async(x, tag=77)  # b never calls tag 77
    assert not req.test()
    a.close()
    with pytest.raises(eccl.Closed):
        req.wait()
    assert req.done
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))
    b.close()
