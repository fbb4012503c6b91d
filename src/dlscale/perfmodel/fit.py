"""The network's ``alpha`` and ``beta`` fitted from measured collective times.

A collective's time is modelled as ``t = a alpha + b n beta`` with ``a`` and ``b`` its counts
(:data:`~.costs.COLLECTIVES`: ring all-reduce on p workers: a = 2(p-1), b = 2(p-1)/p; a binomial
tree's broadcast: a = b = ceil(log2 p); one message: a = b = 1; a push and a pull through k
parameter servers: a = 2, b = 2 max(1, p/k)); each fit is stored under its collective's
``fit`` name (:data:`~.costs.FITS`: ``ring``, ``tree``, ``p2p``, ``ps``).
The fit is least squares on the relative error (each residual divided by its measured time),
because the sizes span eight orders of magnitude and an absolute fit would see only the
largest; robust (scipy's Cauchy loss at a 10% scale), because on a busy machine a few
small messages take 2-5x their usual time; and bounded at 0 (noise at one end gives that term
0, never a negative cost). A reduction cost ``gamma`` scales with n like ``beta`` and is
folded into it (the fitted beta is the effective cost per byte moved). The fit's error is
reported as the median and the largest relative error over the samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlscale.contract.errors import UserError
from dlscale.perfmodel.costs import COLLECTIVES, FITS, Network


@dataclass(frozen=True)
class Fit:
    network: Network
    median_error: float
    """Median of |model - measured| / measured over the samples."""
    max_error: float
    samples: int


def fit_network(
    pattern: str,
    workers: Sequence[int],
    sizes: Sequence[float],
    seconds: Sequence[float],
    servers: Sequence[int] | None = None,
) -> Fit:
    """alpha and beta of the fit ``pattern`` (:data:`~.costs.FITS`) from samples (workers,
    bytes, seconds, and for ``ps`` the parameter servers that held each message: 1 each when
    not given)."""
    if pattern not in FITS:
        raise UserError(f"unknown pattern {pattern!r}; known: {', '.join(FITS)}")
    counts = COLLECTIVES[FITS[pattern]].counts
    held = [1] * len(workers) if servers is None else list(servers)
    if not len(workers) == len(sizes) == len(seconds) == len(held) or len(seconds) < 2:
        raise UserError("a fit needs at least 2 samples, each with workers, bytes and seconds")
    if any(int(k) < 1 for k in held):
        raise UserError(f"a fit needs 1 server or more per sample, got {held}")
    t = np.asarray(seconds, dtype=float)
    n = np.asarray(sizes, dtype=float)
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(np.isfinite(n)) and np.all(n >= 0)):
        raise UserError("a fit needs positive, finite times and non-negative, finite sizes")
    coefficients = np.array(
        [counts(int(p), int(k), 1)[:2] for p, k in zip(workers, held, strict=True)],
        dtype=float,
    )
    design = np.column_stack([coefficients[:, 0], coefficients[:, 1] * n]) / t[:, None]
    target = np.ones_like(t)  # t / t: residuals are relative errors
    start = np.clip(np.linalg.lstsq(design, target, rcond=None)[0], 0.0, None)
    # Robust (Cauchy loss, scale 10% relative error) and bounded at 0: a few small messages that
    # a busy machine made 2-5x slower do not pull beta, and no term goes negative.
    scale = np.maximum(start, [1e-9, 1e-15])  # the unknowns near 1: alpha in s, beta in s/B
    # imported here: scipy.optimize costs a second of CPU in every command that reads PATTERNS
    from scipy.optimize import least_squares

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
