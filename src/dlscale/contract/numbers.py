"""Numbers read from text or from a stored file, checked where they are read.

Every number dlscale takes from a user's text (a host's slots, a script's ``--batch-size``,
``$COLUMNS``, a schema stamp) or from a file it did not just write (a lock, a claims file, a
result) goes through one of these functions, which never raise: ``str.isdigit()`` accepts
``²`` and ``int()`` then refuses it, ``int()`` refuses more than 4300 digits, and
``math.isfinite(10**400)`` raises ``OverflowError``, and ``float()`` reads ``١.٥`` as 1.5
and ``1e-320`` as a denormal. A caller turns ``None`` into its own one
line naming what it read."""

from __future__ import annotations

import math
import re
from typing import TypeGuard

_WHOLE = re.compile(r"[0-9]{1,18}")
"""Plain ASCII digits, at most 18 (below 2**63): ``²``, ``٣``, ``+1``, `` 1`` and a number
of 5,000 digits are not whole numbers here."""


def whole_number(text: object, low: int = 0, high: int = 10**18 - 1) -> int | None:
    """``text`` as an ``int`` when it is 1 to 18 ASCII digits with a value in ``[low, high]``;
    ``None`` for anything else (never an exception)."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def finite_number(
    value: object, low: float = -math.inf, high: float = math.inf
) -> TypeGuard[float]:
    """Whether ``value`` is a real number a float holds, finite and in ``[low, high]``: not a
    bool, a string, NaN or an infinity, nor an integer too large for a float (never an
    exception: ``math.isfinite(10**400)`` would raise)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        as_float = float(value)
    except OverflowError:  # an int past 1.8e308
        return False
    return math.isfinite(as_float) and low <= as_float <= high


def whole_value(value: object, low: int = 0, high: int = 2**63 - 1) -> int | None:
    """``value`` when it is an ``int`` (not a ``bool``) in ``[low, high]``, as a process id,
    a port or a count read from a stored file must be; ``None`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value <= high else None


_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][+-]?[0-9]{1,4})?"
)
"""A decimal number as a person types one, in ASCII: ``0.9``, ``5``, ``1e-3``, ``.5``; not
``١.٥`` (which ``float()`` reads as 1.5), ``1_000``, ``nan``, ``inf`` or spaces around it."""


def decimal_number(text: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    """``text`` as a ``float`` when it is a decimal number (:data:`_DECIMAL`) whose value is
    finite and in ``[low, high]``; ``None`` for anything else (never an exception)."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and low <= value <= high else None
