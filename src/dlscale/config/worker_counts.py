"""``--workers A..B``: the powers of 2 from A to B (``1..8`` is 1, 2, 4, 8), the same in every
command that takes worker counts (``dlscale run``, ``dlscale predict``); a list is written
``1,2,8``."""

from __future__ import annotations

from dlscale.contract.errors import UserError
from dlscale.contract.numbers import whole_number

MAX_POWER = 40
"""2**40 workers: far above any machine; a range beyond it is refused, not enumerated."""


def worker_range(text: str, flag: str = "--workers") -> list[int]:
    """The powers of 2 from A to B of ``A..B``; one line naming the fix for anything else."""
    low_text, _, high_text = text.partition("..")
    low, high = whole_number(low_text.strip(), low=1), whole_number(high_text.strip(), low=1)
    if low is None or high is None or low > high:
        raise UserError(
            f"{flag} {text!r}: give A..B (the powers of 2 from A to B, A >= 1) or a list like 1,2,8"
        )
    counts = [2**k for k in range(MAX_POWER + 1) if low <= 2**k <= high]
    if not counts:
        raise UserError(f"{flag} {text!r}: no power of 2 lies from {low} to {high}; give a list")
    return counts
