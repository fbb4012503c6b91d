"""User text made safe to print: one line, control characters visible (no rich import)."""

from __future__ import annotations

import html
import math
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
    """``argv`` as one line to paste into a shell, the one function every command dlscale
    prints is built by: every word quoted where it needs it (a space, ``;``, ``$(...)``), and
    a word holding a line break or another character :func:`visible` would escape written in
    ANSI-C quotes (``$'place\\nexec "$@"'``: bash, zsh and ksh read it back as the same word,
    where a line break printed as it is would end the command)."""
    return visible(" ".join(_shell_word(str(word)) for word in argv))


def _shell_word(word: str) -> str:
    if not any(char == "\n" or _hidden(char) for char in word):
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(char) for char in word) + "'"


def _hidden(char: str) -> bool:
    return not ("\x20" <= char <= "\x7e") and unicodedata.category(char) in _HIDDEN


_ANSI_C = {"\\": "\\\\", "'": "\\x27", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _ansi_c(char: str) -> str:
    """One character inside ``$'...'``: as it is, or as the escape that gives it back (an
    undecodable byte of a file name, held as a lone surrogate, as that byte)."""
    if char in _ANSI_C:
        return _ANSI_C[char]
    if not _hidden(char):
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's escape of a byte that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x80 else f"\\U{code:08x}"


def html_text(value: Any) -> str:
    """User text for an HTML page: escaped, with its control, format and bidirectional
    characters written as :func:`visible` writes them for a terminal; ``None`` as ``-``."""
    return html.escape("-" if value is None else visible(value))


def excerpt(value: Any, limit: int = 40) -> str:
    """A value a user or a stored file gave, as an error or a warning quotes it: its ``repr``
    cut to ``limit`` characters, a huge integer by its size (its ``repr`` past 4300 digits
    would raise), made :func:`visible`."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    text = repr(value)
    return visible(text if len(text) <= limit else f"{text[: limit - 3]}...")


def one_line(text: str) -> str:
    """``text``'s lines, stripped, blank ones left out, joined by a space: an exception's
    message that spans lines (TensorFlow's end in blank ones) as the one line an error is,
    with no line break for :func:`visible` to write as ``\\n``."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def clip(text: str, limit: int = 2000, where: str = "") -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` and a note of
    how many there were (and ``where`` the whole is): what dlscale stores or prints of an
    exception's message or a line of a rank's output, which a script can make 50 MB long."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters in all{f'; {where}' if where else ''})"


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """`` did you mean a or b?`` for the names close to ``name`` (difflib's ratio, a different
    case counted as the same letter), else ``""``: a typo gets the name it missed, not a list."""
    import difflib

    by_folded = {candidate.casefold(): candidate for candidate in names}
    close = difflib.get_close_matches(name.casefold(), by_folded, n=3, cutoff=0.75)
    if not close:
        return ""
    return f" did you mean {' or '.join(by_folded[c] for c in close)}?"


_TAG = r"(?:\[[^\]]{1,40}\]<std(?:out|err)>:|\d+: )?"
"""A launcher's label before a rank's line (mpirun's ``[1,0]<stderr>:``, srun's ``0: ``)."""


def without_traceback_frames(lines: Iterable[str]) -> list[str]:
    """A process's output lines without Python's traceback frames: the ``Traceback (most recent
    call last):`` line and the indented frame lines after it are left out, the exception's own
    line (the first one not indented) kept. Several ranks' output merged by one launcher
    (srun, mpirun) shows a peer's traceback beside the rank that failed; a person reads the
    error, not the frames."""
    import re

    start = re.compile(_TAG + r"Traceback \(most recent call last\):")
    frame = re.compile(_TAG + r"\s")
    out: list[str] = []
    in_frames = False
    for line in lines:
        if start.match(line):
            in_frames = True
            continue
        if in_frames and frame.match(line):
            continue
        in_frames = False
        out.append(line)
    return out


def for_stream(line: str, stream: Any) -> str:
    """``line`` as it is printed on ``stream``: on a terminal wrapped at words to its width
    (its later lines indented by two), so a long error or warning reads within the screen;
    into a pipe or a log one line, as scripts and tests read it. ``line`` is made
    :func:`visible` by the caller."""
    import shutil
    import textwrap

    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or a fake stream
        terminal = False
    if not terminal:
        return line
    width = shutil.get_terminal_size().columns
    wrapped = textwrap.wrap(line, max(width, 40), subsequent_indent="  ",
                            break_long_words=False, break_on_hyphens=False)  # fmt: skip
    return "\n".join(wrapped) or line


def byte_size(size: float, spec: str = "g") -> str:
    """Bytes for people in binary units, the number formatted by ``spec``: ``64 MiB``,
    ``1.5 GiB``, ``8 B`` (``".3g"``: ``18.6 MiB``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{format(size / scale, spec)} {unit}"
    return f"{format(size, spec)} B"
