"""The model's predictions beside measured points: how far off it is, engine by engine.

Every completed point of 2 workers or more whose engine named how it synchronizes
(``sync_pattern``: ring, fsdp, fsdp-no-reshard, ps-sync, ps-async; docs/metrics.md) is
predicted on that algorithm (:mod:`.patterns`) and compared with its measured throughput:
error = predicted / measured - 1. What the prediction takes:

- **compute**: the point's own no-sync probe (``step_time_nosync_p50_ms``: its median step
  without synchronization at the same scale, so the ranks' contention is in it) where its
  engine can skip synchronization; else the median step of its baseline (its framework's
  1-worker reference point with the same settings and threads per worker, from the same
  store: :mod:`dlscale.metrics.scaling`). Each row says which (``compute_from``).
- **the payload**: the gradient's bytes; for a ring, the bytes the engine's model says one
  worker sends, undone to the payload (a compressed gradient's fp16 copy).
- **the network**: the collectives a microbench measured there at the point's worker count,
  interpolated on log-log axes between the two sizes around the payload (``comm_from``:
  ``measured``), else the fitted cost of the pattern (``fit``); where the engine listed the
  messages a step sends (``sync_message_bytes``), each message priced so and summed
  (``messages``: how many).

A ring or FSDP point is also predicted with the ideal overlap of its collectives with backward
(``overlap_error``; backward's share of the step measured by the probe of the point its compute
comes from, its own or a 1-worker point's, where that engine times a forward alone, else
assumed 2/3: ``backward_share_from``): the two bound what bucketed
overlap gives; a synchronous parameter server's with its pushes and pulls in the link's two
directions at once, overlapped (its ``pipelined`` join), which bounds what a
per-parameter kvstore gives. The median of the absolute errors over the points, per engine
and over all, says how well the model holds here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dlscale.contract.declared_options import scale_keys
from dlscale.contract.errors import UserError
from dlscale.perfmodel.links import Comm, Link
from dlscale.perfmodel.patterns import PATTERNS, Pattern, SentOnCycle, grouped
from dlscale.perfmodel.predict import Profile

MEASURES = ("error", "overlap_error")
"""The errors each row has (``overlap_error``: ``None`` where the pattern does not overlap)."""


def network_key(config: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two runs' networks the same: the launcher, its emulated network and nodes;
    from a stored config (options by plug-in) or a result as the store reads it (flat)."""
    by_plugin = config.get("options")
    options = by_plugin.get("launcher") if isinstance(by_plugin, dict) else None
    if not isinstance(options, dict) or not options:
        options = config
    return (
        plain_key(config.get("launcher")),
        plain_key(options.get("network") or ""),
        plain_key(options.get("nnodes") or 1),
    )


def plain_key(value: Any) -> Any:
    """A key part as stored, or its text when a damaged file put a list or a map there."""
    return value if value is None or isinstance(value, str | int | float) else str(value)


class Compute(NamedTuple):
    """A point's compute: its step without synchronization, where that comes from, and the
    metrics of the point it comes from (whose probe also gives backward's share)."""

    ms: float
    source: str
    metrics: dict[str, Any]


def _compute(
    point: dict[str, Any], by_run: dict[str, dict[str, Any]], points: list[dict[str, Any]]
) -> Compute | None:
    """The point's step without synchronization (ms), where it comes from, and the metrics of
    the point it comes from (whose probe also gives the backward's share): its no-sync
    probe; else, for a pattern that synchronizes nothing at 1 worker (a ring, FSDP), the same
    engine's 1-worker point with the same settings and threads (torch-fsdp's own step; the
    fit loop of keras-fit results stored before its probe, which tf-single's does not time);
    else its baseline's step."""
    metrics = point.get("metrics") or {}
    if metrics.get("step_time_nosync_p50_ms"):
        return Compute(float(metrics["step_time_nosync_p50_ms"]), "no-sync probe", metrics)
    if PATTERNS[metrics["sync_pattern"]].alone_free:
        own = next((p for p in points if _one_worker_of(p, point)), None)
        if own is not None:
            source = f"{point['config'].get('backend')} x1 step"
            return Compute(_step(own), source, own.get("metrics") or {})
    base_ids = point.get("baseline_run_ids") or []
    base = next((by_run[r] for r in base_ids if r in by_run), None)
    if base is None or point.get("baseline_threads_differ") or not _step(base):
        return None
    source = f"{point.get('baseline') or base['config'].get('backend')} step"
    return Compute(_step(base), source, base.get("metrics") or {})


def _one_worker_of(candidate: dict[str, Any], point: dict[str, Any]) -> bool:
    """``candidate`` is ``point``'s run at 1 worker: completed, with its step measured, every
    setting the same but the workers and the nodes they spread over (a 1-worker point runs on
    one: :func:`~dlscale.contract.run_config.scale_keys`), and the same threads a process."""
    config, theirs = point["config"], candidate.get("config") or {}
    skip = {"workers", *scale_keys()}
    same = {k: v for k, v in config.items() if k not in skip} == {
        k: v for k, v in theirs.items() if k not in skip
    }
    return (
        same
        and theirs.get("workers") == 1
        and candidate.get("status") == "completed"
        and candidate.get("threads_per_worker") == point.get("threads_per_worker")
        and bool(_step(candidate))
    )


def _step(point: dict[str, Any]) -> float:
    """A point's median step (ms; 0 where it has none)."""
    return float((point.get("metrics") or {}).get("step_time_p50_ms") or 0.0)


def _payload(metrics: dict[str, Any], pattern: Pattern, p: int) -> float:
    """The bytes one collective carries: the gradient's; where the pattern says how many bytes
    a worker sends per payload byte (a ring: ``2(p-1)/p``), from the bytes its engine says one
    worker sends, so a compressed copy counts as sent."""
    sent = metrics.get("bytes_sent_per_step_model")
    if pattern.sent_per_byte is not None and sent:
        return float(sent) / pattern.sent_per_byte(p)
    return float(metrics["gradient_bytes"])


def compare(
    points: list[dict[str, Any]], link_of: Callable[[dict[str, Any]], Link | None]
) -> list[dict[str, Any]]:
    """The rows of every point the model can predict; ``link_of(point)``: the network it ran
    on (``None``: unknown, the point is left out). ``points`` as :func:`add_scaling` gives
    them (each point names its baseline's runs, looked up among the same points)."""
    by_run = {run_id: p for p in points for run_id in (p.get("run_ids") or [p.get("run_id")])}
    rows = []
    for point in points:
        metrics, config = point.get("metrics") or {}, point.get("config") or {}
        workers = int(config.get("workers") or 0)
        pattern, measured = metrics.get("sync_pattern"), metrics.get("throughput_samples_s")
        batch = point.get("batch_size_per_worker")
        if point.get("status") != "completed" or workers < 2 or pattern not in PATTERNS:
            continue  # a pattern the model does not know (a damaged file's) is not predicted
        compute = _compute(point, by_run, points)
        if not (compute and metrics.get("gradient_bytes") and measured and batch):
            continue
        link = link_of(point)
        if link is None:
            continue
        record = PATTERNS[pattern]
        payload = _payload(metrics, record, workers)
        share, share_from = backward_share(compute.metrics)
        try:
            profile = Profile(
                compute_s=compute.ms / 1e3, batch=int(batch), gradient_bytes=payload,
                backward_share=share,
            )  # fmt: skip
        except UserError:  # stored figures no machine makes (a 1e-300 ms step): not predicted
            continue
        servers = int(metrics.get("sync_servers") or 1)
        messages = _messages(metrics)
        comm = record.comm(payload, workers, servers, link, grouped(messages))
        row = _row(point, record, compute, comm, profile, workers, servers, link, float(measured))
        if record.joins == "overlap" and (sent := _sent_on_cycle(metrics, messages)):
            backward = profile.compute_s * profile.backward_share
            exposed = record.replayed_s(payload, workers, servers, link, sent, backward)
            row["overlap_samples_s"] = workers * profile.batch / (profile.compute_s + exposed)
            row["overlap_error"] = row["overlap_samples_s"] / float(measured) - 1
            row["overlap_from"] = REPLAYED
        rows.append({**row, "backward_share_from": share_from, "messages": len(messages) or None})
    return rows


REPLAYED = "cycle replayed"
"""A row's ``overlap_from`` where its overlap bound is the engine's cycle replayed on when
each message was ready (:meth:`~.patterns.Pattern.replayed_s`), not the ideal overlap."""


def _sent_on_cycle(metrics: dict[str, Any], messages: list[float]) -> SentOnCycle | None:
    """How the engine sent ``messages`` once a cycle, where it saw them (Horovod): each one's
    ready time (``sync_message_ready_ms``, finite, >= 0, one a message), its cycle (> 0) and
    fusion threshold (>= 0); ``None`` where any of them is missing or not so."""
    ready = metrics.get("sync_message_ready_ms")
    cycle, fusion = metrics.get("sync_cycle_ms"), metrics.get("sync_fusion_bytes")
    if not messages or not isinstance(ready, list) or len(ready) != len(messages):
        return None
    numbers = [*ready, cycle, fusion]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
        return None
    values = [float(v) for v in numbers]
    if not all(np.isfinite(v) and v >= 0 for v in values) or not values[-2]:
        return None
    return SentOnCycle(messages, values[:-2], values[-2], values[-1])


def _messages(metrics: dict[str, Any]) -> list[float]:
    """The bytes of each message a synchronized step sends, where the engine listed them and
    every one is a finite number above 0 (else none: the step is priced as one message)."""
    listed = metrics.get("sync_message_bytes")
    if not isinstance(listed, list) or not listed:
        return []
    sizes = [m for m in listed if isinstance(m, int | float) and not isinstance(m, bool)]
    if len(sizes) != len(listed) or not all(np.isfinite(m) and m > 0 for m in sizes):
        return []
    return [float(m) for m in sizes]


ASSUMED_SHARE = "assumed (backward twice the forward)"


def backward_share(metrics: dict[str, Any]) -> tuple[float, str]:
    """The share of a step after its forward (backward and the update: what an overlapped
    synchronization can hide in) and where it comes from: the probe of the point whose step
    is the compute (its own, or the 1-worker point's: runtime/schedule.py), ``1 - forward /
    no-sync step`` (docs/metrics.md, ``forward_time_p50_ms``), clipped to [0, 1]; else 2/3,
    assumed."""
    forward, whole = metrics.get("forward_time_p50_ms"), metrics.get("step_time_nosync_p50_ms")
    if forward and whole and np.isfinite(forward) and np.isfinite(whole) and whole > 0:
        share = float(min(1.0, max(0.0, 1.0 - forward / whole)))
        return share, f"measured: forward {forward:.1f} ms of {whole:.1f} ms"
    return 2 / 3, ASSUMED_SHARE


def _row(
    point: dict[str, Any],
    pattern: Pattern,
    compute: Compute,
    comm: Comm,
    profile: Profile,
    workers: int,
    servers: int,
    link: Link,
    measured: float,
) -> dict[str, Any]:
    config, metrics = point["config"], point.get("metrics") or {}
    launcher, network, nodes = network_key(config)
    row: dict[str, Any] = {
        "run_id": point.get("run_id"),
        "backend": config.get("backend"),
        "model": config.get("model"),
        "workers": workers,
        "launcher": launcher,
        "network": network,
        "nodes": nodes,
        "algorithm": pattern.name,
        "servers": servers if pattern.served else None,
        "measured_samples_s": measured,
        "sample_unit": metrics.get("sample_unit") or "image",  # shown in it: metrics.units
        "units_per_sample": metrics.get("units_per_sample") or 1,
        "measured_step_ms": metrics.get("step_time_p50_ms"),
        "batch": profile.batch,
        "gradient_bytes": profile.gradient_bytes,
        "compute_ms": compute.ms,
        "compute_from": compute.source,
        "noisy": bool(metrics.get("noisy")),
        "comm_ms": comm.seconds * 1e3,
        "comm_from": comm.source,
        "backward_share": profile.backward_share,
    }

    def predicted(overlap: bool) -> float:
        step = pattern.step_s(profile.compute_s, profile.backward_share, comm.seconds,
                              profile.gradient_bytes, workers, servers, link, overlap)  # fmt: skip
        return workers * profile.batch / step

    row["predicted_samples_s"] = predicted(False)
    row["error"] = row["predicted_samples_s"] / measured - 1
    overlaps = pattern.overlaps
    row["overlap_samples_s"] = predicted(True) if overlaps else None
    row["overlap_error"] = row["overlap_samples_s"] / measured - 1 if overlaps else None
    return row


def counted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a median is taken over: those the noise guard did not flag, or every row when
    each one is flagged."""
    return [r for r in rows if not r.get("noisy")] or rows


def median_errors(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The median absolute error (``error``) and with ideal overlap (``overlap_error``) over
    the rows the noise guard did not flag (other processes used the machine during their
    windows: docs/metrics.md, "Noise guard"), or over all rows when every one is flagged;
    ``None`` without rows that have it."""
    quiet = counted(rows)
    out: dict[str, float | None] = {}
    for measure in MEASURES:
        values = [abs(r[measure]) for r in quiet if r.get(measure) is not None]
        out[measure] = statistics.median(values) if values else None
    return out


def per_engine(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """:func:`median_errors` of each engine's rows (by backend), in the rows' order."""
    engines = dict.fromkeys(str(r["backend"]) for r in rows)
    return {e: median_errors([r for r in rows if str(r["backend"]) == e]) for e in engines}
