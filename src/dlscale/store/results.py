"""Run directories under the results root.

Layout of ``<root>/<run_id>/``: ``spec.json`` (resolved config, written before launch),
``events.rank<r>.jsonl`` (per-rank records), ``rank<r>.stdout`` / ``rank<r>.stderr``,
``result.json`` (written last, atomically) and, while a run is going, ``lock``
(:mod:`dlscale.store.locks`). The store has no separate index: listing scans
``*/result.json``, so it cannot go stale.

The store never writes or deletes through a link it did not make: a run directory is created
by the store itself (a link, a file or a dangling link at its path is refused with one line),
cleared of a run's own files only (:mod:`dlscale.store.rundir`), and never created again once
removed: neither it nor the results directory is recreated behind the user's back.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.files import (
    NewerSchema,
    OutputError,
    UnreadableFile,
    make_directory,
    open_directory,
    output_failure,
    parse_json,
    read_regular,
    refuse_non_directory,
    unreadable,
    write_json_atomic,
)
from dlscale.contract.result import Result
from dlscale.contract.text import excerpt, for_stream, visible
from dlscale.store import locks, rundir
from dlscale.store.locks import LOCK, TAKEOVER, describe_owner
from dlscale.store.rundir import LAST_NUMBER, numbered

__all__ = [
    "DEFAULT_ROOT",
    "LOCK",
    "TAKEOVER",
    "RunStore",
    "Stored",
    "describe_owner",
    "print_warning",
    "skipped_message",
]

DEFAULT_ROOT = Path("dlscale-results")


def print_warning(message: str) -> None:
    """The default way a store's warning reaches the user: one line on stderr (never stdout,
    which may carry ``--json`` output or a table)."""
    said = for_stream(f"dlscale: warning: {visible(message)}", sys.stderr)
    print(said, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Stored:
    """What a run's ``result.json`` holds, as one reader sees it at one moment."""

    path: Path
    result: Result | None = None
    """The result in the current schema (``migrate.result_view``); None: absent or unreadable."""
    problem: str | None = None
    """Why it cannot be read (a few words, no path); None: absent or readable."""
    newer: bool = False
    """Written by a newer dlscale: not damage, and never to be overwritten without --force."""
    fingerprint: tuple[int, int, int] | None = None
    """(inode, mtime ns, size) of the file read; None: no file. An atomic rewrite changes it."""

    @property
    def completed(self) -> bool:
        return self.result is not None and self.result.completed

    @property
    def damaged(self) -> bool:
        return self.problem is not None and not self.newer


class RunStore:
    """The runs under ``root``. Readers never fail on one bad run: a result that cannot be
    read is skipped and reported once (per store and file) through ``on_warning``, by default
    one ``dlscale: warning:`` line on stderr. Writers refuse, with one line (an
    :class:`OutputError`), anything they did not make where they write."""

    def __init__(
        self, root: Path | str = DEFAULT_ROOT, *, on_warning: Callable[[str], None] | None = None
    ) -> None:
        self.root = Path(root)
        self.on_warning = on_warning or print_warning
        self._warned: set[Path] = set()
        self._held: dict[str, tuple[int, int]] = {}
        """run id -> (device, inode) of its directory, for each lock this store holds."""
        self._root: tuple[int, int] | None = None
        """(device, inode) of the results directory once this store has written under it."""

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def result_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "result.json"

    def lock_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / LOCK

    def warn_once(self, path: Path, message: str) -> None:
        """Report a problem with ``path`` unless this store reported one already."""
        if path not in self._warned:
            self._warned.add(path)
            self.on_warning(message)

    def read(self, run_id: str) -> Stored:
        """The run's stored result, whatever state it is in; never raises for a bad file."""
        return _read(self.result_path(run_id))

    def completed(self, run_id: str) -> Result | None:
        """The stored result if this run completed, else ``None`` (also when it is unreadable:
        see :meth:`read` for why)."""
        stored = self.read(run_id)
        return stored.result if stored.completed else None

    def check_run_dir(self, run_id: str) -> None:
        """Refuse (:class:`OutputError`, one line naming the path and the fix) a run directory
        the store cannot use: a link (dangling or not) or a file at its path, or a lock that is
        not a lock file (a directory). Nothing is changed."""
        refuse_non_directory(self.run_dir(run_id), "run directory")
        locks.refuse_foreign(self.lock_path(run_id))

    def check_run_dirs(self, run_ids: Iterable[str]) -> None:
        """:meth:`check_run_dir` for every point of a study, before any of them runs."""
        for run_id in run_ids:
            self.check_run_dir(run_id)

    def reserve(self, run_id: str) -> bool:
        """Take the run's lock (atomic, with its content). False if a live process holds it.

        The lock names its owner: host, pid, the process's start time and the boot it ran in.
        A lock of this host whose process is gone, is a zombie, or whose pid now belongs to a
        process started at another time (pid reused), or one from before a reboot, is taken
        over; several studies writing to one results directory therefore never run the same
        point at once. The run directory is made here, and the results directory on the
        store's first write (never again once removed); a link or a file at the run
        directory's path is refused, as is a full disk (no lock is left behind).
        """
        directory = self.run_dir(run_id)
        made = self._make_run_dir(run_id, fresh=False)
        try:
            fd = open_directory(directory, "run directory")
            try:
                taken = locks.acquire(directory / LOCK, fd)
                info = os.fstat(fd)
            finally:
                os.close(fd)
        except BaseException:
            if made:
                with contextlib.suppress(OSError):
                    os.rmdir(directory)  # empty unless another process came in meanwhile
            raise
        if taken:
            self._held[run_id] = (info.st_dev, info.st_ino)
        return taken

    def reserve_new(self, name: str) -> str:
        """Make a fresh run directory for a run that is never resumed (``dlscale
        microbench``): ``name``, else the first of ``name-2`` to ``name-999`` that nothing
        holds; a directory, file or link already at a name is never used, nor followed. The
        directory is held as :meth:`reserve` holds one (:meth:`check_held` catches a swap), with
        no lock: no other process runs under its name. Returns its run id; when every name is
        taken, one line naming them and the fix (:class:`OutputError`)."""
        for run_id in numbered(name):
            if self._make_run_dir(run_id, fresh=True):
                fd = open_directory(self.run_dir(run_id), "run directory")
                try:
                    info = os.fstat(fd)
                finally:
                    os.close(fd)
                self._held[run_id] = (info.st_dev, info.st_ino)
                return run_id
        raise OutputError(
            f"cannot make a fresh run directory under {self.root}: {name} and {name}-2 to "
            f"{name}-{LAST_NUMBER} are all taken (earlier runs, or names someone made there); "
            "remove what is not yours, or choose another --results"
        )

    def _make_run_dir(self, run_id: str, *, fresh: bool) -> bool:
        """The one place a run directory is made (the results directory first, on the store's
        first write: :meth:`_check_root`). ``fresh``: only a directory made here will do, and
        False means the name is taken; else a real directory already there is accepted (the
        point's earlier attempt) and anything else at the name refused. True if made here."""
        self._check_root()
        directory = self.run_dir(run_id)
        if not fresh:
            return make_directory(directory, "run directory")
        try:
            os.mkdir(directory)  # never follows a link at the name: EEXIST
        except FileExistsError:
            return False
        except OSError as error:
            raise output_failure(directory, error) from None
        return True

    def release(self, run_id: str) -> None:
        """Give the run's lock back (never raises; a lock that is no longer this process's, or
        one under a directory that is no longer the one reserved, is left alone)."""
        held = self._held.pop(run_id, None)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.run_dir(run_id), flags)
        except OSError:
            return  # removed, or a link now: nothing of ours to remove there
        try:
            info = os.fstat(fd)
            if held in (None, (info.st_dev, info.st_ino)):
                locks.release(self.lock_path(run_id), fd)
        finally:
            os.close(fd)

    def check_held(self, run_id: str) -> None:
        """Raise :class:`OutputError` if the directory of a run this store reserved was removed
        or replaced since (the results directory deleted while the point ran)."""
        held = self._held.get(run_id)
        if held is None:
            return
        directory = self.run_dir(run_id)
        try:
            info = os.lstat(directory)
            if stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) == held:
                return
        except OSError:
            pass
        gone = (
            f"the results directory {self.root}"
            if not os.path.lexists(self.root)
            else f"the run directory {directory}"
        )
        raise OutputError(
            f"{gone} was removed (or replaced) while point {run_id} ran: its result was not "
            "recorded, and dlscale does not recreate it; run the command again to rerun the point"
        )

    def prepare(self) -> None:
        """Make the results directory if it is missing (:meth:`_check_root`)."""
        self._check_root()

    def _check_root(self) -> None:
        """Make the results directory (and its parents) the first time this store writes under
        it; from then on, one removed or replaced (a study's earlier points gone with it) is
        refused, never made again. A link the user chose as the results directory is followed."""
        try:
            info = os.stat(self.root)
        except FileNotFoundError:
            if self._root is not None:
                raise self._root_gone() from None
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                info = os.stat(self.root)
            except OSError as error:
                raise output_failure(self.root, error) from None
        except OSError as error:
            raise output_failure(self.root, error) from None
        if not stat.S_ISDIR(info.st_mode):
            raise OutputError(f"results directory {self.root} is a file; choose another --results")
        if self._root is None:
            self._root = (info.st_dev, info.st_ino)
        elif self._root != (info.st_dev, info.st_ino):
            raise self._root_gone()

    def _root_gone(self) -> OutputError:
        return OutputError(
            f"the results directory {self.root} was removed (or replaced) while dlscale ran: "
            "the results written there before are gone, and dlscale does not recreate it; run "
            "the command again"
        )

    def lock_owner(self, run_id: str) -> dict[str, Any] | None:
        """Who holds the run's lock, as written in it; None: no lock, or not readable."""
        return locks.read_owner(self.lock_path(run_id))

    def clear(self, run_id: str) -> None:
        """Remove a previous attempt's files: only what a run writes, links unlinked, never
        followed (kept: the lock we hold, another process's takeover guard, anything else).
        The caller decides whether a stored result may go (run_point keeps a completed or
        newer one unless --force)."""
        rundir.clear(self.run_dir(run_id), self._held.get(run_id))

    def set_aside(self, run_id: str, stem: str) -> str | None:
        """Keep the run's ``result.json`` beside it as ``STEM.json``, or the first free of
        ``STEM-2.json`` on, before the run is made again (:func:`rundir.set_aside`: nothing
        at a name replaced or followed); the name used, or None if there is no result."""
        return rundir.set_aside(self.run_dir(run_id), stem)

    def write_result(self, run_id: str, result: Result) -> None:
        """Write ``result.json`` atomically: on a failure (a full disk) the earlier one is as it
        was. The run directory is made if needed, unless this store reserved it: then it must
        still be the one reserved (a removed one is said, never recreated)."""
        if run_id in self._held:
            self.check_held(run_id)
        else:
            self._check_root()
            make_directory(self.run_dir(run_id), "run directory")
        try:
            write_json_atomic(self.result_path(run_id), "result", result.document())
        except OutputError:
            self.check_held(run_id)  # removed while it was written: say that instead
            raise

    def results(self) -> list[Result]:
        """Every readable stored result, oldest first. One that is damaged or from a newer
        dlscale is skipped, with one warning naming the file and what is wrong."""
        if not self.root.is_dir():
            raise UserError(
                f"no results directory at {self.root}; run `dlscale run` first "
                "or pass --results DIR"
            )
        rows = []
        for path in sorted(self.root.glob("*/result.json")):
            stored = _read(path)
            if stored.result is not None:
                rows.append(stored.result)
            elif stored.problem is not None:
                self.warn_once(path, skipped_message(stored))
        rows.sort(key=lambda r: r.finished_at or 0)
        return rows


def skipped_message(stored: Stored) -> str:
    """The one line a reader reports for a result it skips."""
    advice = "upgrade dlscale to read it" if stored.newer else "rerun that point with dlscale run"
    return f"skipped {stored.path}: {stored.problem}; {advice}"


def _read(path: Path) -> Stored:
    from dlscale.store.migrate import ShapeError, result_view

    try:
        raw, info = read_regular(path)  # a FIFO planted as result.json cannot hang a reader
    except FileNotFoundError:
        return Stored(path)  # not written yet, or removed since it was listed
    except OSError as error:
        return Stored(path, problem=f"cannot be read ({unreadable(error)})")
    fingerprint = (info.st_ino, info.st_mtime_ns, info.st_size)
    try:
        # Every schema is read into the current shape; keys added after a result was written
        # read as their defaults.
        result = result_view(parse_json(raw, path, "result"))
    except NewerSchema as error:
        return Stored(path, problem=error.problem, newer=True, fingerprint=fingerprint)
    except UnreadableFile as error:
        return Stored(path, problem=error.problem, fingerprint=fingerprint)
    except ShapeError as error:
        return Stored(path, problem=f"not a usable result: {error}", fingerprint=fingerprint)
    if result.run_id != path.parent.name:  # copied or forged: it would count as another point
        said = f"the result of run {excerpt(result.run_id)}, not of {path.parent.name}"
        return Stored(path, problem=f"{said} (copied or forged)", fingerprint=fingerprint)
    return Stored(path, result=result, fingerprint=fingerprint)
