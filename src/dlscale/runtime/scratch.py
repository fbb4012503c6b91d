"""Each worker's own temporary directory, gone with the run, however it ended.

A framework writes temporary files it removes only at interpreter exit: TensorFlow's autograph
writes every function it converts to ``__autograph_generated_file*.py`` in the temporary
directory and removes them in an ``atexit`` handler, which a worker skips (it leaves with
``os._exit``: :func:`dlscale.worker._exit`); thousands were seen in a machine's ``/tmp``. So a
worker started by dlscale (its run's token :data:`~dlscale.runtime.sweep.MARK_ENV` set) makes a
directory of its own in the temporary directory, ``dlscale-<token>-<pid>-*``, and points
``TMPDIR`` (for what it starts) and :mod:`tempfile` (for itself) at it, before any framework is
imported. It removes it as it leaves (:func:`leave`); what a killed worker left is removed by
whoever ends the run on that machine (:func:`remove_run_scratch`): the process that started
the commands once they are all stopped, or each rank's watchdog once dlscale is gone; what a
worker killed with its dlscale left (no watchdog ran: the parent-death signal) is removed by
the next run that starts commands on that machine (:func:`remove_orphaned_scratch`). On
another host, a killed worker's directory stays in that host's temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from dlscale.runtime.sweep import MARK_ENV

PREFIX = "dlscale-"
_WORKERS = re.compile(r"dlscale-[0-9a-f]{16,}-(\d+)-[a-z0-9_]+")
"""A worker's directory: its run's token (hex), its pid, ``mkdtemp``'s suffix."""
SCOPE_FILE = ".dlscale-pid-scope"
"""In a worker's directory: where its pid names it (:func:`~.watchdog.pid_scope`)."""
_own: Path | None = None
_base: str | None = None
"""The temporary directory this process had before :func:`enter` (where its run's are)."""


def _prefix(mark: str) -> str:
    return f"{PREFIX}{mark}-"


def enter() -> Path | None:
    """This process's own temporary directory, made and put in use; ``None`` (left as it was)
    without a run's token, or where none can be made."""
    global _own, _base
    mark = os.environ.get(MARK_ENV, "")
    if not mark.isalnum():  # a token is hex: anything else is not dlscale's (no path in it)
        return None
    base = tempfile.gettempdir()
    try:
        path = Path(tempfile.mkdtemp(prefix=f"{_prefix(mark)}{os.getpid()}-", dir=base))
    except OSError:
        return None
    _base = base
    with contextlib.suppress(OSError):  # where its pid means this process (the next run's check)
        (path / SCOPE_FILE).write_text(_scope())
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = str(path)
    _own = path
    return path


def leave() -> None:
    """Remove this process's own temporary directory (:func:`enter`), with what it holds."""
    if _own is not None:
        shutil.rmtree(_own, ignore_errors=True)


def _scope() -> str:
    from dlscale.runtime.watchdog import pid_scope  # (the watchdog imports this module)

    return pid_scope()


def _gone(path: Path, pid: int) -> bool:
    """The worker of ``path`` is gone: its pid names no process here, in the scope it wrote
    (a worker of another pid namespace or boot sharing this directory is never taken for
    gone; nor one that wrote no scope)."""
    from dlscale.runtime.procfs import is_alive

    try:
        scope = (path / SCOPE_FILE).read_text()
    except OSError:
        return False
    return scope == _scope() and not is_alive(pid, None)


def remove_orphaned_scratch() -> list[Path]:
    """Remove the directories of workers that are gone, whatever run they were of: a worker
    killed with its dlscale (``kill -9``: the parent-death signal kills a direct child before
    any watchdog sweeps) leaves its own behind, which the next run on this machine removes
    here. A directory whose worker's pid is alive is kept (a run still at work, or the pid
    reused: kept on the safe side), and one whose pid means another process namespace's (a
    container sharing this directory); another user's cannot be removed and is left."""
    gone = []
    for path in Path(_base or tempfile.gettempdir()).glob(f"{PREFIX}*-*-*"):
        named = _WORKERS.fullmatch(path.name)
        if named is None:
            continue  # not a worker's (dlscale-bench-*, a user's own)
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink() and _gone(path, int(named[1])):
                shutil.rmtree(path)
                gone.append(path)
    return gone


def remove_run_scratch(mark: str) -> list[Path]:
    """Remove every worker's directory of the run with token ``mark`` on this machine (in the
    temporary directory this process had before :func:`enter`); those removed."""
    if not mark.isalnum():
        return []
    gone = []
    for path in Path(_base or tempfile.gettempdir()).glob(f"{_prefix(mark)}*"):
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                gone.append(path)
    return gone
