"""Speedup and parallel efficiency against the 1-worker point of the same configuration.

speedup(N) = throughput(N) / throughput(1) and efficiency(N) = speedup(N) / N, where the
1-worker point has every setting equal except the backend and worker count (and run labels).
A reference backend (torch-single: no wrapper) is preferred as that point, so that a
distributed wrapper's own cost shows as efficiency < 1 at one worker; otherwise the same
backend at one worker. Weak scaling keeps the per-worker batch, strong scaling the global batch:
both are ``batch_size`` in the config, so the same key serves both.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dlscale.backends import BACKENDS
from dlscale.config.run_config import RUN_LABEL_KEYS

_NOT_IN_BASELINE_KEY = ("backend", "workers", *RUN_LABEL_KEYS)


def baseline_key(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in config.items() if k not in _NOT_IN_BASELINE_KEY))


def add_scaling(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return rows (dicts with ``config`` and ``metrics``) with speedup fields filled in."""
    candidates: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in results:
        cfg = row["config"]
        if (
            row["status"] == "completed"
            and cfg["workers"] == 1
            and (row["metrics"].get("throughput_img_s"))
        ):
            candidates[baseline_key(cfg)].append(row)
    for row in results:
        row["speedup"] = row["efficiency"] = row["baseline_run_id"] = None
        row["tta_speedup"] = row["statistical_efficiency"] = None
        metrics = row["metrics"]
        if row["status"] != "completed" or not metrics.get("throughput_img_s"):
            continue
        base = _pick_baseline(candidates.get(baseline_key(row["config"]), []), row)
        if base is None:
            continue
        base_metrics = base["metrics"]
        speedup = metrics["throughput_img_s"] / base_metrics["throughput_img_s"]
        row["speedup"] = speedup
        row["efficiency"] = speedup / row["config"]["workers"]
        row["baseline_run_id"] = base["run_id"]
        if metrics.get("time_to_accuracy_s") and base_metrics.get("time_to_accuracy_s"):
            row["tta_speedup"] = base_metrics["time_to_accuracy_s"] / metrics["time_to_accuracy_s"]
        if metrics.get("epochs_to_accuracy") and base_metrics.get("epochs_to_accuracy"):
            row["statistical_efficiency"] = (
                base_metrics["epochs_to_accuracy"] / metrics["epochs_to_accuracy"]
            )
    return results


def _pick_baseline(options: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    if not options:
        return None
    same_repeat = [o for o in options if o["config"]["repeat_id"] == row["config"]["repeat_id"]]
    options = same_repeat or options

    def rank(option: dict[str, Any]) -> tuple[int, int]:
        backend = option["config"]["backend"]
        is_reference = backend in BACKENDS and BACKENDS.get(backend).reference
        return (0 if is_reference else 1, 0 if backend == row["config"]["backend"] else 1)

    return min(options, key=rank)
