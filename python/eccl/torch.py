"""torch.distributed on eccl: ``import eccl.torch`` registers backend "eccl".

    import torch.distributed as dist
    import eccl.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("eccl", init_method="tcp://127.0.0.1:29500",
                            rank=rank, world_size=world)

The process group is eccl._torch.ProcessGroupEccl (python/src/torch_pg.cpp):
rank 0 starts an eccl master in-process on a free port and publishes its
address through the c10d Store (key "eccl/master"); ECCL_MASTER_ADDR names
an external master instead. Every rank connects and the admission loop runs
until the eccl world has world_size peers. A lost peer fails the pending
Work (its wait() raises RuntimeError naming the eccl error, e.g.
ECCL_ERR_PEER_LOST) and breaks the group: build a new one on the survivors.
docs/python.md, "torch.distributed", says more.
"""

import torch.distributed as _dist

from eccl import _torch

ProcessGroupEccl = _torch.ProcessGroupEccl

BACKEND = "eccl"


def create_process_group(store, rank, world_size, timeout):
    """torch 1.13's backend creator signature: (store, rank, world_size,
    timeout) -> ProcessGroup."""
    return _torch.ProcessGroupEccl(store, rank, world_size, timeout)


def register():
    """Registers backend "eccl" with torch.distributed (idempotent)."""
    if BACKEND.upper() not in _dist.Backend._plugins:
        _dist.Backend.register_backend(BACKEND, create_process_group)


register()
