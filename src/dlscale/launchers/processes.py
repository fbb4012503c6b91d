"""Plan entries as processes on this machine (every launcher that runs a local command).

Each command runs in its own process session, so stopping it stops whatever it started too
(the ranks mpirun or horovodrun spawn, say): SIGTERM (and SIGCONT, for a stopped process) to
the group, SIGKILL after a grace.

Nor does what a command started after leaving its group (a script's double-forked daemon):
every command carries a token drawn for the run, and once the run is stopped the processes
that still carry it are killed (:mod:`dlscale.runtime.sweep`).

No command outlives the process that started it, whatever kills that one (``kill -9``
included). Every command's environment names its parent (``DLSCALE_PARENT_PID``,
``DLSCALE_PARENT_START``, ``DLSCALE_PARENT_SCOPE``; :mod:`dlscale.runtime.watchdog`): each
worker on this machine, the ranks a tool spawned included, watches it and kills its command's
process group once it is gone. On Linux
the command itself also gets ``PR_SET_PDEATHSIG=SIGKILL``, so a tool that runs no dlscale code
dies at once; that signal follows the *thread* that started the command, so the commands are
started and watched from one thread that outlives the run (the runner does both in one call).

SIGINT, SIGTERM and SIGHUP are held while a command is started and recorded: one that lands then is
delivered once the command is in the list, so stopping reaches it (the command itself starts
with the signal mask the caller had). Holding takes two things, because a signal mask is per
thread: the signals are blocked in the spawning thread, and (from the main thread, where Python
runs signal handlers) their Python handlers are swapped for one that only notes the signal,
which is raised again once the command is recorded. Blocking alone would not do: where another
thread is alive (torch's OpenMP pool, say) the kernel hands the signal to that thread and
Python runs the handler in the main thread at its next instruction, which may fall between
the fork and the recording.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

from dlscale.launchers.base import LaunchPlan, PlanEntry, Running
from dlscale.runtime.scratch import remove_orphaned_scratch, remove_run_scratch
from dlscale.runtime.sweep import MARK_ENV, new_mark, sweep
from dlscale.runtime.watchdog import parent_env

GRACE_S = 5.0
HELD_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
"""The signals that stop dlscale (:mod:`dlscale.cli`), held while a command is spawned."""
_PR_SET_PDEATHSIG = 1
_Mask = set[int | signal.Signals]


class LocalProcesses(Running):
    def __init__(self, procs: list[subprocess.Popen[bytes]], mark: str = "") -> None:
        self.procs = procs
        self.mark = mark
        """The token in every command's environment (:mod:`dlscale.runtime.sweep`)."""

    def poll(self) -> list[int | None]:
        return [proc.poll() for proc in self.procs]

    def stop(self, entries: list[int] | None = None) -> None:
        chosen = [self.procs[i] for i in entries] if entries is not None else self.procs
        live = [proc for proc in chosen if proc.poll() is None]
        for proc in live:
            _signal_group(proc, signal.SIGTERM)
            _signal_group(proc, signal.SIGCONT)  # a stopped process gets its SIGTERM now
        deadline = time.monotonic() + GRACE_S
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in chosen:
            _signal_group(proc, signal.SIGKILL)  # also children a finished command left behind
            proc.wait()
        if entries is None and self.mark:  # the run is over: what left its groups goes too
            sweep(self.mark)
            remove_run_scratch(self.mark)  # and the ranks' temporary directories


def start_processes(plan: LaunchPlan) -> LocalProcesses:
    return start_entries(plan.entries)


def start_entries(entries: tuple[PlanEntry, ...]) -> LocalProcesses:
    """Each entry's command, a process of this one (its parent, in its environment)."""
    remove_orphaned_scratch()  # what workers killed with an earlier dlscale left here
    running = LocalProcesses([], new_mark())
    parent = {**parent_env(), MARK_ENV: running.mark}
    try:
        for entry in entries:
            with _signals_held() as mask:
                running.procs.append(_spawn(entry, parent, mask))
    except BaseException:
        running.stop()
        raise
    return running


def _spawn(entry: PlanEntry, parent: dict[str, str], mask: _Mask | None) -> subprocess.Popen[bytes]:
    with entry.stdout.open("wb") as out, entry.stderr.open("wb") as err:
        return subprocess.Popen(
            entry.argv,
            env={**os.environ, **entry.env, **parent},
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_in_child(os.getpid(), mask, entry.cpus),
        )


@contextlib.contextmanager
def _signals_held() -> Iterator[_Mask | None]:
    """The stopping signals held: blocked in this thread and their Python handlers deferred;
    yields the mask to restore (``None`` where signals cannot be blocked). One that came
    meanwhile is delivered on leaving."""
    with _handlers_deferred():
        if not hasattr(signal, "pthread_sigmask"):
            yield None
            return
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        try:
            yield previous
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _handlers_deferred() -> Iterator[None]:
    """In the main thread, the stopping signals' Python handlers only note a signal; on leaving
    the handlers are put back and each noted signal raised again. Elsewhere (handlers can be
    set from the main thread only) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {}
    for sig in HELD_SIGNALS:
        if signal.getsignal(sig) is not None:  # None: a handler not set from Python; left alone
            previous[sig] = signal.signal(sig, lambda signum, _frame: came.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)


def _in_child(
    parent: int, mask: _Mask | None, cpus: tuple[int, ...] = ()
) -> Callable[[], None] | None:
    """What the child does between fork and exec: die with its parent (Linux), take back the
    signal mask the parent had before holding signals, and keep to ``cpus`` where given."""
    prctl = _prctl()
    if prctl is None and mask is None and not cpus:
        return None

    kill = int(signal.SIGKILL)

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, kill)
            if os.getppid() != parent:  # the parent died before the line above
                os.kill(os.getpid(), signal.SIGKILL)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


@functools.cache
def _prctl() -> Callable[[int, int], int] | None:
    """libc's prctl, loaded in the parent (not between fork and exec); ``None`` off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[[int, int], int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
