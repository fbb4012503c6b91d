"""Watch a started plan until the run is over, whichever launcher started it.

The run is over when every entry has exited 0; or when every training process has recorded its
``end`` and the only commands still running hold processes whose role never exits by itself
(parameter servers of some engines): those are stopped, which is not a failure; or when a
command fails or the run passes its timeout, and then everything is stopped. Which rank failed
is read from the per-rank event files: a rank with an ``error`` record, else one without its
``end`` record.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from dlscale.launchers.base import LaunchOutcome, LaunchPlan, PlanEntry, Running
from dlscale.metrics.events import events_path, read_events

POLL_S = 0.05
END_CHECK_S = 0.5
STDERR_TAIL_LINES = 20


def watch(
    plan: LaunchPlan,
    running: Running,
    run_dir: Path,
    timeout_s: float,
    blame: Callable[[PlanEntry], int | None] = lambda entry: None,
) -> LaunchOutcome:
    started = time.monotonic()
    failed: tuple[int, str] | None = None
    stopped: set[int] = set()
    last_end_check = 0.0
    try:
        while True:
            codes = running.poll()
            bad = [i for i, code in enumerate(codes) if code not in (None, 0) and i not in stopped]
            if bad:
                # Several commands seen dead in one poll: one killed by a signal is the cause
                # more often than its peers that then failed on a closed connection.
                index = min(bad, key=lambda i: (codes[i] >= 0, i))  # type: ignore[operator]
                entry = plan.entries[index]
                failed = _failed_rank(entry, codes[index], run_dir, blame(entry))
                break
            live = [i for i, code in enumerate(codes) if code is None and i not in stopped]
            if not live:
                break
            now = time.monotonic()
            if now - started > timeout_s:
                ranks = [r for i in live for r in plan.entries[i].ranks]
                failed = (
                    ranks[0],
                    (
                        f"timed out after {timeout_s:g} s (rank(s) {ranks} still running); "
                        "raise timeout_s or look for a hung worker"
                    ),
                )
                break
            if now - last_end_check > END_CHECK_S:
                last_end_check = now
                idle = _never_exiting(plan, live, run_dir)
                if idle:
                    running.stop(idle)
                    stopped.update(idle)
            time.sleep(POLL_S)
    finally:
        running.stop()
    codes = running.poll()
    returncodes = {
        rank: None if i in stopped else codes[i]
        for i, entry in enumerate(plan.entries)
        for rank in entry.ranks
    }
    duration = time.monotonic() - started
    if failed is None:
        return LaunchOutcome(ok=True, returncodes=returncodes, duration_s=duration)
    rank, reason = failed
    entry = next(e for e in plan.entries if rank in e.ranks)
    return LaunchOutcome(
        ok=False,
        returncodes=returncodes,
        failed_rank=rank,
        reason=reason,
        stderr_tail=_tail(entry.stderr),
        duration_s=duration,
    )


def _never_exiting(plan: LaunchPlan, live: list[int], run_dir: Path) -> list[int]:
    """Live entries that may be stopped: every training process has ended, and each of these
    holds a role that never exits and no process of an exiting role still at work."""
    processes = plan.layout.processes
    if not any(not processes[r].exits for i in live for r in plan.entries[i].ranks):
        return []
    if not all(_ended(run_dir, rank) for rank in plan.layout.training_ranks):
        return []
    return [
        i
        for i in live
        if any(not processes[r].exits for r in plan.entries[i].ranks)
        and all(_ended(run_dir, r) for r in plan.entries[i].ranks if processes[r].exits)
    ]


def _ended(run_dir: Path, rank: int) -> bool:
    return any(r.get("event") == "end" for r in read_events(events_path(run_dir, rank)))


def _failed_rank(
    entry: PlanEntry, code: int | None, run_dir: Path, reported: int | None
) -> tuple[int, str]:
    """The rank to blame for a failed command, and why: the one its launcher reports, else one
    that recorded an error, else one that did not record its end."""
    ranks = list(entry.ranks)
    events = {rank: read_events(events_path(run_dir, rank)) for rank in ranks}
    with_error = [r for r in ranks if any(e.get("event") == "error" for e in events[r])]
    without_end = [r for r in ranks if not any(e.get("event") == "end" for e in events[r])]
    reported_list = [reported] if reported in ranks else []
    rank = (reported_list or with_error or without_end or ranks)[0]
    what = f"rank {rank}" if len(ranks) == 1 else f"rank {rank} (command of ranks {ranks})"
    assert code is not None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return rank, f"{what} was killed by {name}"
    return rank, f"{what} exited with code {code}"


def _tail(path: Path) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return lines[-STDERR_TAIL_LINES:]
