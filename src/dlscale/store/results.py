"""Run directories under the results root.

Layout of ``<root>/<run_id>/``: ``spec.json`` (resolved config, written before launch),
``events.rank<r>.jsonl`` (per-rank records), ``rank<r>.stdout`` / ``rank<r>.stderr``,
``result.json`` (written last, atomically) and, while a run is going, ``lock``.
The store has no separate index: listing scans ``*/result.json``, so it cannot go stale.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.errors import UserError
from dlscale.runtime.procfs import boot_id, is_alive, process_start
from dlscale.store.files import NewerSchema, UnreadableFile, parse_json, write_json_atomic
from dlscale.text import visible

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_ROOT = Path("dlscale-results")

LOCK = "lock"
TAKEOVER = "lock.takeover"
"""Held (briefly) by whoever removes a stale lock, so that two processes that both judged a lock
stale cannot remove each other's new one. One left by a crash is ignored after a few seconds."""
TAKEOVER_STALE_S = 10.0
UNREADABLE_LOCK_STALE_S = 60.0
"""A lock that cannot be parsed (its owner died between creating and writing it) is stale after
this long; younger, it may be one being written."""


def print_warning(message: str) -> None:
    """The default way a store's warning reaches the user: one line on stderr (never stdout,
    which may carry ``--json`` output or a table)."""
    print(f"dlscale: warning: {visible(message)}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Stored:
    """What a run's ``result.json`` holds, as one reader sees it at one moment."""

    path: Path
    result: dict[str, Any] | None = None
    """The result in the reader shape (``migrate.result_view``); None: absent or unreadable."""
    problem: str | None = None
    """Why it cannot be read (a few words, no path); None: absent or readable."""
    newer: bool = False
    """Written by a newer dlscale: not damage, and never to be overwritten without --force."""
    fingerprint: tuple[int, int, int] | None = None
    """(inode, mtime ns, size) of the file read; None: no file. An atomic rewrite changes it."""

    @property
    def completed(self) -> bool:
        return self.result is not None and self.result.get("status") == "completed"

    @property
    def damaged(self) -> bool:
        return self.problem is not None and not self.newer


class RunStore:
    """The runs under ``root``. Readers never fail on one bad run: a result that cannot be
    read is skipped and reported once (per store and file) through ``on_warning``, by default
    one ``dlscale: warning:`` line on stderr."""

    def __init__(
        self, root: Path | str = DEFAULT_ROOT, *, on_warning: Callable[[str], None] | None = None
    ) -> None:
        self.root = Path(root)
        self.on_warning = on_warning or print_warning
        self._warned: set[Path] = set()

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

    def completed(self, run_id: str) -> dict[str, Any] | None:
        """The stored result if this run completed, else ``None`` (also when it is unreadable:
        see :meth:`read` for why)."""
        stored = self.read(run_id)
        return stored.result if stored.completed else None

    def reserve(self, run_id: str) -> bool:
        """Take the run's lock (atomic create). False if a live process holds it already.

        The lock names its owner: host, pid, the process's start time and the boot it ran in.
        A lock of this host whose process is gone, is a zombie, or whose pid now belongs to a
        process started at another time (pid reused), or one from before a reboot, is taken
        over; several studies writing to one results directory therefore never run the same
        point at once.
        """
        directory = self.run_dir(run_id)
        directory.mkdir(parents=True, exist_ok=True)
        lock = directory / LOCK
        owner = json.dumps(_this_process())
        for _ in range(3):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not _take_over(lock):
                    return False
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(owner)
            return True
        return False

    def release(self, run_id: str) -> None:
        self.lock_path(run_id).unlink(missing_ok=True)

    def lock_owner(self, run_id: str) -> dict[str, Any] | None:
        """Who holds the run's lock, as written in it; None: no lock, or not readable."""
        try:
            owner = json.loads(self.lock_path(run_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return owner if isinstance(owner, dict) else None

    def clear(self, run_id: str) -> None:
        """Remove a previous attempt's files (kept: the lock we hold, and another process's
        takeover guard). The caller decides whether a stored result may go (run_point keeps a
        completed or newer one unless --force)."""
        for path in self.run_dir(run_id).iterdir():
            if path.name in (LOCK, TAKEOVER):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def write_result(self, run_id: str, result: dict[str, Any]) -> None:
        write_json_atomic(self.result_path(run_id), "result", result)

    def results(self) -> list[dict[str, Any]]:
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
        rows.sort(key=lambda r: r.get("finished_at") or 0)
        return rows


def skipped_message(stored: Stored) -> str:
    """The one line a reader reports for a result it skips."""
    advice = "upgrade dlscale to read it" if stored.newer else "rerun that point with dlscale run"
    return f"skipped {stored.path}: {stored.problem}; {advice}"


def _read(path: Path) -> Stored:
    from dlscale.store.migrate import ShapeError, result_view

    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            raw = handle.read()
    except FileNotFoundError:
        return Stored(path)  # not written yet, or removed since it was listed
    except OSError as error:
        return Stored(path, problem=f"cannot be read ({error.strerror or error})")
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
    return Stored(path, result=result, fingerprint=fingerprint)


# --------------------------------------------------------------------------------------------
# locks


def _this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": process_start(pid),
        "boot": boot_id(),
        "time": time.time(),
    }


def describe_owner(owner: dict[str, Any] | None) -> str:
    """A lock's owner in words: ``pid 123 on host h, since 12:03:04``."""
    if not owner:
        return "owner unknown"
    since = owner.get("time")
    when = (
        f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
        if isinstance(since, int | float)
        else ""
    )
    return f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}{when}"


def _take_over(lock: Path) -> bool:
    """Remove ``lock`` if it is stale; True if it is gone (removed here or released)."""
    guard = lock.with_name(TAKEOVER)
    try:
        os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        try:  # another process is taking it over, or one crashed doing so
            if time.time() - guard.stat().st_mtime > TAKEOVER_STALE_S:
                guard.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        return False
    try:
        if not _stale(lock):
            return False
        lock.unlink(missing_ok=True)
        return True
    finally:
        guard.unlink(missing_ok=True)


def _stale(lock: Path) -> bool:
    """Whether ``lock`` is gone or its owner certainly is (only this host can tell)."""
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
        if not isinstance(owner, dict):
            raise ValueError("not an object")
        pid = int(owner["pid"])
        if pid <= 0:
            raise ValueError(f"pid {pid}")
    except FileNotFoundError:
        return True
    except (OSError, ValueError, KeyError, TypeError):
        try:
            return time.time() - lock.stat().st_mtime > UNREADABLE_LOCK_STALE_S
        except FileNotFoundError:
            return True
    if owner.get("host") != socket.gethostname():
        return False  # another host's run: only that host can tell
    boot = boot_id()
    if owner.get("boot") and boot and owner["boot"] != boot:
        return True  # written before this machine rebooted
    start = owner.get("start")
    return not is_alive(pid, start if isinstance(start, int) else None)  # gone, zombie, reused


def load_results(path: Path | str = DEFAULT_ROOT, *, per: str = "run") -> pd.DataFrame:
    """All results in a results directory as a pandas DataFrame.

    ``per="run"`` (default): one row per run, with its own metrics and its point's scaling;
    ``per="point"``: one row per point, its runs combined (docs/metrics.md, "Runs and
    points"): the throughput is the mean over runs and ``throughput_ci95_img_s`` its interval
    over runs (``interval`` says ``runs``, or ``windows`` for a point with one run).

    Columns: run_id (a point's: its first run's), status, error, the resolved config keys,
    every metric of docs/metrics.md (``None``/NaN where it does not apply), runs, run_ids,
    runs_left_out (runs loaded in every window, not in the point's figures),
    interval, speedup with speedup_ci95_low/high, efficiency with efficiency_ci95_low/high,
    baseline and baseline_run_ids (the 1-worker point with the same threads per worker),
    machine_speedup (over the whole machine as one worker, when measured), threads_per_worker,
    oversubscribed, and environment columns (hostname, cpu_model, torch_version,
    dlscale_version, git_commit).
    """
    import pandas as pd

    from dlscale.metrics.scaling import add_scaling
    from dlscale.plugins import load_plugins

    if per not in ("run", "point"):
        raise ValueError(f"per must be 'run' or 'point', got {per!r}")
    load_plugins()  # a plug-in's stored options and reference flags read like the built-ins

    rows = add_scaling(RunStore(path).results(), per=per)
    return pd.DataFrame([flatten(row) for row in rows])


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """One flat record of a result: config keys, scalar metrics, scaling and environment."""
    from dlscale.metrics.scaling import SCALING_KEYS

    config = row["config"]
    metrics = row.get("metrics") or {}
    env = row.get("environment") or {}
    flat: dict[str, Any] = {
        "run_id": row["run_id"],
        "status": row["status"],
        "error": row.get("error"),
        "framework": row.get("framework"),
    }
    flat.update(config)
    flat["batch_size_per_worker"] = row.get("batch_size_per_worker")
    flat["global_batch_size"] = row.get("global_batch_size")
    flat["threads_per_worker"] = row.get("threads_per_worker") or config.get("threads_per_worker")
    flat["oversubscribed"] = row.get("oversubscribed")
    flat.update({k: v for k, v in metrics.items() if not isinstance(v, list | dict)})
    for key in SCALING_KEYS:
        value = row.get(key)
        if key.endswith("_ci95"):
            flat[f"{key}_low"], flat[f"{key}_high"] = value if value else (None, None)
        else:
            flat[key] = value
    for key in ("runs", "run_ids", "runs_left_out", "interval"):
        flat[key] = row.get(key)
    for key in ("hostname", "cpu_model", "torch_version", "dlscale_version", "git_commit"):
        flat[key] = env.get(key)
    flat["started_at"] = row.get("started_at")
    flat["finished_at"] = row.get("finished_at")
    return flat
