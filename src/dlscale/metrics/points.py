"""Runs of the same point, combined: the statistics that hold from one run to the next.

A *point* is a configuration (every config key but the run labels and operational keys, see
:data:`~dlscale.contract.run_config.NOT_MATCHED_KEYS`) within a study; its *runs* are independent
launches (``repeat_id``, ``dlscale run --repeats``). Windows inside one run share the processes, the
warm caches and the allocator's state, so they are not independent repeats: a point's interval
is taken over its runs' throughputs, and only a point with a single run falls back to its
windows (``interval`` says which). Definitions: docs/metrics.md ("Runs and points").

A point row has the shape of a run row (``config``, ``metrics``, ``status``, ``run_id``...),
so tables, figures and exports read both; its ``metrics`` are the runs' combined.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from dlscale.contract.run_config import NOT_MATCHED_KEYS
from dlscale.metrics.stats import mean_ci95

Row = dict[str, Any]
PointKey = tuple[tuple[str, Any], ...]

MEAN_OVER_RUNS = (
    "step_time_p50_ms",
    "step_time_p95_ms",
    "input_time_p50_ms",
    "input_wait_fraction",
    "step_time_nosync_p50_ms",
    "forward_time_p50_ms",
    "epoch_time_s",
    "final_train_loss",
    "eval_accuracy",
    "time_to_accuracy_s",
    "epochs_to_accuracy",
    "page_faults_per_step",
    "bytes_sent_per_step_model",
    "bytes_sent_per_step_counted",
    "gradient_bytes",
    "staleness_mean",
)
"""Metrics a point reports as the mean over its runs (those that have them)."""
MAX_OVER_RUNS = ("rss_peak_bytes", "device_peak_allocated_bytes", "device_peak_reserved_bytes")
"""Metrics a point reports as the largest over its runs: the memory it must have."""


def point_key(config: dict[str, Any]) -> PointKey:
    """What makes two runs the same point: every config key but the run labels."""
    return tuple(sorted((k, v) for k, v in config.items() if k not in NOT_MATCHED_KEYS))


def run_throughputs(runs: Sequence[Row]) -> list[float]:
    return [float(r["metrics"]["throughput_samples_s"]) for r in runs]


def window_throughputs(runs: Sequence[Row]) -> list[float]:
    """Every window of every run, pooled (the finer view inside runs)."""
    return [
        float(w)
        for r in runs
        for w in (r["metrics"].get("throughput_windows_samples_s") or [])
        if w is not None
    ]


def samples(runs: Sequence[Row]) -> tuple[list[float], str]:
    """The throughput samples a point's statistics use, and their kind: one per run when it
    has two runs or more (``runs``), else its windows (``windows``)."""
    if len(runs) >= 2:
        return run_throughputs(runs), "runs"
    return window_throughputs(runs) or run_throughputs(runs), "windows"


def combine(results: Sequence[Row]) -> list[Row]:
    """One row per point from its completed runs, and every run that did not complete as its
    own row (never hidden); in the order the points' first runs appear."""
    groups: dict[tuple[Any, Any, PointKey], list[Row]] = defaultdict(list)
    order: list[tuple[str, Any]] = []
    for row in results:
        if row["status"] == "completed" and row["metrics"].get("throughput_samples_s"):
            key = (row.get("study"), row.get("framework"), point_key(row["config"]))
            if key not in groups:
                order.append(("point", key))
            groups[key].append(row)
        else:
            order.append(("run", row))
    return [_point(groups[item]) if kind == "point" else _single(item) for kind, item in order]


def _single(row: Row) -> Row:
    return {**row, "runs": 1, "run_ids": [row["run_id"]], "runs_left_out": [], "interval": None}


def _runs_diverged(runs: Sequence[Row]) -> int | None:
    """How many runs' loss diverged; ``None`` where no run measured a loss (a script's)."""
    flags = [r["metrics"].get("loss_diverged") for r in runs]
    return None if all(flag is None for flag in flags) else sum(1 for flag in flags if flag)


def loaded_throughout(run: Row) -> bool:
    """Every window the run recorded was over the noise guard's limits (docs/metrics.md).
    Runs stored before ``windows_recorded`` existed are never counted as such."""
    metrics = run["metrics"]
    recorded = metrics.get("windows_recorded")
    return bool(recorded) and (metrics.get("windows_loaded") or 0) >= recorded


def _point(every_run: list[Row]) -> Row:
    every_run = sorted(
        every_run, key=lambda r: (r["config"].get("repeat_id", 0), r.get("started_at") or 0)
    )
    # The noise guard, one level up: runs loaded in every window are left out while a run
    # with a clean window remains.
    clean = [r for r in every_run if not loaded_throughout(r)]
    runs = clean or every_run
    left_out = [r["run_id"] for r in every_run if loaded_throughout(r)] if clean else []
    first = runs[0]
    values, kind = samples(runs)
    mean, half = mean_ci95(values)
    if kind == "runs":  # the point estimate is the mean of the runs' throughputs
        mean = float(np.mean(values))
    metrics: dict[str, Any] = {
        **first["metrics"],  # histories and per-rank figures: the first run's
        "throughput_samples_s": mean,
        "throughput_ci95_samples_s": half,
        "throughput_runs_samples_s": run_throughputs(runs),
        "throughput_windows_samples_s": window_throughputs(runs),
        "throughput_cv": _cv(run_throughputs(runs)),
    }
    for key in MEAN_OVER_RUNS:
        present = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None]
        metrics[key] = float(np.mean(present)) if present else None
    for key in MAX_OVER_RUNS:
        present = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None]
        metrics[key] = max(present) if present else None
    peaks = {r["metrics"].get("peak_flops_per_worker") for r in runs}
    if len(peaks) > 1:  # one MFU over runs read against different peaks would mix them
        metrics.update(peak_flops_per_worker=None, peak_basis=None, peak_source=None)
        metrics["mfu_missing"] = (
            "no MFU: the point's runs were read against different peaks (a peak measured anew, "
            "or peak_tflops changed between them)"
        )
    metrics.update(_exposed(runs))
    metrics.update(_noise(runs, every_run))
    metrics.update(_guard(runs, every_run, mean))
    metrics["restarts"] = sum(r["metrics"].get("restarts") or 0 for r in runs)
    metrics["runs_diverged"] = _runs_diverged(runs)
    metrics["restart_lost_s"] = sum(r["metrics"].get("restart_lost_s") or 0.0 for r in runs)
    last = runs[-1]
    return {
        **first,
        "metrics": metrics,
        "runs": len(runs),
        "run_ids": [r["run_id"] for r in runs],
        "runs_left_out": left_out,
        "run_rows": runs,  # the runs the point's figures use
        "all_run_rows": every_run,
        "interval": kind,
        "oversubscribed": any(r.get("oversubscribed") for r in runs),
        "finished_at": last.get("finished_at"),
    }


def _cv(values: list[float]) -> float | None:
    """Coefficient of variation of the runs' throughputs (sample standard deviation / mean)."""
    if len(values) < 2:
        return None
    return float(np.std(values, ddof=1) / np.mean(values))


def _exposed(runs: list[Row]) -> dict[str, Any]:
    """Exposed communication over runs (Student t over the runs' fractions), or the single
    run's own interval over its probe pairs."""
    measured = [r for r in runs if r["metrics"].get("exposed_comm_fraction") is not None]
    out = _probe_load(measured)
    if not measured:
        return {**out, "exposed_comm_fraction": None}
    if len(measured) == 1:
        (only,) = measured
        return {
            **out,
            **{
                k: only["metrics"].get(k)
                for k in ("exposed_comm_fraction", "exposed_comm_ci95", "exposed_comm_significant")
            },
        }
    present = [r["metrics"]["exposed_comm_fraction"] for r in measured]
    mean, half = mean_ci95(present)
    if all(v == 0 for v in present):  # 0 by definition (nothing synchronized)
        return {**out, "exposed_comm_fraction": 0.0, "exposed_comm_significant": False}
    return {
        **out,
        "exposed_comm_fraction": mean,
        "exposed_comm_ci95": half,
        "exposed_comm_significant": half is not None and abs(mean) > half,
    }


def _probe_load(runs: list[Row]) -> dict[str, Any]:
    """The load during the probes of the runs behind the point's exposed communication: the
    largest outside load and steal, and whether any probe was loaded (``None``: none read)."""
    loads = [r["metrics"].get("exposed_comm_outside_load_max") for r in runs]
    steals = [r["metrics"].get("exposed_comm_steal_max") for r in runs]
    flags = [r["metrics"].get("exposed_comm_noisy") for r in runs]
    known = [flag for flag in flags if flag is not None]
    return {
        "exposed_comm_outside_load_max": max((v for v in loads if v is not None), default=None),
        "exposed_comm_steal_max": max((v for v in steals if v is not None), default=None),
        "exposed_comm_noisy": any(known) if known else None,
    }


def _noise(runs: list[Row], every_run: list[Row]) -> dict[str, Any]:
    """The load the point's figures were measured under: over the runs it uses (a run left
    out is counted in ``runs_loaded`` and named in ``runs_left_out``, not described here)."""
    loads = [r["metrics"].get("outside_load_max") for r in runs]
    steals = [r["metrics"].get("steal_max") for r in runs]
    delays = [r["metrics"].get("run_delay_max") for r in runs]
    read = [v for v in delays if v is not None]
    return {
        "outside_load_max": max((v for v in loads if v is not None), default=None),
        "steal_max": max((v for v in steals if v is not None), default=None),
        "windows_loaded": sum(r["metrics"].get("windows_loaded") or 0 for r in runs),
        "noisy": any(r["metrics"].get("noisy") for r in runs),
        "runs_noisy": sum(1 for r in runs if r["metrics"].get("noisy")),
        "runs_loaded": sum(1 for r in every_run if loaded_throughout(r)),
        "run_delay_max": max(read) if read else None,
        "waited": any(r["metrics"].get("waited") for r in runs) if read else None,
    }


def _guard(runs: list[Row], every_run: list[Row], throughput: float) -> dict[str, Any]:
    """What the noise guard did to the point (docs/metrics.md, "Runs and points"): the windows
    it left out of the runs the point uses, and how far both of its levels (windows inside
    runs, ``runs_left_out``) moved the point's throughput: ``throughput / unguarded - 1``,
    the unguarded figure being the same mean over every completed run of the point, each
    over every window it recorded. ``None`` where a run was stored before these figures."""
    left_out = [r["metrics"].get("windows_left_out") for r in runs]
    shifts = [r["metrics"].get("noise_guard_shift") for r in every_run]
    shift = None
    if len(every_run) == 1:  # the single run's windows are the point's
        shift = shifts[0]
    elif None not in shifts and all(s > -1 for s in shifts):
        unguarded = [  # each run's mean over every window it recorded
            float(r["metrics"]["throughput_samples_s"]) / (1.0 + s)
            for r, s in zip(every_run, shifts, strict=True)
        ]
        shift = throughput / float(np.mean(unguarded)) - 1.0
    return {
        "windows_left_out": sum(left_out) if None not in left_out else None,
        "noise_guard_shift": shift,
    }
