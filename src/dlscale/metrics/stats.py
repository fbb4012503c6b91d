"""Small statistics with honest labels."""

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
    from scipy.stats import t

    half = float(t.ppf(0.975, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size))
    return mean, half


def percentile(samples: Sequence[float] | np.ndarray[Any, Any], q: float) -> float:
    """The q-th percentile with linear interpolation between order statistics (numpy default)."""
    return float(np.percentile(np.asarray(samples, dtype=float), q))
