"""Running a study with a progress bar (or JSON lines) and the final table."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dlscale.cli.tables import LEGEND, console, points_table
from dlscale.config.study import Study
from dlscale.metrics.scaling import add_scaling
from dlscale.runner import run_point
from dlscale.store.results import RunStore

JSON_KEYS = (
    "throughput_img_s",
    "throughput_ci95_img_s",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "epoch_time_s",
    "final_train_loss",
    "eval_accuracy",
    "time_to_accuracy_s",
    "exposed_comm_fraction",
)


def json_record(row: dict[str, Any]) -> dict[str, Any]:
    cfg, metrics = row["config"], row.get("metrics") or {}
    record = {
        "run_id": row["run_id"],
        "status": row["status"],
        "error": row.get("error"),
        "backend": cfg["backend"],
        "model": cfg["model"],
        "dataset": cfg["dataset"],
        "workers": cfg["workers"],
        "batch_size_per_worker": row["batch_size_per_worker"],
        "global_batch_size": row["global_batch_size"],
        "scaling": cfg["scaling"],
    }
    record.update({key: metrics.get(key) for key in JSON_KEYS})
    record.update({key: row.get(key) for key in ("speedup", "efficiency", "baseline_run_id")})
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }


def run_study(
    study: Study, results: Path, *, force: bool, as_json: bool, command: list[str]
) -> int:
    store = RunStore(results)
    err = console(stderr=True)
    finished: list[str] = []
    failed = busy = 0

    def warn(message: str) -> None:
        err.print(f"[yellow]warning:[/] {message}", highlight=False)

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        disable=as_json or not err.is_terminal,
    )
    with progress:
        task = progress.add_task(f"study {study.name}", total=len(study.points))
        for config in study.points:
            progress.update(task, description=f"{config.backend} x{config.workers} {config.model}")
            outcome = run_point(
                config, store, force=force, command=command, study=study.name, on_warning=warn
            )
            progress.advance(task)
            if outcome.state == "busy":
                busy += 1
                warn(f"{outcome.run_id} is being run by another dlscale process; skipped")
                continue
            if outcome.state == "skipped" and not as_json:
                err.print(
                    f"{outcome.run_id}: already completed (use --force to rerun)", highlight=False
                )
            if outcome.state == "failed":
                failed += 1
                assert outcome.result is not None
                err.print(
                    f"[red]failed:[/] {outcome.run_id}: {outcome.result['error']}", highlight=False
                )
                for line in (outcome.result.get("failure") or {}).get("stderr_tail", [])[-5:]:
                    err.print(f"    {line}", highlight=False, markup=False)
            finished.append(outcome.run_id)
            if as_json:
                row = _with_scaling(store, outcome.run_id)
                print(json.dumps(json_record(row)), flush=True)
    if not as_json:
        rows = [r for r in add_scaling(store.results()) if r["run_id"] in set(finished)]
        order = {run_id: i for i, run_id in enumerate(finished)}
        rows.sort(key=lambda r: order[r["run_id"]])
        out = console()
        out.print(points_table(rows, title=f"study {study.name}: {study.description}"))
        out.print(LEGEND, style="dim", highlight=False)
        out.print(
            f"results: {results}/ (dlscale ls runs --results {results}; "
            f"dlscale.load_results({str(results)!r}))",
            highlight=False,
        )
    if failed or busy:
        print(f"dlscale: {failed} point(s) failed, {busy} skipped as busy", file=sys.stderr)
        return 1
    return 0


def _with_scaling(store: RunStore, run_id: str) -> dict[str, Any]:
    return next(r for r in add_scaling(store.results()) if r["run_id"] == run_id)
