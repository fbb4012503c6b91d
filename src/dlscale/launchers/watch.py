"""Watch a started plan until the run is over, whichever launcher started it.

The run is over when every entry has exited 0; or when every training process has recorded its
``end`` and the only commands still running hold processes whose role never exits by itself
(parameter servers of some engines): those are stopped, which is not a failure; or when a
command fails or the run passes its timeout, and then everything is stopped. Which rank failed
is read from the per-rank event files: a rank with an ``error`` record, else one without its
``end`` record; a rank the kernel's OOM killer killed is said to be out of memory where the
kernel shows it (:mod:`dlscale.launchers.oom`). On a timeout, the rank that looks hung
(:func:`hung_rank`): one whose process is stopped, else the training rank with the fewest
windows, else the one whose last record is the oldest. The loop polls the commands every
50 ms; the event files are read every 0.5 s only while a role that never exits runs, and once
on a timeout.
"""

from __future__ import annotations

import math
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlscale.contract.events import events_path, read_events
from dlscale.contract.files import read_tail
from dlscale.contract.layout import ProcessLayout
from dlscale.contract.text import clip
from dlscale.launchers.base import LaunchOutcome, LaunchPlan, PlanEntry, Running
from dlscale.launchers.oom import OomWatch, out_of_memory
from dlscale.runtime.procfs import process_state

POLL_S = 0.05
SETTLE_S = 0.5
"""How long the watcher waits, after seeing ranks fail with an exit code, for a rank killed by
a signal to show as such (the cause, more often than the peers that failed after it)."""
END_CHECK_S = 0.5
STDERR_TAIL_LINES = 20
TAIL_BYTES = 64 * 1024
TAIL_LINE_CHARS = 2000


def watch(
    plan: LaunchPlan,
    running: Running,
    run_dir: Path,
    timeout_s: float,
    blame: Callable[[PlanEntry], int | None] = lambda entry: None,
) -> LaunchOutcome:
    oom = OomWatch.start()  # the OOM killer's counters before any rank allocates much
    try:
        started = last = time.monotonic()
        queued_s = 0.0  # waited for a scheduler: counts neither to the timeout nor the duration
        failed: tuple[int, str] | None = None
        stopped: set[int] = set()
        ended: set[int] = set()  # ranks seen to record their end (a rank ends once)
        last_end_check = 0.0
        while True:
            codes = running.poll()
            bad = [i for i, code in enumerate(codes) if code not in (None, 0) and i not in stopped]
            first = set(bad)
            if bad and all(codes[i] > 0 for i in bad):  # type: ignore[operator]
                # A rank killed by a signal closes its sockets before its exit status can be
                # read, so a peer that failed on that closed connection can be seen first:
                # look once more, a moment later, before naming the cause.
                time.sleep(SETTLE_S)
                codes = running.poll()
                bad = [i for i, c in enumerate(codes) if c not in (None, 0) and i not in stopped]
            if bad:
                index = min(bad, key=lambda i: _cause_order(i, codes[i], first, plan, run_dir))
                entry = plan.entries[index]
                failed = failed_rank(entry, codes[index], run_dir, blame(entry))
                if (evidence := oom.evidence(_pids(run_dir, entry.ranks))) is not None:
                    failed = (failed[0], out_of_memory(failed[1], evidence))
                if (how := running.describe(index)) is not None:
                    failed = (failed[0], f"{how}: {failed[1]}")
                break
            live = [i for i, code in enumerate(codes) if code is None and i not in stopped]
            if not live:
                break
            now = time.monotonic()
            if running.queued():
                queued_s += now - last
            last = now
            if now - started - queued_s > timeout_s:
                ranks = [r for i in live for r in plan.entries[i].ranks]
                try:
                    rank, why = hung_rank(ranks, plan.layout, run_dir)
                    where = where_it_ran(read_events(events_path(run_dir, rank)))
                except Exception as error:  # naming the rank must not lose the run's record
                    rank, why = ranks[0], f"the first still running (no better guess: {error})"
                    where = ""
                network = ", or check its host's network" if "on host" in where else ""
                failed = (
                    rank,
                    (
                        f"timed out after {timeout_s:g} s (rank(s) {ranks} still running); "
                        f"rank {rank}{where} looks hung: {why}; raise timeout_s if it was only "
                        f"slow{network}"
                    ),
                )
                break
            if now - last_end_check > END_CHECK_S:
                last_end_check = now
                idle = _stoppable_once_trained(plan, live, run_dir, ended)
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
    duration = time.monotonic() - started - queued_s
    if failed is None:
        return LaunchOutcome(ok=True, returncodes=returncodes, duration_s=duration)
    rank, reason = failed
    entry = next(e for e in plan.entries if rank in e.ranks)
    return LaunchOutcome(
        ok=False,
        returncodes=returncodes,
        failed_rank=rank,
        reason=reason,
        stderr_tail=tail_of(entry.stderr),
        duration_s=duration,
    )


def _cause_order(
    index: int, code: int | None, first: set[int], plan: LaunchPlan, run_dir: Path
) -> tuple[bool, bool, float, int]:
    """How likely a failed command is the cause, lowest first, among several seen dead: one
    killed by a signal (its peers then fail on its closed connections), then one seen dead
    before the others, then the one whose ranks recorded an error first (a rank whose loader
    died fails before the peer that then loses its connection to it), then the lowest."""
    errors = [
        float(record.get("time") or math.inf)
        for rank in plan.entries[index].ranks
        for record in read_events(events_path(run_dir, rank))
        if record.get("event") == "error"
    ]
    assert code is not None
    return code >= 0, index not in first, min(errors, default=math.inf), index


def _stoppable_once_trained(
    plan: LaunchPlan, live: list[int], run_dir: Path, ended: set[int]
) -> list[int]:
    """Live entries that may be stopped, in a run with a role that never exits (a parameter
    server's ps task): every training process has ended, and no process of an exiting role in
    these is still at work. That takes the entries holding the never-exiting roles, and those
    whose every rank has ended but whose tool waits on (torchrun's agents wait up to 300 s in
    their exit barrier for the agent of the node whose ps task was stopped). ``ended`` collects
    the ranks seen ended, so each events file is read until its rank ends, not on every
    check."""
    processes = plan.layout.processes

    def has_ended(rank: int) -> bool:
        if rank not in ended and any(
            r.get("event") == "end" for r in read_events(events_path(run_dir, rank))
        ):
            ended.add(rank)
        return rank in ended

    if all(process.exits for process in processes) or not live:
        return []
    if not all(has_ended(rank) for rank in plan.layout.training_ranks):
        return []
    return [
        i for i in live if all(has_ended(r) for r in plan.entries[i].ranks if processes[r].exits)
    ]


def failed_rank(
    entry: PlanEntry, code: int | None, run_dir: Path, reported: int | None
) -> tuple[int, str]:
    """The rank to blame for a failed command, and why: the one its launcher reports, else one
    that recorded an error, else one that did not record its end. A rank whose only error is
    a lost connection to its peers is not blamed while a silent rank (no error, no end: killed
    on another host) was the peer it lost: its launcher may see the survivor exit first."""
    ranks = list(entry.ranks)
    events = {rank: read_events(events_path(run_dir, rank)) for rank in ranks}
    errors = {r: [e for e in events[r] if e.get("event") == "error"] for r in ranks}
    with_error = [r for r in ranks if errors[r]]
    without_end = [r for r in ranks if not any(e.get("event") == "end" for e in events[r])]
    silent = [r for r in without_end if not errors[r]]
    reported_list = [reported] if reported in ranks else []
    rank = (reported_list or with_error or without_end or ranks)[0]
    if silent and errors[rank] and all(_lost_peer(e) for e in errors[rank]):
        rank = silent[0]
    what = f"rank {rank}" if len(ranks) == 1 else f"rank {rank} (command of ranks {ranks})"
    assert code is not None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = f"{what} was killed by {name}"
    else:
        why = f"{what} exited with code {code}"
    why += where_it_ran(events[rank])
    if rank not in without_end:
        why += " after recording the end of its run"
    return rank, why


LOST_PEER = re.compile(r"connection (closed|reset) by peer|broken pipe|socket closed", re.I)
"""A collective's words for a peer that went away (gloo, TensorFlow's gRPC, MPI's TCP)."""


def _lost_peer(error: dict[str, Any]) -> bool:
    return bool(LOST_PEER.search(str(error.get("message") or "")))


def quietest_rank(ranks: list[int], run_dir: Path) -> int | None:
    """Of ``ranks``, the one whose last record is the oldest (a rank with none first): when a
    launcher lost a host, the ranks there fell silent while the others went on to record the
    lost connection. ``None`` without ranks."""
    last = {}
    for rank in ranks:
        events = read_events(events_path(run_dir, rank))
        last[rank] = max((float(e.get("time") or 0.0) for e in events), default=-math.inf)
    return min(last, key=lambda r: (last[r], r)) if last else None


def where_it_ran(events: list[dict[str, Any]]) -> str:
    """`` (role ps, on host node2)`` from a rank's ``start`` record: its role unless a plain
    worker here, its host when not this one; empty when neither needs saying."""
    start = next((e for e in events if e.get("event") == "start"), {})
    role, host = start.get("role"), start.get("host")
    elsewhere = isinstance(host, str) and host and host != socket.gethostname()
    where = []
    if role not in (None, "?") and (role != "worker" or elsewhere):  # a server, a ps task
        where.append(f"role {role}")
    if elsewhere:  # a rank of a host list, a Slurm node
        where.append(f"on host {host}")
    return f" ({', '.join(where)})" if where else ""


def hung_rank(ranks: list[int], layout: ProcessLayout, run_dir: Path) -> tuple[int, str]:
    """The rank to blame for a timeout among ``ranks`` (those still running), and why.

    A rank whose process (the pid of its last ``start`` record, on this host) is stopped
    (state T: SIGSTOP, a debugger); else, among the training ranks (every rank if none is
    running), the one with the fewest windows, then the one whose last record is the oldest
    (a rank with no record at all first); ties go to the lowest rank.
    """
    host = socket.gethostname()
    events = {rank: since_last_start(read_events(events_path(run_dir, rank))) for rank in ranks}
    for rank in ranks:
        start = events[rank][0] if events[rank] and events[rank][0].get("event") == "start" else {}
        pid = start.get("pid")
        if isinstance(pid, int) and pid > 0 and start.get("host") == host:
            state = process_state(pid)
            if state in ("T", "t"):
                return rank, f"its process {pid} is stopped (state {state})"
    if len(ranks) == 1:
        return ranks[0], "it is the only one still running"
    training = [r for r in ranks if r < layout.size and layout.processes[r].trains] or ranks
    windows = {r: sum(e.get("event") == "window" for e in events[r]) for r in training}
    last = {r: max((_time(e) for e in events[r]), default=-math.inf) for r in training}
    rank = min(training, key=lambda r: (windows[r], last[r], r))
    others = [r for r in training if r != rank]
    if last[rank] == -math.inf:
        return rank, "it has written no record"
    if others and windows[rank] < min(windows[r] for r in others):
        most = max(windows[r] for r in others)
        return rank, f"it recorded the fewest windows ({windows[rank]}; the others up to {most})"
    return rank, f"its last record is the oldest ({time.time() - last[rank]:.0f} s ago)"


def _pids(run_dir: Path, ranks: range) -> set[int]:
    """The pids the ranks' processes recorded at their start (every attempt's)."""
    return {
        pid
        for rank in ranks
        for record in read_events(events_path(run_dir, rank))
        if record.get("event") == "start" and isinstance(pid := record.get("pid"), int)
    }


def since_last_start(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the latest process that wrote the file (an earlier attempt may have)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    return events[starts[-1] :] if starts else events


def _time(record: dict[str, Any]) -> float:
    value = record.get("time")
    return float(value) if isinstance(value, int | float) else -math.inf


def tail_of(path: Path) -> list[str]:
    """The last lines of a rank's output file, bounded: read from its last
    :data:`TAIL_BYTES`, each line cut to :data:`TAIL_LINE_CHARS`, and a first line saying how
    much came before when that is not all."""
    try:
        raw, size = read_tail(path, TAIL_BYTES)
    except OSError:
        return []
    lines = [
        clip(line, TAIL_LINE_CHARS, f"all of it in {path}")
        for line in raw.decode("utf-8", errors="replace").splitlines()[-STDERR_TAIL_LINES:]
    ]
    if size > len(raw):
        lines.insert(0, f"[{size} bytes in all: the last of them follow; all of them in {path}]")
    return lines
