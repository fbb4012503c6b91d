"""A run's metrics checked against their declared shapes before they are stored: a figure no
clock or counter could honestly give (NaN, negative, beyond
:data:`~dlscale.contract.shapes.MAX_QUANTITY`) fails the run, in words that name it."""

from __future__ import annotations

from typing import Any

from dlscale.contract.numbers import whole_number
from dlscale.contract.shapes import COMPLETED, MEASURED, METRICS
from dlscale.contract.text import excerpt
from dlscale.metrics.units import CI95, THROUGHPUT, WINDOWS, rate_of
from dlscale.store.validate import Problem, problems


def impossible_figures(metrics: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A run's metrics as they may be stored, and what is wrong with them (None: nothing).

    A figure outside its declared shape (a window's throughput NaN, negative or beyond
    :data:`~dlscale.contract.shapes.MAX_QUANTITY`: a clock or a counter gave an impossible
    reading) is no measurement: it is stored as ``None`` (with every throughput figure, when a
    window's is wrong), and the words say which value, so the run is recorded as failed."""
    found = list(problems({k: metrics.get(k) for k in MEASURED}, COMPLETED, "metric"))
    found += [p for p in problems(metrics, METRICS, "metric") if p.key not in MEASURED]
    if not found:
        return metrics, None
    bad = {p.key for p in found}
    if bad & set(MEASURED):  # a wrong window makes every throughput figure wrong
        bad |= set(_THROUGHPUT)
    first = found[0]
    rest = [p for p in found[1:] if not (p.key in _THROUGHPUT and first.key in _THROUGHPUT)]
    more = f" (and {len(rest)} more)" if rest else ""
    return {**metrics, **dict.fromkeys(bad)}, (
        f"{_said(first, metrics)}{more}: a measured figure must be {first.shape.expected} (a "
        "clock or counter gave an impossible reading); the run is recorded as failed, not "
        "completed"
    )


_THROUGHPUT = (THROUGHPUT, CI95, WINDOWS)


def _said(problem: Problem, metrics: dict[str, Any]) -> str:
    """One stored figure in words, a throughput in the run's unit (:mod:`.units`):
    ``throughput of window 2 is nan img/s``."""
    value, unit = excerpt(problem.value), problem.shape.unit
    window = whole_number(problem.where[1:-1])
    if problem.key in (WINDOWS, THROUGHPUT) and isinstance(problem.value, int | float):
        rate = rate_of(metrics)
        value = excerpt(rate.per_second(problem.value, metrics))
        where = f" of window {window + 1}" if problem.key == WINDOWS and window is not None else ""
        return f"throughput{where} is {value} {rate.label}"
    return f"{problem.key}{problem.where} is {value}" + (f" {unit}" if unit else "")
