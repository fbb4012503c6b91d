"""What every stored value may be: the shapes of a result's figures, declared once as data,
and the checks that use them.

Readers check a result against these shapes on read (:func:`dlscale.store.migrate.result_view`);
one value outside its shape (the wrong type, NaN, an infinity, an integer no float can hold, a
negative time, a timestamp centuries away, a history entry that is no record) makes the whole
result unusable, and the reader skips it with one warning naming the file and the field, so no
table, figure, speedup or gate ever computes with it. The writer checks a run's metrics against
the same shapes before it stores the run as completed (:func:`dlscale.runner.result_of`), and
the aggregation initialises exactly the keys declared here (:data:`METRICS`), so the two sides
cannot drift. Definitions and units: docs/metrics.md ("Stored values" gives these bounds).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

MAX_QUANTITY = 1e15
"""The largest throughput (img/s), time (ms or s), byte count or count a stored result may
hold. Far beyond any machine (a petabyte per step, 31 million years), and far inside a float's
range, so sums, means and ratios of such figures never overflow."""
TIMESTAMP_RANGE_S = (0.0, 4e9)
"""Seconds since the epoch a stored start or finish time may be: 1970 to 2096 (a time beyond
it cannot be printed as a date)."""


class ShapeError(ValueError):
    """A stored result lacks a key every reader needs, or holds a value outside its shape. The
    message says which, in a few words (it ends up in a one-line warning)."""


def finite_number(value: Any) -> TypeGuard[float]:
    """A real number a float holds, finite: not a bool, a string, NaN, an infinity, nor an
    integer too large for a float (``math.isfinite`` would raise on that)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def show(value: Any) -> str:
    """A stored value in a message: short (a long one cut, a huge integer by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


@dataclass(frozen=True)
class Shape:
    """What one stored value may be. ``None`` (not measured, does not apply) always may."""

    kind: str
    """``number``, ``count`` (a whole number), ``flag``, ``text``, ``list`` (of ``item``),
    ``by_key`` (an object of ``item`` keyed by a whole number: a rank, a staleness),
    ``records`` (a list of objects with ``fields``; ``record``: one of them) or ``any`` (every
    number in it finite)."""
    unit: str = ""
    low: float = 0.0
    high: float = MAX_QUANTITY
    positive: bool = False
    """Above ``low``, not equal to it."""
    item: Shape | None = None
    fields: tuple[tuple[str, Shape], ...] = ()
    """``records``: each record's fields, all present; a field's value may be None only
    where ``nullable``."""
    nullable: bool = True

    @property
    def expected(self) -> str:
        """The shape in words, for messages."""
        unit = f" {self.unit}" if self.unit else ""
        if self.kind in ("number", "count"):
            whole = "a whole number" if self.kind == "count" else "a number"
            low = f"({self.low:g}" if self.positive else f"[{self.low:g}"
            return f"{whole} in {low}, {self.high:g}]{unit}"
        if self.kind in ("list", "by_key") and self.item is not None:
            items = {"count": "whole numbers", "text": "strings"}.get(self.item.kind, "numbers")
            if self.kind == "by_key":
                return f"an object of {items} keyed by whole numbers"
            return f"a list of {items}"
        if self.kind in ("records", "record"):
            names = ", ".join(name for name, _ in self.fields)
            return (
                f"a list of records ({names})" if self.kind == "records" else f"a record ({names})"
            )
        return {"flag": "true or false", "text": "a string", "any": "a finite number"}[self.kind]


def number(unit: str = "", low: float = 0.0, high: float = MAX_QUANTITY) -> Shape:
    return Shape("number", unit, low, high)


def count(unit: str = "") -> Shape:
    return Shape("count", unit)


def list_of(item: Shape) -> Shape:
    return Shape("list", item=item)


def by_key(item: Shape) -> Shape:
    return Shape("by_key", item=item)


def records(**fields: Shape) -> Shape:
    return Shape("records", fields=tuple(fields.items()))


FLAG, TEXT, ANY = Shape("flag"), Shape("text"), Shape("any")
SECONDS, MS, RATE, BYTES = number("s"), number("ms"), number("img/s"), number("bytes")
SIGNED = number(low=-MAX_QUANTITY)
"""A figure that may be below 0 (exposed communication: noise; an outside load or steal:
counters read a moment apart; seconds lost to a restart: clocks of two hosts)."""
FRACTION = number(high=1.0)
TIMESTAMP = number("s since the epoch", *TIMESTAMP_RANGE_S)
LOSS = number("nats", low=-MAX_QUANTITY)

METRICS: dict[str, Shape] = {
    "throughput_img_s": RATE,
    "throughput_ci95_img_s": RATE,
    "throughput_windows_img_s": list_of(RATE),
    "step_time_p50_ms": MS,
    "step_time_p95_ms": MS,
    "input_time_p50_ms": MS,
    "input_wait_fraction": number(),
    "step_time_nosync_p50_ms": MS,
    "exposed_comm_fraction": SIGNED,
    "exposed_comm_ci95": number(),
    "exposed_comm_significant": FLAG,
    "page_faults_per_step": number("faults"),
    "outside_load_max": SIGNED,
    "steal_max": SIGNED,
    "windows": count("windows"),
    "windows_loaded": count("windows"),
    "windows_recorded": count("windows"),
    "noisy": FLAG,
    "epoch_time_s": SECONDS,
    "final_train_loss": LOSS,
    "loss_diverged": FLAG,
    "train_loss_by_window": list_of(LOSS),
    "eval_accuracy": FRACTION,
    "eval_history": records(
        epoch=Shape("count", nullable=False),
        accuracy=Shape("number", high=1.0, nullable=False),
        loss=LOSS,
        elapsed_s=Shape("number", "s", nullable=False),
        images=Shape("count", nullable=False),
    ),
    "time_to_accuracy_s": SECONDS,
    "epochs_to_accuracy": count("epochs"),
    "measured_steps": count("steps"),
    "measured_images": count("images"),
    "rank_step_time_mean_ms": by_key(Shape("number", "ms", nullable=False)),
    "bytes_sent_per_step_model": BYTES,
    "bytes_sent_per_step_counted": BYTES,
    "gradient_bytes": count("bytes"),
    "staleness_mean": number("updates"),
    "staleness_p50": number("updates"),
    "staleness_max": count("updates"),
    "staleness_histogram": by_key(Shape("count", nullable=False)),
    "restarts": count("restarts"),
    "restart_lost_s": number("s", low=-MAX_QUANTITY),
    "traces": list_of(Shape("text", nullable=False)),
}
"""Every metric a run's ``result.json`` holds (docs/metrics.md defines each), by its shape.
:func:`dlscale.metrics.aggregate.aggregate` writes exactly these keys."""

MEASURED = ("throughput_windows_img_s", "throughput_img_s")
"""A completed run's measurement: above 0 (an empty or backwards clock is no measurement)."""
COMPLETED = {
    "throughput_img_s": Shape("number", "img/s", positive=True),
    "throughput_windows_img_s": list_of(Shape("number", "img/s", positive=True, nullable=False)),
}

RESULT: dict[str, Shape] = {
    "error": TEXT,
    "framework": TEXT,
    "study": TEXT,
    "reference": FLAG,
    "oversubscribed": FLAG,
    "started_at": TIMESTAMP,
    "finished_at": TIMESTAMP,
    "duration_s": SECONDS,
    "batch_size_per_worker": number("images"),
    "global_batch_size": number("images"),
    "threads_per_worker": count("threads"),
}
"""A result's own fields that readers compute with or print (beside config, metrics and
environment)."""

ENVIRONMENT: dict[str, Shape] = {
    **dict.fromkeys(
        ("hostname", "cpu_model", "os", "python", "dlscale_version", "git_commit"), TEXT
    ),
    **dict.fromkeys(("torch_version", "cuda_version", "device"), TEXT),
    **dict.fromkeys(("cpu_cores_logical", "cpu_cores_usable", "torch_threads"), count("cores")),
    "memory_gib": number("GiB"),
    "gpu_names": list_of(Shape("text", nullable=False)),
    "gloo_available": FLAG,
    "nccl_available": FLAG,
}
"""The environment's values that reports print (``runtime.environment``, a framework's facts);
any other key (a plug-in's facts) may hold anything whose numbers are finite."""


@dataclass(frozen=True)
class Problem:
    """One stored value outside its shape."""

    field: str
    """``metric throughput_img_s``, ``environment memory_gib``, ``finished_at``."""
    key: str
    where: str
    """Inside the value: ``[2]`` (a list's third item), ``['0'].accuracy``; "" for itself."""
    value: Any
    shape: Shape

    def __str__(self) -> str:
        return f"{self.field}{self.where} is {show(self.value)}, not {self.shape.expected}"


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
    environment against their shapes (``metrics`` and ``environment`` are objects already)."""
    check({k: document.get(k) for k in RESULT}, RESULT)
    metrics = document["metrics"]
    if document.get("status") == "completed":  # its measurement first: the likeliest damage
        check({k: metrics.get(k) for k in MEASURED}, COMPLETED, "metric")
    check(metrics, METRICS, "metric")
    check(document["environment"], ENVIRONMENT, "environment")


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
                return f"[{show(key)}]{found[0]}", found[1], found[2]
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
        return _first(item, replace(shape.item, nullable=False))
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
    return key.isdigit() and key.isascii() and len(key) <= 18


def _any(value: Any) -> tuple[str, Any, Shape] | None:
    """The first number in ``value`` (at any depth) that is not finite; walked without
    recursion, so a deeply nested value costs no stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{where}[{show(k)}]", v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
        elif _number(item) and not finite_number(item):
            return where, item, ANY
    return None
