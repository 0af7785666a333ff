"""One rank of the torch.distributed tests (test_torch_backend.py starts it as
a fresh /usr/bin/python3 with PYTHONPATH at the build tree):

    torch_worker.py SCENARIO RANK WORLD STORE_FILE [ARGS...]

It prints progress lines and, last, one JSON line {"rank", "failures", ...}.
A failed check is recorded, not raised, so that one run reports them all.
"""

import hashlib
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import eccl.torch  # noqa: F401  registers backend "eccl"

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


class Checks:
    def __init__(self):
        self.failures = []

    def equal(self, got, want, what):
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        if not ok:
            self.failures.append("%s: got %s %s, want %s %s" % (what, got.dtype, got.flatten()[:8].tolist(),
                                                                 want.dtype, want.flatten()[:8].tolist()))
        return ok

    def true(self, cond, what):
        if not cond:
            self.failures.append(what)
        return cond


def inputs(rank, n, dtype):
    # Small positive integers: sums, products, averages of up to three ranks
    # are exact in every dtype, so the checks are element by element.
    return ((torch.arange(n) % 3) + 1 + rank).to(dtype)


def out(result):
    print(json.dumps(result), flush=True)


def init(backend, rank, world, store_file):
    if os.environ.get("MASTER_PORT") and backend == "eccl":
        # torchrun's way: env:// (a TCPStore on MASTER_ADDR:MASTER_PORT)
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    else:
        dist.init_process_group(backend, init_method="file://" + store_file, rank=rank, world_size=world)


# ---- every collective on every dtype ---------------------------------------------

def collectives(rank, world, store_file, extra):
    stagger = float(extra[0]) if extra else 0.0
    ck = Checks()
    if stagger:
        # Staggered starts make the eccl admission order differ from c10d's
        # rank order (the highest rank first), so that the rank table is
        # used. Every rank first waits for the others' imports (seconds
        # apart on a loaded machine), so that only the stagger orders them.
        open("%s.imported.%d" % (store_file, rank), "w").close()
        while not all(os.path.exists("%s.imported.%d" % (store_file, r)) for r in range(world)):
            time.sleep(0.05)
        time.sleep(stagger * (world - 1 - rank))
    init("eccl", rank, world, store_file)
    pg = dist.distributed_c10d._get_default_group()
    ck.true(dist.get_backend() == "eccl", "backend is %r" % dist.get_backend())
    eranks = list(pg.eccl_ranks)
    ck.true(sorted(eranks) == list(range(world)), "eccl rank table %s is not a permutation" % eranks)
    n = 12 * world  # divisible by world for the scatter layouts
    for dt in DTYPES:
        name = str(dt).replace("torch.", "")
        alls = [inputs(r, n, dt) for r in range(world)]
        total = sum(a.to(torch.int64) for a in alls).to(dt)

        # all_reduce: every op; AVG on floats only (c10d has no integer AVG)
        ops = [(dist.ReduceOp.SUM, total),
               (dist.ReduceOp.MAX, torch.stack(alls).max(0).values),
               (dist.ReduceOp.MIN, torch.stack(alls).min(0).values),
               (dist.ReduceOp.PRODUCT, torch.stack(alls).to(torch.int64).prod(0).to(dt))]
        if dt.is_floating_point:
            ops.append((dist.ReduceOp.AVG, (total.to(torch.float64) / world).to(dt)))
        for op, want in ops:
            t = alls[rank].clone()
            dist.all_reduce(t, op=op)
            ck.equal(t, want, "%s all_reduce %s" % (name, op))

        # async all_reduce: wait() and the Future's value
        t = alls[rank].clone()
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        val = fut.wait()
        ck.true(work.is_completed(), "%s async all_reduce: work not completed after its future" % name)
        ck.true(isinstance(val, list) and len(val) == 1, "%s future value %r" % (name, type(val)))
        ck.equal(val[0], total, "%s async all_reduce future value" % name)
        ck.true(work.wait(), "%s async work.wait()" % name)
        ck.equal(t, total, "%s async all_reduce tensor" % name)

        # several in flight at once, waited in reverse
        ts = [alls[rank].clone() * (k + 1) for k in range(3)]
        works = [dist.all_reduce(x, async_op=True) for x in ts]
        for w in reversed(works):
            w.wait()
        for k, x in enumerate(ts):
            ck.equal(x, total * (k + 1), "%s concurrent all_reduce %d" % (name, k))

        # all_reduce_coalesced
        a, b = alls[rank][:5].clone(), alls[rank][5:].clone().reshape(-1, 1)
        dist.all_reduce_coalesced([a, b])
        ck.equal(a, total[:5], "%s all_reduce_coalesced a" % name)
        ck.equal(b, total[5:].reshape(-1, 1), "%s all_reduce_coalesced b" % name)

        # broadcast and reduce from every root
        for root in range(world):
            t = alls[rank].clone()
            dist.broadcast(t, src=root)
            ck.equal(t, alls[root], "%s broadcast root %d" % (name, root))
            t = alls[rank].clone()
            dist.reduce(t, dst=root)
            if rank == root:
                ck.equal(t, total, "%s reduce root %d" % (name, root))

        # all_gather: list and into one tensor
        lst = [torch.zeros(n, dtype=dt) for _ in range(world)]
        dist.all_gather(lst, alls[rank])
        for r in range(world):
            ck.equal(lst[r], alls[r], "%s all_gather block %d" % (name, r))
        flat = torch.zeros(world * n, dtype=dt)
        dist.all_gather_into_tensor(flat, alls[rank])
        ck.equal(flat, torch.cat(alls), "%s all_gather_into_tensor" % name)

        # reduce_scatter: list and from one tensor
        per = n // world
        mine = total[rank * per:(rank + 1) * per]
        o = torch.zeros(per, dtype=dt)
        dist.reduce_scatter(o, list(alls[rank].split(per)))
        ck.equal(o, mine, "%s reduce_scatter" % name)
        o = torch.zeros(per, dtype=dt)
        dist.reduce_scatter_tensor(o, alls[rank].clone())
        ck.equal(o, mine, "%s reduce_scatter_tensor" % name)
        o = torch.zeros(per, dtype=dt)
        dist.reduce_scatter_tensor(o, alls[rank].clone(), op=dist.ReduceOp.MAX)
        ck.equal(o, torch.stack(alls).max(0).values[rank * per:(rank + 1) * per],
                 "%s reduce_scatter_tensor MAX" % name)

        # all_to_all_single: equal blocks, then uneven splits (rank i sends
        # i + j + 1 rows of 2 to rank j)
        o = torch.zeros(n, dtype=dt)
        dist.all_to_all_single(o, alls[rank].clone())
        ck.equal(o, torch.cat([alls[i][rank * per:(rank + 1) * per] for i in range(world)]),
                 "%s all_to_all_single" % name)
        ins = [sum(i + j + 1 for j in range(world)) for i in range(world)]
        src = [((torch.arange(ins[i] * 2) % 7) + 10 * i).to(dt).reshape(-1, 2) for i in range(world)]
        in_splits = [rank + j + 1 for j in range(world)]
        out_splits = [i + rank + 1 for i in range(world)]
        o = torch.zeros(sum(out_splits), 2, dtype=dt)
        dist.all_to_all_single(o, src[rank].clone(), out_splits, in_splits)
        want = []
        for i in range(world):
            start = sum(i + j + 1 for j in range(rank))
            want.append(src[i][start:start + i + rank + 1])
        ck.equal(o, torch.cat(want), "%s all_to_all_single uneven" % name)

        # all_to_all: lists of tensors of different sizes
        ins_l = [((torch.arange(rank + j + 1) + 100 * rank + j)).to(dt) for j in range(world)]
        outs_l = [torch.zeros(i + rank + 1, dtype=dt) for i in range(world)]
        dist.all_to_all(outs_l, ins_l)
        for i in range(world):
            ck.equal(outs_l[i], (torch.arange(i + rank + 1) + 100 * i + rank).to(dt),
                     "%s all_to_all from %d" % (name, i))

        # send/recv around the ring (async both ways), then a blocking pair
        right, left = (rank + 1) % world, (rank - 1) % world
        r = torch.zeros(n, dtype=dt)
        sw = dist.isend(alls[rank].clone(), right)
        rw = dist.irecv(r, left)
        sw.wait()
        rw.wait()
        ck.equal(r, alls[left], "%s isend/irecv from left" % name)
        if rank == 0:
            dist.send(alls[0] * 2, world - 1, tag=7)
        elif rank == world - 1:
            r = torch.zeros(n, dtype=dt)
            dist.recv(r, 0, tag=7)
            ck.equal(r, alls[0] * 2, "%s send/recv tag 7" % name)

    dist.barrier()
    # Argument checks raise before anything is sent.
    for what, fn in [("non-contiguous", lambda: dist.all_reduce(torch.zeros(4, 4).t())),
                     ("BAND", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=dist.ReduceOp.BAND)),
                     ("bool reduction", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.bool)))]:
        try:
            fn()
            ck.true(False, "%s: no exception" % what)
        except (RuntimeError, ValueError, TypeError):
            pass
    dist.barrier()
    dist.destroy_process_group()
    out({"rank": rank, "failures": ck.failures, "eccl_ranks": eranks})


# ---- DDP: eccl against gloo ---------------------------------------------------------

def make_data(seed, rank, steps, batch=16, dim=32):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    w_true = torch.randn(dim, 1, generator=torch.Generator().manual_seed(seed))
    xs = [torch.randn(batch, dim, generator=g) for _ in range(steps)]
    ys = [torch.tanh(x @ w_true) + 0.1 * torch.randn(batch, 1, generator=g) for x in xs]
    return xs, ys


def make_model(seed, rank):
    # Each rank starts from its own seed: DDP's construction broadcasts
    # rank 0's parameters, so the broadcast is exercised too.
    torch.manual_seed(seed + 17 * rank)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 1))


def train(backend, rank, world, store_file, steps, seed=1, on_step=None):
    init(backend, rank, world, store_file)
    model = torch.nn.parallel.DistributedDataParallel(make_model(seed, rank), bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = make_data(seed, rank, min(steps, 64))  # cycled: ddp_kill runs "forever"
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs[step % len(xs)]), ys[step % len(ys)])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step:
            on_step(step)
    params = [p.detach().clone() for p in model.module.parameters()]
    dist.destroy_process_group()
    return params, losses


def digest(params):
    h = hashlib.sha256()
    for p in params:
        h.update(p.numpy().tobytes())
    return h.hexdigest()


def ddp(rank, world, store_file, extra):
    steps = int(extra[0])
    ck = Checks()
    p_eccl, l_eccl = train("eccl", rank, world, store_file, steps)
    p_gloo, l_gloo = train("gloo", rank, world, store_file + ".gloo", steps)
    for i, (a, b) in enumerate(zip(p_eccl, p_gloo)):
        if world == 2:
            # sums of two are order-free: bit for bit
            ck.equal(a, b, "parameter %d eccl vs gloo" % i)
        else:
            ck.true(torch.allclose(a, b, rtol=1e-5, atol=1e-6), "parameter %d eccl vs gloo (allclose)" % i)
    ck.true(l_eccl[-1] < l_eccl[0], "eccl loss did not fall: %s" % l_eccl[:3])
    out({"rank": rank, "failures": ck.failures, "digest_eccl": digest(p_eccl), "digest_gloo": digest(p_gloo),
         "loss_eccl": l_eccl, "loss_gloo": l_gloo})


# ---- a peer lost ---------------------------------------------------------------------

def ddp_kill(rank, world, store_file, extra):
    """Trains with backend eccl and prints "step N" after each step; the test
    SIGKILLs the victim. The survivor reports the exception and its time."""
    steps = int(extra[0])

    def on_step(step):
        print("step %d" % step, flush=True)
        time.sleep(0.02)

    t0 = time.monotonic()
    try:
        train("eccl", rank, world, store_file, steps, on_step=on_step)
        out({"rank": rank, "failures": ["training finished: no exception"], "error": None})
    except RuntimeError as e:
        print("error after %.2f s: %s" % (time.monotonic() - t0, e), flush=True)
        out({"rank": rank, "failures": [], "error": str(e), "t_error": time.monotonic()})


def allreduce_kill(rank, world, store_file, extra):
    """Rank world-1 SIGKILLs itself instead of joining a large all_reduce that
    the others are in: their wait() must raise, the tensor as it was."""
    init("eccl", rank, world, store_file)
    t = torch.arange(1 << 20, dtype=torch.float32) + rank
    dist.all_reduce(t)  # one that works
    dist.barrier()
    if rank == world - 1:
        time.sleep(0.3)
        os.kill(os.getpid(), 9)
    before = (torch.arange(1 << 20, dtype=torch.float32) * 7).contiguous()
    t = before.clone()
    t0 = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    err = None
    try:
        work.wait()
    except RuntimeError as e:
        err = str(e)
    waited = time.monotonic() - t0
    ck = Checks()
    ck.true(err is not None, "all_reduce with a dead peer did not raise")
    if err is not None:
        ck.true("ECCL_ERR_PEER_LOST" in err, "error does not name ECCL_ERR_PEER_LOST: %s" % err)
        ck.equal(t, before, "tensor restored after the failed all_reduce")
    # The group is broken now: the next op raises at once.
    try:
        dist.all_reduce(torch.ones(4))
        ck.true(False, "an op on the broken group did not raise")
    except RuntimeError as e:
        ck.true("broken" in str(e), "next op: %s" % e)
    out({"rank": rank, "failures": ck.failures, "error": err, "waited_s": waited})
    os._exit(0)  # the group's destructor would only wait on the dead peer's master link


def solo(rank, world, store_file, extra):
    """world_size 1: every collective returns its input (libeccl is not
    called: its collectives need two peers)."""
    ck = Checks()
    init("eccl", 0, 1, store_file)
    x = torch.arange(6, dtype=torch.float32)
    t = x.clone()
    dist.all_reduce(t)
    ck.equal(t, x, "solo all_reduce")
    w = dist.all_reduce(t, async_op=True)
    ck.equal(w.get_future().wait()[0], x, "solo future")
    dist.broadcast(t, 0)
    dist.reduce(t, 0)
    ck.equal(t, x, "solo broadcast/reduce")
    o = torch.zeros(6)
    dist.all_gather_into_tensor(o, x)
    ck.equal(o, x, "solo all_gather_into_tensor")
    lst = [torch.zeros(6)]
    dist.all_gather(lst, x)
    ck.equal(lst[0], x, "solo all_gather")
    o = torch.zeros(6)
    dist.reduce_scatter_tensor(o, x)
    ck.equal(o, x, "solo reduce_scatter_tensor")
    o = torch.zeros(6)
    dist.reduce_scatter(o, [x.clone()])
    ck.equal(o, x, "solo reduce_scatter")
    o = torch.zeros(6)
    dist.all_to_all_single(o, x)
    ck.equal(o, x, "solo all_to_all_single")
    outs = [torch.zeros(6)]
    dist.all_to_all(outs, [x.clone()])
    ck.equal(outs[0], x, "solo all_to_all")
    dist.barrier()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()
    dist.destroy_process_group()
    out({"rank": 0, "failures": ck.failures})


def between_kill(rank, world, store_file, extra):
    """Rank world-1 SIGKILLs itself between two calls; once libeccl has
    re-formed its ring on the survivors, their next all_reduce would run on
    world-1 peers: it must raise, not return a sum of the survivors."""
    init("eccl", rank, world, store_file)
    t = torch.ones(1000)
    dist.all_reduce(t)
    dist.barrier()
    if rank == world - 1:
        os.kill(os.getpid(), 9)
    time.sleep(2.0)  # the loss is seen and the ring re-formed meanwhile
    ck = Checks()
    t = torch.ones(1000)
    err = None
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        err = str(e)
    ck.true(err is not None, "all_reduce on a group that lost a peer returned %s" % t[:4].tolist())
    if err is not None:
        ck.true("ECCL_ERR_PEER_LOST" in err or "ECCL_ERR_TOO_FEW_PEERS" in err, "error: %s" % err)
    out({"rank": rank, "failures": ck.failures, "error": err})
    os._exit(0)


SCENARIOS = {"solo": solo, "between_kill": between_kill, "collectives": collectives, "ddp": ddp, "ddp_kill": ddp_kill, "allreduce_kill": allreduce_kill}

if __name__ == "__main__":
    scenario, rank, world, store_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    try:
        SCENARIOS[scenario](rank, world, store_file, sys.argv[5:])
    except Exception:
        traceback.print_exc()
        out({"rank": rank, "failures": ["exception: " + traceback.format_exc()[-2000:]]})
        sys.exit(1)
