"""all_reduce busbw and a DDP step, backend="eccl" next to backend="gloo".

    PYTHONPATH=build/python /usr/bin/python3 python/bench/torch_allreduce.py [--world 2]
        [--min-mib 1] [--max-mib 64] [--iters 10] [--ddp-steps 20]

Starts --world ranks on 127.0.0.1 (fresh interpreters, a FileStore in a
temporary folder); each rank runs the eccl group, then the gloo group, in
the same process. Prints nccl-tests-style rows (float32 SUM, in place):
size, time per call (median of --iters after 2 warm-ups) and busbw =
bytes * 2 (n - 1) / n / time, then the DDP step time (median) of one MLP
(about 4.2 M parameters, 16 MiB of gradients, bucket_cap_mb 25) on seeded
synthetic data. Timing only: nothing is asserted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(args):
    import torch
    import torch.distributed as dist
    import eccl.torch  # noqa: F401

    rank, world = args.rank, args.world
    torch.set_num_threads(1)
    report = {}
    for backend in ("eccl", "gloo"):
        dist.init_process_group(backend, init_method="file://" + args.store + "." + backend, rank=rank,
                                world_size=world)
        rows = []
        mib = args.min_mib
        while mib <= args.max_mib:
            n = int(mib * (1 << 20)) // 4
            t = torch.ones(n, dtype=torch.float32)
            times = []
            for i in range(args.iters + 2):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            sec = statistics.median(times)
            rows.append((n * 4, sec, n * 4 * 2 * (world - 1) / world / sec / 1e9))
            mib *= 2
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024),
                                    torch.nn.ReLU(), torch.nn.Linear(1024, 10))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(rank)
        x, y = torch.randn(32, 1024, generator=g), torch.randint(0, 10, (32,), generator=g)
        steps = []
        for i in range(args.ddp_steps + 2):
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
            if i >= 2:
                steps.append(time.perf_counter() - t0)
        report[backend] = {"rows": rows, "ddp_step_s": statistics.median(steps),
                           "params": sum(p.numel() for p in model.parameters())}
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(report), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--min-mib", type=float, default=1)
    ap.add_argument("--max-mib", type=float, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--ddp-steps", type=int, default=20)
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--store", default="")
    args = ap.parse_args()
    if args.rank >= 0:
        return worker(args)
    from eccl.launch import job_secret
    job_secret()  # the ranks inherit it
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        base = [sys.executable, os.path.abspath(__file__), "--world", str(args.world), "--min-mib", str(args.min_mib),
                "--max-mib", str(args.max_mib), "--iters", str(args.iters), "--ddp-steps", str(args.ddp_steps),
                "--store", store]
        procs = [subprocess.Popen(base + ["--rank", str(r)], stdout=subprocess.PIPE, text=True)
                 for r in range(args.world)]
        outs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            sys.exit("a rank failed: exit codes %s" % [p.returncode for p in procs])
    rep = json.loads([l for l in outs[0].splitlines() if l.startswith("{")][-1])
    print("# torch.distributed all_reduce, float32 SUM in place, %d ranks on 127.0.0.1 (median of %d)"
          % (args.world, args.iters))
    print("%12s %12s %12s %12s %12s %8s" % ("size(B)", "eccl(us)", "eccl busbw", "gloo(us)", "gloo busbw",
                                            "eccl/gloo"))
    for (size, te, be), (_, tg, bg) in zip(rep["eccl"]["rows"], rep["gloo"]["rows"]):
        print("%12d %12.1f %12.3f %12.1f %12.3f %8.2f" % (size, te * 1e6, be, tg * 1e6, bg, be / bg))
    print("# DDP step (MLP, %d parameters, batch 32, median of %d): eccl %.2f ms, gloo %.2f ms (eccl/gloo %.2f)"
          % (rep["eccl"]["params"], args.ddp_steps, rep["eccl"]["ddp_step_s"] * 1e3, rep["gloo"]["ddp_step_s"] * 1e3,
             rep["eccl"]["ddp_step_s"] / rep["gloo"]["ddp_step_s"]))


if __name__ == "__main__":
    main()
