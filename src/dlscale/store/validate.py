"""The checks of every stored value against its declared shape
(:mod:`dlscale.contract.shapes`; a result's own fields: :data:`dlscale.contract.result.RESULT`).

Readers check a result against these shapes on read (:func:`dlscale.store.migrate.result_view`);
one value outside its shape (the wrong type, NaN, an infinity, an integer no float can hold, a
negative time, a timestamp centuries away, a history entry that is no record) makes the whole
result unusable, and the reader skips it with one warning naming the file and the field, so no
table, figure, speedup or gate ever computes with it. The writer checks a run's metrics against
the same shapes before it stores the run as completed (:func:`dlscale.runner.result_of`), and
the aggregation initialises exactly the keys declared there (:data:`METRICS`), so the two sides
cannot drift. Definitions and units: docs/metrics.md ("Stored values" gives these bounds).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dlscale.contract.numbers import finite_number, whole_number
from dlscale.contract.result import RESULT
from dlscale.contract.shapes import (
    ANY,
    COMPLETED,
    ENVIRONMENT,
    MEASURED,
    METRICS,
    RENAMED_METRICS,
    Shape,
)
from dlscale.contract.text import excerpt


class ShapeError(ValueError):
    """A stored result lacks a key every reader needs, or holds a value outside its shape. The
    message says which, in a few words (it ends up in a one-line warning)."""


@dataclass(frozen=True)
class Problem:
    """One stored value outside its shape."""

    field: str
    """``metric throughput_samples_s``, ``environment memory_gib``, ``finished_at``."""
    key: str
    where: str
    """Inside the value: ``[2]`` (a list's third item), ``['0'].accuracy``; "" for itself."""
    value: Any
    shape: Shape

    def __str__(self) -> str:
        return f"{self.field}{self.where} is {excerpt(self.value)}, not {self.shape.expected}"


def check(values: Mapping[str, Any], shapes: Mapping[str, Shape], what: str = "") -> None:
    """Raise :class:`ShapeError` for the first value of ``values`` outside its shape; keys
    not declared in ``shapes`` may hold anything whose numbers are finite."""
    for problem in problems(values, shapes, what):
        raise ShapeError(str(problem))


def problems(
    values: Mapping[str, Any], shapes: Mapping[str, Shape], what: str = ""
) -> Iterator[Problem]:
    """Every top-level value of ``values`` outside its shape, one problem each."""
    for key, value in values.items():
        shape = shapes.get(key, ANY)
        found = _first(value, shape)
        if found is not None:
            where, bad, inner = found
            name = f"{what} {key}" if what else key
            yield Problem(name, key, where, bad, inner)


def without_problems(values: Mapping[str, Any], shapes: Mapping[str, Shape]) -> dict[str, Any]:
    """``values`` with each one outside its shape replaced by ``None`` (what a writer stores
    of facts that are not measurements, such as a worker's environment)."""
    return {**values, **dict.fromkeys(p.key for p in problems(values, shapes))}


def check_result(document: dict[str, Any]) -> None:
    """A stored result's own fields, metrics (a completed run's measurement above 0) and
    environment against their shapes (``metrics`` and ``environment`` are objects already);
    a metric stored under its older name (:data:`RENAMED_METRICS`) as it is under today's."""
    check({k: document.get(k) for k in RESULT}, RESULT)
    metrics = document["metrics"]
    if document.get("status") == "completed":  # its measurement first: the likeliest damage
        check({k: metrics.get(k) for k in _MEASURED}, _COMPLETED, "metric")
    check(metrics, _METRICS, "metric")
    check(document["environment"], ENVIRONMENT, "environment")


def _in_images(shape: Shape) -> Shape:
    """A throughput's shape as a result stored before schema 4 holds it: in images/s."""
    item = None if shape.item is None else replace(shape.item, unit="img/s")
    return replace(shape, unit="img/s" if shape.unit else "", item=item)


_METRICS = {**METRICS, **{old: _in_images(METRICS[new]) for old, new in RENAMED_METRICS.items()}}
_COMPLETED = {
    **COMPLETED,
    **{old: _in_images(COMPLETED[new]) for old, new in RENAMED_METRICS.items() if new in COMPLETED},
}
_MEASURED = (*MEASURED, *(old for old, new in RENAMED_METRICS.items() if new in MEASURED))


def _first(value: Any, shape: Shape) -> tuple[str, Any, Shape] | None:
    """Where in ``value`` the first thing outside ``shape`` is, what it is, and the shape it
    broke; None: it fits."""
    if value is None:
        return None if shape.nullable else ("", value, shape)
    kind = shape.kind
    if kind == "any":
        return _any(value)
    if kind in ("number", "count"):
        return None if _fits_number(value, shape) else ("", value, shape)
    if kind == "flag":
        return None if isinstance(value, bool) else ("", value, shape)
    if kind == "text":
        return None if isinstance(value, str) else ("", value, shape)
    if kind == "by_key":
        if not isinstance(value, dict):
            return "", value, shape
        assert shape.item is not None
        for key, item in value.items():
            if not _whole_number_text(key):
                return "", value, shape
            found = _first(item, shape.item)
            if found is not None:
                return f"[{excerpt(key)}]{found[0]}", found[1], found[2]
        return None
    if not isinstance(value, list):
        return "", value, shape
    for index, item in enumerate(value):
        found = _item(item, shape)
        if found is not None:
            return f"[{index}]{found[0]}", found[1], found[2]
    return None


def _item(item: Any, shape: Shape) -> tuple[str, Any, Shape] | None:
    if shape.kind == "list":
        assert shape.item is not None
        return _first(item, shape.item)
    if not isinstance(item, dict):  # records
        return "", item, Shape("record", fields=shape.fields)
    for name, field in shape.fields:
        found = _first(item.get(name), field)
        if found is not None:
            return f".{name}{found[0]}", found[1], found[2]
    return None


def _fits_number(value: Any, shape: Shape) -> bool:
    if not finite_number(value):
        return False
    if shape.kind == "count" and not float(value).is_integer():
        return False
    low_ok = value > shape.low if shape.positive else value >= shape.low
    return low_ok and value <= shape.high


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole_number_text(key: str) -> bool:
    return whole_number(key) is not None


def _any(value: Any) -> tuple[str, Any, Shape] | None:
    """The first number in ``value`` (at any depth) that is not finite; walked without
    recursion, so a deeply nested value costs no stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{where}[{excerpt(k)}]", v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
        elif _number(item) and not finite_number(item):
            return where, item, ANY
    return None
