"""A study's description in words of what it runs.

A description written for a grid (the default study's "plain PyTorch at 1 worker against DDP at
1 and 2 workers", or a study file's) is wrong once a flag or ``--set`` changes that grid: a
torch-ring study was titled as the default's comparison. :func:`study_description` keeps a
description only while nothing overrode the settings it was written for, and otherwise
describes the points themselves (:func:`describe_points`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dlscale.contract.run_config import RunConfig


def describe_points(points: Iterable[RunConfig]) -> str:
    """Each backend at its worker counts, in the points' order: ``torch-single at 1 worker,
    torch-ring at 1 and 2 workers``."""
    counts: dict[str, list[int]] = {}
    for point in points:
        seen = counts.setdefault(point.backend, [])
        if point.workers not in seen:
            seen.append(point.workers)
    return ", ".join(
        f"{backend} at {_words(sorted(workers))} worker{'' if workers == [1] else 's'}"
        for backend, workers in counts.items()
    )


def study_description(
    written: str,
    written_for: Mapping[str, Any],
    settings: Mapping[str, Any],
    points: Iterable[RunConfig],
) -> str:
    """``written`` (the default study's or a file's description) while ``settings`` (after
    the flags, ``--set`` and the scale) still hold every value of ``written_for`` (the
    settings it was written with) and add no key; else what the points run."""
    unchanged = all(settings.get(key) == value for key, value in written_for.items())
    if written and unchanged and set(settings) <= set(written_for):
        return written
    return describe_points(points)


def _words(numbers: list[int]) -> str:
    text = [str(n) for n in numbers]
    return text[0] if len(text) == 1 else f"{', '.join(text[:-1])} and {text[-1]}"
