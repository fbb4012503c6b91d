"""Turn the per-rank event streams of one run into its metrics (definitions: docs/metrics.md).

Rules (house style 8): warm-up is never in a window; a synchronous step or window takes the
maximum over ranks; images are summed over ranks, never rank 0 times the world size.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from dlscale.contract.records import (
    Environment,
    Eval,
    Messages,
    Record,
    Resume,
    Staleness,
    Strategy,
    Window,
)
from dlscale.contract.shapes import METRICS
from dlscale.metrics.memory import memory_metrics
from dlscale.metrics.noise import OUTSIDE_LOAD_LIMIT as OUTSIDE_LOAD_LIMIT
from dlscale.metrics.noise import STEAL_LIMIT as STEAL_LIMIT
from dlscale.metrics.noise import (
    guard_effect,
    loaded_windows,
    probe_load,
    run_delay,
    window_load,
    window_wait,
)
from dlscale.metrics.stats import mean_ci95, percentile
from dlscale.metrics.sync_facts import sync_metrics

Events = list[Record]


def aggregate(
    all_ranks: dict[int, Events],
    *,
    target_accuracy: float | None,
    target_loss: float | None = None,
    training_ranks: Iterable[int] | None = None,
) -> dict[str, Any]:
    """Metrics of one run from every rank's records; missing pieces give ``None``, not zero.

    ``training_ranks`` are the processes that train and record windows (the backend's roles
    say which); the others (parameter servers, schedulers) may report staleness. ``None``: every
    rank trains.
    """
    train = set(all_ranks) if training_ranks is None else set(training_ranks)
    all_ranks = {r: latest_attempt(e) for r, e in all_ranks.items()}
    per_rank = {r: all_ranks.get(r, []) for r in sorted(train)}
    others = {r: e for r, e in all_ranks.items() if r not in train}
    every = _windows(per_rank, "measure")
    out: dict[str, Any] = dict.fromkeys(METRIC_KEYS)
    out.update(loaded_windows(every))
    # The noise guard: windows under outside load are left out while a clean one remains.
    clean = [w for w in every if not w["loaded"]]
    measure = clean or every
    out["windows"] = len(measure)
    out["windows_recorded"] = len(every)
    rates = {id(w): _per_second(w["samples"], w["duration_s"]) for w in every}
    out.update(guard_effect([rates[id(w)] for w in measure], list(rates.values())))
    out.update(run_delay(measure))
    if measure:  # every figure below is over these windows, the ones the guard kept
        per_window = [rates[id(w)] for w in measure]
        with np.errstate(all="ignore"):  # an impossible window is named by the result's check
            out["throughput_samples_s"], out["throughput_ci95_samples_s"] = mean_ci95(per_window)
        out["throughput_windows_samples_s"] = per_window
        steps, per_step = _step_times(measure)
        out["step_time_p50_ms"] = percentile(steps, 50)
        out["step_time_p95_ms"] = percentile(steps, 95) if per_step else None
        with_data = [w for w in measure if w["data_ms"] is not None and w["step_ms"] is not None]
        if with_data:
            waits = np.concatenate([w["data_ms"] for w in with_data])
            out["input_time_p50_ms"] = percentile(waits, 50)
            total = float(np.sum(np.concatenate([w["step_ms"] for w in with_data])))
            out["input_wait_fraction"] = float(np.sum(waits)) / total if total > 0 else None
        out["measured_steps"] = int(sum(w["steps"] for w in measure))
        out["measured_images"] = int(sum(w["samples"] for w in measure))
        epochs = [w for w in measure if w["epoch"] is not None]
        if epochs:  # each epoch's time scaled to its whole epoch (the first lacks the warm-up;
            # events before schema 3 did not say the epoch's steps: taken as they are)
            out["epoch_time_s"] = float(
                np.mean(
                    [
                        w["duration_s"] * (w["epoch_steps"] or w["steps"]) / w["steps"]
                        for w in epochs
                    ]
                )
            )
        faults = [w for w in measure if w["minor_faults"] is not None]
        if faults:
            out["page_faults_per_step"] = sum(w["minor_faults"] for w in faults) / (
                sum(w["steps"] for w in faults) * len(per_rank)
            )
        # every recorded window: the noise guard leaves out times taken under load, and a
        # window's loss is the same whatever else ran on the machine
        losses = [w["loss"] for w in every if w["loss"] is not None]
        out["final_train_loss"] = losses[-1] if losses else None
        out["train_loss_by_window"] = losses
        by_step = [w["step_losses"] for w in every]
        out["train_loss_by_step"] = (
            [loss for window in by_step for loss in window] if None not in by_step else None
        )
        out["loss_diverged"] = _diverged(every)
        out["rank_step_time_mean_ms"] = _rank_means(per_rank)
    if measure:
        out.update(_exposed_comm(per_rank, all_ranks))
    out.update(_bytes(per_rank, measure))
    out.update(_staleness(others))
    out.update(_restarts(per_rank), **memory_metrics(per_rank))
    evals = _evals(per_rank)
    out["eval_history"] = evals
    if evals:
        out["eval_accuracy"] = evals[-1]["accuracy"]
        if target_accuracy is not None:
            reached = [e for e in evals if e["accuracy"] >= target_accuracy]
            if reached:
                out["time_to_accuracy_s"] = reached[0]["elapsed_s"]
                if any(w["epoch"] is not None for w in every):  # epoch mode only
                    out["epochs_to_accuracy"] = reached[0]["epoch"]
        out["eval_loss"] = evals[-1]["loss"]
        if target_loss is not None:  # the first evaluation at or below the target loss
            low = [e for e in evals if e["loss"] is not None and e["loss"] <= target_loss]
            if low:
                out["time_to_loss_s"] = low[0]["elapsed_s"]
    return out


METRIC_KEYS = tuple(METRICS)
"""Every metric of a run, each ``None`` until measured: the keys, and each one's shape, are
declared once, in :data:`dlscale.contract.shapes.METRICS`, which readers check results against."""


def _per_second(count: float, seconds: float) -> float:
    """``count / seconds``; a window of no time reads as an infinite (or, empty, NaN) rate,
    which :func:`dlscale.metrics.impossible.impossible_figures` turns into a failed run
    instead of a crash."""
    if seconds == 0:
        return math.nan if count == 0 else math.copysign(math.inf, count)
    return float(count / seconds)


def latest_attempt(events: Events) -> Events:
    """One rank's records with each window (kind and index) and each evaluation (epoch) taken
    from its latest attempt: a restarted run measures again what its failed attempt recorded
    after the last saved state (:mod:`dlscale.runtime.checkpoint`)."""
    last: dict[tuple[Any, ...], int] = {}
    for i, record in enumerate(events):
        if isinstance(record, Window):
            last[("window", record.kind, record.index)] = i
        elif isinstance(record, Eval):
            last[("eval", record.epoch)] = i
    keep = set(last.values())
    return [r for i, r in enumerate(events) if not isinstance(r, Window | Eval) or i in keep]


def _restarts(per_rank: dict[int, Events]) -> dict[str, Any]:
    """Restarts the first training rank resumed from, and the seconds they cost in all
    (``Resume.lost_s``); 0 and 0.0 for a run that was never restarted."""
    first = next(iter(per_rank.values()), [])
    resumes = [r for r in first if isinstance(r, Resume)]
    return {"restarts": len(resumes), "restart_lost_s": float(sum(r.lost_s for r in resumes))}


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
                "step_losses": _mean_over_ranks([p.step_losses for p in parts]),
                # a loss that was recorded and is not finite; a window with no loss at all
                # (a user's script records none) is not measured, not diverged
                "diverged": any(_not_finite(p) for p in parts),
                "loss_measured": any(p.loss_count for p in parts),
                "bytes_sent": sum(p.bytes_sent or 0.0 for p in parts)
                if all(p.bytes_sent is not None for p in parts)
                else None,
                "steps": parts[0].steps,
                "epoch_steps": parts[0].epoch_steps,
                "minor_faults": sum(p.minor_faults or 0 for p in parts)
                if all(p.minor_faults is not None for p in parts)
                else None,
                **window_load(parts),
                "wait_share": window_wait(parts),
            }
        )
    return merged


def _not_finite(part: Window) -> bool:
    """The window's loss was recorded and is not finite (records before ``loss_nonfinite``
    said it by a ``None`` sum over counted steps)."""
    return part.loss_nonfinite or (part.loss_sum is None and part.loss_count > 0)


def _diverged(windows: list[dict[str, Any]]) -> bool | None:
    """A recorded loss was not finite in some window; ``None`` where no window recorded a
    loss (not measured: a script's own loop, a loader-only run), never ``True``."""
    if any(w["diverged"] for w in windows):
        return True
    return False if any(w["loss_measured"] for w in windows) else None


def _exposed_comm(per_rank: dict[int, Events], all_ranks: dict[int, Events]) -> dict[str, Any]:
    """Exposed communication from the interleaved probe (docs/metrics.md): pairs of a
    synchronized and an unsynchronized step; 0 by definition where nothing is synchronized."""
    synchronizes = next(
        (
            r.synchronizes
            for events in per_rank.values()
            for r in events
            if isinstance(r, Environment) and r.synchronizes is not None
        ),
        None,
    )
    synced, unsynced = _windows(per_rank, "probe"), _windows(per_rank, "nosync")
    compute = _compute_probe(per_rank, unsynced)
    if synchronizes is False:
        return {"exposed_comm_fraction": 0.0, "exposed_comm_significant": False, **compute}
    if not synced:
        return compute  # one process's compute probe (runtime/schedule.py), or nothing
    if not unsynced:
        return {}
    sync_ms, nosync_ms = _step_times(synced)[0], _step_times(unsynced)[0]
    if len(sync_ms) != len(nosync_ms) or not len(sync_ms):
        return {}
    fraction, half = exposed_fraction(sync_ms, nosync_ms)
    return {
        **compute,
        "exposed_comm_fraction": fraction,
        "exposed_comm_ci95": half,
        "exposed_comm_significant": half is not None and abs(fraction) > half,
        **probe_load(synced + unsynced),
    }


def _compute_probe(per_rank: dict[int, Events], unsynced: list[dict[str, Any]]) -> dict[str, Any]:
    """The median step without synchronization and the median forward alone (ms), from the
    probe's ``nosync`` and ``forward`` windows (a 1-process run has only these); none without
    ``nosync`` steps."""
    nosync_ms = _step_times(unsynced)[0] if unsynced else None
    if nosync_ms is None or not len(nosync_ms):
        return {}
    forward = _windows(per_rank, "forward")
    forward_ms = _step_times(forward)[0] if forward else None
    return {
        "step_time_nosync_p50_ms": percentile(nosync_ms, 50),
        "forward_time_p50_ms": (
            percentile(forward_ms, 50) if forward_ms is not None and len(forward_ms) else None
        ),
    }


def exposed_fraction(sync_ms: np.ndarray, nosync_ms: np.ndarray) -> tuple[float, float | None]:
    """``1 - mean(no-sync) / mean(sync)`` over paired steps, and the half-width of its 95%
    interval: Student's t over the pairs' differences, divided by the mean synchronized step
    (its own spread is second order). Not clipped: below 0 is noise, and says how much."""
    diff = np.asarray(sync_ms, dtype=float) - np.asarray(nosync_ms, dtype=float)
    mean_sync = float(np.mean(sync_ms))
    mean_diff, half = mean_ci95(diff)
    return mean_diff / mean_sync, (half / mean_sync if half is not None else None)


def _step_times(windows: list[dict[str, Any]]) -> tuple[np.ndarray, bool]:
    """Every step's time, or, from an engine that times whole windows, each window's mean step
    (then the second value is False: no per-step percentiles beyond the median)."""
    if all(w["step_ms"] is not None for w in windows):
        return np.concatenate([w["step_ms"] for w in windows]), True
    return np.array([w["duration_s"] * 1e3 / w["steps"] for w in windows]), False


def _mean_over_ranks(per_rank: list[list[float | None] | None]) -> list[float | None] | None:
    """Step-wise mean over ranks of each step's loss (the global batch's mean loss, the ranks'
    batches being equal); a step is ``None`` where a rank's was not finite."""
    rows = [losses for losses in per_rank if losses is not None]
    if len(rows) < len(per_rank) or len({len(row) for row in rows}) > 1:
        return None
    means: list[float | None] = []
    for step in zip(*rows, strict=True):
        finite = [loss for loss in step if loss is not None]
        means.append(math.fsum(finite) / len(step) if len(finite) == len(step) else None)
    return means


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
    seen = next((r for r in first if isinstance(r, Messages)), None)
    if strategy is not None:
        out["bytes_sent_per_step_model"] = strategy.bytes_sent_per_step_model
        out["gradient_bytes"] = strategy.gradient_bytes
        out["traces"] = list(strategy.traces)
        out.update(sync_metrics(strategy.facts, seen))
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
