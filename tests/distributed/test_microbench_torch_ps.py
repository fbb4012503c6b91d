"""``dlscale microbench --backend torch-ps``: torch-ps' own push and pull through its server
ranks (frameworks/torch/ps_collectives.py), 2 workers on gloo: exact at every size, a message
split over 2 servers (a 4-byte one held by one), the servers serving every round and recording
nothing, the figures recomputed from the workers' own records, the ps fit, every process gone;
then with 1 server a prediction's whole loop for torch-ps, its push and pull priced on these rows
(tests/distributed/whole_loop.py)."""

import json
import statistics

import pytest

from dlscale.contract.events import events_path, read_events
from tests.distributed.microbench_events import ran_this_checkout, slowest_per_iteration
from tests.distributed.processes import alive
from tests.distributed.whole_loop import check_the_whole_loop

pytestmark = pytest.mark.dist

SIZES = (4, 64 << 10, 1 << 20, 4 << 20)


def test_torch_ps_push_and_pull_through_two_servers_are_exact_and_fit_the_ps_pattern(cli, tmp_path):
    run = cli("microbench", "--backend", "torch-ps", "--workers", "2", "--set", "num_servers=2",
              "--sizes", "4,64k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "microbench failed" not in run.stderr
    (path,) = tmp_path.glob("microbench-torch-ps-w2-local-*/microbench.json")
    run_dir = path.parent
    assert ran_this_checkout(run_dir)
    stored = json.loads(path.read_text())
    assert stored["error"] is None and stored["processes"] == 2  # the workers, not the servers
    offered_none = "torch-ps's library offers no such collective"
    assert stored["not_measured"] == dict.fromkeys(
        ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"), offered_none
    )
    rows = stored["rows"]
    assert [(r["collective"], r["bytes"]) for r in rows] == [("ps_pushpull", s) for s in SIZES]
    assert all(r["correct"] and r["max_error"] == 0 for r in rows), rows
    # one float32 element cannot be split: one server held it; the others over both
    assert [r["servers"] for r in rows] == [1, 2, 2, 2]
    assert all(r["ranks_reporting"] == 2 for r in rows), rows
    events = {rank: read_events(events_path(run_dir, rank)) for rank in range(4)}
    starts = {rank: next(e for e in ev if e["event"] == "start") for rank, ev in events.items()}
    assert [s["role"] for s in starts.values()] == ["worker", "worker", "server", "server"]
    assert all(ev[-1]["event"] == "end" for ev in events.values())
    assert not [e for rank in (2, 3) for e in events[rank] if e["event"] == "collective"]
    # one figure by hand: the 1 MiB push and pull, from both workers' own times
    row = next(r for r in rows if r["bytes"] == 1 << 20)
    slowest = slowest_per_iteration([events[0], events[1]], "ps_pushpull", 1 << 20)
    assert row["time_s"] == statistics.median(slowest) and len(slowest) == 20
    fit = stored["fits"]["ps"]
    assert set(stored["fits"]) == {"ps"} and fit["collective"] == "ps_pushpull"
    assert fit["alpha_s"] >= 0 and fit["beta_s_per_byte"] >= 0
    assert "ps fit (ps_pushpull): alpha" in run.stdout
    assert not [start["pid"] for start in starts.values() if alive(start["pid"])]


def test_a_torch_ps_point_is_priced_on_its_own_push_and_pull(cli, tmp_path):
    run = cli("microbench", "--backend", "torch-ps", "--workers", "2",
              "--sizes", "4k,64k,1M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    row = check_the_whole_loop(cli, tmp_path, "torch-ps", "ps-sync")
    assert row["servers"] == 1
