"""The machine's load around a measurement window: the noise guard's raw numbers.

A window's throughput is only the engine's if nothing else competed for the machine. Linux
says how busy every CPU was (``/proc/stat``: user, nice, system, irq and softirq time, and the
time a hypervisor gave the virtual CPU to another guest, *steal*) and how much CPU each
process used (``/proc/<pid>/stat`` fields 14 and 15, utime and stime, every thread included).
The run's own CPU time is that of the dlscale parent and every process below it; the rest of
the machine's busy time is *outside load*. Definitions and the threshold: docs/metrics.md
("Noise guard"). Page faults are the process's own (``getrusage``), read by every rank.

Without /proc (not Linux) or without the parent's pid (a worker not started by dlscale),
the machine figures are ``None``; the page faults are still counted. Every rank also reads
how long its own threads waited, runnable, for a CPU (the kernel's run delay) and how often
they were preempted: contention on the process's own cores or cgroup, which the machine's
load does not show (a worker pinned to a core another process keeps busy).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dlscale.contract.numbers import whole_number
from dlscale.runtime.procfs import (
    HAS_PROC,
    reset_rss_peak,
    rss_peak_bytes,
    stat_fields,
    thread_waits,
)

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class LoadSample:
    minor_faults: int
    """This process's minor page faults so far."""
    busy_s: float | None = None
    """CPU seconds every CPU of the machine spent busy (not idle, not waiting for I/O, not
    stolen) since boot."""
    steal_s: float | None = None
    """CPU seconds the hypervisor ran something else on this machine's virtual CPUs."""
    run_s: float | None = None
    """CPU seconds used by the run: the dlscale parent and every process below it."""
    waits: dict[int, tuple[int, int]] | None = None
    """This process's threads: nanoseconds each waited for a CPU, its involuntary switches
    (`dlscale.runtime.procfs.thread_waits`); None without /proc."""
    rss_peak_bytes: int | None = None
    """The process's high-water resident set now (``VmHWM``); None without /proc."""
    rss_peak_reset: bool | None = None
    """A window's first sample: the mark was reset as it was read (None: not asked)."""


def machine_cpu() -> tuple[float, float] | None:
    """``(busy_s, steal_s)`` summed over every CPU since boot, from the ``cpu`` line."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq) * _TICK_S, steal * _TICK_S


def tree_cpu(root: int) -> float | None:
    """CPU seconds (user + system, every thread) of ``root`` and all its descendants that are
    running now; ``None`` if ``root`` is not running."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        pid = whole_number(entry.name)
        if pid is None:
            continue
        fields = stat_fields(pid)
        if fields is None or len(fields) < 13:
            continue
        try:
            parents[pid] = int(fields[1])
            times[pid] = (int(fields[11]) + int(fields[12])) * _TICK_S
        except ValueError:
            continue
    if root not in times:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def sample(root: int | None, *, starts_window: bool = False) -> LoadSample:
    """The counters now: own page faults and memory high-water mark always; the machine's and
    the run's CPU time when ``root`` (the dlscale parent's pid) is given and /proc exists.
    ``starts_window``: a measured window starts here, so the memory mark is reset (the
    warm-up's and the previous window's peaks are not the window's)."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    waits = thread_waits() or None if HAS_PROC else None
    reset = reset_rss_peak() if starts_window and HAS_PROC else None
    own = LoadSample(
        minor_faults=faults, waits=waits, rss_peak_bytes=rss_peak_bytes(), rss_peak_reset=reset
    )
    if root is None or not HAS_PROC:
        return own
    machine = machine_cpu()
    run = tree_cpu(root)
    if machine is None or run is None:
        return own
    return replace(own, busy_s=machine[0], steal_s=machine[1], run_s=run)


def machine_cores() -> int:
    """CPUs /proc/stat sums over (all of the machine's, not only this process's affinity)."""
    return os.cpu_count() or 1


def load_fields(before: LoadSample, after: LoadSample) -> dict[str, Any]:
    """A window's load counters from the samples around it (``None`` where not read): the
    fields of :class:`~dlscale.contract.records.Window` they fill."""
    fields: dict[str, Any] = {"minor_faults": after.minor_faults - before.minor_faults}
    if after.rss_peak_bytes is not None:  # the mark since the window began (or the start)
        fields["rss_peak_bytes"] = after.rss_peak_bytes
        fields["rss_peak_reset"] = bool(before.rss_peak_reset)
    if before.waits is not None and after.waits is not None:  # a thread new since: all of it
        deltas = [
            (ns - before.waits.get(tid, (0, 0))[0], n - before.waits.get(tid, (0, 0))[1])
            for tid, (ns, n) in after.waits.items()
        ]
        fields["run_delay_s"] = max(0, sum(d for d, _ in deltas)) / 1e9
        fields["involuntary_switches"] = max(0, sum(n for _, n in deltas))
    if (
        before.busy_s is not None
        and after.busy_s is not None
        and before.run_s is not None
        and after.run_s is not None
    ):
        fields["machine_busy_s"] = after.busy_s - before.busy_s
        fields["machine_steal_s"] = (after.steal_s or 0.0) - (before.steal_s or 0.0)
        fields["run_cpu_s"] = after.run_s - before.run_s
        fields["machine_cores"] = machine_cores()
    return fields


def probe_load_fields(before: LoadSample, after: LoadSample, span_s: float) -> dict[str, Any]:
    """The machine's counters of the exposed-communication probe, read around the whole of it
    (``span_s`` wall seconds, its warm-up pair included): both of its windows carry them, since
    their steps interleave. No page faults: those are the measured windows' figure."""
    fields = load_fields(before, after)
    own_figures = ("minor_faults", "run_delay_s", "involuntary_switches", "rss_peak_bytes")
    for own in (*own_figures, "rss_peak_reset"):  # the measured windows' figures
        fields.pop(own, None)
    if fields:
        fields["load_span_s"] = span_s
    return fields
