"""What a run writes into its directory, and how a previous attempt's files are removed.

A run directory may hold things dlscale did not write (a note, a link someone planted), so
clearing it removes only the names a run writes, each without following a link: a link is
unlinked, never its target emptied, and every other name is left in place. The names are
grepped from their writers; keep this list with them.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlscale.contract.files import OutputError, open_directory, output_failure
from dlscale.store.locks import LOCK, TAKEOVER, TEMP_PREFIX, UNREADABLE_LOCK_STALE_S

OUTPUT_FILES = (
    "spec.json",  # runner.launch
    "result.json",  # RunStore.write_result
    "microbench.json",  # cli/microbench
    "network.json",  # launchers/torchrun (the emulated network's record)
    "job.sbatch",  # launchers/slurm
    "slurm-job-id",
    "horovod-timeline.json",  # frameworks/horovod/session (horovod_timeline)
)
OUTPUT_PATTERNS = (
    "events.rank*.jsonl",  # contract/events
    "rank*.stdout",  # launchers/local
    "rank*.stderr",
    "launcher.stdout",  # one-command launchers, slurm
    "launcher.stderr",
    "torchrun*.stdout",  # launchers/torchrun
    "torchrun*.stderr",
    "slurm.stdout",  # launchers/slurm
    "slurm.stderr",
    "final_params.*",  # every engine's saved parameters (.pt, .npz, .npy)
    *(f".{name}.*.tmp" for name in OUTPUT_FILES),  # contract/files.write_atomic, interrupted
)
OUTPUT_DIRS = (
    "pythonpath",  # runtime/worker_path
    "checkpoint",  # runtime/checkpoint
)


LAST_NUMBER = 999
"""The highest number a fresh name is given (:func:`numbered`)."""


def numbered(stem: str, suffix: str = "") -> Iterator[str]:
    """``stem + suffix``, then ``stem-2 + suffix`` to ``stem-999 + suffix``: the names a
    fresh run directory or set-aside file is given, the first free one first."""
    yield f"{stem}{suffix}"
    for number in range(2, LAST_NUMBER + 1):
        yield f"{stem}-{number}{suffix}"


def set_aside(directory: Path, stem: str) -> str | None:
    """Keep ``directory``'s ``result.json`` beside it as ``STEM.json`` (a file :func:`clear`
    leaves and no reader takes for a result); the name used, or None if there is none.
    Nothing at a name is replaced, followed or removed: a directory, link or earlier file
    there (a result set aside before, or something planted under a name anyone can predict)
    moves it to ``STEM-2.json`` and on; when every name is taken, one line
    (:class:`OutputError`) and the result stays where it is. Renamed inside the directory
    opened without following links."""
    fd = open_directory(directory, "run directory")
    try:
        for name in numbered(stem, ".json"):
            try:  # a hard link fails on anything at the name, where a rename would replace it
                os.link("result.json", name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                continue
            except FileNotFoundError:
                return None
            except OSError as error:
                if error.errno not in _NO_HARD_LINKS or _taken(name, fd):
                    raise output_failure(directory / name, error) from None
                _rename(directory, name, fd)  # a file system without hard links
                return name
            os.unlink("result.json", dir_fd=fd)
            return name
    finally:
        os.close(fd)
    raise OutputError(
        f"cannot set aside {directory / 'result.json'}: {stem}.json and {stem}-2.json to "
        f"{stem}-{LAST_NUMBER}.json are all taken in {directory}; move them away, or run "
        "with --keep-stale"
    )


_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV)


def _taken(name: str, fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True


def _rename(directory: Path, name: str, fd: int) -> None:
    try:
        os.rename("result.json", name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError as error:
        raise output_failure(directory / name, error) from None


def is_output(name: str, traces: set[str]) -> bool:
    """Whether a run writes ``name`` (``traces``: the files its engine said it wrote)."""
    return (
        name in OUTPUT_FILES
        or name in OUTPUT_DIRS
        or name in traces
        or any(fnmatch.fnmatchcase(name, pattern) for pattern in OUTPUT_PATTERNS)
    )


def clear(directory: Path, identity: tuple[int, int] | None) -> None:
    """Remove a previous attempt's files from ``directory`` (kept: the lock, another process's
    takeover guard, a lock being written, anything a run does not write). ``identity``: the
    directory's (device, inode) when it was reserved; another one there is refused."""
    fd = open_directory(directory, "run directory")
    try:
        info = os.fstat(fd)
        if identity is not None and (info.st_dev, info.st_ino) != identity:
            raise OutputError(
                f"run directory {directory} was replaced since dlscale took its lock; nothing "
                "was removed: run the command again"
            )
        traces = _trace_names(fd)
        for entry in list(os.scandir(fd)):
            name = entry.name
            if name in (LOCK, TAKEOVER):
                continue
            if name.startswith(TEMP_PREFIX):
                _remove_old_lock_temp(fd, name)
            elif is_output(name, traces):
                _remove(fd, name, directory)
    finally:
        os.close(fd)


def _remove(fd: int, name: str, directory: Path) -> None:
    """Remove ``name`` under the directory open as ``fd``: a link or a file is unlinked, a real
    directory removed with everything in it (links inside unlinked, never followed)."""
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
        if stat.S_ISDIR(mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as error:
        raise OutputError(
            f"cannot remove {directory / name} (a previous attempt's file): "
            f"{error.strerror or error}; remove it by hand and run the command again"
        ) from None


def _remove_old_lock_temp(fd: int, name: str) -> None:
    """A lock being written is another process's, unless it is old (its writer died)."""
    with contextlib.suppress(OSError):
        info = os.lstat(name, dir_fd=fd)
        if stat.S_ISREG(info.st_mode) and time.time() - info.st_mtime > UNREADABLE_LOCK_STALE_S:
            os.unlink(name, dir_fd=fd)


def _trace_names(fd: int) -> set[str]:
    """The trace files the previous attempt's engine wrote (``Strategy.traces`` in its events):
    plain names in the run directory only."""
    names: set[str] = set()
    for entry in os.scandir(fd):
        if not fnmatch.fnmatchcase(entry.name, "events.rank*.jsonl"):
            continue
        try:
            events = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError:
            continue
        with os.fdopen(events, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                continue
            for line in handle:
                if b'"strategy"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    strategy = isinstance(record, dict) and record.get("event") == "strategy"
                    traces = record.get("traces") if strategy else None
                    for name in traces if isinstance(traces, list) else []:
                        if isinstance(name, str) and name == Path(name).name:
                            names.add(name)
    return names - {LOCK, TAKEOVER, "", ".", ".."}


def config_problem(spec: dict[str, Any]) -> str | None:
    """What makes a stored spec's ``config`` unusable, naming the field (its ``config``, its
    options or one plug-in's group not a JSON object); None: the shape is right."""
    config = spec.get("config")
    options = (config.get("options") or {}) if isinstance(config, dict) else {}
    fields = {"config": config, "config.options": options}
    if isinstance(options, dict):
        fields.update({f"config.options.{key}": value for key, value in options.items()})
    bad = next((name for name, value in fields.items() if not isinstance(value, dict)), None)
    if bad is None:
        return None
    kinds = {str: "a string", list: "an array", bool: "a boolean", type(None): "missing or null"}
    return f"its {bad} is {kinds.get(type(fields[bad]), 'a number')}, not a JSON object"
