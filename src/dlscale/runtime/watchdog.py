"""A worker dies with the dlscale process that started it, whatever killed that one.

The process that starts the commands (:func:`dlscale.launchers.processes.start_processes`, i.e.
``dlscale run``) puts three variables in every command's environment; a tool the command runs
(mpirun, horovodrun...) passes them on to the ranks it spawns:

``DLSCALE_PARENT_PID``
    the pid of the process that started the command;
``DLSCALE_PARENT_START``
    that process's start time, field 22 of ``/proc/<pid>/stat`` (clock ticks after boot), so
    that another process given the same pid after the parent died is not taken for it; empty
    where there is no ``/proc``;
``DLSCALE_PARENT_SCOPE``
    where that pid names that process: the kernel's boot id and the parent's pid namespace
    (Linux), else the host name. A rank a tool started on another host or in a container sees
    another scope and runs no watchdog (the tool answers for it there).

A worker that finds them set, in the parent's scope (:func:`start_watchdog`, the first thing
``dlscale.worker`` does), runs a daemon thread that checks every :data:`CHECK_S` seconds that
the parent is still there (the pid exists, is not a zombie and started at that time). Once it
is gone, the worker kills what the run started outside its groups (the processes carrying the
run's token, :mod:`dlscale.runtime.sweep`), then SIGKILLs its own process group: the group
``start_processes`` made for the command, so the tool and the ranks it started die too, not
only this rank. A worker started by hand, without the variables, has no watchdog. The direct
child of the parent also gets ``PR_SET_PDEATHSIG`` (Linux), which is immediate; the watchdog
covers the processes a tool started and the systems without it.

The thread needs the interpreter lock: a rank blocked in native code that holds it is killed by
a sibling's group kill, or by the parent-death signal when it is the direct child.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Mapping

from dlscale.contract.numbers import whole_number
from dlscale.runtime.procfs import boot_id, is_alive, process_start
from dlscale.runtime.scratch import remove_run_scratch
from dlscale.runtime.sweep import MARK_ENV, sweep

PARENT_PID_ENV = "DLSCALE_PARENT_PID"
PARENT_START_ENV = "DLSCALE_PARENT_START"
PARENT_SCOPE_ENV = "DLSCALE_PARENT_SCOPE"
CHECK_S = 0.5
"""How often the parent is checked (a read of one small /proc file)."""


def pid_scope() -> str:
    """Where a pid names one process: this boot of the kernel and this pid namespace (Linux),
    else this host."""
    boot = boot_id()
    try:
        if boot:
            return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        pass
    return f"host:{socket.gethostname()}"


def parent_env(pid: int | None = None) -> dict[str, str]:
    """The variables that tie a command to ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return {
        PARENT_PID_ENV: str(pid),
        PARENT_START_ENV: str(process_start(pid) or ""),
        PARENT_SCOPE_ENV: pid_scope(),
    }


def parent_alive(pid: int, start: int | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` (when known) still runs."""
    return is_alive(pid, start)


def local_parent(environ: Mapping[str, str] | None = None) -> int | None:
    """The pid of the dlscale process named in ``environ`` (the process's environment by
    default); ``None`` when none is named, or one whose pid means another process here
    (another host, another pid namespace)."""
    environ = os.environ if environ is None else environ
    try:
        pid = int(environ.get(PARENT_PID_ENV, ""))
    except ValueError:
        return None
    if pid <= 0 or environ.get(PARENT_SCOPE_ENV) != pid_scope():
        return None
    return pid


def start_watchdog(environ: Mapping[str, str] | None = None) -> threading.Thread | None:
    """Watch the parent named in ``environ`` (the process's environment by default) and kill
    this process's group once it is gone; ``None`` (no watchdog) when no parent is named, or
    one whose pid means another process here (another host, another pid namespace)."""
    environ = os.environ if environ is None else environ
    pid = local_parent(environ)
    if pid is None or not hasattr(os, "killpg"):
        return None
    start_text = environ.get(PARENT_START_ENV, "")
    start = whole_number(start_text)
    try:
        parent_group: int | None = os.getpgid(pid)
    except OSError:
        parent_group = None  # already gone (or not ours to see): the first check says which
    thread = threading.Thread(
        target=_watch, args=(pid, start, parent_group), name="dlscale-watchdog", daemon=True
    )
    thread.start()
    return thread


def _watch(pid: int, start: int | None, parent_group: int | None) -> None:
    while parent_alive(pid, start):
        time.sleep(CHECK_S)
    _say(
        f"dlscale worker {os.getpid()}: the dlscale process {pid} that started it is gone; "
        "stopping its process group\n"
    )
    if mark := os.environ.get(MARK_ENV):  # what the run's commands started outside their groups
        sweep(mark)
        remove_run_scratch(mark)  # the run's ranks' own temporary directories
    group = os.getpgid(0)
    # The group start_processes made for the command (the session's group), or this process's
    # own; never a group the parent was in (that would be someone else's, e.g. a shell's).
    if group != parent_group and group in (os.getsid(0), os.getpid()):
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _say(text: str) -> None:
    """A line on stderr when that is a file (a pipe whose reader is gone might block)."""
    try:
        if stat.S_ISREG(os.fstat(2).st_mode):
            os.write(2, text.encode())
    except OSError:
        pass
