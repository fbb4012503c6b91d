"""``dlscale microbench --backend mxnet-kv`` with real ps-lite processes in MXNet's own
environment (`make mxnet`): 2 workers, the scheduler and a server; the kvstore's push and pull
through the server (ps_pushpull) and its broadcast exact at every size, the figures recomputed
from the workers' own records, the ps fit (never a ring or tree fit from messages through the
servers), the collectives a kvstore has not said to be not measured, and every process gone
when the command returns; then a prediction's whole loop for mxnet-kv
(tests/distributed/whole_loop.py)."""

import json
import os
import statistics
from pathlib import Path

import pytest

from dlscale.contract.events import events_path, read_events
from tests.distributed.microbench_events import ran_this_checkout, slowest_per_iteration
from tests.distributed.processes import alive
from tests.distributed.whole_loop import check_the_whole_loop

pytestmark = pytest.mark.dist


def _running_in(directory: Path) -> list[int]:
    """Processes whose command line names ``directory`` (a rank's spec.json lies there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(directory) in command and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


SIZES = (4, 64 << 10, 1 << 20, 4 << 20)
"""Up to 4 MiB: the whole loop below needs the fit's bandwidth term, which a loaded machine
can hide at 1 MiB and below (a CI run: tf-mwms' 1 MiB no slower than its 4 B)."""


def test_the_kvstores_push_pull_and_broadcast_are_exact_and_fit_the_ps_pattern(cli, tmp_path):
    run = cli("microbench", "--backend", "mxnet-kv", "--workers", "2",
              "--sizes", "4,64k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "microbench failed" not in run.stderr
    offered_none = "mxnet-kv's library offers no such collective"
    assert (
        f"dlscale: not measured: all_reduce, all_gather, reduce_scatter, send_recv ({offered_none})"
        in run.stderr
    )
    (path,) = tmp_path.glob("microbench-mxnet-kv-w2-local-*/microbench.json")
    run_dir = path.parent
    assert ran_this_checkout(run_dir)  # the ranks ran this checkout's dlscale
    stored = json.loads(path.read_text())
    assert stored["error"] is None and stored["processes"] == 2  # the workers, not the servers
    assert stored["not_measured"] == dict.fromkeys(
        ("all_reduce", "all_gather", "reduce_scatter", "send_recv"), offered_none
    )
    rows = stored["rows"]
    assert [(r["collective"], r["bytes"]) for r in rows] == [
        (name, size) for name in ("broadcast", "ps_pushpull") for size in SIZES
    ]
    assert all(r["correct"] and r["max_error"] == 0 for r in rows), rows
    # 2 workers report; the scheduler (rank 2) and the server (rank 3) served and ended
    assert all(r["ranks_reporting"] == 2 and r["servers"] == 1 for r in rows), rows
    events = {rank: read_events(events_path(run_dir, rank)) for rank in range(4)}
    starts = {rank: next(e for e in ev if e["event"] == "start") for rank, ev in events.items()}
    assert [s["role"] for s in starts.values()] == ["worker", "worker", "scheduler", "server"]
    assert all(ev[-1]["event"] == "end" for ev in events.values())
    assert not [e for rank in (2, 3) for e in events[rank] if e["event"] == "collective"]
    # one figure by hand: the 64 KiB push and pull, from both workers' own times
    row = next(r for r in rows if r["collective"] == "ps_pushpull" and r["bytes"] == 64 << 10)
    slowest = slowest_per_iteration([events[0], events[1]], "ps_pushpull", 64 << 10)
    assert row["time_s"] == statistics.median(slowest) and len(slowest) == 20
    assert row["busbw_bytes_s"] == pytest.approx((64 << 10) / row["time_s"])  # 2(p-1)/p = 1
    # the ps pattern from the push and pull; no ring (no all_reduce) and no tree: the
    # broadcast went through the server
    assert stored["fit"] is None and set(stored["fits"]) == {"ps"}
    fit = stored["fits"]["ps"]
    assert fit["collective"] == "ps_pushpull" and fit["alpha_s"] >= 0
    assert fit["beta_s_per_byte"] >= 0 and fit["median_error"] < 1
    assert "ps fit (ps_pushpull): alpha" in run.stdout
    # every rank's process is gone: the workers freed the kvstore, which stopped the server
    # and the scheduler
    assert not [start["pid"] for start in starts.values() if alive(start["pid"])]
    assert not _running_in(tmp_path)
    # the whole loop: an mxnet-kv point beside it, predicted as ps-sync from the push and pull
    check_the_whole_loop(cli, tmp_path, "mxnet-kv", "ps-sync")
