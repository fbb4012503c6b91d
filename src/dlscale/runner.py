"""Run the points of a study: reserve in the store, launch, aggregate, record.

Only files pass between this parent and the workers (spec.json in, events out), so a worker
may run any framework under any interpreter; no framework is imported here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.backends import BACKENDS
from dlscale.config.run_config import RunConfig
from dlscale.datasets import DATASETS
from dlscale.launchers import LAUNCHERS
from dlscale.launchers.watch import watch
from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.events import events_path, read_records
from dlscale.metrics.records import Environment, Error, Record
from dlscale.plugins import load_plugins
from dlscale.runtime.environment import host_environment
from dlscale.runtime.worker_path import prepare_worker_path
from dlscale.store.results import RunStore


@dataclass(frozen=True, kw_only=True)
class PointOutcome:
    config: RunConfig
    run_id: str
    state: str
    """completed | failed | skipped (already completed) | busy (another process runs it)."""
    result: dict[str, Any] | None


def interpreter(config: RunConfig) -> str:
    return config.python or BACKENDS.get(config.backend).python or sys.executable


def check_inputs(points: tuple[RunConfig, ...]) -> None:
    """Checks that need the file system (data files): before anything is launched."""
    seen = set()
    for config in points:
        key = (config.dataset, config.data_dir)
        if key not in seen:
            seen.add(key)
            DATASETS.get(config.dataset).check(Path(config.data_dir) if config.data_dir else None)


def run_point(
    config: RunConfig,
    store: RunStore,
    *,
    force: bool,
    command: list[str],
    study: str,
    on_warning: Callable[[str], None] = lambda message: None,
) -> PointOutcome:
    run_id = config.run_id()
    if not force and (done := store.completed(run_id)) is not None:
        return PointOutcome(config=config, run_id=run_id, state="skipped", result=done)
    if not store.reserve(run_id):
        return PointOutcome(config=config, run_id=run_id, state="busy", result=None)
    try:
        store.clear(run_id)
        result = _launch(config, store, run_id, command=command, study=study, on_warning=on_warning)
        store.write_result(run_id, result)
    finally:
        store.release(run_id)
    return PointOutcome(config=config, run_id=run_id, state=result["status"], result=result)


def _launch(
    config: RunConfig,
    store: RunStore,
    run_id: str,
    *,
    command: list[str],
    study: str,
    on_warning: Callable[[str], None],
) -> dict[str, Any]:
    started_at = time.time()
    run_dir = store.run_dir(run_id)
    spec_path = run_dir / "spec.json"
    launcher = LAUNCHERS.get(config.launcher).create()
    plan = launcher.plan(config, spec_path, interpreter(config))
    plugins = load_plugins()
    store.write_spec(
        run_id,
        {
            "run_id": run_id,
            "study": study,
            "command": command,
            "config": config.to_dict(),
            "cluster": plan.addresses.to_dict(),
            "layout": plan.layout.to_dict(),
            "plugins": plugins,
        },
    )
    prepare_worker_path(run_dir, plugins)
    for warning in plan.warnings:
        on_warning(warning)
    outcome = watch(plan, launcher.start(plan), run_dir, config.timeout_s, launcher.blame)
    layout = plan.layout
    per_rank = {p.rank: read_records(events_path(run_dir, p.rank)) for p in layout.processes}
    metrics = aggregate(
        per_rank, target_accuracy=config.target_accuracy, training_ranks=layout.training_ranks
    )
    error = None
    if not outcome.ok:
        error = outcome.reason
        message = _error_message(per_rank.get(outcome.failed_rank or 0, []))
        if message:
            error = f"{error}: {message}"
    elif not metrics["windows"]:
        error = "the workers exited without recording a measurement window"
    environment = host_environment()
    first = per_rank.get(layout.training_ranks[0], [])
    worker = next((r for r in first if isinstance(r, Environment)), None)
    if worker is not None:
        environment["worker"] = worker.payload()
        environment["packages"] = worker.packages
        environment.update(worker.framework)  # e.g. torch_version, gpu_names (flat columns)
    return {
        "run_id": run_id,
        "status": "failed" if error else "completed",
        "error": error,
        "failure": None
        if outcome.ok
        else {
            "failed_rank": outcome.failed_rank,
            "returncodes": {str(k): v for k, v in outcome.returncodes.items()},
            "stderr_tail": outcome.stderr_tail,
        },
        "study": study,
        "command": command,
        "framework": config.framework,
        "reference": BACKENDS.get(config.backend).reference,
        "config": config.to_dict(),
        "layout": layout.to_dict(),
        "batch_size_per_worker": config.batch_per_worker,
        "global_batch_size": config.global_batch,
        "threads_per_worker": plan.threads_per_worker,
        "interpreter": interpreter(config),
        "warnings": list(plan.warnings),
        "metrics": metrics,
        "environment": environment,
        "started_at": started_at,
        "finished_at": time.time(),
        "duration_s": outcome.duration_s,
    }


def _error_message(records: list[Record]) -> str | None:
    errors = [record for record in records if isinstance(record, Error)]
    return errors[-1].message if errors else None
