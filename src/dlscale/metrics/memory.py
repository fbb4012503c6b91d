"""Peak memory of a run from its ranks' measured windows (docs/metrics.md, "Peak memory").

Each rank records, at the end of every measured window, its process's high-water resident set
(``VmHWM``) since the window began (:mod:`dlscale.runtime.load`), and on a GPU its allocator's
peaks over the window. A rank's peak is the largest over its measured windows; the run's is
the largest over its training ranks (every rank holds a replica: the most any one node's
process needed), with each rank's kept beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dlscale.contract.records import Record, Window

MEMORY_KEYS = (
    "rss_peak_bytes",
    "rss_peak_bytes_by_rank",
    "rss_peak_reset",
    "device_peak_allocated_bytes",
    "device_peak_reserved_bytes",
)


def memory_metrics(per_rank: dict[int, list[Record]]) -> dict[str, Any]:
    """The run's memory figures (:data:`MEMORY_KEYS`); ``None`` where no window read them."""
    by_rank: dict[str, int] = {}  # keyed as JSON keys them
    reset: list[bool] = []
    device: dict[str, list[int]] = {"allocated": [], "reserved": []}
    for rank, events in per_rank.items():
        windows = [r for r in events if isinstance(r, Window) and r.kind == "measure"]
        rss = [w.rss_peak_bytes for w in windows if w.rss_peak_bytes is not None]
        if rss:
            by_rank[str(rank)] = max(rss)
        reset += [bool(w.rss_peak_reset) for w in windows if w.rss_peak_bytes is not None]
        device["allocated"] += _present(w.device_peak_allocated_bytes for w in windows)
        device["reserved"] += _present(w.device_peak_reserved_bytes for w in windows)
    return {
        "rss_peak_bytes": max(by_rank.values()) if by_rank else None,
        "rss_peak_bytes_by_rank": by_rank or None,
        "rss_peak_reset": all(reset) if reset else None,
        "device_peak_allocated_bytes": max(device["allocated"], default=None),
        "device_peak_reserved_bytes": max(device["reserved"], default=None),
    }


def _present(values: Iterable[int | None]) -> list[int]:
    return [v for v in values if v is not None]
