"""A study's published claims computed from its own runs, each with a verdict.

Definitions (also docs/metrics.md, "Published claims"):

- **Which points.** Completed points of the study (runs combined, :mod:`dlscale.metrics.points`)
  whose settings equal the claim's ``of`` (and, for a ratio, ``over``) and its ``needs``, the
  paper's conditions. Without ``workers`` in them, the most workers at which the claim can be
  computed.
- **Speedup**: the point's ``speedup`` over its 1-worker baseline, with its 95% interval
  (:mod:`dlscale.metrics.scaling`).
- **Ratio**: ``throughput(of) / throughput(over)`` of two points equal on every key but the
  backend, the backends' options, the keys the claim names and run labels; its 95% interval by
  Fieller's theorem on the points' samples (:func:`dlscale.metrics.scaling.throughput_ratio`).
  Several such pairs (a grid over models) are checked one by one.
- **Verdict** against the published value P with the interval [lo, hi]: **holds** when
  lo <= P <= hi; **same direction** when P is outside but the whole interval is on P's side
  of 1 (both faster, or both slower); **contradicted** otherwise (the interval reaches 1 or
  the other side); **cannot be measured here** when no point meets the claim (why: the
  conditions it needs and what the study ran) or a side has one sample (no interval).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dlscale.config.claims import RATIO, Claim
from dlscale.contract.run_config import NOT_MATCHED_KEYS
from dlscale.metrics.scaling import describe, throughput_ratio

Row = dict[str, Any]


class ClaimVerdict(StrEnum):
    HOLDS = "holds"
    SAME_DIRECTION = "same direction"
    CONTRADICTED = "contradicted"
    NOT_MEASURABLE = "cannot be measured here"


@dataclass(frozen=True)
class ClaimCheck:
    """One claim at one set of points (a grid over models gives one check a model)."""

    claim: Claim
    verdict: ClaimVerdict
    why: str
    """Why the verdict, in a sentence: what was measured, or what the claim needs."""
    measured: float | None = None
    interval: tuple[float, float] | None = None
    at: str = ""
    """The points measured: ``torch-ddp x2, 1 thr over torch-single x1, 1 thr``."""

    def measured_text(self) -> str:
        """``1.92x [1.71, 2.16]``, ``1.92x`` without an interval, ``-`` when not measured."""
        if self.measured is None:
            return "-"
        if self.interval is None:
            return f"{self.measured:.2f}x"
        return f"{self.measured:.2f}x [{self.interval[0]:.2f}, {self.interval[1]:.2f}]"

    def record(self) -> dict[str, Any]:
        """One JSON record (``dlscale run --json``): ``kind`` ``claim``."""
        return {
            "kind": "claim",
            "id": self.claim.id,
            "published": self.claim.published,
            "measured": self.measured,
            "interval": list(self.interval) if self.interval else None,
            "verdict": str(self.verdict),
            "at": self.at,
            "why": self.why,
        }

    def detail(self) -> str:
        """Where it was measured and why the verdict, in one sentence."""
        return f"{self.at}: {self.why}" if self.at else self.why


def check_claims(claims: Iterable[Claim], points: Sequence[Row]) -> list[ClaimCheck]:
    """Every claim against the study's points (rows of :func:`add_scaling`, per point)."""
    usable = [p for p in points if p["status"] == "completed" and _throughput(p)]
    return [check for claim in claims for check in _check(claim, usable)]


def selected(selector: Mapping[str, Any]) -> str:
    """``backend=torch-ddp, workers=12``: a selector as words."""
    return ", ".join(f"{key}={value}" for key, value in selector.items())


def _check(claim: Claim, points: list[Row]) -> list[ClaimCheck]:
    mine = [p for p in points if _matches(p, claim.of)]
    if not mine:
        return [_cannot(claim, f"this study has no completed run of {selected(claim.of)}")]
    met = [p for p in mine if _matches(p, claim.needs)]
    if not met:
        return [_cannot(claim, _unmet(claim, mine))]
    if claim.measure == RATIO:
        return _ratios(claim, met, points)
    return _speedups(claim, met)


def _speedups(claim: Claim, met: list[Row]) -> list[ClaimCheck]:
    scaled = [p for p in met if _workers(p) > 1 and p.get("speedup") is not None]
    if not scaled:
        return [_cannot(claim, f"no point of {selected(claim.of)} over 1 worker has a baseline")]
    most = max(_workers(p) for p in scaled)
    at_most = [p for p in scaled if _workers(p) == most]
    varying = _varying(at_most)
    return [
        _verdict(
            claim,
            point["speedup"],
            point.get("speedup_ci95"),
            f"{_named(point, claim.of)} over {point['baseline']}{_variant(point, varying)}",
        )
        for point in at_most
    ]


def _ratios(claim: Claim, met: list[Row], points: list[Row]) -> list[ClaimCheck]:
    assert claim.over is not None
    theirs = [p for p in points if _matches(p, claim.over) and _matches(p, claim.needs)]
    if not theirs:
        return [_cannot(claim, f"this study has no completed run of {selected(claim.over)}")]
    named = claim.keys()
    pairs = [
        (mine, other)
        for mine in met
        for other in theirs
        if mine is not other and _pair_key(mine, named) == _pair_key(other, named)
    ]
    if not pairs:
        return [
            _cannot(
                claim,
                f"no run of {selected(claim.over)} has the settings of a run of "
                f"{selected(claim.of)} (the same workers, model, batch and threads)",
            )
        ]
    most = max(_workers(mine) for mine, _ in pairs)
    at_most = [(mine, other) for mine, other in pairs if _workers(mine) == most]
    varying = _varying([mine for mine, _ in at_most])
    checks = []
    for mine, other in at_most:
        ratio, interval = throughput_ratio(mine, other)
        at = f"{_named(mine, claim.of)} over {_named(other, claim.over)}"
        at += _variant(mine, varying)
        checks.append(_verdict(claim, ratio, interval, at))
    return checks


def _verdict(
    claim: Claim, measured: float, interval: Sequence[float] | None, at: str
) -> ClaimCheck:
    published = claim.published
    if interval is None:
        return ClaimCheck(
            claim,
            ClaimVerdict.NOT_MEASURABLE,
            "one sample a side, so no 95% interval: run more windows or repeats",
            measured,
            None,
            at,
        )
    low, high = float(interval[0]), float(interval[1])
    if low <= published <= high:
        verdict, why = ClaimVerdict.HOLDS, "the published value is inside the 95% interval"
    elif (published > 1 and low > 1) or (published < 1 and high < 1):
        way = "faster" if published > 1 else "slower"
        verdict = ClaimVerdict.SAME_DIRECTION
        why = f"{way} here too, but by {measured:.2f}x, not {published:g}x"
    else:
        verdict = ClaimVerdict.CONTRADICTED
        why = (
            "the interval includes 1: no difference shown here"
            if low <= 1 <= high
            else f"the other way round here ({measured:.2f}x)"
        ) + f", and excludes the published {published:g}x"
    return ClaimCheck(claim, verdict, why, measured, (low, high), at)


def _cannot(claim: Claim, why: str) -> ClaimCheck:
    return ClaimCheck(claim, ClaimVerdict.NOT_MEASURABLE, why)


def _unmet(claim: Claim, mine: list[Row]) -> str:
    """What the claim needs and what the study's points of it have instead."""
    had = []
    for key in claim.needs:
        values = sorted({str(_value(p, key)) for p in mine}, key=_natural)
        had.append(f"{key} {', '.join(values)}")
    return f"needs {selected(claim.needs)}; this study's runs of it have {'; '.join(had)}"


def _matches(point: Row, selector: Mapping[str, Any]) -> bool:
    return all(_value(point, key) == value for key, value in selector.items())


def _value(point: Row, key: str) -> Any:
    return point["config"].get(key)


def _workers(point: Row) -> int:
    return int(point["config"]["workers"])


def _throughput(point: Row) -> bool:
    return bool((point.get("metrics") or {}).get("throughput_samples_s"))


def _pair_key(point: Row, named: set[str]) -> tuple[tuple[str, str], ...]:
    """What two points of a ratio share: every key but the backend, its options, the keys the
    claim names (``kvstore = "dist_async"``) and run labels."""
    skip = {
        "backend",
        *named,
        *NOT_MATCHED_KEYS,
        *(point.get("config_options") or {}).get("backend", {}),
    }
    skip.discard("workers")  # set against each other at the same worker count
    return tuple(sorted((k, repr(v)) for k, v in point["config"].items() if k not in skip))


def _varying(points: list[Row]) -> list[str]:
    """The keys whose values differ among ``points`` (a grid the claim spans)."""
    keys = {k for p in points for k in p["config"] if k not in NOT_MATCHED_KEYS}
    return sorted(k for k in keys if len({repr(_value(p, k)) for p in points}) > 1)


def _named(point: Row, selector: Mapping[str, Any]) -> str:
    """``mxnet-kv x2, 1 thr (kvstore=dist_sync)``: the point and the options the claim chose."""
    chosen = {k: v for k, v in selector.items() if k not in ("backend", "workers")}
    return describe(point) + (f" ({selected(chosen)})" if chosen else "")


def _variant(point: Row, varying: list[str]) -> str:
    return "".join(f", {key}={_value(point, key)}" for key in varying)


def _natural(text: str) -> tuple[int, float | str]:
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)
