"""eccl.launch: rank, world and rendezvous from torchrun's and Slurm's
variables; collect() ends what outlives its deadline."""

import subprocess
import sys
import time

import pytest

from eccl import launch


def test_torchrun_variables():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5",
           "MASTER_PORT": "1234", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}  # torchrun inside sbatch: torchrun wins
    assert launch.from_env(env) == launch.Launch(3, 8, 1, 2, "10.0.0.5", 1234, "torchrun")


def test_slurm_variables():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "3(x2)",
           "SLURM_JOB_NODELIST": "gpu[07-09,12],login1"}
    assert launch.from_env(env) == launch.Launch(5, 6, 2, 3, "gpu07", 29500, "slurm")
    env["MASTER_ADDR"], env["MASTER_PORT"] = "head", "4000"
    assert launch.from_env(env)[4:6] == ("head", 4000)
    assert launch.expand_first_host("n1,n2") == "n1"


def test_defaults_and_bad_values():
    assert launch.from_env({}) == launch.Launch(0, 1, 0, 1, "127.0.0.1", 29500, "default")
    with pytest.raises(ValueError):
        launch.from_env({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(ValueError):
        launch.from_env({"RANK": "x"})
    assert launch.master_addr({"ECCL_MASTER_ADDR": "h:1"}) == "h:1"
    with pytest.raises(ValueError):
        launch.master_addr({})


def test_collect_kills_at_the_deadline():
    procs = [subprocess.Popen([sys.executable, "-c", "print('{\"a\": 1}')"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    t0 = time.monotonic()
    done = launch.collect(procs, 3)
    assert time.monotonic() - t0 < 20
    assert done[0].rc == 0 and done[0].result == {"a": 1}
    assert done[1].rc == -9 and "deadline" in done[1].err and done[1].result is None
