"""One peer of a multi-process test: python3 worker.py SCENARIO MASTER INDEX N [DIR]

Started by conftest.run_workers as a fresh interpreter (no fork of the test
process, whose master thread runs). Connects to MASTER, admits peers until
the world has N members, runs SCENARIO, and prints one JSON line on stdout:
{"index": ..., "failures": [...], ...}; the test asserts on it. A check that
fails is recorded and the scenario goes on, so one run reports every
failure. Every call is bounded by the communicator's timeouts, and the
test kills a worker that outlives its deadline.
"""

import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
import weakref

import numpy as np

import eccl

OP_TIMEOUT_MS = 15000

NUMPY_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64"]
TORCH_DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


class Checks:
    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(what)
        return cond

    def equal(self, got, want, what):
        got = np.asarray(got)
        want = np.asarray(want)
        ok = got.shape == want.shape and np.array_equal(got, want)
        return self.check(ok, "%s: got %s, want %s" % (what, got.tolist()[:8], want.tolist()[:8]))


# ---- buffers: one adapter per array library -----------------------------------

class NumpyLib:
    name = "numpy"

    def make(self, values, dtype):
        return np.asarray(values).astype(dtype)

    def empty(self, n, dtype):
        return np.zeros(n, dtype)

    def to_np(self, x):
        return np.asarray(x)

    def is_float(self, dtype):
        return np.dtype(dtype).kind == "f"


class TorchLib:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch

    def make(self, values, dtype):
        return self.torch.tensor(np.asarray(values, np.float64), dtype=getattr(self.torch, dtype))

    def empty(self, n, dtype):
        return self.torch.zeros(n, dtype=getattr(self.torch, dtype))

    def to_np(self, x):
        if x.dtype == self.torch.bfloat16:
            return x.float().numpy()
        return x.numpy()

    def is_float(self, dtype):
        return dtype.startswith("float") or dtype == "bfloat16"


def ref(values, dtype):
    """The expected values in numpy (bfloat16: float32, exact for the small
    integers used here)."""
    return np.asarray(values).astype("float32" if dtype == "bfloat16" else dtype)


# ---- scenario: every collective on every dtype ------------------------------

def inputs(rank, n):
    # Small integers: sums, products (at most 5*4*3 = 60) and averages of
    # three ranks are exact in every dtype, int8 and float16 included.
    return (np.arange(n) % 3) + 1 + rank


def collectives(comm, lib, dtypes, ck):
    world, rank = comm.world_size, comm.rank
    n = 6 * world  # divisible into world blocks
    all_in = [inputs(r, n) for r in range(world)]
    tag = [1000]

    def next_tag():
        tag[0] += 1
        return tag[0]

    for dt in dtypes:
        mine = all_in[rank]
        floats = lib.is_float(dt)
        # all_reduce: every op, in place, out of place, async
        ops = [(eccl.SUM, sum(all_in)), (eccl.PROD, np.prod(all_in, axis=0)),
               (eccl.MIN, np.min(all_in, axis=0)), (eccl.MAX, np.max(all_in, axis=0))]
        if floats:
            ops.append((eccl.AVG, sum(all_in) / world))
        for op, want in ops:
            buf = lib.make(mine, dt)
            info = comm.all_reduce(buf, op=op, tag=next_tag())
            ck.equal(lib.to_np(buf), ref(want, dt), "%s all_reduce %s %s in place" % (lib.name, op.name, dt))
            ck.check(info.world_size == world, "%s all_reduce info.world_size %d" % (dt, info.world_size))
        send, recv = lib.make(mine, dt), lib.empty(n, dt)
        comm.all_reduce(send, recv, op=eccl.SUM, tag=next_tag())
        ck.equal(lib.to_np(recv), ref(sum(all_in), dt), "%s all_reduce %s out of place" % (lib.name, dt))
        ck.equal(lib.to_np(send), ref(mine, dt), "%s all_reduce %s sendbuf untouched" % (lib.name, dt))
        buf = lib.make(mine, dt)
        req = comm.all_reduce_async(buf, op=eccl.MAX, tag=next_tag())
        info = req.wait()
        ck.equal(lib.to_np(buf), ref(np.max(all_in, axis=0), dt), "%s all_reduce_async %s" % (lib.name, dt))
        ck.check(req.done and info.world_size == world, "%s all_reduce_async done/info" % dt)

        # all_gather: out of place, in place, async
        block = lib.make(mine[:3], dt)
        recv = lib.empty(3 * world, dt)
        comm.all_gather(block, recv, tag=next_tag())
        want = np.concatenate([a[:3] for a in all_in])
        ck.equal(lib.to_np(recv), ref(want, dt), "%s all_gather %s" % (lib.name, dt))
        recv = lib.empty(3 * world, dt)
        recv[3 * rank:3 * rank + 3] = lib.make(mine[:3], dt)
        comm.all_gather(None, recv, tag=next_tag())
        ck.equal(lib.to_np(recv), ref(want, dt), "%s all_gather %s in place" % (lib.name, dt))
        recv = lib.empty(3 * world, dt)
        comm.all_gather_async(block, recv, tag=next_tag()).wait()
        ck.equal(lib.to_np(recv), ref(want, dt), "%s all_gather_async %s" % (lib.name, dt))

        # reduce_scatter: out of place, in place, async
        per = n // world
        total = sum(all_in)
        recv = lib.empty(per, dt)
        comm.reduce_scatter(lib.make(mine, dt), recv, op=eccl.SUM, tag=next_tag())
        ck.equal(lib.to_np(recv), ref(total[rank * per:(rank + 1) * per], dt),
                 "%s reduce_scatter %s" % (lib.name, dt))
        buf = lib.make(mine, dt)
        comm.reduce_scatter(buf, op=eccl.SUM, tag=next_tag())
        ck.equal(lib.to_np(buf)[rank * per:(rank + 1) * per], ref(total[rank * per:(rank + 1) * per], dt),
                 "%s reduce_scatter %s in place" % (lib.name, dt))
        recv = lib.empty(per, dt)
        comm.reduce_scatter_async(lib.make(mine, dt), recv, op=eccl.MIN, tag=next_tag()).wait()
        ck.equal(lib.to_np(recv), ref(np.min(all_in, axis=0)[rank * per:(rank + 1) * per], dt),
                 "%s reduce_scatter_async %s" % (lib.name, dt))

        # broadcast and reduce, every root
        for root in range(world):
            buf = lib.make(mine, dt)
            comm.broadcast(buf, root=root, tag=next_tag())
            ck.equal(lib.to_np(buf), ref(all_in[root], dt), "%s broadcast %s root %d" % (lib.name, dt, root))
            recv = lib.empty(n, dt)
            comm.reduce(lib.make(mine, dt), recv, root=root, op=eccl.SUM, tag=next_tag())
            want = sum(all_in) if rank == root else np.zeros(n)
            ck.equal(lib.to_np(recv), ref(want, dt), "%s reduce %s root %d" % (lib.name, dt, root))
        buf = lib.make(mine, dt)
        comm.broadcast_async(buf, root=world - 1, tag=next_tag()).wait()
        ck.equal(lib.to_np(buf), ref(all_in[world - 1], dt), "%s broadcast_async %s" % (lib.name, dt))
        buf = lib.make(mine, dt)
        comm.reduce_async(buf, root=0, op=eccl.MAX, tag=next_tag()).wait()
        if rank == 0:
            ck.equal(lib.to_np(buf), ref(np.max(all_in, axis=0), dt), "%s reduce_async %s" % (lib.name, dt))

        # all_to_all: block j of rank i goes to rank j as its block i
        def a2a_want():
            return np.concatenate([all_in[i][rank * per:(rank + 1) * per] for i in range(world)])
        recv = lib.empty(n, dt)
        comm.all_to_all(lib.make(mine, dt), recv, tag=next_tag())
        ck.equal(lib.to_np(recv), ref(a2a_want(), dt), "%s all_to_all %s" % (lib.name, dt))
        buf = lib.make(mine, dt)
        comm.all_to_all_async(buf, tag=next_tag()).wait()
        ck.equal(lib.to_np(buf), ref(a2a_want(), dt), "%s all_to_all_async %s in place" % (lib.name, dt))

        # send / recv around the ring, async, and one blocking pair
        right, left = (rank + 1) % world, (rank - 1) % world
        recv = lib.empty(n, dt)
        t = next_tag()
        rreq = comm.recv_async(recv, left, tag=t)
        sreq = comm.send_async(lib.make(mine, dt), right, tag=t)
        sreq.wait()
        rreq.wait()
        ck.equal(lib.to_np(recv), ref(all_in[left], dt), "%s send/recv async %s" % (lib.name, dt))
        t = next_tag()
        if rank == 0:
            comm.send(lib.make(mine, dt), 1, tag=t)
        elif rank == 1:
            recv = lib.empty(n, dt)
            comm.recv(recv, 0, tag=t)
            ck.equal(lib.to_np(recv), ref(all_in[0], dt), "%s send/recv %s" % (lib.name, dt))

        # the v layouts: rank r contributes r + 1 elements
        counts = [r + 1 for r in range(world)]
        displs = [sum(counts[:r]) for r in range(world)]
        recv = lib.empty(sum(counts), dt)
        comm.all_gatherv(lib.make(mine[:rank + 1], dt), recv, counts, tag=next_tag())
        want = np.concatenate([all_in[r][:r + 1] for r in range(world)])
        ck.equal(lib.to_np(recv), ref(want, dt), "%s all_gatherv %s" % (lib.name, dt))
        recv = lib.empty(rank + 1, dt)
        comm.reduce_scatterv(lib.make(sum_layout(all_in[rank], counts), dt), recv, counts, op=eccl.SUM,
                             tag=next_tag())
        total_v = sum(sum_layout(all_in[r], counts) for r in range(world))
        ck.equal(lib.to_np(recv), ref(total_v[displs[rank]:displs[rank] + rank + 1], dt),
                 "%s reduce_scatterv %s" % (lib.name, dt))
        # all_to_allv: rank i sends i + j + 1 elements to rank j
        scounts = [rank + j + 1 for j in range(world)]
        rcounts = [i + rank + 1 for i in range(world)]
        send = lib.make(np.arange(sum(scounts)) % 5 + rank, dt)
        recv = lib.empty(sum(rcounts), dt)
        comm.all_to_allv(send, recv, sendcounts=scounts, recvcounts=rcounts, tag=next_tag())
        want = []
        for i in range(world):
            sc_i = [i + j + 1 for j in range(world)]
            src = np.arange(sum(sc_i)) % 5 + i
            want.append(src[sum(sc_i[:rank]):sum(sc_i[:rank]) + sc_i[rank]])
        ck.equal(lib.to_np(recv), ref(np.concatenate(want), dt), "%s all_to_allv %s" % (lib.name, dt))

    comm.barrier(tag=next_tag())
    comm.barrier_async(tag=next_tag()).wait()
    return next_tag()


def sum_layout(values, counts):
    """A reduce_scatterv send buffer: sum(counts) elements."""
    return (np.arange(sum(counts)) % 4) + values[0]


def scenario_collectives(comm, index, n, args, ck, out):
    lib = NumpyLib()
    tag = collectives(comm, lib, NUMPY_DTYPES, ck)
    world, rank = comm.world_size, comm.rank

    # A batch retried on peer loss (none here): in place and out of place.
    a, b = np.full(8, rank + 1.0, np.float32), np.full(5, rank + 1, np.int64)
    b_out = np.zeros(5, np.int64)
    infos = comm.all_reduce_multiple_with_retry([a, (b, b_out)], op=eccl.SUM, tags=[tag + 1, tag + 2],
                                                max_in_flight=2)
    s = world * (world + 1) // 2
    ck.equal(a, np.full(8, s, np.float32), "all_reduce_multiple_with_retry in place")
    ck.equal(b_out, np.full(5, s, np.int64), "all_reduce_multiple_with_retry out of place")
    ck.check(len(infos) == 2 and all(i.world_size == world for i in infos), "multiple infos")

    # An async op holds its arrays until it ended, and lets go of them then.
    x = np.full(64, rank + 1.0, np.float64)
    ref_x = weakref.ref(x)
    req = comm.all_reduce_async(x, tag=tag + 6)
    del x
    gc.collect()
    ck.check(ref_x() is not None, "an array of an op in flight was freed")
    ck.check(repr(req).startswith("<eccl.Request all_reduce_async"), "Request repr %r" % req)
    req.wait()
    ck.check(ref_x() is None, "a completed request still holds its array")
    y = np.full(64, rank + 1.0, np.float64)
    req = comm.all_reduce_async(y, tag=tag + 7)
    req.wait()
    ck.equal(y, np.full(64, float(s)), "the async result, in the caller's array")

    # Quantised: one byte per value on the wire, close to the exact sum.
    x = np.linspace(-1, 1, 4096, dtype=np.float32) * (rank + 1)
    exact = np.linspace(-1, 1, 4096, dtype=np.float32) * s
    info = comm.all_reduce(x, op=eccl.SUM, tag=tag + 3, quant=eccl.Quant.MINMAX_U8)
    ck.check(np.max(np.abs(x - exact)) < 0.1 * s, "quantised all_reduce error %g" % np.max(np.abs(x - exact)))
    ck.check(info.tx_bytes < 4096 * 4, "quantised all_reduce sent %d bytes (plain: %d)" % (info.tx_bytes, 4096 * 4))

    # A wrong call raises before anything is sent: the same tag then runs
    # a good call that pairs with the other ranks' only call of that tag.
    t = tag + 4
    if rank == 0:
        try:
            comm.all_reduce(np.ones(4, np.float32), np.ones(4, np.float64), tag=t)
            ck.check(False, "mismatched dtypes did not raise")
        except TypeError:
            pass
        try:
            comm.all_reduce(np.ones(4, np.float32), np.ones(5, np.float32), tag=t)
            ck.check(False, "mismatched sizes did not raise")
        except ValueError:
            pass
        try:
            comm.all_gather(np.ones(4, np.float32), np.ones(4 * world + 1, np.float32), tag=t)
            ck.check(False, "all_gather recvbuf of the wrong size did not raise")
        except ValueError:
            pass
    good = np.full(4, rank + 1.0, np.float32)
    comm.all_reduce(good, tag=t)
    ck.equal(good, np.full(4, s, np.float32), "the tag of a refused call runs the next call")

    # The GIL is released while a call blocks: rank 0 waits in a barrier the
    # others enter 0.6 s late, while a Python thread of its own counts.
    t = tag + 5
    if rank == 0:
        stamps, stop = [], threading.Event()

        def spin():
            k = 0
            while not stop.is_set():
                k += 1
                if k % 2000 == 0:
                    stamps.append(time.monotonic())

        th = threading.Thread(target=spin)
        th.start()
        t0 = time.monotonic()
        comm.barrier(tag=t)
        t1 = time.monotonic()
        stop.set()
        th.join()
        middle = [s_ for s_ in stamps if t0 + 0.15 < s_ < t1 - 0.15]
        out["gil"] = {"barrier_s": t1 - t0, "stamps_inside": len(middle)}
    else:
        time.sleep(0.6)
        comm.barrier(tag=t)


def scenario_torch(comm, index, n, args, ck, out):
    lib = TorchLib()
    collectives(comm, lib, TORCH_DTYPES, ck)
    torch = lib.torch
    # Non-contiguous tensors, unsupported dtypes: refused before sending.
    try:
        comm.all_reduce(torch.zeros(4, 4)[:, 0])
        ck.check(False, "non-contiguous tensor did not raise")
    except ValueError:
        pass
    try:
        comm.all_reduce(torch.zeros(4, dtype=torch.bool))
        ck.check(False, "bool tensor did not raise")
    except TypeError:
        pass
    try:
        comm.all_reduce(torch.zeros(4, dtype=torch.float32), np.zeros(4, np.float64))
        ck.check(False, "torch float32 with numpy float64 did not raise")
    except TypeError:
        pass
    # Mixed libraries, same dtype: both are host memory, fine.
    t = torch.full((4,), float(comm.rank + 1))
    a = np.zeros(4, np.float32)
    comm.all_reduce(t, a, tag=9000)
    w = comm.world_size
    ck.equal(a, np.full(4, w * (w + 1) / 2, np.float32), "torch sendbuf, numpy recvbuf")
    # A parameter (requires_grad) is a tensor like any other.
    p = torch.nn.Parameter(torch.ones(3))
    comm.all_reduce(p, tag=9001)
    ck.equal(p.detach().numpy(), np.full(3, w, np.float32), "all_reduce of an nn.Parameter")
    out["cuda"] = bool(torch.cuda.is_available())


def scenario_kill(comm, index, n, args, ck, out):
    """Worker n-1 SIGKILLs itself inside its second all-reduce, which the
    others entered 0.1 s before it (so they are surely inside theirs): they
    must fail with PeerLost, find their buffer as it was, bit for bit, and
    complete the retry on the survivors."""
    victim = n - 1
    size = 8 << 20  # float32 elements: 32 MiB, a call that lasts
    rng = np.random.default_rng(index)
    mine = rng.standard_normal(size).astype(np.float32)  # arbitrary bits, not small integers
    buf = mine.copy()
    comm.all_reduce(buf, tag=1)  # warm: links open
    in_call = threading.Event()
    if index == victim:
        def killer():
            in_call.wait()
            time.sleep(0.005)  # its C call has started moving data (the call lasts 30 ms and more)
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Thread(target=killer, daemon=True).start()
    for it in range(2, 30):
        buf[:] = mine
        before = buf.copy()
        comm.barrier(tag=1000 + it)
        if index == victim:
            time.sleep(0.1)  # the others wait inside their call meanwhile
            in_call.set()
        t0 = time.monotonic()
        try:
            comm.all_reduce(buf, tag=it)
        except eccl.PeerLost as e:
            out["lost_at"] = it
            out["call_s"] = time.monotonic() - t0
            out["error"] = {"class": type(e).__name__, "code": e.code, "call": e.call,
                            "is_eccl_error": isinstance(e, eccl.Error)}
            out["restored"] = bool(np.array_equal(buf.view(np.uint32), before.view(np.uint32)))
            break
    else:
        ck.check(False, "no PeerLost in 28 all-reduces after the kill")
        return
    # The retry runs on the survivors: world n - 1, the survivors' sum.
    out["world_after"] = comm.world_size
    buf[:] = mine
    comm.all_reduce(buf, tag=100)
    survivors = [i for i in range(n) if i != victim]
    want = np.zeros(size, np.float32)
    # Summation order differs from the library's: compare with a tolerance,
    # and the bit-exact parity across survivors through a digest.
    for i in survivors:
        want += np.random.default_rng(i).standard_normal(size).astype(np.float32)
    out["retry_close"] = bool(np.allclose(buf, want, atol=1e-4))
    out["retry_digest"] = int(np.bitwise_xor.reduce(buf.view(np.uint32)))


def scenario_elastic(comm, index, n, args, ck, out):
    """Workers 0 and 1 sync a model, admit worker 2 (a newcomer that waited
    for the file DIR/synced), sync again: the newcomer gets the model.
    Then every peer optimises the topology and all leave together."""
    flag = os.path.join(args[0], "synced")
    model = np.full(1000, 7.0 if index < 2 else 0.0, np.float32)
    step = np.array([41 if index < 2 else 0], np.int64)
    local = np.array([index], np.int64)  # may differ: not voted, not moved
    state = eccl.SharedState({"model": model, "step": step, "local": local}, revision=0, unvoted=["local"])
    if index < 2:
        state.revision = 1
        info = comm.sync_shared_state(state)
        ck.check(state.revision == 1 and info.revision == 1, "first sync revision %d" % state.revision)
        with open(flag, "w"):
            pass
        comm.admit_until(3)
        state.revision += 1
    else:
        state.revision = 1234  # a newcomer's revision is ignored: it adopts the elected one
    info = comm.sync_shared_state(state)
    out["sync"] = {"revision": state.revision, "keys_fetched": info.keys_fetched,
                   "rx_bytes": info.rx_bytes, "model_ok": bool(np.all(model == 7.0)),
                   "step": int(step[0]), "local": int(local[0])}
    out["world"] = comm.world_size
    topo = comm.optimize_topology(probe_ms=5, probe_conns=1)
    out["topo"] = {"pairs_measured": topo.pairs_measured, "unmeasured_links": topo.unmeasured_links}
    buf = np.ones(16, np.float64)
    comm.all_reduce(buf, tag=5)
    ck.equal(buf, np.full(16, 3.0), "all_reduce after optimize_topology")
    comm.leave()
    try:
        comm.barrier(tag=6)
        ck.check(False, "a call after leave() did not raise")
    except eccl.Closed:
        pass


SCENARIOS = {
    "collectives": scenario_collectives,
    "torch": scenario_torch,
    "kill": scenario_kill,
    "elastic": scenario_elastic,
}


def main():
    scenario, addr, index, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    args = sys.argv[5:]
    out = {"index": index, "scenario": scenario}
    ck = Checks()
    if scenario == "elastic" and index >= 2:
        # The newcomer registers once the first two synced.
        end = time.monotonic() + 30
        while not os.path.exists(os.path.join(args[0], "synced")):
            if time.monotonic() > end:
                raise RuntimeError("the first sync never happened")
            time.sleep(0.01)
    comm = eccl.Comm(addr, op_timeout_ms=OP_TIMEOUT_MS, peer_timeout_ms=3000, connect_timeout_ms=10000)
    try:
        comm.connect()
        comm.admit_until(2 if scenario == "elastic" else n)
        out["rank"] = comm.rank
        SCENARIOS[scenario](comm, index, n, args, ck, out)
        # The run ends as a whole: leave() is the vote after which no one's
        # going turns into a loss under a slower peer's last call.
        if scenario != "elastic":  # (it tests leave() itself)
            comm.leave()
    except Exception:
        ck.failures.append(traceback.format_exc())
    finally:
        comm.close()
    out["failures"] = ck.failures
    out["checks"] = ck.count
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
