"""Small statistics with honest labels.

Student's t quantiles come from ``scipy.special.stdtrit(df, p)``, the function
``scipy.stats.t.ppf(p, df)`` computes with (equal to the bit): importing ``scipy.stats`` costs
about a second of CPU in every ``dlscale`` command that prints a table, ``scipy.special`` a
quarter of that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def mean_ci95(samples: Sequence[float] | np.ndarray[Any, Any]) -> tuple[float, float | None]:
    """Mean and the half-width of its two-sided 95% confidence interval.

    Student's t with n-1 degrees of freedom: ``t_{0.975, n-1} * s / sqrt(n)`` where ``s`` is the
    sample standard deviation (ddof=1). Fewer than two samples give no interval (``None``).
    """
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("no samples")
    mean = float(values.mean())
    if values.size < 2:
        return mean, None
    from scipy.special import stdtrit

    half = float(stdtrit(values.size - 1, 0.975) * values.std(ddof=1) / math.sqrt(values.size))
    return mean, half


def percentile(samples: Sequence[float] | np.ndarray[Any, Any], q: float) -> float:
    """The q-th percentile with linear interpolation between order statistics (numpy default)."""
    return float(np.percentile(np.asarray(samples, dtype=float), q))


def ratio_ci95(
    numerator: Sequence[float] | np.ndarray[Any, Any],
    denominator: Sequence[float] | np.ndarray[Any, Any],
) -> tuple[float, tuple[float, float] | None]:
    """``mean(numerator) / mean(denominator)`` of two independent samples and its 95%
    confidence interval by Fieller's theorem (Fieller 1954).

    With means ``a``, ``b`` and squared standard errors ``va = s_a^2/n_a``, ``vb = s_b^2/n_b``,
    the interval holds every ``R`` with ``(a - R b)^2 <= t^2 (va + R^2 vb)``; ``t`` is Student's
    0.975 quantile with Welch-Satterthwaite degrees of freedom for ``a - R b`` at the estimate.
    Unlike the delta method it is not symmetric, and it says when there is no finite interval:
    the denominator's mean is not distinguishable from 0 (``t^2 vb >= b^2``); then, as with
    fewer than two samples on a side, the interval is ``None``.
    """
    a_values = np.asarray(numerator, dtype=float)
    b_values = np.asarray(denominator, dtype=float)
    if a_values.size == 0 or b_values.size == 0:
        raise ValueError("no samples")
    a, b = float(a_values.mean()), float(b_values.mean())
    if b == 0:
        raise ValueError("the denominator's mean is 0")
    ratio = a / b
    if a_values.size < 2 or b_values.size < 2:
        return ratio, None
    va = float(a_values.var(ddof=1)) / a_values.size
    vb = float(b_values.var(ddof=1)) / b_values.size
    if va == 0 and vb == 0:
        return ratio, (ratio, ratio)
    spread = va + ratio**2 * vb
    parts = va**2 / (a_values.size - 1) + ratio**4 * vb**2 / (b_values.size - 1)
    from scipy.special import stdtrit

    quantile = float(stdtrit(spread**2 / parts, 0.975))
    t2 = quantile**2
    lead = b * b - t2 * vb
    if lead <= 0:
        return ratio, None
    root = math.sqrt(t2 * (a * a * vb + b * b * va - t2 * va * vb))
    return ratio, ((a * b - root) / lead, (a * b + root) / lead)
