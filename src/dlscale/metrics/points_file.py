"""Every figure a study printed, kept beside its runs at full precision:
``<root>/points-<study>.json`` (issue 45: the terminal and the report round them, and a point's
figures could not be checked against anything stored).

Written at the end of each `dlscale run` of a study (atomically, the whole file), from the same
rows the finding and the table are written from (:func:`dlscale.metrics.scaling.add_scaling`):
for each point its settings, the runs it combines and leaves out, the figures combined over
them (:data:`POINT_FIGURES`) and its ratios (:data:`~dlscale.metrics.scaling.SCALING_KEYS`).
Each figure is defined in docs/metrics.md; a figure that is not a finite number is ``null``.
Throughputs are samples per second, beside the point's ``sample_unit`` and ``units_per_sample``
(:mod:`dlscale.metrics.units`); a file written before (schema 1: ``throughput_img_s``...) reads
with :func:`read_points` as one of today's, in images.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dlscale.contract.files import read_json, schema_version, write_json_atomic
from dlscale.contract.shapes import RENAMED_METRICS
from dlscale.metrics.figures import Figures
from dlscale.metrics.points import MAX_OVER_RUNS, MEAN_OVER_RUNS
from dlscale.metrics.scaling import SCALING_KEYS
from dlscale.metrics.units import sample_unit, units_per_sample
from dlscale.store.claims import study_file
from dlscale.store.results import RunStore

PREFIX = "points-"

POINT_FIGURES = (
    "throughput_samples_s",
    "throughput_ci95_samples_s",
    "throughput_runs_samples_s",
    "throughput_windows_samples_s",
    "throughput_cv",
    *MEAN_OVER_RUNS,
    "exposed_comm_fraction",
    "exposed_comm_ci95",
    "exposed_comm_significant",
    "exposed_comm_outside_load_max",
    "exposed_comm_steal_max",
    "exposed_comm_noisy",
    "outside_load_max",
    "steal_max",
    "windows_loaded",
    "noisy",
    "runs_noisy",
    "runs_loaded",
    "run_delay_max",
    "waited",
    "windows_left_out",
    "noise_guard_shift",
    "restarts",
    "restart_lost_s",
    "runs_diverged",
    *MAX_OVER_RUNS,
    "train_flops_per_sample",
    "train_flops_per_sample_causal",
    "flops_rule",
    "peak_flops_per_worker",
    "peak_basis",
    "mfu_missing",
)
"""What `dlscale.metrics.points` combines over a point's runs, and the facts MFU is derived
from (the first run's)."""


def points_path(root: Path, study: str) -> Path:
    return study_file(root, PREFIX, study)


def point_document(row: dict[str, Any]) -> dict[str, Any]:
    """One point as the points file keeps it."""
    metrics = row.get("metrics") or {}
    document = {
        "status": row.get("status"),
        "config": row.get("config"),
        "run_ids": row.get("run_ids"),
        "runs_left_out": row.get("runs_left_out"),
        "runs": row.get("runs"),
        "interval": row.get("interval"),
        "threads_per_worker": row.get("threads_per_worker"),
        "batch_size_per_worker": row.get("batch_size_per_worker"),
        "sample_unit": sample_unit(metrics),
        "units_per_sample": units_per_sample(metrics),
        "figures": {key: metrics.get(key) for key in POINT_FIGURES},
        **{key: row.get(key) for key in SCALING_KEYS},
        **_utilization(row),
    }
    return _finite(document)


def _utilization(row: dict[str, Any]) -> dict[str, Any]:
    """The point's derived MFU figures (:class:`~dlscale.metrics.figures.Figures`), written
    beside the facts above for recomputation: ``mfu`` = ``achieved_flops_s`` / ``peak_flops_s``."""
    figures = Figures.of(row)
    return {
        "achieved_flops_s": figures.achieved_flops_s,
        "peak_flops_s": figures.peak_flops_s,
        "mfu": figures.mfu,
        "mfu_basis": figures.mfu_basis,
        "mfu_missing": figures.mfu_missing,
    }


def write_points(store: RunStore, study: str, rows: list[dict[str, Any]]) -> Path | None:
    """Keep the study's points (nothing when it has none); returns the file."""
    if not rows:
        return None
    store.prepare()
    path = points_path(store.root, study)
    document = {"study": study, "points": [point_document(row) for row in rows]}
    write_json_atomic(path, "points", document)
    return path


_RENAMED = {**RENAMED_METRICS, "throughput_runs_img_s": "throughput_runs_samples_s"}
"""The figures schema 2 renamed (a point stored before measured images, one a sample)."""


def read_points(path: Path) -> dict[str, Any]:
    """A points file (``UnreadableFile`` where it is no readable one), in today's names: a
    file of schema 1 with its figures renamed and each point's unit said (``image``, 1)."""
    document = read_json(path, "points")
    if schema_version(document) < 2:
        for point in document.get("points") or []:
            if not isinstance(point, dict):
                continue
            figures = point.get("figures")
            if isinstance(figures, dict):
                point["figures"] = {_RENAMED.get(k, k): v for k, v in figures.items()}
            point.setdefault("sample_unit", "image")
            point.setdefault("units_per_sample", 1)
    return document


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite as None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
