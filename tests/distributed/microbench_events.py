"""Reading a microbench run back from its ranks' own records, for recomputing its figures by
hand in the tests."""

from pathlib import Path
from typing import Any

import dlscale


def slowest_per_iteration(
    events_by_rank: list[list[dict[str, Any]]], collective: str, size: int
) -> list[float]:
    """Each timed iteration's time of the slowest of these ranks (their ``collective``
    records of ``size`` bytes): what a row's median is taken over."""
    mine = [
        next(e["times_s"] for e in events
             if e["event"] == "collective" and e["collective"] == collective
             and e["bytes"] == size)
        for events in events_by_rank
    ]  # fmt: skip
    return [max(times) for times in zip(*mine, strict=True)]


def ran_this_checkout(run_dir: Path) -> bool:
    """Whether the run's ranks imported the dlscale these tests import (its pythonpath link)."""
    here = Path(dlscale.__file__).resolve().parent
    return bool((run_dir / "pythonpath" / "dlscale").resolve() == here)


PUSH_AND_PULL_ONLY = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
"""What a parameter server's push-and-pull kernel does not measure."""


def check_push_and_pull(
    run: Any, results: Path, backend: str, sizes: tuple[int, ...], servers: list[int],
    roles: list[str], by_hand: int,
) -> dict[int, list[dict[str, Any]]]:  # fmt: skip
    """A push-and-pull microbench of 2 workers (torch-ps', tf-ps'): its ``ps_pushpull`` rows at
    ``sizes``, exact, held by ``servers``; the ranks' ``roles``, the servers recording nothing;
    the ``by_hand`` size's figure recomputed from both workers' own times; the ps fit. The
    ranks' events."""
    import json
    import statistics

    from dlscale.contract.events import events_path, read_events

    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "microbench failed" not in run.stderr
    (path,) = results.glob(f"microbench-{backend}-w2-local-*/microbench.json")
    assert ran_this_checkout(path.parent)
    stored = json.loads(path.read_text())
    assert stored["error"] is None and stored["processes"] == 2  # the workers, not the servers
    offered_none = f"{backend}'s library offers no such collective"
    assert stored["not_measured"] == dict.fromkeys(PUSH_AND_PULL_ONLY, offered_none)
    rows = stored["rows"]
    assert [(r["collective"], r["bytes"]) for r in rows] == [("ps_pushpull", s) for s in sizes]
    assert all(r["correct"] and r["max_error"] == 0 for r in rows), rows
    assert [r["servers"] for r in rows] == servers  # one float32 is held by one server
    assert all(r["ranks_reporting"] == 2 for r in rows), rows
    events = {rank: read_events(events_path(path.parent, rank)) for rank in range(len(roles))}
    starts = [next(e for e in ev if e["event"] == "start") for ev in events.values()]
    assert [s["role"] for s in starts] == roles
    assert events[0][-1]["event"] == events[1][-1]["event"] == "end"
    assert not [e for rank in events if rank >= 2 for e in events[rank]
                if e["event"] == "collective"]  # fmt: skip
    row = next(r for r in rows if r["bytes"] == by_hand)
    slowest = slowest_per_iteration([events[0], events[1]], "ps_pushpull", by_hand)
    assert row["time_s"] == statistics.median(slowest) and len(slowest) == 20
    fit = stored["fits"]["ps"]
    assert set(stored["fits"]) == {"ps"} and fit["collective"] == "ps_pushpull"
    assert fit["alpha_s"] >= 0 and fit["beta_s_per_byte"] >= 0
    assert "ps fit (ps_pushpull): alpha" in run.stdout
    return events
