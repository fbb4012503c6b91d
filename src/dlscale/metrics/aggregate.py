"""Turn the per-rank event streams of one run into its metrics (definitions: docs/metrics.md).

Rules (house style 8): warm-up is never in a window; a synchronous step or window takes the
maximum over ranks; images are summed over ranks, never rank 0 times the world size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from dlscale.metrics.records import Eval, Record, Staleness, Strategy, Window
from dlscale.metrics.stats import mean_ci95, percentile

Events = list[Record]


def aggregate(
    all_ranks: dict[int, Events],
    *,
    target_accuracy: float | None,
    training_ranks: Iterable[int] | None = None,
) -> dict[str, Any]:
    """Metrics of one run from every rank's records; missing pieces give ``None``, not zero.

    ``training_ranks`` are the processes that train and record windows (the backend's roles
    say which); the others (parameter servers, schedulers) may report staleness. ``None``: every
    rank trains.
    """
    train = set(all_ranks) if training_ranks is None else set(training_ranks)
    per_rank = {r: all_ranks.get(r, []) for r in sorted(train)}
    others = {r: e for r, e in all_ranks.items() if r not in train}
    measure = _windows(per_rank, "measure")
    nosync = _windows(per_rank, "nosync")
    out: dict[str, Any] = dict.fromkeys(METRIC_KEYS)
    out["windows"] = len(measure)
    if measure:
        per_window = [w["samples"] / w["duration_s"] for w in measure]
        out["throughput_img_s"], out["throughput_ci95_img_s"] = mean_ci95(per_window)
        out["throughput_windows_img_s"] = per_window
        steps, per_step = _step_times(measure)
        out["step_time_p50_ms"] = percentile(steps, 50)
        out["step_time_p95_ms"] = percentile(steps, 95) if per_step else None
        with_data = [w for w in measure if w["data_ms"] is not None]
        if with_data:
            out["input_time_p50_ms"] = percentile(
                np.concatenate([w["data_ms"] for w in with_data]), 50
            )
        out["measured_steps"] = int(sum(w["steps"] for w in measure))
        out["measured_images"] = int(sum(w["samples"] for w in measure))
        if any(w.get("epoch") is not None for w in measure):
            out["epoch_time_s"] = float(np.mean([w["duration_s"] for w in measure]))
        losses = [w["loss"] for w in measure if w["loss"] is not None]
        out["final_train_loss"] = losses[-1] if losses else None
        out["train_loss_by_window"] = losses
        out["loss_diverged"] = any(w["loss"] is None for w in measure)
        out["rank_step_time_mean_ms"] = _rank_means(per_rank)
    if measure and nosync:
        sync_p50 = out["step_time_p50_ms"]
        nosync_p50 = percentile(_step_times(nosync)[0], 50)
        out["step_time_nosync_p50_ms"] = nosync_p50
        out["exposed_comm_fraction"] = max(0.0, (sync_p50 - nosync_p50) / sync_p50)
    out.update(_bytes(per_rank, measure))
    out.update(_staleness(others))
    evals = _evals(per_rank)
    out["eval_history"] = evals
    if evals:
        out["eval_accuracy"] = evals[-1]["accuracy"]
        if target_accuracy is not None:
            reached = [e for e in evals if e["accuracy"] >= target_accuracy]
            if reached:
                out["time_to_accuracy_s"] = reached[0]["elapsed_s"]
                out["epochs_to_accuracy"] = reached[0]["epoch"]
    return out


METRIC_KEYS = (
    "throughput_img_s",
    "throughput_ci95_img_s",
    "throughput_windows_img_s",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "input_time_p50_ms",
    "step_time_nosync_p50_ms",
    "exposed_comm_fraction",
    "epoch_time_s",
    "final_train_loss",
    "loss_diverged",
    "train_loss_by_window",
    "eval_accuracy",
    "time_to_accuracy_s",
    "epochs_to_accuracy",
    "measured_steps",
    "measured_images",
    "rank_step_time_mean_ms",
    "bytes_sent_per_step_model",
    "bytes_sent_per_step_counted",
    "gradient_bytes",
    "staleness_mean",
    "staleness_p50",
    "staleness_max",
    "staleness_histogram",
)


def _windows(per_rank: dict[int, Events], kind: str) -> list[dict[str, Any]]:
    """Windows that every rank completed, merged across ranks (max time, summed images)."""
    by_index: dict[int, list[Window]] = defaultdict(list)
    for events in per_rank.values():
        for record in events:
            if isinstance(record, Window) and record.kind == kind:
                by_index[record.index].append(record)
    merged = []
    for index in sorted(by_index):
        parts = by_index[index]
        if len(parts) != len(per_rank):
            continue  # a rank died during this window: it is not a whole measurement
        finite = all(p.loss_sum is not None for p in parts)
        loss_sum = sum(p.loss_sum or 0.0 for p in parts) if finite else 0.0
        loss_count = sum(p.loss_count for p in parts) if finite else 0
        merged.append(
            {
                "index": index,
                "epoch": parts[0].epoch,
                "samples": sum(p.samples for p in parts),
                "duration_s": max(p.duration_s for p in parts),
                "step_ms": _max_over_ranks([p.step_ms for p in parts]),
                "data_ms": _max_over_ranks([p.data_ms for p in parts]),
                "loss": loss_sum / loss_count if loss_count else None,
                "bytes_sent": sum(p.bytes_sent or 0.0 for p in parts)
                if all(p.bytes_sent is not None for p in parts)
                else None,
                "steps": parts[0].steps,
            }
        )
    return merged


def _step_times(windows: list[dict[str, Any]]) -> tuple[np.ndarray, bool]:
    """Every step's time, or, from an engine that times whole windows, each window's mean step
    (then the second value is False: no per-step percentiles beyond the median)."""
    if all(w["step_ms"] is not None for w in windows):
        return np.concatenate([w["step_ms"] for w in windows]), True
    return np.array([w["duration_s"] * 1e3 / w["steps"] for w in windows]), False


def _max_over_ranks(per_rank: list[list[float] | None]) -> np.ndarray | None:
    """Step-wise maximum over ranks (a synchronous step ends when its slowest rank does)."""
    if any(times is None for times in per_rank):
        return None
    return np.max(np.array(per_rank, dtype=float), axis=0)


def _evals(per_rank: dict[int, Events]) -> list[dict[str, Any]]:
    by_epoch: dict[int, list[Eval]] = defaultdict(list)
    for events in per_rank.values():
        for record in events:
            if isinstance(record, Eval):
                by_epoch[record.epoch].append(record)
    history = []
    for epoch in sorted(by_epoch):
        parts = by_epoch[epoch]
        if len(parts) != len(per_rank):
            continue
        total = sum(p.total for p in parts)
        if not total:
            continue
        history.append(
            {
                "epoch": epoch,
                "accuracy": sum(p.correct for p in parts) / total,
                "loss": sum(p.loss_sum for p in parts if p.loss_sum is not None) / total
                if all(p.loss_sum is not None for p in parts)
                else None,
                "elapsed_s": max(p.elapsed_s for p in parts),
                "images": total,
            }
        )
    return history


def _rank_means(per_rank: dict[int, Events]) -> dict[str, float]:
    """Each rank's own mean step time (before the max over ranks): stragglers show here."""
    means = {}
    for rank, events in sorted(per_rank.items()):
        steps = [
            s
            for r in events
            if isinstance(r, Window) and r.kind == "measure"
            for s in (r.step_ms or [r.duration_s * 1e3 / max(r.steps, 1)])
        ]
        if steps:
            means[str(rank)] = float(np.mean(steps))
    return means


def _bytes(per_rank: dict[int, Events], measure: list[dict[str, Any]]) -> dict[str, Any]:
    """Bytes each worker sends per step: the strategy's model, and the count it kept."""
    out: dict[str, Any] = {}
    first = per_rank[min(per_rank)] if per_rank else []
    strategy = next((r for r in first if isinstance(r, Strategy)), None)
    if strategy is not None:
        out["bytes_sent_per_step_model"] = strategy.bytes_sent_per_step_model
        out["gradient_bytes"] = strategy.gradient_bytes
    counted = [w for w in measure if w["bytes_sent"] is not None]
    if counted and per_rank:
        total = sum(w["bytes_sent"] for w in counted)
        steps = sum(w["steps"] for w in counted)
        out["bytes_sent_per_step_counted"] = total / (steps * len(per_rank))
    return out


def _staleness(others: dict[int, Events]) -> dict[str, Any]:
    """Staleness of applied gradients (server version minus the version they were computed on)."""
    histogram: dict[int, int] = defaultdict(int)
    for events in others.values():
        for record in events:
            if isinstance(record, Staleness):
                for value, count in record.histogram.items():
                    histogram[int(value)] += int(count)
    if not histogram:
        return {}
    values = np.repeat(np.array(sorted(histogram)), [histogram[k] for k in sorted(histogram)])
    return {
        "staleness_mean": float(values.mean()),
        "staleness_p50": percentile(values, 50),
        "staleness_max": int(values.max()),
        "staleness_histogram": {str(k): histogram[k] for k in sorted(histogram)},
    }
