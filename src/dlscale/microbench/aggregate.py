"""Per-rank :class:`~dlscale.contract.records.Collective` records as one row per collective and
message size: the time (per iteration the slowest rank, as a collective ends when its last
rank does; then the median over iterations), algorithm and bus bandwidth (nccl-tests'
definitions, :data:`dlscale.perfmodel.costs.BUS_FACTOR`), whether every rank's result was
exact, and the parameter servers that held the message (0: none). An iteration some rank timed
as no finite positive time (a hand-edited or damaged record) is left out, never stored."""

from __future__ import annotations

import statistics
from typing import Any

from dlscale.contract.numbers import finite_number
from dlscale.contract.records import Collective, Record
from dlscale.contract.shapes import MAX_QUANTITY
from dlscale.perfmodel.costs import bus_bandwidth


def collective_rows(per_rank: dict[int, list[Record]], processes: int) -> list[dict[str, Any]]:
    found: dict[tuple[str, int], list[Collective]] = {}
    for records in per_rank.values():
        for record in records:
            if isinstance(record, Collective):
                found.setdefault((record.collective, record.bytes), []).append(record)
    rows = []
    for (collective, size), ranks in found.items():
        active = [r.times_s for r in ranks if r.times_s]
        if not active:
            continue
        slowest = [max(times) for times in zip(*active, strict=False) if all(map(_timed, times))]
        if not slowest:
            continue
        time_s = statistics.median(slowest)
        algbw, busbw = bus_bandwidth(collective, size, time_s, processes)
        rows.append(
            {
                "collective": collective,
                "bytes": size,
                "processes": processes,
                "ranks_reporting": len(ranks),
                "iterations": len(slowest),
                "time_s": time_s,
                "time_min_s": min(slowest),
                "algbw_bytes_s": algbw,
                "busbw_bytes_s": busbw,
                "correct": all(r.correct for r in ranks),
                "max_error": max(r.max_error for r in ranks),
                "servers": max(r.servers for r in ranks),
                "messages_per_call": max(r.messages_per_call for r in ranks),
            }
        )
    return sorted(rows, key=lambda row: (row["collective"], row["bytes"]))


def _timed(seconds: Any) -> bool:
    return finite_number(seconds) and 0 < seconds <= MAX_QUANTITY
