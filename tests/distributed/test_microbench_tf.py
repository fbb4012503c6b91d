"""``dlscale microbench --backend tf-mwms`` with real TensorFlow workers (2 processes, the cluster
from TF_CONFIG, MultiWorkerMirroredStrategy started as its training backend starts it):
TensorFlow's collective all-reduce, all-gather and broadcast exact at every size, the figures
recomputed from the ranks' own records, the ring fit, reduce_scatter and send_recv (none on a
CPU in TensorFlow's collective ops) said to be not measured without failing the run, and both
ranks gone when the command returns; then a prediction's whole loop for tf-mwms
(tests/distributed/whole_loop.py)."""

import json
import statistics

import pytest

from dlscale.contract.events import events_path, read_events
from tests.distributed.microbench_events import ran_this_checkout, slowest_per_iteration
from tests.distributed.processes import processes_naming, wait_gone
from tests.distributed.whole_loop import check_the_whole_loop

pytestmark = pytest.mark.dist

NOT_OFFERED = "tf-mwms's library offers no such collective"


def test_tensorflows_collectives_are_exact_and_the_others_are_said_not_measured(cli, tmp_path):
    # up to 4 MiB: the whole loop below needs the fit's bandwidth term, which a loaded machine
    # can hide at 1 MiB and below (a CI run: "no microbench with a fitted network")
    run = cli("microbench", "--backend", "tf-mwms", "--workers", "2",
              "--sizes", "4,64k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = f"dlscale: not measured: reduce_scatter, send_recv, ps_pushpull ({NOT_OFFERED})"
    assert said in run.stderr
    assert "Traceback" not in run.stderr and "microbench failed" not in run.stderr
    (path,) = tmp_path.glob("microbench-tf-mwms-w2-local-*/microbench.json")
    stored = json.loads(path.read_text())
    assert stored["error"] is None and stored["config"]["launcher"] == "local"
    assert stored["not_measured"] == dict.fromkeys(
        ("reduce_scatter", "send_recv", "ps_pushpull"), NOT_OFFERED
    )
    rows = stored["rows"]
    assert {r["collective"] for r in rows} == {"all_reduce", "all_gather", "broadcast"}
    assert len(rows) == 3 * 4 and all(r["correct"] and r["max_error"] == 0 for r in rows), rows
    # 20 timed iterations, fewer once they would move more than 64 MiB: 16 of 4 MiB
    assert all(r["ranks_reporting"] == 2 for r in rows)
    assert all(r["iterations"] == (16 if r["bytes"] == 4 << 20 else 20) for r in rows), rows
    # all_gather's 4 B are one float per rank: 8 B in all
    sizes = {c: sorted(r["bytes"] for r in rows if r["collective"] == c) for c in
             ("all_reduce", "all_gather", "broadcast")}  # fmt: skip
    assert sizes["all_gather"] == [8, 64 << 10, 1 << 20, 4 << 20]
    assert sizes["all_reduce"] == sizes["broadcast"] == [4, 64 << 10, 1 << 20, 4 << 20]
    # one figure by hand: the 64 KiB all-reduce, from both ranks' own times
    row = next(r for r in rows if r["collective"] == "all_reduce" and r["bytes"] == 64 << 10)
    run_dir = path.parent
    assert ran_this_checkout(run_dir)  # the ranks ran this checkout's dlscale
    events = {rank: read_events(events_path(run_dir, rank)) for rank in (0, 1)}
    slowest = slowest_per_iteration([events[0], events[1]], "all_reduce", 64 << 10)
    assert row["time_s"] == statistics.median(slowest) and len(slowest) == 20
    assert row["busbw_bytes_s"] == pytest.approx((64 << 10) / row["time_s"])  # 2(p-1)/p = 1
    assert not [
        e for rank in (0, 1) for e in events[rank]
        if e["event"] == "collective" and e["collective"] in ("reduce_scatter", "send_recv")
    ]  # fmt: skip
    assert all(events[rank][-1]["event"] == "end" for rank in (0, 1))
    fit = stored["fit"]
    assert fit["pattern"] == "ring" and fit["collective"] == "all_reduce"
    assert fit["alpha_s"] >= 0 and fit["beta_s_per_byte"] >= 0
    assert stored["fits"]["ring"] == fit and stored["fits"]["tree"]["collective"] == "broadcast"
    assert "ring fit (all_reduce)" in run.stdout
    assert "reduce_scatter" not in run.stdout and "send_recv" not in run.stdout
    # both ranks left by themselves: nothing of the run is still running
    pids = [next(e["pid"] for e in events[rank] if e["event"] == "start") for rank in (0, 1)]
    assert not wait_gone(pids, 5.0) and not processes_naming(tmp_path)
    # the whole loop: a tf-mwms point beside it, predicted on a ring from these rows
    check_the_whole_loop(cli, tmp_path, "tf-mwms", "ring")
