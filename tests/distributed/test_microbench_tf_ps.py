"""``dlscale microbench --backend tf-ps``: tf-ps' own push and pull through its ps tasks
(frameworks/tensorflow/ps_collectives.py), 2 TensorFlow workers in the synchronous layout the
microbench takes by itself: exact at every size, a message split over 2 ps tasks (a 4-byte one
held by one), the ps tasks recording nothing, a figure recomputed from the workers' own records,
the ps fit, every process gone; the asynchronous layout refused in one line; then with 1 ps task
a prediction's whole loop for tf-ps sync, its compute from tf-single's 1-worker point and its
push and pull priced on these rows (tests/distributed/whole_loop.py)."""

import json

import pytest

from tests.distributed.microbench_events import check_push_and_pull
from tests.distributed.processes import processes_naming, wait_gone
from tests.distributed.whole_loop import check_the_whole_loop

pytestmark = pytest.mark.dist

SIZES = (4, 64 << 10, 1 << 20)


def test_tf_ps_push_and_pull_through_two_ps_tasks_are_exact_and_fit_the_ps_pattern(cli, tmp_path):
    run = cli("microbench", "--backend", "tf-ps", "--workers", "2", "--set", "num_ps=2",
              "--sizes", "4,64k,1M", "--results", str(tmp_path))  # fmt: skip
    # the 64 KiB figure by hand, from both workers' own times
    events = check_push_and_pull(run, tmp_path, "tf-ps", SIZES, [1, 2, 2],
                                 ["worker", "worker", "ps", "ps"], 64 << 10)  # fmt: skip
    (path,) = tmp_path.glob("microbench-tf-ps-w2-local-*/microbench.json")
    options = json.loads(path.read_text())["config"]["options"]["backend"]
    assert options["ps_mode"] == "sync" and options["num_ps"] == 2  # sync: not asked for
    # the workers left by themselves, the launcher stopped the ps tasks: nothing still runs
    pids = [next(e["pid"] for e in ev if e["event"] == "start") for ev in events.values()]
    assert not wait_gone(pids, 5.0) and not processes_naming(tmp_path)


def test_the_asynchronous_layout_is_refused_in_one_line(cli, tmp_path):
    """Before anything starts (it started 4 TensorFlow processes, and the chief failed)."""
    run = cli("microbench", "--backend", "tf-ps", "--workers", "2", "--set", "ps_mode=async",
              "--sizes", "4", "--results", str(tmp_path / "r"))  # fmt: skip
    assert run.returncode == 2
    said = (
        "dlscale: error: dlscale microbench --backend tf-ps times the synchronous layout's push "
        "and pull (every worker its own process): leave out --set ps_mode=async, or set "
        "ps_mode=sync"
    )
    assert run.stderr.startswith(said) and len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists() and not processes_naming(tmp_path)


def test_a_tf_ps_point_is_priced_on_its_own_push_and_pull(cli, tmp_path):
    # tiny's gradient is 15,848 B: measured around it, and up to 4 MiB for the fit's bandwidth
    # term (which a loaded machine can hide at 1 MiB and below: tf-mwms' test says so too)
    run = cli("microbench", "--backend", "tf-ps", "--workers", "2",
              "--sizes", "4k,16k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    row = check_the_whole_loop(
        cli, tmp_path, "tf-ps", "ps-sync", options=("ps_mode=sync",), baseline="tf-single"
    )
    assert row["servers"] == 1
