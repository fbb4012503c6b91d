"""The model's predictions beside measured points: how far off it is.

For every completed point with 2 workers or more that records the two things the model needs
from it, its compute without synchronization (``step_time_nosync_p50_ms``, the no-sync probe's
median step at the same scale, so the contention of the ranks on the machine is in it) and its
gradient's bytes, the point's throughput is predicted on the given network for a ring
all-reduce without and with the ideal overlap (:mod:`.predict`), and compared with the
measured one: error = predicted / measured - 1. The two bound what bucketed overlap gives, so
the measured point should lie between them; the median of the absolute errors over the points
says how well the model holds on this machine.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.predict import Profile, step_s

STRATEGIES = ("ring", "ring-overlap")


def network_key(config: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two runs' networks the same: the launcher, its emulated network and nodes;
    from a stored config (options by plug-in) or a result as the store reads it (flat)."""
    options = (config.get("options") or {}).get("launcher") or config
    return (config.get("launcher"), options.get("network") or "", options.get("nnodes") or 1)


def compare(
    points: list[dict[str, Any]], network_of: Callable[[dict[str, Any]], Network | None]
) -> list[dict[str, Any]]:
    """The rows of every point the model can predict; ``network_of(point)``: the network it
    ran on (``None``: unknown, the point is left out)."""
    rows = []
    for point in points:
        metrics, config = point.get("metrics") or {}, point.get("config") or {}
        workers = int(config.get("workers") or 0)
        nosync = metrics.get("step_time_nosync_p50_ms")
        gradient = metrics.get("gradient_bytes")
        measured = metrics.get("throughput_img_s")
        batch = point.get("batch_size_per_worker")
        if point.get("status") != "completed" or workers < 2:
            continue
        if not (nosync and gradient and measured and batch):
            continue
        net = network_of(point)
        if net is None:
            continue
        profile = Profile(compute_s=nosync / 1e3, batch=int(batch), gradient_bytes=gradient)
        row: dict[str, Any] = {
            "run_id": point.get("run_id"),
            "backend": config.get("backend"),
            "model": config.get("model"),
            "workers": workers,
            "launcher": config.get("launcher"),
            "network": network_key(config)[1],
            "measured_img_s": measured,
            "measured_step_ms": metrics.get("step_time_p50_ms"),
            "compute_ms": nosync,
        }
        for strategy in STRATEGIES:
            predicted = workers * profile.batch / step_s(profile, strategy, workers, net)
            row[f"{strategy}_img_s"] = predicted
            row[f"{strategy}_error"] = predicted / measured - 1
        rows.append(row)
    return rows


def median_errors(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each strategy's median absolute error over the rows; ``None`` without rows."""
    return {
        s: statistics.median(abs(r[f"{s}_error"]) for r in rows) if rows else None
        for s in STRATEGIES
    }
