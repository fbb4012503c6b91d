"""Typed command-line values: the ``type=`` of every flag that takes a number, built on
:mod:`dlscale.contract.numbers` (ASCII digits only, finite, in range), so ``--servers`` of 400
digits, ``--workers ٣``, ``' 3 '`` or ``--compute-ms 1e-320`` is one line naming the flag, the
value (cut: :func:`~dlscale.contract.text.excerpt`) and what it may be, never a traceback or an
echo of 5,000 characters."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dlscale.contract.numbers import decimal_number, whole_number
from dlscale.contract.text import excerpt


def whole(low: int = 0, high: int = 10**18 - 1) -> Callable[[str], int]:
    """A flag's whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        value = whole_number(text, low=low, high=high)
        if value is None:
            raise argparse.ArgumentTypeError(
                f"{excerpt(text)} is not a whole number from {low:,} to {high:,} (ASCII digits)"
            )
        return value

    return parse


def decimal(low: float, high: float, *, above: bool = False) -> Callable[[str], float]:
    """A flag's decimal number in ``[low, high]`` (``above``: ``(low, high]``)."""

    def parse(text: str) -> float:
        value = decimal_number(text, low=low, high=high)
        if value is None or (above and value <= low):
            start = "(" if above else "["
            raise argparse.ArgumentTypeError(
                f"{excerpt(text)} is not a number in {start}{low:g}, {high:g}]"
            )
        return value

    return parse


def whole_list(text: str, low: int = 1, high: int = 10**18 - 1) -> list[int] | None:
    """A comma-separated list of whole numbers (``2,4``), each from ``low`` to ``high``, in
    order, each once; ``None`` when any part is not one (the caller says its own line)."""
    values = [whole_number(part, low=low, high=high) for part in text.split(",")]
    if not values or any(value is None for value in values):
        return None
    return list(dict.fromkeys(value for value in values if value is not None))
