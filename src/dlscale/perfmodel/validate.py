"""The model's predictions beside measured points: how far off it is.

For every completed point with 2 workers or more that records the two things the model needs
from it, its compute without synchronization (``step_time_nosync_p50_ms``, the no-sync probe's
median step at the same scale, so the contention of the ranks on the machine is in it) and its
gradient's bytes, the point's throughput is predicted on the given network for a ring
all-reduce without and with the ideal overlap (:mod:`.predict`), and compared with the
measured one: error = predicted / measured - 1. The all-reduce's time is the one a microbench
measured on that network at the point's worker count, interpolated on log-log axes between the
two sizes around the gradient's, where there is one; else the fitted ring cost. The two
strategies bound what bucketed overlap gives, so the measured point should lie between them;
the median of the absolute errors over the points says how well the model holds here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.predict import Profile, comm_s, step_s

STRATEGIES = ("ring", "ring-overlap")


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


@dataclass(frozen=True)
class Link:
    """A network as validation sees it: its fitted costs and, where a microbench measured the
    all-reduce with ``processes`` ranks, its (bytes, seconds) rows."""

    network: Network
    allreduce: tuple[tuple[float, float], ...] = ()
    processes: int = 0

    def allreduce_s(self, n: float, p: int) -> float | None:
        """The measured all-reduce of ``n`` bytes on ``p`` ranks, interpolated between the two
        nearest sizes on log-log axes; ``None`` outside what was measured."""
        if p != self.processes or len(self.allreduce) < 2:
            return None
        sizes, times = zip(*sorted(self.allreduce), strict=True)
        if not sizes[0] <= n <= sizes[-1]:
            return None
        return float(np.exp(np.interp(np.log(n), np.log(sizes), np.log(times))))


def compare(
    points: list[dict[str, Any]], link_of: Callable[[dict[str, Any]], Link | None]
) -> list[dict[str, Any]]:
    """The rows of every point the model can predict; ``link_of(point)``: the network it ran
    on (``None``: unknown, the point is left out)."""
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
        link = link_of(point)
        if link is None:
            continue
        profile = Profile(compute_s=nosync / 1e3, batch=int(batch), gradient_bytes=gradient)
        measured_comm = link.allreduce_s(gradient, workers)
        comm = measured_comm if measured_comm is not None else comm_s(profile, "ring", workers,
                                                                     link.network)  # fmt: skip
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
            "noisy": bool(metrics.get("noisy")),
            "allreduce_ms": comm * 1e3,
            "allreduce_from": "measured" if measured_comm is not None else "fit",
        }
        for strategy in STRATEGIES:
            step = step_s(profile, strategy, workers, link.network, comm=comm)
            predicted = workers * profile.batch / step
            row[f"{strategy}_img_s"] = predicted
            row[f"{strategy}_error"] = predicted / measured - 1
        rows.append(row)
    return rows


def median_errors(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each strategy's median absolute error over the rows the noise guard did not flag
    (other processes used the machine during their windows: docs/metrics.md, "Noise guard"),
    or over all rows when every one is flagged; ``None`` without rows."""
    quiet = [r for r in rows if not r.get("noisy")] or rows
    return {
        s: statistics.median(abs(r[f"{s}_error"]) for r in quiet) if quiet else None
        for s in STRATEGIES
    }


def median_basis(rows: list[dict[str, Any]]) -> str:
    """Which rows :func:`median_errors` took, in words."""
    noisy = sum(1 for r in rows if r.get("noisy"))
    if not noisy:
        return _count(len(rows), "point")
    if noisy == len(rows):
        return f"{_count(len(rows), 'point')}, every one flagged noisy"
    return f"{_count(len(rows) - noisy, 'quiet point')} ({noisy} flagged noisy left out)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
