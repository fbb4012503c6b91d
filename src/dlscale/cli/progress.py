"""Running a study with a progress bar (or JSON lines) and the final table."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dlscale.cli.tables import LEGEND, console, points_table, say
from dlscale.config.study import Study
from dlscale.metrics.scaling import add_scaling
from dlscale.runner import run_point
from dlscale.store.results import RunStore, describe_owner
from dlscale.text import visible

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
    err = console(stderr=True)
    finished: list[str] = []
    failed = busy = 0

    def line(text: str) -> None:
        """One line on stderr, never wrapped (a path may be longer than the console)."""
        err.print(visible(text), highlight=False, soft_wrap=True)

    def warn(message: str) -> None:
        line(f"dlscale: [yellow]warning:[/] {escape(message)}")

    store = RunStore(results, on_warning=warn)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        disable=as_json or not err.is_terminal,
    )
    with progress:
        task = progress.add_task(escape(f"study {study.name}"), total=len(study.points))
        for config in study.points:
            progress.update(
                task, description=escape(f"{config.backend} x{config.workers} {config.model}")
            )
            outcome = run_point(
                config,
                store,
                force=force,
                command=command,
                study=study.name,
                on_warning=warn,
                on_wait=lambda message: line(f"dlscale: {escape(message)}"),
            )
            progress.advance(task)
            if outcome.state == "busy":
                busy += 1
                warn(busy_message(store, outcome.run_id, outcome.lock_owner))
                continue
            if outcome.state == "newer":
                continue  # kept, with a warning from the store; nothing to show
            if outcome.state == "skipped" and not as_json:
                line(
                    escape(
                        f"{outcome.run_id}: completed by another dlscale process"
                        if outcome.elsewhere
                        else f"{outcome.run_id}: already completed (use --force to rerun)"
                    )
                )
            if outcome.state == "failed":
                failed += 1
                assert outcome.result is not None
                where = " (in another dlscale process)" if outcome.elsewhere else ""
                error = escape(f"{outcome.run_id}{where}: {outcome.result.get('error')}")
                line(f"[red]failed:[/] {error}")
                for text in (outcome.result.get("failure") or {}).get("stderr_tail", [])[-5:]:
                    say(err, f"    {text}")
            finished.append(outcome.run_id)
            if as_json:
                row = _with_scaling(store, outcome.run_id)
                if row is not None:
                    print(json.dumps(json_record(row)), flush=True)
    if not as_json:
        rows = [r for r in add_scaling(store.results()) if r["run_id"] in set(finished)]
        order = {run_id: i for i, run_id in enumerate(finished)}
        rows.sort(key=lambda r: order[r["run_id"]])
        out = console()
        out.print(points_table(rows, title=f"study {study.name}: {study.description}"))
        out.print(LEGEND, style="dim", highlight=False)
        say(
            out,
            f"results: {results}/ (dlscale ls runs --results {results}; "
            f"dlscale.load_results({str(results)!r}))",
        )
    if failed or busy:
        print(f"dlscale: {failed} point(s) failed, {busy} skipped as busy", file=sys.stderr)
        return 1
    return 0


def busy_message(store: RunStore, run_id: str, owner: dict[str, Any] | None) -> str:
    """Why a point was skipped as busy, and how to free it if its owner is really gone."""
    lock = store.lock_path(run_id)
    return (
        f"skipped {run_id}: another dlscale process still runs it ({describe_owner(owner)}); "
        f"if that process is gone (e.g. on another host, or killed), delete {lock} and rerun"
    )


def _with_scaling(store: RunStore, run_id: str) -> dict[str, Any] | None:
    return next((r for r in add_scaling(store.results()) if r["run_id"] == run_id), None)
