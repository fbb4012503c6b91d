"""User text made safe to print: one line, control characters visible (no rich import)."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: Any, *, lines: bool = False) -> str:
    """``str(text)`` on one line (or its own lines, with ``lines``), its control characters
    written as Python escapes."""
    control = _CONTROL_BUT_NEWLINE if lines else _CONTROL
    return control.sub(lambda m: repr(m.group())[1:-1], str(text))
