"""Where a process stands in a launch: rank, world and rendezvous from the
launcher's environment, and local process groups that end in bounded time.

eccl's native API needs no rank: the master numbers peers in admission
order, and only its address is needed (``master_addr()``, from
ECCL_MASTER_ADDR). torch.distributed does need one, and launchers say it in
their own variables:

- rank: RANK (torchrun), SLURM_PROCID (srun), else 0;
- world size: WORLD_SIZE, SLURM_NTASKS, else 1;
- local rank: LOCAL_RANK, SLURM_LOCALID, else 0;
- local world size: LOCAL_WORLD_SIZE, the first count of
  SLURM_NTASKS_PER_NODE (or SLURM_TASKS_PER_NODE), else 1;
- rendezvous host: MASTER_ADDR; under Slurm without it the first host of
  SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST); else 127.0.0.1;
- rendezvous port: MASTER_PORT, else 29500 (torchrun's default).

torchrun's variables win where both are set (torchrun inside an sbatch
allocation sets its own). ``init_process_group(backend)`` forms a
torch.distributed group from them with a tcp:// rendezvous, so the same
script runs under torchrun, srun or a plain ``RANK=.. WORLD_SIZE=..`` shell
line (torch's own env:// reads only torchrun's names).

``collect(procs, timeout_s)`` waits for local child processes with one
deadline for all, SIGKILLs what is left at it and returns each one's exit
code, output and last JSON line: what eccl.bench, the examples' drivers and
the tests use to run peers as fresh interpreters without ever hanging;
``run_group(cmd, timeout_s)`` runs one command that starts processes of its
own and kills them all with it at the deadline.
"""

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections import namedtuple

DEFAULT_PORT = 29500

Launch = namedtuple("Launch", "rank world_size local_rank local_world_size master_addr master_port source")


def _int(env, name):
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, value)) from None


def expand_first_host(nodelist):
    """The first host of a Slurm hostlist: "node[03-05,9],gpu1" -> "node03".
    Enough for the rendezvous (the first node runs rank 0 under srun's block
    distribution); scontrol show hostnames does the full expansion."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError("cannot read a host from SLURM_JOB_NODELIST=%r" % nodelist)
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def from_env(env=None):
    """The rank, world and rendezvous this process was launched with (a
    Launch tuple; ``source`` says which launcher's variables were read:
    "torchrun", "slurm" or "default")."""
    env = os.environ if env is None else env
    if _int(env, "RANK") is not None or _int(env, "WORLD_SIZE") is not None:
        source = "torchrun"
        rank, world = _int(env, "RANK") or 0, _int(env, "WORLD_SIZE") or 1
        local_rank = _int(env, "LOCAL_RANK")
        local_world = _int(env, "LOCAL_WORLD_SIZE")
    elif _int(env, "SLURM_PROCID") is not None:
        source = "slurm"
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS") or 1
        local_rank = _int(env, "SLURM_LOCALID")
        # "2(x3),1": the first node's count; uneven layouts have no one answer.
        per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
        m = re.match(r"(\d+)", per_node)
        local_world = int(m.group(1)) if m else None
    else:
        source, rank, world, local_rank, local_world = "default", 0, 1, 0, 1
    if not 0 <= rank < world:
        raise ValueError("rank %d is not in a world of %d (%s variables)" % (rank, world, source))
    addr = env.get("MASTER_ADDR")
    if not addr:
        nodelist = (env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")) if source == "slurm" else None
        addr = expand_first_host(nodelist) if nodelist else "127.0.0.1"
    port = _int(env, "MASTER_PORT") or DEFAULT_PORT
    return Launch(rank, world, 0 if local_rank is None else local_rank, 1 if local_world is None else local_world,
                  addr, port, source)


def job_secret(env=None):
    """Makes up the job's secret where none is set: where ``env`` (default
    os.environ, which the processes this one starts inherit) has neither
    ECCL_AUTH_SECRET_FILE nor ECCL_AUTH_SECRET and ECCL_AUTH is not 0, sets
    ECCL_AUTH_SECRET to 64 fresh random hex digits, as eccl_auth_job_secret
    does for C launchers. Every master, relay and communicator of a job must
    hold the same secret (docs/protocol.md, "Authentication"). Returns
    ``env``."""
    env = os.environ if env is None else env
    if env.get("ECCL_AUTH") != "0" and not env.get("ECCL_AUTH_SECRET_FILE") and not env.get("ECCL_AUTH_SECRET"):
        env["ECCL_AUTH_SECRET"] = secrets.token_hex(32)
    return env


def master_addr(env=None, default=None):
    """The eccl master's HOST:PORT for eccl.Comm: ECCL_MASTER_ADDR (as the
    torch backend reads it), else ``default``."""
    env = os.environ if env is None else env
    addr = env.get("ECCL_MASTER_ADDR") or default
    if not addr:
        raise ValueError("no eccl master: set ECCL_MASTER_ADDR=HOST:PORT")
    return addr


def init_process_group(backend="eccl", launch=None, **kwargs):
    """torch.distributed.init_process_group(backend) with the rank, world and
    tcp:// rendezvous of ``launch`` (default: from_env()). backend "eccl"
    imports eccl.torch (registering it). Returns the Launch used."""
    import torch.distributed as dist
    if backend == "eccl":
        from . import torch as _  # noqa: F401  (registers the backend)
    launch = launch or from_env()
    dist.init_process_group(backend, init_method="tcp://%s:%d" % (launch.master_addr, launch.master_port),
                            rank=launch.rank, world_size=launch.world_size, **kwargs)
    return launch


# ---- local process groups ---------------------------------------------------------

Finished = namedtuple("Finished", "rc result out err")


def last_json(text):
    """The last line of ``text`` that is a JSON object, decoded, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def collect(procs, timeout_s):
    """Waits for every process of ``procs`` (started with stdout and stderr
    as text pipes) within one deadline of ``timeout_s`` for all; at the
    deadline every one still running is SIGKILLed, and its stderr says so.
    Returns [Finished(rc, result, out, err)] in the order given, ``result``
    being the last JSON line of its stdout (None without one)."""
    deadline = time.monotonic() + timeout_s
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_all(procs)
            out, err = p.communicate()
            err = (err or "") + "\n[killed: past the %.0f s deadline]" % timeout_s
        done.append(Finished(p.returncode, last_json(out or ""), out or "", err or ""))
    return done


def run_group(cmd, timeout_s, env=None):
    """Runs ``cmd`` in a session of its own and waits at most ``timeout_s``;
    at the deadline SIGKILLs the whole process group, so that what the
    command started (a master, workers) goes too. Returns a Finished."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        err += "\n[killed with its process group: past the %.0f s deadline]" % timeout_s
    return Finished(p.returncode, last_json(out), out, err)


def kill_all(procs):
    """SIGKILLs those of ``procs`` that still run (a cleanup path: nothing
    of theirs is worth waiting for) and reaps them."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass
