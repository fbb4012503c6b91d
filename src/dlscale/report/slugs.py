"""File-name and HTML-id stems for study names: safe characters only, distinct, stable."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SLUG_CHARS = 48
"""The readable part of a slug; with its hash and a figure key a file name stays short."""


def _slug(name: str, digits: int) -> str:
    readable = _UNSAFE.sub("_", name).lstrip("-_")[:_SLUG_CHARS]
    if readable == name and name and digits == 0:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[: digits or 10]
    return f"{readable or 'study'}-{digest}"


def study_slugs(names: Iterable[str]) -> dict[str, str]:
    """A file-name and HTML-id stem for each study name: only ASCII letters, digits, ``-`` and
    ``_`` (no dots, slashes or leading dashes), distinct even where case is not, and the same
    for a name whatever other names come with it unless they collide.

    A name that is already such a stem is kept; any other gets a short hash of the full name
    (``lr0.1`` -> ``lr0_1-<hash>``), so names that differ only in unsafe characters never share
    files or ids."""
    slugs = {name: _slug(name, 0) for name in dict.fromkeys(names)}
    for digits in (10, 16, 64):
        counts = Counter(slug.lower() for slug in slugs.values())
        clashing = [name for name, slug in slugs.items() if counts[slug.lower()] > 1]
        if not clashing:
            break
        for name in clashing:
            slugs[name] = _slug(name, digits)
    return slugs
