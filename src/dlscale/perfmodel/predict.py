"""A step's time, and from it throughput, speedup and efficiency, predicted for N workers on a
pattern (:data:`~.patterns.PATTERNS`, each by name or with its overlap on: ``ring-overlap``).

A worker's step is its compute (forward and backward at its batch: the compute profile,
measured by a 1-worker run) joined with what its pattern's synchronization costs on the
network, priced as ``dlscale predict --validate`` prices a measured point
(:meth:`~.patterns.Pattern.comm`, :meth:`~.patterns.Pattern.step_s`); a gradient sent in
``Profile.messages`` messages is that many messages of its share.

Weak scaling (each worker keeps its batch): throughput = N x batch / step; speedup =
throughput(N) / throughput(1); efficiency = speedup / N. One worker never synchronizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dlscale.contract.errors import UserError
from dlscale.contract.numbers import finite_number
from dlscale.contract.text import excerpt
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import variant

MAX_MESSAGES = 1_000_000
"""The most messages a step's gradient may be given in (far beyond any model's tensors)."""

PROFILE_RANGES = {
    "compute_s": (1e-10, 1e7),
    "batch": (1, 1e6),
    "gradient_bytes": (0.0, 1e15),
    "backward_share": (0.0, 1.0),
    "messages": (1, MAX_MESSAGES),
}
"""What a profile's figures may be: a step of 0.1 ns to about 100 days, a batch of up to a
million, a gradient of up to a petabyte, in up to a million messages. Inside them every
prediction is a finite number (a step of 1e-320 s or a gradient of 1e308 bytes made ``nan``)."""
MAX_BANDWIDTH_BIT_S = 1e15
"""1000 Tbit/s: the most :func:`bandwidth_for` looks to, far beyond any link (2026's fastest
ports carry 1.6 Tbit/s); a target needing more is one no network reaches."""


@dataclass(frozen=True)
class Profile:
    """What the model needs to know of the training: one worker's step and its gradient."""

    compute_s: float
    """Forward and backward of one step at ``batch`` on one worker (seconds)."""
    batch: int
    """Images per worker per step."""
    gradient_bytes: float
    backward_share: float = 2 / 3
    """The share of ``compute_s`` that is backward (the window an all-reduce can hide in);
    2/3 by the rule that backward costs twice forward, unless measured."""
    messages: int = 1
    """The messages the gradient travels in each step (jax-dp: one all-reduce per gradient
    array; mxnet-kv: a push and pull per parameter): each pays the pattern's latency."""

    def __post_init__(self) -> None:
        for name, (low, high) in PROFILE_RANGES.items():
            value = getattr(self, name)
            if not finite_number(value, low, high):
                raise UserError(
                    f"a profile's {name} must be from {low:g} to {high:g}, got {excerpt(value)}"
                )


@dataclass(frozen=True)
class Predicted:
    strategy: str
    """The pattern, with ``-overlap`` where its overlap is on."""
    workers: int
    step_s: float
    comm_s: float
    """The synchronization's own time (hidden or not)."""
    throughput_samples_s: float
    speedup: float
    efficiency: float
    comm_from: str = ""
    """Where the synchronization's price comes from (``ring fit``, ``measured``)."""


def predict(
    profile: Profile, name: str, workers: Sequence[int], link: Link, servers: int = 1
) -> list[Predicted]:
    """``profile`` on the pattern ``name`` at each of ``workers`` on ``link``."""
    if servers < 1:
        raise UserError(f"servers must be >= 1, got {servers}")
    pattern, overlap = variant(name)
    n, single = profile.gradient_bytes, profile.batch / profile.compute_s
    messages = ((n / profile.messages, profile.messages),) if profile.messages > 1 else ()
    rows = []
    for p in workers:
        comm = pattern.comm(n, p, servers, link, messages)
        step = pattern.step_s(
            profile.compute_s, profile.backward_share, comm.seconds, n, p, servers, link, overlap
        )
        throughput = p * profile.batch / step
        row = Predicted(name, p, step, comm.seconds, throughput, throughput / single,
                        throughput / single / p, comm.source)  # fmt: skip
        figures = (row.step_s, row.comm_s, row.throughput_samples_s, row.speedup, row.efficiency)
        if not all(finite_number(figure) for figure in figures) or not row.step_s > 0:
            net = link.network
            raise UserError(
                f"{name} at {p} workers gives no finite prediction on this network "
                f"({net.alpha_s:g} s a message, {net.beta_s_per_byte:g} s a byte) for this "
                "profile: give a step, gradient and network a machine can have"
            )
        rows.append(row)
    return rows


def bandwidth_for(
    profile: Profile,
    name: str,
    p: int,
    target_efficiency: float,
    link: Link,
    servers: int = 1,
) -> float | None:
    """The least bandwidth between nodes (bit/s) at which ``p`` workers reach
    ``target_efficiency`` with ``link``'s latency (and its link inside nodes); ``None`` if no
    bandwidth does (the latency alone costs too much). Efficiency grows with bandwidth, so a
    bisection on its logarithm finds it (to 0.1%)."""
    if not 0 < target_efficiency <= 1:
        raise UserError(f"the target efficiency must be in (0, 1], got {target_efficiency}")

    def efficiency(bandwidth: float) -> float:
        net = Network.from_link(bandwidth, link.network.alpha_s)
        given = replace(link, network=net, fits={}, measured={})
        (row,) = predict(profile, name, [p], given, servers)
        return row.efficiency

    low, high = 1e3, MAX_BANDWIDTH_BIT_S  # bit/s: 1 kbit/s to beyond any link
    if efficiency(high) < target_efficiency:
        return None
    if efficiency(low) >= target_efficiency:
        return low
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        if efficiency(middle) >= target_efficiency:
            high = middle
        else:
            low = middle
    return high
