"""The network's ``alpha`` and ``beta`` fitted from measured collective times.

A collective's time is modelled as ``t = a alpha + b n beta`` with ``a`` and ``b`` the counts
of its pattern (ring all-reduce on p workers: a = 2(p-1), b = 2(p-1)/p; a binomial tree's
broadcast: a = b = ceil(log2 p); one message: a = b = 1; :data:`PATTERNS`).
The fit is least squares on the relative error (each residual divided by its measured time),
because the sizes span eight orders of magnitude and an absolute fit would see only the
largest; robust (scipy's Cauchy loss at a 10% scale), because on a busy machine a few
small messages take 2-5x their usual time; and bounded at 0 (noise at one end gives that term
0, never a negative cost). A reduction cost ``gamma`` scales with n like ``beta`` and is
folded into it (the fitted beta is the effective cost per byte moved). The fit's error is
reported as the median and the largest relative error over the samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from dlscale.errors import UserError
from dlscale.perfmodel.costs import Network

PATTERNS: dict[str, Callable[[int], tuple[float, float]]] = {
    "ring": lambda p: (2 * (p - 1), 2 * (p - 1) / p),
    "tree": lambda p: (math.ceil(math.log2(p)), math.ceil(math.log2(p))),
    "p2p": lambda p: (1.0, 1.0),
}
"""(latency messages, bytes factor) of each pattern on p workers, as in :mod:`.costs`: the ring
all-reduce; a binomial tree (a broadcast: ceil(log2 p) rounds of whole messages); one
point-to-point message (the parameter server's push or pull)."""

FITTED_FROM = {"ring": "all_reduce", "tree": "broadcast", "p2p": "send_recv"}
"""The collective of ``dlscale microbench`` each pattern is fitted from."""

USED_BY = {"ring": "ring", "ring-overlap": "ring", "tree": "tree", "ps-sync": "p2p",
           "ps-async": "p2p"}  # fmt: skip
"""The pattern whose fit predicts each strategy of :mod:`.predict`."""


@dataclass(frozen=True)
class Fit:
    network: Network
    median_error: float
    """Median of |model - measured| / measured over the samples."""
    max_error: float
    samples: int


def fit_network(
    pattern: str, workers: Sequence[int], sizes: Sequence[float], seconds: Sequence[float]
) -> Fit:
    """alpha and beta of ``pattern`` from samples (workers, bytes, seconds)."""
    if pattern not in PATTERNS:
        raise UserError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    if not len(workers) == len(sizes) == len(seconds) or len(seconds) < 2:
        raise UserError("a fit needs at least 2 samples, each with workers, bytes and seconds")
    t = np.asarray(seconds, dtype=float)
    n = np.asarray(sizes, dtype=float)
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(np.isfinite(n)) and np.all(n >= 0)):
        raise UserError("a fit needs positive, finite times and non-negative, finite sizes")
    coefficients = np.array([PATTERNS[pattern](int(p)) for p in workers], dtype=float)
    design = np.column_stack([coefficients[:, 0], coefficients[:, 1] * n]) / t[:, None]
    target = np.ones_like(t)  # t / t: residuals are relative errors
    start = np.clip(np.linalg.lstsq(design, target, rcond=None)[0], 0.0, None)
    # Robust (Cauchy loss, scale 10% relative error) and bounded at 0: a few small messages that
    # a busy machine made 2-5x slower do not pull beta, and no term goes negative.
    scale = np.maximum(start, [1e-9, 1e-15])  # the unknowns near 1: alpha in s, beta in s/B
    solved = least_squares(
        lambda x: design @ (x * scale) - target,
        x0=start / scale,
        bounds=(0.0, np.inf),
        loss="cauchy",
        f_scale=0.1,
    )
    alpha, beta = solved.x * scale
    # a term the bound pressed to 0 is 0, not 1e-30 (no bandwidth term: 0, never a huge one)
    if np.all(coefficients[:, 0] * alpha < 1e-9 * t):
        alpha = 0.0
    if np.all(coefficients[:, 1] * n * beta < 1e-9 * t):
        beta = 0.0
    model = coefficients[:, 0] * alpha + coefficients[:, 1] * n * beta
    errors = np.abs(model - t) / t
    return Fit(
        network=Network(alpha_s=float(alpha), beta_s_per_byte=float(beta)),
        median_error=float(np.median(errors)),
        max_error=float(np.max(errors)),
        samples=len(t),
    )
