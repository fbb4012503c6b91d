"""Running a study: its progress on stderr (`dlscale.cli.study_progress`: a live line in a
terminal, one plain line per run elsewhere), or JSON lines, then the final table."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlscale.cli.claims import print_claims
from dlscale.cli.eta import StudyClock
from dlscale.cli.stale import say_stale
from dlscale.cli.study_progress import (
    RunLines,
    point_description,
    study_description,
    study_progress,
)
from dlscale.cli.tables import (
    console,
    literal,
    markup,
    print_findings,
    results_command,
    say,
    show_table,
)
from dlscale.config.repeats import Repeats
from dlscale.config.study import Study
from dlscale.contract.files import OutputError, refuse_foreign_document
from dlscale.contract.text import visible, without_traceback_frames
from dlscale.metrics.claims import check_claims
from dlscale.metrics.figures import Figures
from dlscale.metrics.points_file import points_path, write_points
from dlscale.metrics.scaling import SCALING_KEYS, add_scaling
from dlscale.runner import PointOutcome, run_point
from dlscale.store.claims import claims_path, write_claims
from dlscale.store.results import RunStore, describe_owner

JSON_KEYS = (
    "throughput_samples_s",
    "throughput_ci95_samples_s",
    "sample_unit",
    "units_per_sample",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "epoch_time_s",
    "final_train_loss",
    "eval_accuracy",
    "time_to_accuracy_s",
    "input_time_p50_ms",
    "input_wait_fraction",
    "exposed_comm_fraction",
    "exposed_comm_ci95",
    "page_faults_per_step",
    "outside_load_max",
    "noisy",
    "train_flops_per_sample",
    "peak_flops_per_worker",
    "peak_basis",
    "rss_peak_bytes",
    "device_peak_allocated_bytes",
)


def json_record(row: dict[str, Any], kind: str = "run") -> dict[str, Any]:
    """One finished run (``kind="run"``), or a point with its runs combined (``"point"``)."""
    cfg, metrics = row["config"], row.get("metrics") or {}
    record = {
        "kind": kind,
        "run_id": row["run_id"],
        "status": row["status"],
        "error": row.get("error"),
        "backend": cfg["backend"],
        "model": cfg["model"],
        "dataset": cfg["dataset"],
        "workers": cfg["workers"],
        "threads_per_worker": row.get("threads_per_worker"),
        "batch_size_per_worker": row["batch_size_per_worker"],
        "global_batch_size": row["global_batch_size"],
        "scaling": cfg["scaling"],
        "repeat_id": cfg.get("repeat_id"),
        "loader_only": bool(cfg.get("loader_only")),
    }
    record.update({key: metrics.get(key) for key in JSON_KEYS})
    figures = Figures.of(row)  # derived: docs/metrics.md, "MFU"
    record.update(mfu=figures.mfu, achieved_flops_s=figures.achieved_flops_s)
    record["mfu_missing"] = figures.mfu_missing
    if kind == "point":
        record["run_ids"] = row.get("run_ids")
        record["runs_left_out"] = row.get("runs_left_out")
        record["runs"] = row.get("runs")
        record["interval"] = row.get("interval")
        record["throughput_runs_samples_s"] = metrics.get("throughput_runs_samples_s")
        record["oversubscribed"] = row.get("oversubscribed")
        record.update({key: row.get(key) for key in SCALING_KEYS})
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }


_NOT_RUN_HERE = ("skipped", "busy", "newer", "submitted")
"""Outcomes whose seconds are no run's: kept from before, run by another process, handed on."""


@dataclass
class _Tally:
    finished: list[str] = field(default_factory=list)
    failed: int = 0
    busy: int = 0
    submitted: int = 0


def run_study(
    study: Study,
    results: Path,
    *,
    force: bool,
    as_json: bool,
    command: list[str],
    wide_table: bool = False,
    keep_stale: bool = False,
) -> int:
    """Every point ``repeats`` times in interleaved rounds, then, under ``target_ci``, more
    rounds of the points whose interval is still wider, until the rule's budget runs out.
    Stored runs made by other code are said in one line first, and run again unless
    ``keep_stale``."""
    err = console(stderr=True)
    tally = _Tally()
    plan = study.repeats
    started = time.monotonic()

    def line(text: str) -> None:
        """One line of markup on stderr, never wrapped (a path may be longer than the console);
        user text in it has been through `markup`."""
        err.print(visible(text), highlight=False, soft_wrap=True)

    def warn(message: str) -> None:
        line(f"dlscale: [yellow]warning:[/] {markup(message)}")

    store = RunStore(results, on_warning=warn)
    for path, kind in ((points_path(results, study.name), "points"),
                       (claims_path(results, study.name), "claims")):  # fmt: skip
        refuse_foreign_document(path, kind, f"the study's {kind}")  # before any point runs
    write_claims(store, study.name, study.claims)  # for `dlscale report` to check later
    if not force:
        say_stale(store, study, keep_stale, warn)
    progress = study_progress(err, disable=as_json)
    run_ids: dict[int, list[str]] = {i: [] for i in range(len(study.points))}
    clock = StudyClock([p.workers for p in study.points], plan.repeats)
    # off a terminal (a pipe, a batch job's log) one plain line per run instead of the live one
    lines = RunLines(err, on=not as_json and not err.is_terminal, clock=clock, started=started)

    def run_round(number: int, indices: list[int]) -> None:
        for i in round_order(indices, number, plan):
            if number >= plan.repeats and _over_budget(plan, started):
                return
            config = dataclasses.replace(
                study.points[i], repeat_id=study.points[i].repeat_id + number
            )
            name = point_description(config, number)
            progress.update(task, description=name)
            run_ids[i].append(config.run_id())
            began = time.monotonic()
            outcome = _run_one(
                config, store, (force, keep_stale), command, study.name, as_json, line, warn,
                tally,
            )  # fmt: skip
            took = time.monotonic() - began
            ran_here = outcome.state not in _NOT_RUN_HERE
            if ran_here:
                clock.record(i, took)
            else:  # kept from before, or handed to a scheduler: says nothing of its time
                clock.skip(i)
            progress.update(task, advance=1, left=clock.words())
            total = int(progress.tasks[0].total or 0)
            lines.finished(
                name, outcome, total=total, took_s=took if ran_here else None, now=time.monotonic()
            )

    with progress:
        task = progress.add_task(
            study_description(study.name),
            total=len(study.points) * plan.repeats,
            left=clock.words(),
        )
        everyone = list(range(len(study.points)))
        for number in range(plan.repeats):
            run_round(number, everyone)
        number = plan.repeats
        stop = None
        while plan.target_ci is not None:
            wide = _wide_points(store, run_ids, plan.target_ci)
            stop = _stop_reason(wide, number, plan, started)
            if stop is not None:
                break
            clock.plan(wide)
            progress.update(task, total=(progress.tasks[0].total or 0) + len(wide))
            run_round(number, wide)
            number += 1
    points = _study_points(store, tally.finished)
    if as_json:
        for point in points:
            print(json.dumps(json_record(point, kind="point")), flush=True)
        for check in check_claims(study.claims, points) if study.claims else []:
            print(json.dumps(check.record()), flush=True)
    elif points or not tally.submitted:
        out = console()
        print_findings(out, points)
        title = f"study {study.name}: {study.description}"
        show_table(out, points, title, wide=wide_table)
        from dlscale.metrics.input_bound import input_findings, input_lines

        for text in input_lines(input_findings(points)):  # wrapped at words, as a paragraph
            out.print(literal(f"input: {text}"))
        print_claims(out, study.name, study.claims, points)
        # two lines, each under 100 columns for a path of 40: what to type, and from Python
        say(out, f"results: {results}/ ({results_command('ls', 'runs', results=results)})")
        say(out, f"  in Python: dlscale.load_results({str(results)!r})")
    try:  # every figure printed above, at full precision; after the table, so a file
        write_points(store, study.name, points)  # planted meanwhile costs one line, not them
        unwritten = False
    except OutputError as error:
        line(f"dlscale: error: {markup(str(error))}")
        unwritten = True
    if plan.target_ci is not None and stop is not None:
        line(f"dlscale: stopping rule: {markup(stop)}")
    if tally.submitted:
        line(
            markup(
                f"dlscale: {tally.submitted} point(s) submitted; each records its result when "
                f"its job ends: `{results_command('ls', 'runs', results=results)}` shows where "
                f"they stand, `{results_command('report', results=results)}` reads them once done"
            )
        )
    if tally.failed or tally.busy:
        print(
            f"dlscale: {tally.failed} run(s) failed, {tally.busy} skipped as busy", file=sys.stderr
        )
        return 1
    return 2 if unwritten else 0


def round_order(indices: list[int], number: int, plan: Repeats) -> list[int]:
    """The order of one round: ABBA (study order in even rounds, reversed in odd ones) or
    shuffled with the study's seed and the round's number."""
    if plan.order == "random":
        shuffled = list(indices)
        random.Random(plan.order_seed * 100_003 + number).shuffle(shuffled)
        return shuffled
    return list(indices) if number % 2 == 0 else list(reversed(indices))


def _over_budget(plan: Repeats, started: float) -> bool:
    return plan.time_budget_s is not None and time.monotonic() - started >= plan.time_budget_s


def _wide_points(store: RunStore, run_ids: dict[int, list[str]], target: float) -> list[int]:
    """Points whose throughput interval over runs is still wider than ``target`` percent of
    the mean (a point that never completed is not run again: its failure will not heal)."""
    points = {id_: p for p in add_scaling(store.results()) for id_ in _every_run_id(p)}
    wide = []
    for index, ids in run_ids.items():
        point = next((points[i] for i in ids if i in points), None)
        if point is None or point["status"] != "completed":
            continue
        if relative_half_width(point) is None or relative_half_width(point) > target:  # type: ignore[operator]
            wide.append(index)
    return wide


def relative_half_width(point: dict[str, Any]) -> float | None:
    """Half-width of the point's throughput interval over runs, in percent of its mean."""
    metrics = point["metrics"]
    if point.get("interval") != "runs" or metrics.get("throughput_ci95_samples_s") is None:
        return None
    return 100 * metrics["throughput_ci95_samples_s"] / metrics["throughput_samples_s"]


def _stop_reason(wide: list[int], number: int, plan: Repeats, started: float) -> str | None:
    if not wide:
        return f"every point's interval is within {plan.target_ci:g}% of its mean"
    if number >= (plan.max_repeats or plan.repeats):  # set in Repeats
        return (
            f"{len(wide)} point(s) still wider than {plan.target_ci:g}% after "
            f"{plan.max_repeats} runs (max_repeats)"
        )
    if _over_budget(plan, started):
        return (
            f"{len(wide)} point(s) still wider than {plan.target_ci:g}% when the time budget "
            f"of {plan.time_budget_s:g} s ran out"
        )
    return None


def _run_one(
    config: Any,
    store: RunStore,
    modes: tuple[bool, bool],
    command: list[str],
    study: str,
    as_json: bool,
    line: Callable[[str], None],
    warn: Callable[[str], None],
    tally: _Tally,
) -> PointOutcome:
    """Runs one point and says how it went (``modes``: force, keep_stale); returns its
    outcome."""
    force, keep_stale = modes
    outcome = run_point(
        config,
        store,
        force=force,
        keep_stale=keep_stale,
        command=command,
        study=study,
        on_warning=warn,
        on_wait=lambda message: line(f"dlscale: {markup(message)}"),
    )
    if outcome.state == "busy":
        tally.busy += 1
        warn(busy_message(store, outcome.run_id, outcome.lock_owner))
        return outcome
    if outcome.state == "newer":
        return outcome  # kept, with a warning from the store; nothing to show
    if outcome.state == "submitted":
        tally.submitted += 1
        if as_json:
            record = {"kind": "submitted", "run_id": outcome.run_id, "detail": outcome.detail}
            print(json.dumps(record), flush=True)
        else:
            line(markup(f"{outcome.run_id}: submitted: {outcome.detail}"))
        return outcome
    if outcome.state == "skipped" and not as_json:
        line(
            markup(
                f"{outcome.run_id}: completed by another dlscale process"
                if outcome.elsewhere
                else f"{outcome.run_id}: already completed (use --force to rerun)"
            )
        )
    if outcome.state == "failed":
        tally.failed += 1
        assert outcome.result is not None
        where = " (in another dlscale process)" if outcome.elsewhere else ""
        error = markup(f"{outcome.run_id}{where}: {outcome.result.error}")
        line(f"[red]failed:[/] {error}")
        tail = (outcome.result.failure or {}).get("stderr_tail", [])
        for text in without_traceback_frames(tail)[-5:]:  # the errors, not a peer's frames
            say(console(stderr=True), f"    {text}")
    tally.finished.append(outcome.run_id)
    if as_json:
        row = next(
            (r for r in add_scaling(store.results(), per="run") if r["run_id"] == outcome.run_id),
            None,
        )
        if row is not None:
            print(json.dumps(json_record(row)), flush=True)
    return outcome


def _every_run_id(point: dict[str, Any]) -> set[str]:
    """The point's runs, those the noise guard left out included."""
    return {*point["run_ids"], *point["runs_left_out"]}


def _study_points(store: RunStore, finished: list[str]) -> list[dict[str, Any]]:
    """The points (runs combined) that hold a run this study finished, in study order."""
    order = {run_id: i for i, run_id in enumerate(finished)}
    # a point's runs include those the noise guard left out: they fix its place too
    points = [p for p in add_scaling(store.results()) if order.keys() & _every_run_id(p)]
    points.sort(key=lambda p: min(order[i] for i in _every_run_id(p) if i in order))
    return points


def busy_message(store: RunStore, run_id: str, owner: dict[str, Any] | None) -> str:
    """Why a point was skipped as busy, and how to free it if its owner is really gone."""
    lock = store.lock_path(run_id)
    return (
        f"skipped {run_id}: another dlscale process still runs it ({describe_owner(owner)}); "
        f"if that process is gone (e.g. on another host, or killed), delete {lock} and rerun"
    )
