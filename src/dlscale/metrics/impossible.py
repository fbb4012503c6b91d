"""A run's metrics checked against their declared shapes before they are stored: a figure no
clock or counter could honestly give (NaN, negative, beyond
:data:`~dlscale.contract.shapes.MAX_QUANTITY`) fails the run, in words that name it."""

from __future__ import annotations

from typing import Any

from dlscale.contract.numbers import whole_number
from dlscale.contract.shapes import COMPLETED, MEASURED, METRICS
from dlscale.contract.text import excerpt
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
        f"{_said(first)}{more}: a measured figure must be {first.shape.expected} (a clock or "
        "counter gave an impossible reading); the run is recorded as failed, not completed"
    )


_THROUGHPUT = ("throughput_img_s", "throughput_ci95_img_s", "throughput_windows_img_s")


def _said(problem: Problem) -> str:
    """One stored figure in words: ``throughput of window 2 is nan img/s``."""
    value, unit = excerpt(problem.value), problem.shape.unit
    window = whole_number(problem.where[1:-1])
    if problem.key == "throughput_windows_img_s" and window is not None:
        return f"throughput of window {window + 1} is {value} img/s"
    if problem.key == "throughput_img_s":
        return f"throughput is {value} img/s"
    return f"{problem.key}{problem.where} is {value}" + (f" {unit}" if unit else "")
