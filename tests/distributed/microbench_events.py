"""Reading a microbench run back from its ranks' own records, for recomputing its figures by
hand in the tests."""

from pathlib import Path
from typing import Any

import dlscale


def slowest_per_iteration(
    events_by_rank: list[list[dict[str, Any]]], collective: str, size: int
) -> list[float]:
    """Each timed iteration's time of the slowest of these ranks (their ``collective``
    records of ``size`` bytes): what a row's median is taken over."""
    mine = [
        next(e["times_s"] for e in events
             if e["event"] == "collective" and e["collective"] == collective
             and e["bytes"] == size)
        for events in events_by_rank
    ]  # fmt: skip
    return [max(times) for times in zip(*mine, strict=True)]


def ran_this_checkout(run_dir: Path) -> bool:
    """Whether the run's ranks imported the dlscale these tests import (its pythonpath link)."""
    here = Path(dlscale.__file__).resolve().parent
    return bool((run_dir / "pythonpath" / "dlscale").resolve() == here)
