"""What Linux says about a process (``/proc``), in one place: whether it still runs, when it
started, and its state. A pid alone does not name a process for long (the kernel reuses pids),
so a process is named by its pid and its start time, field 22 of ``/proc/<pid>/stat``.
Used by the lock owner check (:mod:`dlscale.store.results`), the worker watchdog
(:mod:`dlscale.runtime.watchdog`) and the hung-rank guess (:mod:`dlscale.launchers.watch`).
"""

from __future__ import annotations

import os
from pathlib import Path

HAS_PROC = Path("/proc/self/stat").exists()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (the state) on, after the command name
    (which may hold spaces and parentheses, hence the last ``)``); ``None`` when there is no
    such process (or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError, OverflowError):
        return None
    return text.rpartition(")")[2].split()


def process_start(pid: int) -> int | None:
    """When a process started (clock ticks since boot); ``None`` without /proc or process."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def process_state(pid: int) -> str | None:
    """The state letter (``R``, ``S``, ``T`` stopped, ``Z`` zombie...); ``None`` if unknown."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def boot_id() -> str | None:
    """This boot of the kernel (a pid or a start time means nothing across a reboot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def is_alive(pid: int, start: int | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` (when known) still runs: it
    exists, is not a zombie, and was not replaced by another process given the same pid."""
    fields = stat_fields(pid)
    if fields is None:
        if HAS_PROC:
            return False
        try:  # no /proc: the pid decides
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        except (OverflowError, ValueError):
            return False
        return True
    if fields[0] in ("Z", "X", "x"):  # exited, not yet reaped
        return False
    return start is None or (len(fields) > 19 and fields[19] == str(start))


def thread_waits() -> dict[int, tuple[int, int]]:
    """This process's threads: thread id -> (nanoseconds it waited, runnable, on a run queue
    for a CPU: ``/proc/self/task/<tid>/schedstat``'s second field; its involuntary context
    switches: ``nonvoluntary_ctxt_switches`` of its ``status``). A thread whose files cannot be
    read (it ended meanwhile; a kernel without schedstats) is left out; empty without /proc."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    out = {}
    for name in tids:
        task = f"/proc/self/task/{name}"
        try:
            with open(f"{task}/schedstat", encoding="ascii") as handle:
                waited_ns = int(handle.read().split()[1])
            with open(f"{task}/status", encoding="utf-8", errors="replace") as handle:
                switches = next(
                    int(line.split()[1])
                    for line in handle
                    if line.startswith("nonvoluntary_ctxt_switches:")
                )
            out[int(name)] = (waited_ns, switches)
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return out


def rss_peak_bytes() -> int | None:
    """This process's high-water resident set (``VmHWM`` of ``/proc/self/status``: the most
    of its memory that was in RAM at once, since it started or since :func:`reset_rss_peak`);
    ``None`` without /proc."""
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_rss_peak() -> bool:
    """Set this process's high-water resident set to what it holds now (``5`` written to
    ``/proc/self/clear_refs``, Linux 4.0 and later); False where the kernel refused or there
    is no /proc: the mark then still counts from the process's start."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True
