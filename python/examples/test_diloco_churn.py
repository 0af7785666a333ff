"""DiLoCo under churn, both variants, as a test (ctest python_eccl_examples).

diloco.py's driver runs a real master and three workers; one SIGKILLs
itself while the others wait in outer step 3's all-reduce (they get
eccl.PeerLost and call it again on the survivors), and a newcomer joins at
step 6 of 12; it exits 1 when a
check of the run fails: a model hash or evaluation loss that differs
between the workers of a step, a survivor that had to fetch anything in a
shared-state sync, a newcomer that did not receive the model and the outer
momentum, a world that did not shrink and grow back, a loss that did not
fall. test_checks_catch_* feed the checks a real run's rows with one thing
broken, so that a check that could never fail would show.
"""

import copy
import os
import sys

import pytest

from eccl.launch import run_group

import diloco

HERE = os.path.dirname(os.path.abspath(__file__))
# Outer Nesterov 0.5 / 0.5 for both variants: with DiLoCo's 0.7 / 0.9 the
# first dozen outer steps still oscillate, and whether step 12 lands below
# step 3 then depends on the corpus, which is this repository's docs and
# changes with every edit of them. With 0.5 / 0.5 the final loss was 0.70
# to 0.76 of the first over four seeds of both variants (the check: 0.9).
# --kill-in-allreduce: the victim dies while the others wait inside step
# 3's all-reduce, so that the survivors' retry after eccl.PeerLost runs.
RUN = ["--workers", "3", "--outer-steps", "12", "--inner-steps", "6", "--kill-at", "3", "--join-at", "6",
       "--kill-in-allreduce", "--outer-lr", "0.5", "--momentum", "0.5", "--max-loss-ratio", "0.9", "--timeout", "75"]


@pytest.fixture(scope="module", params=["sync", "async"])
def run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    cmd = [sys.executable, os.path.join(HERE, "diloco.py"), "--out", str(out)] + RUN
    cmd += ["--async"] if request.param == "async" else []
    # The driver bounds its workers by --timeout; this bounds the driver,
    # and takes its master and workers with it if it has to kill it.
    p = run_group(cmd, 120)
    return p, p.result, out


def test_diloco_churn(run):
    p, summary, out = run
    assert p.rc == 0 and summary and summary["ok"], "stdout:\n%s\nstderr:\n%s" % (p.out[-4000:], p.err[-4000:])
    kinds = [e["kind"] for e in summary["events"]]
    assert kinds == ["kill", "join"], summary
    assert summary["steps_checked"] == 13, summary  # outer steps 0..12, every one hash-checked
    assert summary["loss_end"] < 0.9 * summary["loss_start"], summary
    assert 2 in summary["worlds"] and summary["worlds"][-1] == 3, summary
    # The survivors (workers 0 and 1) lost the victim inside the all-reduce
    # (both, unless one came to the call after the loss) and called it again.
    assert summary["peer_lost_retries"]["0"] + summary["peer_lost_retries"]["1"] >= 1, summary
    if summary["png"]:
        assert os.path.getsize(summary["png"]) > 1000


def rows_of(run):
    _, summary, _ = run
    rows = [r for r in diloco.read_rows(summary["tsv"]) if r["kind"] == "log"]
    return rows, summary["events"]


def test_checks_pass_on_the_run(run):
    rows, events = rows_of(run)
    assert diloco.check_run(rows, events, 3, 12, 0.9) == []


def test_checks_catch_a_diverged_model(run):
    rows, events = rows_of(run)
    bad = copy.deepcopy(rows)
    victim = next(r for r in bad if r["step"] == 8)
    victim["hash"] = "0" * 16
    assert any("models differ" in f for f in diloco.check_run(bad, events, 3, 12, 0.9))


def test_checks_catch_a_newcomer_without_the_model(run):
    rows, events = rows_of(run)
    bad = copy.deepcopy(rows)
    join = next(e for e in events if e["kind"] == "join")
    first = min((r for r in bad if r["worker"] == join["worker"]), key=lambda r: r["step"])
    first["keys_fetched"], first["rx_bytes"] = 0, 0
    assert any("did not receive the model" in f for f in diloco.check_run(bad, events, 3, 12, 0.9))


def test_checks_catch_a_loss_that_does_not_fall(run):
    rows, events = rows_of(run)
    bad = copy.deepcopy(rows)
    for r in bad:
        if r["step"] == 12:
            r["eval_loss"] = 99.0
    assert any("did not fall" in f for f in diloco.check_run(bad, events, 3, 12, 0.9))
