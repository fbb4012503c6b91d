"""Per-rank :class:`~dlscale.contract.records.Collective` records as one row per collective and
message size: the time (per iteration the slowest rank, as a collective ends when its last
rank does; then the median over iterations), algorithm and bus bandwidth (nccl-tests'
definitions, :data:`.bus.BUS_FACTOR`), whether every rank's result was
exact and, for each rank whose was not, which elements differed (``wrong_ranks``), and the
parameter servers that held the message (0: none). An iteration some rank timed as no finite
positive time (a hand-edited or damaged record) is left out, never stored; a count of wrong
elements that is no whole number >= 0 (damage again) is stored as not known (``None``).
:func:`wrong_results` says a run's wrong rows in words."""

from __future__ import annotations

import statistics
from typing import Any

from dlscale.contract.numbers import finite_number, whole_value
from dlscale.contract.records import Collective, Record
from dlscale.contract.shapes import MAX_QUANTITY
from dlscale.microbench.bus import bus_bandwidth


def collective_rows(per_rank: dict[int, list[Record]], processes: int) -> list[dict[str, Any]]:
    found: dict[tuple[str, int], list[tuple[int, Collective]]] = {}
    for rank, records in per_rank.items():
        for record in records:
            if isinstance(record, Collective):
                found.setdefault((record.collective, record.bytes), []).append((rank, record))
    rows = []
    for (collective, size), ranked in found.items():
        ranks = [record for _, record in ranked]
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
                "wrong_ranks": _wrong_ranks(ranked),
                "servers": max(r.servers for r in ranks),
                "messages_per_call": max(r.messages_per_call for r in ranks),
            }
        )
    return sorted(rows, key=lambda row: (row["collective"], row["bytes"]))


def wrong_results(rows: list[dict[str, Any]]) -> str | None:
    """The run's error where some row's result was wrong: each such collective and size, with
    which ranks' results differed and how, e.g. ``wrong results: reduce_scatter 67108864 B
    (rank 0: 841704 of 8388608 elements wrong, the first at element 7546904, off by up to
    1)``; ``None`` where every row is exact. What a rank's record does not say (records of an
    older dlscale, damaged counts) is left out of its words."""
    wrong = []
    for row in rows:
        if not row["correct"]:
            ranks = "; ".join(_said(rank) for rank in row.get("wrong_ranks") or [])
            wrong.append(f"{row['collective']} {row['bytes']} B" + (f" ({ranks})" if ranks else ""))
    return f"wrong results: {', '.join(wrong)}" if wrong else None


def _wrong_ranks(ranks: list[tuple[int, Collective]]) -> list[dict[str, Any]]:
    """Each rank whose result was wrong, in rank order: how many of how many elements
    differed, the first of them and the largest difference (``None``: not said)."""
    wrong = []
    for rank, record in sorted(ranks, key=lambda item: item[0]):
        if record.correct:
            continue
        elements = whole_value(record.wrong_elements, 1)
        of = whole_value(record.checked_elements, elements or 1)  # never fewer than are wrong
        first = whole_value(record.first_wrong, 0, of - 1 if of is not None else 2**63 - 1)
        error = record.max_error if finite_number(record.max_error, 0.0) else None
        wrong.append(
            {"rank": rank, "elements": elements, "of": of, "first": first, "max_error": error}
        )
    return wrong


def _said(rank: dict[str, Any]) -> str:
    """One wrong rank in words: ``rank 0: 3 of 8 elements wrong, the first at element 5, off
    by up to 1``."""
    elements, of, first, error = rank["elements"], rank["of"], rank["first"], rank["max_error"]
    if elements is None:
        words = "wrong"
    elif of is None:
        words = f"{elements} element{'s' if elements != 1 else ''} wrong"
    else:
        words = f"{elements} of {of} element{'s' if of != 1 else ''} wrong"
    if first is not None:
        words += f", the first at element {first}"
    if error:
        words += f", off by up to {error:g}"
    return f"rank {rank['rank']}: {words}"


def _timed(seconds: Any) -> bool:
    return finite_number(seconds) and 0 < seconds <= MAX_QUANTITY
