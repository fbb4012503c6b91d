"""Every process a run started ends with it, also those that left its process groups.

Stopping a command's process group (:mod:`dlscale.launchers.processes`) reaches what it started
unless something left the group: a script that forks, calls ``setsid()`` and forks again (a
daemon) is in a session of its own, with init as its parent. What it cannot leave as easily is
its environment: every command a run starts carries :data:`MARK_ENV`, a token drawn for that
run, and every process it forks inherits it. Once the run's commands are stopped, the processes
of this user on this machine that still carry the token are killed, in rounds (what one forked
before it was killed is found by the next scan). They are killed at once, never stopped first
(SIGSTOP) to be killed later: every rank's watchdog sweeps when dlscale is gone, all at about
the same moment, and a sweep cut short between the two (a sibling's sweep killed the sweeper),
or two sweeps that stopped each other, left ranks stopped for ever. A process that rewrote its
own environment, or one on another host, is not found this way (Slurm's cgroups or a host's own
tool answer for those); the docs say so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

from dlscale.contract.numbers import whole_number

MARK_ENV = "DLSCALE_RUN_MARK"
ENVIRON_LIMIT = 2**20
"""The most bytes of a process's environment read (Linux allows a few MiB; a mark is near
the start of a command's environment as dlscale builds it, where the caller put it)."""
_ROUNDS = 5


def new_mark() -> str:
    return secrets.token_hex(12)


def marked(mark: str) -> list[int]:
    """The processes of this user here, but this one, whose environment holds ``mark``."""
    needle = f"{MARK_ENV}={mark}".encode()
    uid, me, found = os.getuid(), os.getpid(), []
    for entry in Path("/proc").iterdir() if Path("/proc/self").exists() else ():
        pid = whole_number(entry.name)
        if pid is None or pid == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(entry / "environ", "rb") as handle:
                environ = handle.read(ENVIRON_LIMIT)
        except OSError:  # gone since, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def sweep(mark: str) -> list[int]:
    """Kill every process that carries ``mark``; the pids found."""
    killed: list[int] = []
    for _ in range(_ROUNDS):  # a process that forked before it was killed: its child too
        fresh = [pid for pid in marked(mark) if pid not in killed]
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += fresh
    return killed
