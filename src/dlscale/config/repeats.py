"""A study's own settings, beside the grid of points: how many runs each point gets, in which
order, and the stopping rule that adds more (docs/metrics.md, "Runs and points"), and how a
value of one of them is read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.options import parse_value
from dlscale.contract.text import excerpt

ORDERS = ("abba", "random")


@dataclass(frozen=True, kw_only=True)
class Repeats:
    """How many independent runs each point gets, in which order, and when to stop adding
    them (docs/metrics.md, "Runs and points")."""

    repeats: int = 1
    """Runs of every point (fresh processes each), before the stopping rule adds more."""
    target_ci: float | None = None
    """Stopping rule: add runs to a point until its throughput interval's half-width is at
    most this percentage of its mean (``None``: no rule, ``repeats`` runs)."""
    max_repeats: int | None = None
    """The stopping rule's limit of runs per point (default: 10, or ``repeats`` if more)."""
    time_budget_s: float | None = None
    """The stopping rule's limit of seconds for the whole study (no new run starts after it)."""
    order: str = "abba"
    """abba: the points in study order, then reversed, round after round (each point, the
    1-worker baselines included, is first as often as last); random: shuffled each round."""
    order_seed: int = 0
    """Seed of the ``random`` order."""
    machine_reference: bool = False
    """Add the framework's reference backend at 1 worker with every core (the whole-machine
    reference line) when the study's thread budget gives a point fewer."""

    def __post_init__(self) -> None:
        _study_check(
            isinstance(self.repeats, int) and self.repeats >= 1,
            "repeats",
            "an integer >= 1",
            self.repeats,
        )
        if self.max_repeats is None:
            object.__setattr__(self, "max_repeats", max(10, self.repeats))
        _study_check(
            isinstance(self.max_repeats, int) and self.max_repeats >= self.repeats,
            "max_repeats",
            f"an integer >= repeats ({self.repeats})",
            self.max_repeats,
        )
        if self.target_ci is not None:
            _study_check(
                _finite(self.target_ci) and 0 < self.target_ci < 100,
                "target_ci",
                "a percentage in (0, 100)",
                self.target_ci,
            )
        if self.time_budget_s is not None:
            _study_check(
                _finite(self.time_budget_s) and self.time_budget_s > 0,
                "time_budget_s",
                "seconds > 0",
                self.time_budget_s,
            )
        _study_check(self.order in ORDERS, "order", " or ".join(ORDERS), self.order)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _study_check(ok: bool, key: str, expected: str, value: object) -> None:
    if not ok:
        raise UserError(f"{key} must be {expected}, got {excerpt(value)}")


def coerce_study(key: str, value: Any, origin: str) -> Any:
    """A value of one of the :class:`Repeats` keys, in its type (checked by ``Repeats``)."""
    kind = {"repeats": int, "max_repeats": int, "order_seed": int, "target_ci": float}.get(key)
    if key == "time_budget_s":
        kind = float
    if isinstance(value, list):
        raise UserError(f"{origin}: {key} is a study setting, not a grid axis: give one value")
    if key == "machine_reference":
        kind = bool
    if kind is None:  # order
        return str(value).strip().lower() if isinstance(value, str) else value
    optional = key in ("target_ci", "time_budget_s")
    return parse_value(value, kind, f"{origin}: {key}", optional=optional)
