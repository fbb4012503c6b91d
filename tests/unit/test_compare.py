"""dlscale.metrics.compare: matching, the ratio, its Welch interval on logs, the Mann-Whitney
test and the regression rule, on constructed inputs whose answers are known."""

import math

import numpy as np
import pytest
from scipy import stats

from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.metrics.compare import (
    NOT_IN_POINT_KEY,
    Verdict,
    closest_pair,
    compare,
    ratio_estimate,
    smallest_mannwhitney_p,
    verdict,
    welch_log_ratio_ci,
)
from dlscale.store.migrate import current

BASE = [100.0, 101.0, 99.0, 102.0, 98.0, 100.5, 99.5, 101.5]


def reader_row(document: dict, schema: int) -> dict:
    """A stored document as readers see it, without the store's checks."""
    return Result.from_document(current(document, schema)).row()


def noisy(level: float, n: int = 8, seed: int = 0, noise: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + noise * rng.standard_normal(n)))


def result(
    windows: list[float] | None,
    *,
    status: str = "completed",
    tta: float | None = None,
    run_id: str | None = None,
    **config: object,
) -> dict:
    cfg = RunConfig.make(model="tiny", **config)
    return reader_row(
        {
            "run_id": run_id or cfg.run_id(),
            "status": status,
            "error": None if status == "completed" else "rank 0 exited with code 1",
            "config": cfg.to_dict(),
            "metrics": {
                "throughput_img_s": None if windows is None else float(np.mean(windows)),
                "throughput_windows_img_s": windows,
                "time_to_accuracy_s": tta,
            },
        },
        2,
    )


def test_identical_samples_ratio_one_no_regression():
    est = ratio_estimate(BASE, BASE)
    assert est.ratio == pytest.approx(1.0)
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low <= 1.0 <= est.ci_high
    assert est.p_value is not None and est.p_value >= 0.99
    assert (est.n_a, est.n_b) == (8, 8)
    assert verdict(est, 0.05, 0.05, higher_is_better=True) is Verdict.OK


def test_twenty_percent_slowdown_is_a_significant_regression():
    a, b = noisy(100.0, seed=1), noisy(80.0, seed=2)
    est = ratio_estimate(a, b)
    assert est.ratio == pytest.approx(0.8, rel=0.01)
    assert est.ci_high is not None and est.ci_high < 1.0
    assert est.p_value is not None and est.p_value < 0.01
    assert est.testable
    assert verdict(est, 0.10, 0.05, higher_is_better=True) is Verdict.REGRESSION
    assert verdict(est, 0.25, 0.05, higher_is_better=True) is Verdict.OK


def test_faster_candidate_is_not_a_regression():
    est = ratio_estimate(noisy(100.0, seed=3), noisy(130.0, seed=4))
    got = verdict(est, 0.05, 0.05, higher_is_better=True)
    assert got is Verdict.FASTER
    assert not got.regressed


def test_small_significant_slowdown_within_threshold_is_ok():
    est = ratio_estimate(noisy(100.0, seed=5, noise=0.002), noisy(97.0, seed=6, noise=0.002))
    assert est.p_value is not None and est.p_value < 0.01
    assert verdict(est, 0.05, 0.05, higher_is_better=True) is Verdict.OK


def test_welch_log_interval_matches_hand_computation():
    a = np.array([100.0, 104.0, 97.0, 101.0])
    b = np.array([90.0, 95.0, 88.0, 93.0, 91.0])
    x, y = np.log(a), np.log(b)
    va, vb = x.var(ddof=1) / 4, y.var(ddof=1) / 5
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)  # Welch-Satterthwaite
    diff = y.mean() - x.mean()
    half = stats.t.ppf(0.975, dof) * se
    expected = (math.exp(diff - half), math.exp(diff + half))

    assert welch_log_ratio_ci(a, b) == pytest.approx(expected, rel=1e-12)
    est = ratio_estimate(list(a), list(b))
    assert (est.ci_low, est.ci_high) == pytest.approx(expected, rel=1e-12)
    assert est.ratio == pytest.approx(b.mean() / a.mean())
    # The geometric-mean ratio sits at the centre of the interval on the log scale.
    assert math.sqrt(expected[0] * expected[1]) == pytest.approx(math.exp(diff))
    assert 4 < dof < 7


def test_welch_log_interval_agrees_with_scipy_ttest_when_available():
    a, b = np.array(noisy(100.0, n=6, seed=7)), np.array(noisy(90.0, n=9, seed=8))
    test = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    if not hasattr(test, "confidence_interval"):
        pytest.skip("scipy < 1.11 has no ttest_ind(...).confidence_interval")
    ci = test.confidence_interval(0.95)
    assert welch_log_ratio_ci(a, b) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))


def test_mann_whitney_p_is_scipys_two_sided_value():
    a, b = noisy(100.0, n=5, seed=9, noise=0.05), noisy(95.0, n=6, seed=10, noise=0.05)
    expected = stats.mannwhitneyu(b, a, alternative="two-sided").pvalue
    assert ratio_estimate(a, b).p_value == pytest.approx(expected)


def test_fewer_than_two_samples_is_a_possible_regression():
    est = ratio_estimate([100.0], [70.0])
    assert est.ratio == pytest.approx(0.7)
    assert est.ci_low is None and est.ci_high is None and est.p_value is None
    assert est.note and "too few samples" in est.note
    got = verdict(est, 0.10, 0.05, higher_is_better=True)
    assert got is Verdict.POSSIBLE_REGRESSION
    assert got.regressed
    # ... but only beyond the threshold.
    assert verdict(ratio_estimate([100.0], [95.0]), 0.10, 0.05, higher_is_better=True) is (
        Verdict.OK
    )


def test_three_windows_a_side_cannot_reach_alpha():
    # Complete separation of 3 against 3 gives p = 2 / C(6, 3) = 0.1: the test cannot decide.
    assert smallest_mannwhitney_p(3, 3) == pytest.approx(0.1)
    assert smallest_mannwhitney_p(4, 4) == pytest.approx(2 / 70)
    est = ratio_estimate([100.0, 101.0, 99.0], [70.0, 71.0, 69.0])
    assert est.p_value == pytest.approx(0.1)
    assert not est.testable and est.note
    assert est.ci_high is not None and est.ci_high < 1
    assert verdict(est, 0.10, 0.05, higher_is_better=True) is Verdict.POSSIBLE_REGRESSION


def test_matching_ignores_run_labels_and_pools_repeats():
    assert set(NOT_IN_POINT_KEY) == {
        "repeat_id",
        "timeout_s",
        "python",
        "comm_probe_steps",
        "save_params",
        "resource_guard",
        "peak_tflops",
    }
    runs_a = [
        result(BASE[:4], repeat_id=0, run_id="a0"),
        result(BASE[4:], repeat_id=1, timeout_s=60.0, run_id="a1"),
    ]
    runs_b = [result(noisy(80.0, seed=11), comm_probe_steps=0, python="/usr/bin/python3")]
    comparison = compare(runs_a, runs_b, threshold=0.10)
    assert len(comparison.matched) == 1
    point = comparison.matched[0]
    assert point.run_ids_a == ("a0", "a1")
    assert (point.throughput.n_a, point.throughput.n_b) == (8, 8)
    assert point.throughput.mean_a == pytest.approx(np.mean(BASE))
    assert point.throughput_verdict is Verdict.REGRESSION
    assert comparison.regressions == (point,)
    assert "repeat_id" not in point.config
    assert not comparison.only_in_a and not comparison.only_in_b and not comparison.failed
    # A 2-thread run is another point: it is not pooled with the default.
    threads = compare([*runs_a, result(BASE, threads_per_worker=2, run_id="t2")], runs_b)
    assert len(threads.matched) == 1 and [u.run_ids for u in threads.only_in_a] == [("t2",)]


def test_unmatched_and_failed_runs_are_listed():
    runs_a = [result(BASE, workers=1), result(BASE, workers=2)]
    runs_b = [
        result(BASE, workers=1),
        result(None, workers=2, status="failed", run_id="b-failed"),
        result(BASE, workers=4),
    ]
    comparison = compare(runs_a, runs_b)
    assert [p.config["workers"] for p in comparison.matched] == [1]
    assert [p.config["workers"] for p in comparison.only_in_a] == [2]
    assert [p.config["workers"] for p in comparison.only_in_b] == [4]
    assert [(f.side, f.run_id, f.status) for f in comparison.failed] == [
        ("B", "b-failed", "failed")
    ]
    assert comparison.failed[0].error
    assert comparison.matched[0].throughput_verdict is Verdict.OK
    assert not comparison.regressions


def test_time_to_accuracy_ratio_and_rule():
    tta_a, tta_b = [100.0, 101.0, 99.0, 100.5], [130.0, 131.0, 129.0, 130.5]
    runs_a = [result(BASE, tta=t, repeat_id=i) for i, t in enumerate(tta_a)]
    runs_b = [result(BASE, tta=t, repeat_id=i) for i, t in enumerate(tta_b)]
    point = compare(runs_a, runs_b).matched[0]
    assert point.tta is not None
    assert point.tta.ratio == pytest.approx(np.mean(tta_b) / np.mean(tta_a))
    assert point.tta.p_value == pytest.approx(2 / 70)
    assert point.tta_verdict is Verdict.REGRESSION
    assert point.throughput_verdict is Verdict.OK
    assert point.regressed  # a time-to-accuracy regression counts


def test_time_to_accuracy_with_one_run_a_side_is_ratio_only():
    point = compare([result(BASE, tta=100.0)], [result(BASE, tta=80.0)]).matched[0]
    assert point.tta is not None
    assert point.tta.ratio == pytest.approx(0.8)
    assert point.tta.p_value is None and point.tta.ci_low is None
    assert point.tta_verdict is Verdict.POSSIBLY_FASTER
    assert not point.regressed


def test_no_time_to_accuracy_gives_none():
    point = compare([result(BASE)], [result(BASE)]).matched[0]
    assert point.tta is None and point.tta_verdict is None


def test_closest_pair_names_the_differing_keys():
    runs_a = [result(BASE, batch_size=64, seed=0), result(BASE, batch_size=32, seed=5)]
    runs_b = [result(BASE, batch_size=128, seed=0)]
    assert not compare(runs_a, runs_b).matched
    pair = closest_pair(runs_a, runs_b)
    assert pair is not None
    assert pair[2] == ["batch_size"]


def test_bad_threshold_or_alpha_is_refused():
    with pytest.raises(ValueError):
        compare([], [], threshold=1.5)
    with pytest.raises(ValueError):
        compare([], [], alpha=0.0)
