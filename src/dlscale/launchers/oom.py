"""Was a rank killed by the kernel's OOM killer? Evidence read around a run, never a guess.

A process the OOM killer chose dies by SIGKILL, which alone says nothing about memory (``kill
-9`` looks the same). Two things the kernel keeps do say it:

* the ``oom_kill`` counter of this process's memory cgroup (v2 ``memory.events``, v1
  ``memory.oom_control``), which counts the processes of the cgroup that the OOM killer
  killed, for an exhaustion of the cgroup's limit or of the machine (v2 counts those of the
  cgroups below it too; v1 did not here, kernel 6.18); the ranks a launcher starts on this
  machine are in dlscale's cgroup. Where no cgroup counter can be read, the machine's own
  (``/proc/vmstat`` ``oom_kill``), which also counts other processes of the machine, and is
  named as such;
* the kernel log (``/dev/kmsg``, readable by root or where ``dmesg_restrict`` is 0), whose
  ``Killed process PID`` line names the process.

:meth:`OomWatch.start` reads the counters before a run; :meth:`OomWatch.evidence` after a
failure says what rose, or which of the run's processes the kernel log names, since then; it
says nothing (``None``) without evidence, so the plain signal is reported.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from dlscale.runtime.environment import MemoryCgroup, counter, memory_cgroup

KMSG = Path("/dev/kmsg")
VMSTAT = Path("/proc/vmstat")
MAX_RECORDS = 100_000
"""The most kernel log records read (the ring buffer holds a few thousand)."""
KILLED = re.compile(r"(?:Out of memory|out of memory).*?: Killed process (\d+) \(([^)]*)\)")
"""The OOM killer's line: ``Out of memory: Killed process 4242 (python)`` (the machine) or
``Memory cgroup out of memory: Killed process 4242 (python)`` (a cgroup's limit)."""
SLACK_S = 1.0
"""Kernel log records this much older than the run's start still count (the log's clock is
the scheduler's, close to but not exactly CLOCK_MONOTONIC)."""
ADVICE = "use a smaller batch or fewer workers"


@dataclass(frozen=True)
class OomWatch:
    cgroup: MemoryCgroup | None
    cgroup_kills: int | None
    machine_kills: int | None
    since: float
    """``time.monotonic()`` when the run started."""
    kmsg: Path = KMSG
    vmstat: Path = VMSTAT

    @classmethod
    def start(
        cls, cgroup: MemoryCgroup | None = None, *, kmsg: Path = KMSG, vmstat: Path = VMSTAT
    ) -> OomWatch:
        """The counters now (``cgroup``: this process's by default)."""
        cgroup = memory_cgroup() if cgroup is None else cgroup
        return cls(
            cgroup=cgroup,
            cgroup_kills=cgroup.oom_kills() if cgroup is not None else None,
            machine_kills=machine_oom_kills(vmstat),
            since=time.monotonic(),
            kmsg=kmsg,
            vmstat=vmstat,
        )

    def evidence(self, pids: Collection[int] = ()) -> str | None:
        """What shows that the OOM killer killed a process of the run since :meth:`start`, in
        words; ``None`` without evidence."""
        named = killed_in_log(self.kmsg, set(pids), self.since - SLACK_S)
        if named is not None:
            pid, name = named
            return f"the kernel's OOM killer killed its process {pid} ({name}), says the kernel log"
        if self.cgroup is not None and self.cgroup_kills is not None:
            now = self.cgroup.oom_kills()
            if now is not None and now > self.cgroup_kills:
                return (
                    f"the kernel's OOM killer killed {_processes(now - self.cgroup_kills)} of "
                    f"dlscale's memory cgroup during the run: oom_kill {self.cgroup_kills} -> "
                    f"{now} in {self.cgroup.counter_name()}"
                )
            return None  # the run's own counter did not move: another cgroup's kill is not ours
        now = machine_oom_kills(self.vmstat)
        if now is not None and self.machine_kills is not None and now > self.machine_kills:
            return (
                f"the kernel's OOM killer killed {_processes(now - self.machine_kills)} on this "
                f"machine during the run: oom_kill {self.machine_kills} -> {now} in {self.vmstat}"
            )
        return None


def out_of_memory(why: str, evidence: str) -> str:
    """A failure's words with what the evidence says: ``rank 1 was killed by SIGKILL: out of
    memory (the kernel's OOM killer ...); use a smaller batch or fewer workers``."""
    return f"{why}: out of memory ({evidence}); {ADVICE}"


def machine_oom_kills(vmstat: Path = VMSTAT) -> int | None:
    """Processes the OOM killer killed on this machine since it booted."""
    return counter(vmstat, "oom_kill")


def killed_in_log(kmsg: Path, pids: set[int], since: float) -> tuple[int, str] | None:
    """The first of ``pids`` the kernel log says the OOM killer killed at ``since`` (seconds of
    the monotonic clock) or later: (pid, its command name); ``None`` where none is named or
    the log cannot be read (not root, ``dmesg_restrict``)."""
    if not pids:
        return None
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return None  # the end of the log
            except OSError as error:
                if error.errno == errno.EPIPE:  # overwritten while read: go on with the next
                    continue
                return None
            if not record:
                return None
            found = _killed(record.decode(errors="replace"), since)
            if found is not None and found[0] in pids:
                return found
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _killed(record: str, since: float) -> tuple[int, str] | None:
    """``6,1234,5678901,-;Out of memory: Killed process 4242 (python) ...``: (4242, python)
    when the record's time (microseconds since boot, the third field) is ``since`` or later."""
    header, _, message = record.partition(";")
    fields = header.split(",")
    try:
        at_s = int(fields[2]) / 1e6
    except (IndexError, ValueError):
        return None
    found = KILLED.search(message)
    if found is None or at_s < since:
        return None
    return int(found.group(1)), found.group(2)


def _processes(count: int) -> str:
    return "1 process" if count == 1 else f"{count} processes"
