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
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.errors import SchemaError, UserError
from dlscale.store.files import read_json, schema_version, write_json_atomic

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_ROOT = Path("dlscale-results")


class RunStore:
    def __init__(self, root: Path | str = DEFAULT_ROOT) -> None:
        self.root = Path(root)

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def completed(self, run_id: str) -> dict[str, Any] | None:
        """The stored result if this run completed, else ``None``."""
        path = self.run_dir(run_id) / "result.json"
        if not path.exists():
            return None
        from dlscale.store.migrate import read_view

        result = read_json(path, "result")
        if result.get("status") != "completed":
            return None
        return read_view(result, schema_version(result))

    def reserve(self, run_id: str) -> bool:
        """Take the run's lock (atomic create). False if a live process holds it already.

        A lock left by a dead process on this host is taken over; several studies writing to
        one results directory therefore never run the same point twice at once.
        """
        directory = self.run_dir(run_id)
        directory.mkdir(parents=True, exist_ok=True)
        lock = directory / "lock"
        owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()})
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not _stale(lock):
                    return False
                lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(owner)
            return True
        return False

    def release(self, run_id: str) -> None:
        (self.run_dir(run_id) / "lock").unlink(missing_ok=True)

    def clear(self, run_id: str) -> None:
        """Remove a previous attempt's files (kept: the lock we hold)."""
        for path in self.run_dir(run_id).iterdir():
            if path.name == "lock":
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def write_spec(self, run_id: str, spec: dict[str, Any]) -> Path:
        path = self.run_dir(run_id) / "spec.json"
        write_json_atomic(path, "spec", spec)
        return path

    def write_result(self, run_id: str, result: dict[str, Any]) -> None:
        write_json_atomic(self.run_dir(run_id) / "result.json", "result", result)

    def results(self) -> list[dict[str, Any]]:
        """Every stored result, oldest first. Unreadable ones are reported, not skipped."""
        if not self.root.is_dir():
            raise UserError(
                f"no results directory at {self.root}; run `dlscale run` first "
                "or pass --results DIR"
            )
        from dlscale.store.migrate import read_view

        rows = []
        for path in sorted(self.root.glob("*/result.json")):
            try:
                row = read_json(path, "result")
                # Every schema is read into the current shape; keys added after a result was
                # written read as their defaults.
                rows.append(read_view(row, schema_version(row)))
            except SchemaError:
                raise
            except OSError as error:
                raise UserError(f"cannot read {path}: {error}") from None
        rows.sort(key=lambda r: r.get("finished_at", 0))
        return rows


def _stale(lock: Path) -> bool:
    try:
        owner = json.loads(lock.read_text())
    except (OSError, json.JSONDecodeError):
        return time.time() - lock.stat().st_mtime > 60 if lock.exists() else True
    if owner.get("host") != socket.gethostname():
        return False  # another host's run: only that host can tell
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def load_results(path: Path | str = DEFAULT_ROOT) -> pd.DataFrame:
    """All runs in a results directory as a pandas DataFrame, one row per run.

    Columns: run_id, status, error, the resolved config keys, every metric of
    docs/metrics.md (``None``/NaN where it does not apply), speedup, efficiency and
    baseline_run_id (against the 1-worker point of the same configuration), and
    environment columns (hostname, cpu_model, torch_version, dlscale_version, git_commit).
    """
    import pandas as pd

    from dlscale.metrics.scaling import add_scaling
    from dlscale.plugins import load_plugins

    load_plugins()  # a plug-in's stored options and reference flags read like the built-ins

    rows = add_scaling(RunStore(path).results())
    return pd.DataFrame([flatten(row) for row in rows])


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """One flat record of a result: config keys, scalar metrics, scaling and environment."""
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
    flat.update({k: v for k, v in metrics.items() if not isinstance(v, list | dict)})
    for key in (
        "speedup",
        "efficiency",
        "baseline_run_id",
        "tta_speedup",
        "statistical_efficiency",
    ):
        flat[key] = row.get(key)
    for key in ("hostname", "cpu_model", "torch_version", "dlscale_version", "git_commit"):
        flat[key] = env.get(key)
    flat["started_at"] = row.get("started_at")
    flat["finished_at"] = row.get("finished_at")
    return flat
