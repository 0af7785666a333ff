"""DDP with backend="eccl" next to backend="gloo": one seed, one loss curve.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/ddp.py [--world 2] [--steps 300] [--out DIR]

Without --worker this is the driver: it launches --world ranks for each
backend in turn, the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT in each rank's environment), then writes
DIR/ddp.tsv (both curves) and DIR/ddp.png (loss against step and wall
time) and exits 1 if the curves differ: with 2 ranks every gradient
all-reduce sums two numbers, which is order-free, so the losses must be
equal bit for bit; with more ranks the two libraries may add in different
orders and the losses must agree within 1e-4 (relative).

A rank (--worker) reads its rank and world through eccl.launch, so the
same script runs under a launcher:

    torchrun --nproc_per_node 2 python/examples/ddp.py --worker --backend eccl
    srun -n 4 python3 python/examples/ddp.py --worker --backend eccl   # MASTER_ADDR: the first node

The model is common.py's character MLP on this repository's docs; each
rank draws its own batches, AdamW, batch 32 per rank.
"""

import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def worker(a):
    import torch
    import eccl.launch
    from common import CharMLP, Corpus, digest, loss_on, train_step

    torch.set_num_threads(1)
    launch = eccl.launch.init_process_group(a.backend)
    corpus = Corpus()
    torch.manual_seed(a.seed)
    model = CharMLP(len(corpus.vocab))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr)
    gen = torch.Generator().manual_seed(a.seed * 1000 + launch.rank)
    log = open(a.log, "w") if a.log and launch.rank == 0 else None
    t0 = time.time()
    for step in range(a.steps):
        loss = train_step(ddp, opt, corpus, a.batch, gen)
        if log:
            log.write("%s\t%d\t%.4f\t%r\n" % (a.backend, step, time.time() - t0, loss))
    if log:
        with torch.no_grad():
            log.write("# final\t%s\t%r\n" % (digest(torch.cat([p.reshape(-1) for p in model.parameters()])),
                                             loss_on(model, corpus.eval_x, corpus.eval_y).item()))
        log.close()
    torch.distributed.destroy_process_group()
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_backend(a, backend, logs):
    """--world ranks of this script with torchrun's variables; returns
    ([(step, wall_s, loss)], final hash, final eval loss, wall time)."""
    from eccl.launch import collect, job_secret, kill_all
    log = os.path.join(logs, backend + ".tsv")
    port = free_port()
    base = {k: v for k, v in job_secret().items() if not k.startswith(("SLURM_", "ECCL_MASTER"))}
    t0 = time.time()
    procs = []
    try:
        for rank in range(a.world):
            env = dict(base, RANK=str(rank), WORLD_SIZE=str(a.world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(a.world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--backend",
                                           backend, "--steps", str(a.steps), "--batch", str(a.batch), "--lr",
                                           str(a.lr), "--seed", str(a.seed), "--log", log],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        done = collect(procs, a.timeout)
    finally:
        kill_all(procs)
    wall = time.time() - t0
    for rank, d in enumerate(done):
        if d.rc != 0:
            raise RuntimeError("%s rank %d: exit %s\n%s" % (backend, rank, d.rc, d.err[-3000:]))
    points, final = [], None
    for line in open(log):
        parts = line.rstrip("\n").split("\t")
        if parts[0] == "# final":
            final = (parts[1], float(parts[2]))
        else:
            points.append((int(parts[1]), float(parts[2]), float(parts[3])))
    return points, final, wall


def driver(a):
    os.makedirs(a.out, exist_ok=True)
    logs = os.path.join(a.out, "ddp.logs")
    os.makedirs(logs, exist_ok=True)
    runs = {b: run_backend(a, b, logs) for b in ("eccl", "gloo")}
    tsv = os.path.join(a.out, "ddp.tsv")
    with open(tsv, "w") as f:
        f.write("# DDP, %d ranks, seed %d: rank 0's training loss per step, both backends\n" % (a.world, a.seed))
        f.write("step\teccl_loss\tgloo_loss\teccl_wall_s\tgloo_wall_s\n")
        for (s, we, le), (_, wg, lg) in zip(runs["eccl"][0], runs["gloo"][0]):
            f.write("%d\t%r\t%r\t%.4f\t%.4f\n" % (s, le, lg, we, wg))
    failures = []
    exact = a.world == 2
    for (s, _, le), (_, _, lg) in zip(runs["eccl"][0], runs["gloo"][0]):
        if (le != lg) if exact else abs(le - lg) > 1e-4 * abs(lg):
            failures.append("step %d: eccl loss %r, gloo loss %r" % (s, le, lg))
            break
    if len(runs["eccl"][0]) != a.steps or len(runs["gloo"][0]) != a.steps:
        failures.append("a run logged %d and %d of %d steps" % (len(runs["eccl"][0]), len(runs["gloo"][0]), a.steps))
    if exact and runs["eccl"][1][0] != runs["gloo"][1][0]:
        failures.append("final models differ: eccl %s, gloo %s" % (runs["eccl"][1][0], runs["gloo"][1][0]))
    first, last = runs["eccl"][0][0][2], sum(p[2] for p in runs["eccl"][0][-10:]) / 10
    if not last < 0.8 * first:
        failures.append("the loss did not fall: %.3f -> %.3f (mean of the last 10 steps)" % (first, last))
    png = None
    if not a.no_plot:
        from common import plot
        png = os.path.join(a.out, "ddp.png")
        if not plot(png, "DDP, %d ranks: backend eccl and gloo, same seed" % a.world, [
                {"xlabel": "step", "ylabel": "training loss, rank 0 (nats/char)",
                 "curves": [(b, [(s, l) for s, _, l in runs[b][0]]) for b in ("eccl", "gloo")]},
                {"xlabel": "wall time since the first step (s)", "ylabel": "training loss, rank 0 (nats/char)",
                 "curves": [(b, [(w, l) for _, w, l in runs[b][0]]) for b in ("eccl", "gloo")]}]):
            png = None
    for b in ("eccl", "gloo"):
        pts = runs[b][0]
        print("%s: %d steps, loss %.3f -> %.3f, eval %.4f, model %s; training %.1f s, launch to exit %.1f s"
              % (b, len(pts), pts[0][2], pts[-1][2], runs[b][1][1], runs[b][1][0], pts[-1][1], runs[b][2]))
    print("curves %s (%s); %s%s" % ("equal" if not failures else "DIFFER", "bit for bit" if exact else "within 1e-4",
                                    tsv, ", " + png if png else ""))
    for f in failures:
        print("  check failed: " + f)
    return 1 if failures else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true",
                    help="run as one rank (rank and world from torchrun's or Slurm's variables)")
    ap.add_argument("--backend", default="eccl", help="--worker: the torch.distributed backend")
    ap.add_argument("--log", help="--worker: rank 0 writes its losses here")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="ddp-out")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--timeout", type=float, default=300, help="each backend's run, s")
    a = ap.parse_args(argv)
    return worker(a) if a.worker else driver(a)


if __name__ == "__main__":
    sys.exit(main())
