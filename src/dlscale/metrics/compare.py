"""Compare two sets of runs (A = baseline, B = candidate) point by point.

Definitions (also in docs/metrics.md, "Comparing two sets of runs"):

- **Matching.** A run of A and a run of B are the same point when their configs are equal on
  every key except the run labels in :data:`NOT_IN_POINT_KEY`. Only ``completed`` runs are
  compared; several completed runs of one point on one side (``repeat_id``, ``--repeats``) give
  one sample each (their mean throughputs) when both sides have two runs or more, else the
  runs' per-window throughputs are pooled. Points with completed runs on one side only, and
  every run that did not complete or has no usable throughput (its mean or a window not a
  finite number above 0), are listed, never silently dropped.
- **Throughput ratio** ``mean(B samples) / mean(A samples)`` (above 1: B is faster); the
  throughputs are samples per second (``throughput_samples_s``), the same ratio in any unit.
- **Its 95% confidence interval** is computed on log throughput: Welch's t interval
  (Welch 1947; Welch-Satterthwaite degrees of freedom) for the difference of the means of
  ``log(samples)``, exponentiated. That is the CI of the *ratio of geometric means* B/A, not of
  the ratio of arithmetic means printed as the point estimate (the two agree closely when the
  windows vary by a few percent). Logs, because a slowdown is multiplicative: 0.8x and 1.25x are
  the same distance from 1 on the log scale, and the interval of a difference of means of logs
  turns into an interval of a ratio.
- **Significance**: the two-sided Mann-Whitney U test (Mann & Whitney 1947) on the raw per-window
  throughputs (scipy's default method: exact for small samples without ties, else the normal
  approximation with tie and continuity corrections). It assumes nothing about the shape of the
  distribution, which matters with a handful of windows disturbed by other processes.
- **Time to accuracy**: ratio ``mean(B) / mean(A)`` of ``time_to_accuracy_s`` over the runs of the
  point (below 1: B is faster), with the same interval and test when each side has >= 2 runs
  (repeats), else the ratio only.

**Regression rule.** With ``threshold`` (e.g. 0.05 for 5%) and ``alpha`` (default 0.05), a point
regresses in throughput when ``ratio < 1 - threshold`` AND the Mann-Whitney p-value < ``alpha``;
in time to accuracy when ``ratio > 1 + threshold`` AND p < ``alpha``. When the test cannot decide
(fewer than 2 samples on a side, or so few that even complete separation of the samples gives
p >= ``alpha``, e.g. 3 windows against 3: smallest p = 0.1), a change beyond the threshold is a
``possible regression (too few samples to test)``, and it counts as a regression for
``--fail-on-regression``: conservative for CI gating, where a slowdown nobody can rule out
should stop the merge rather than pass unnoticed. A significant change beyond the threshold in
the good direction is ``faster`` (``possibly faster`` when it cannot be tested).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from dlscale.contract.numbers import finite_number
from dlscale.contract.run_config import NOT_MATCHED_KEYS
from dlscale.contract.text import excerpt
from dlscale.metrics.points import PointKey, point_key, run_throughputs
from dlscale.metrics.units import sample_unit, units_per_sample

NOT_IN_POINT_KEY = NOT_MATCHED_KEYS
"""Config keys that label a run without changing what is measured: ignored when matching."""

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05
CONFIDENCE = 0.95


class Verdict(StrEnum):
    OK = "ok"
    FASTER = "faster"
    POSSIBLY_FASTER = "possibly faster"
    REGRESSION = "regression"
    POSSIBLE_REGRESSION = "possible regression"

    @property
    def regressed(self) -> bool:
        """Counts as a regression for --fail-on-regression (the untestable case included)."""
        return self in (Verdict.REGRESSION, Verdict.POSSIBLE_REGRESSION)


@dataclass(frozen=True)
class RatioEstimate:
    """B/A ratio of one metric at one point, with its interval and test (``None``: not done)."""

    mean_a: float
    mean_b: float
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_a: int
    n_b: int
    testable: bool
    """Whether the test can reach p < alpha with these sample sizes."""
    note: str | None = None


@dataclass(frozen=True)
class PointComparison:
    config: dict[str, Any]
    """The point's config (A's first run), without the keys in NOT_IN_POINT_KEY."""
    run_ids_a: tuple[str, ...]
    run_ids_b: tuple[str, ...]
    throughput: RatioEstimate
    throughput_verdict: Verdict
    tta: RatioEstimate | None
    tta_verdict: Verdict | None
    sample_unit: str | None = "image"
    """What the throughput samples count (:mod:`dlscale.metrics.units`): the means are
    samples per second, read in this unit."""
    units_per_sample: int = 1

    @property
    def regressed(self) -> bool:
        tta = self.tta_verdict is not None and self.tta_verdict.regressed
        return self.throughput_verdict.regressed or tta


@dataclass(frozen=True)
class UnmatchedPoint:
    config: dict[str, Any]
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class FailedRun:
    side: str
    """"A" (baseline) or "B" (candidate)."""
    run_id: str
    status: str
    config: dict[str, Any]
    error: str | None


@dataclass(frozen=True)
class Comparison:
    matched: tuple[PointComparison, ...]
    only_in_a: tuple[UnmatchedPoint, ...]
    only_in_b: tuple[UnmatchedPoint, ...]
    failed: tuple[FailedRun, ...]
    threshold: float
    alpha: float

    @property
    def regressions(self) -> tuple[PointComparison, ...]:
        return tuple(p for p in self.matched if p.regressed)


def compare(
    results_a: Sequence[dict[str, Any]],
    results_b: Sequence[dict[str, Any]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """Match the completed runs of A (baseline) and B (candidate) and compare every point."""
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    groups_a, groups_b = _completed_by_point(results_a), _completed_by_point(results_b)
    matched = tuple(
        compare_point(groups_a[key], groups_b[key], threshold=threshold, alpha=alpha)
        for key in groups_a
        if key in groups_b
    )
    return Comparison(
        matched=matched,
        only_in_a=_unmatched(groups_a, groups_b),
        only_in_b=_unmatched(groups_b, groups_a),
        failed=(*_failed(results_a, "A"), *_failed(results_b, "B")),
        threshold=threshold,
        alpha=alpha,
    )


def compare_point(
    runs_a: Sequence[dict[str, Any]],
    runs_b: Sequence[dict[str, Any]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
) -> PointComparison:
    """Throughput and time-to-accuracy of one point: B's completed runs against A's."""
    throughput = ratio_estimate(*_throughput_samples(runs_a, runs_b), alpha=alpha)
    tta_a, tta_b = _tta(runs_a), _tta(runs_b)
    tta = ratio_estimate(tta_a, tta_b, alpha=alpha) if tta_a and tta_b else None
    counted = {
        (sample_unit(r.get("metrics")), units_per_sample(r.get("metrics")))
        for r in (*runs_a, *runs_b)
    }  # both sides in one unit, else in samples (a damaged or foreign result)
    unit, per_sample = counted.pop() if len(counted) == 1 else (None, 1)
    return PointComparison(
        config=dict(point_key(runs_a[0]["config"])),
        run_ids_a=tuple(r["run_id"] for r in runs_a),
        run_ids_b=tuple(r["run_id"] for r in runs_b),
        throughput=throughput,
        throughput_verdict=verdict(throughput, threshold, alpha, higher_is_better=True),
        tta=tta,
        tta_verdict=None if tta is None else verdict(tta, threshold, alpha, higher_is_better=False),
        sample_unit=unit,
        units_per_sample=per_sample,
    )


def ratio_estimate(
    samples_a: Sequence[float], samples_b: Sequence[float], *, alpha: float = DEFAULT_ALPHA
) -> RatioEstimate:
    """``mean(B) / mean(A)``, the Welch interval of the ratio of geometric means, and the
    two-sided Mann-Whitney U p-value. Fewer than 2 samples on a side: no interval, no test.

    Samples must be positive (throughputs, durations): logs are taken.
    """
    a, b = _positive(samples_a), _positive(samples_b)
    if a.size == 0 or b.size == 0:
        raise ValueError("each side needs at least one positive sample")
    n_a, n_b = int(a.size), int(b.size)
    mean_a, mean_b = float(a.mean()), float(b.mean())
    if n_a < 2 or n_b < 2:
        short = f"too few samples to test (n_a={n_a}, n_b={n_b}; need >= 2 a side)"
        return RatioEstimate(
            mean_a, mean_b, mean_b / mean_a, None, None, None, n_a, n_b, testable=False, note=short
        )
    low, high = welch_log_ratio_ci(a, b)
    smallest = smallest_mannwhitney_p(n_a, n_b)
    note: str | None = None
    if smallest >= alpha:
        note = (
            f"too few samples to test: with n_a={n_a}, n_b={n_b} the smallest possible "
            f"Mann-Whitney p is {smallest:.3g} >= alpha={alpha}"
        )
    p_value = mannwhitney_p(a, b)
    return RatioEstimate(
        mean_a, mean_b, mean_b / mean_a, low, high, p_value, n_a, n_b, smallest < alpha, note
    )


def welch_log_ratio_ci(
    samples_a: np.ndarray[Any, Any], samples_b: np.ndarray[Any, Any], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Interval of the ratio of geometric means B/A (Welch 1947, on logs, exponentiated).

    With ``x = log(A)``, ``y = log(B)``, ``v = var/n`` per side (sample variances, ddof=1):
    ``d = mean(y) - mean(x)``, ``se = sqrt(v_x + v_y)``,
    ``dof = se^4 / (v_x^2 / (n_x - 1) + v_y^2 / (n_y - 1))`` (Welch-Satterthwaite), and the
    interval is ``exp(d -/+ t_{(1+confidence)/2, dof} * se)``. Both sides constant: a zero-width
    interval at the ratio.
    """
    from scipy.special import stdtrit

    x, y = np.log(samples_a), np.log(samples_b)
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = float(y.mean() - x.mean())
    se = math.sqrt(vx + vy)
    if se == 0:
        return math.exp(diff), math.exp(diff)
    dof = se**4 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = float(stdtrit(dof, (1 + confidence) / 2)) * se
    return math.exp(diff - half), math.exp(diff + half)


def mannwhitney_p(samples_a: np.ndarray[Any, Any], samples_b: np.ndarray[Any, Any]) -> float:
    """Two-sided Mann-Whitney U p-value (Mann & Whitney 1947); all values equal: 1."""
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(samples_b, samples_a, alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


def smallest_mannwhitney_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided exact p-value with these sizes: complete separation,
    ``2 / C(n_a + n_b, n_a)`` (capped at 1). At or above alpha, the test cannot detect anything.
    """
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def verdict(
    estimate: RatioEstimate, threshold: float, alpha: float, *, higher_is_better: bool
) -> Verdict:
    """Apply the regression rule of the module docstring to one ratio."""
    worse = estimate.ratio < 1 - threshold if higher_is_better else estimate.ratio > 1 + threshold
    better = estimate.ratio > 1 + threshold if higher_is_better else estimate.ratio < 1 - threshold
    if not (worse or better):
        return Verdict.OK
    if not estimate.testable or estimate.p_value is None:
        return Verdict.POSSIBLE_REGRESSION if worse else Verdict.POSSIBLY_FASTER
    if estimate.p_value >= alpha:
        return Verdict.OK
    return Verdict.REGRESSION if worse else Verdict.FASTER


def differing_keys(config_a: dict[str, Any], config_b: dict[str, Any]) -> list[str]:
    """Keys (outside NOT_IN_POINT_KEY) whose values differ between two configs."""
    keys = (set(config_a) | set(config_b)) - set(NOT_IN_POINT_KEY)
    return sorted(k for k in keys if config_a.get(k) != config_b.get(k))


def closest_pair(
    results_a: Iterable[dict[str, Any]], results_b: Iterable[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], list[str]] | None:
    """The completed configs of A and B that differ in the fewest keys, and those keys."""
    configs_a = [r["config"] for r in results_a if r.get("status") == "completed"]
    configs_b = [r["config"] for r in results_b if r.get("status") == "completed"]
    pairs = [(a, b, differing_keys(a, b)) for a in configs_a for b in configs_b]
    return min(pairs, key=lambda pair: len(pair[2]), default=None)


def _completed_by_point(results: Iterable[dict[str, Any]]) -> dict[PointKey, list[dict[str, Any]]]:
    groups: dict[PointKey, list[dict[str, Any]]] = defaultdict(list)
    for row in results:
        if row.get("status") == "completed" and _unusable(row) is None:
            groups[point_key(row["config"])].append(row)
    return groups


def _unusable(run: dict[str, Any]) -> str | None:
    """Why a completed run has no throughput to compare (None: it has): its mean, or one of
    its windows, is not a finite number above 0. Such a run is listed with the failed ones,
    never dropped unseen (a reader's checks keep them out of a store: this guards callers
    that pass rows of their own)."""
    metrics = run.get("metrics") or {}
    windows = metrics.get("throughput_windows_samples_s") or []
    values = [("throughput", metrics.get("throughput_samples_s"))]
    values += [(f"throughput of window {i + 1}", w) for i, w in enumerate(windows)]
    for name, value in values:
        if not (finite_number(value) and value > 0):
            return (
                f"completed, but its {name} is {excerpt(value)}, not a number above 0: not compared"
            )
    return None


def _unmatched(
    mine: dict[PointKey, list[dict[str, Any]]], other: dict[PointKey, list[dict[str, Any]]]
) -> tuple[UnmatchedPoint, ...]:
    return tuple(
        UnmatchedPoint(config=dict(key), run_ids=tuple(r["run_id"] for r in runs))
        for key, runs in mine.items()
        if key not in other
    )


def _failed(results: Iterable[dict[str, Any]], side: str) -> list[FailedRun]:
    """Every run that did not complete, and every completed one without a usable throughput
    (status ``unusable``)."""
    failed = []
    for row in results:
        completed = row.get("status") == "completed"
        unusable = _unusable(row) if completed else None
        if completed and unusable is None:
            continue
        failed.append(
            FailedRun(
                side=side,
                run_id=row["run_id"],
                status="unusable" if completed else str(row.get("status")),
                config=row["config"],
                error=unusable if completed else row.get("error"),
            )
        )
    return failed


def _throughput_samples(
    runs_a: Sequence[dict[str, Any]], runs_b: Sequence[dict[str, Any]]
) -> tuple[list[float], list[float]]:
    """One throughput per run when each side has two runs or more (independent repeats),
    else every window of the runs, pooled (windows of one run are not independent: the
    interval and test are then optimistic)."""
    if len(runs_a) >= 2 and len(runs_b) >= 2:
        return run_throughputs(runs_a), run_throughputs(runs_b)
    return _windows(runs_a), _windows(runs_b)


def _windows(runs: Iterable[dict[str, Any]]) -> list[float]:
    """Per-window throughputs of the runs (usable ones: :func:`_unusable`), pooled; a run
    without them gives its mean."""
    pooled: list[float] = []
    for run in runs:
        metrics = run.get("metrics") or {}
        windows = metrics.get("throughput_windows_samples_s")
        pooled.extend(float(w) for w in windows or [metrics["throughput_samples_s"]])
    return pooled


def _tta(runs: Iterable[dict[str, Any]]) -> list[float]:
    values = ((run.get("metrics") or {}).get("time_to_accuracy_s") for run in runs)
    return [float(v) for v in values if v is not None and v > 0]


def _positive(samples: Sequence[float]) -> np.ndarray[Any, Any]:
    values = np.asarray(samples, dtype=float)
    return values[np.isfinite(values) & (values > 0)]
