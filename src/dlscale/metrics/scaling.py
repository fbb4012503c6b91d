"""Speedup and parallel efficiency against the 1-worker point of the same configuration.

speedup(N) = throughput(N) / throughput(1) and efficiency(N) = speedup(N) / N, where the
1-worker point is of the same framework and has every setting equal except the backend, its
options and the worker count (and run labels). The framework's reference backend
(torch-single: no wrapper) is preferred as that point, so that a distributed wrapper's own cost
shows as efficiency < 1 at one worker; otherwise the same backend with the same options at one
worker. A baseline is never taken from another framework: TensorFlow's speedup is over
TensorFlow. Weak scaling keeps the per-worker batch, strong scaling the global batch:
both are ``batch_size`` in the config, so the same key serves both.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dlscale.backends import BACKENDS
from dlscale.config.run_config import NOT_MATCHED_KEYS

_NOT_IN_BASELINE_KEY = ("backend", "workers", *NOT_MATCHED_KEYS)


def baseline_key(row: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a run and its 1-worker baseline share: the framework and every key except the
    backend, its options, the worker count and run labels."""
    backend_options = set((row.get("config_options") or {}).get("backend", {}))
    skip = {*_NOT_IN_BASELINE_KEY, *backend_options}
    key = sorted((k, v) for k, v in row["config"].items() if k not in skip)
    return (("framework", row.get("framework")), *key)


def _backend_options(row: dict[str, Any]) -> dict[str, Any]:
    return dict((row.get("config_options") or {}).get("backend", {}))


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
            candidates[baseline_key(row)].append(row)
    for row in results:
        row["speedup"] = row["efficiency"] = row["baseline_run_id"] = None
        row["tta_speedup"] = row["statistical_efficiency"] = None
        metrics = row["metrics"]
        if row["status"] != "completed" or not metrics.get("throughput_img_s"):
            continue
        base = _pick_baseline(candidates.get(baseline_key(row), []), row)
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
    options = [o for o in options if _is_reference(o) or _same_strategy(o, row)]
    if not options:
        return None
    same_repeat = [o for o in options if o["config"]["repeat_id"] == row["config"]["repeat_id"]]
    options = same_repeat or options
    return min(options, key=lambda option: 0 if _is_reference(option) else 1)


def _is_reference(row: dict[str, Any]) -> bool:
    """Stored with the result (a reader may not have the backend's plug-in loaded); results
    written before it was stored ask the registry."""
    if row.get("reference") is not None:
        return bool(row["reference"])
    backend = row["config"]["backend"]
    return backend in BACKENDS and BACKENDS.get(backend).reference


def _same_strategy(option: dict[str, Any], row: dict[str, Any]) -> bool:
    return option["config"]["backend"] == row["config"]["backend"] and _backend_options(
        option
    ) == _backend_options(row)
