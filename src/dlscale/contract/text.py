"""User text made safe to print: one line, control characters visible (no rich import)."""

from __future__ import annotations

import html
import re
import shlex
import unicodedata
from collections.abc import Iterable
from typing import Any

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
"""Unicode categories shown as escapes: controls (ESC, BEL, NUL, C1 such as CSI), format
characters (the bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069, the marks
U+200E/U+200F, zero-width characters, tags), lone surrogates (an undecodable file name, which
would also fail to print), unassigned code points (a terminal with newer Unicode tables may
give them a meaning) and the line and paragraph separators. Each can move the cursor, reorder,
hide or break the text around it."""

_CANDIDATE = re.compile(r"[^\x20-\x7e]")
"""Everything but printable ASCII; its category decides (ASCII text takes the fast path)."""


def _escape(match: re.Match[str], keep_newline: bool) -> str:
    char = match.group()
    if char == "\n" and keep_newline:
        return char
    if unicodedata.category(char) in _HIDDEN:
        return repr(char)[1:-1]  # \x1b, \u202e, \U000e0001, \udcff: what Python would type
    return char


def visible(text: Any, *, lines: bool = False) -> str:
    """``str(text)`` on one line (or its own lines, with ``lines``), its control and format
    characters (see ``_HIDDEN``) written as Python escapes: the one function every text a user
    or a stored file supplied goes through before it reaches a terminal."""
    return _CANDIDATE.sub(lambda match: _escape(match, lines), str(text))


def shell_command(argv: Iterable[Any]) -> str:
    """``argv`` as one line to paste into a POSIX shell: every word quoted where it needs it
    (a space, ``;``, ``$(...)``), then control characters made visible (a line break inside a
    word would otherwise end the command)."""
    return visible(shlex.join(str(word) for word in argv))


def html_text(value: Any) -> str:
    """User text for an HTML page: escaped, with its control, format and bidirectional
    characters written as :func:`visible` writes them for a terminal; ``None`` as ``-``."""
    return html.escape("-" if value is None else visible(value))
