"""A step's time, and from it throughput, speedup and efficiency, predicted for N workers.

A worker's step is its compute (forward and backward at its batch: the compute profile,
measured by a 1-worker run) plus what synchronizing costs (:mod:`.costs`):

- ``ring``, ``tree``: compute, then the all-reduce (no overlap);
- ``ring-overlap``: the all-reduce runs while backward computes (DDP's and Horovod's buckets),
  so a step is ``forward + max(backward, all-reduce)``: the ideal overlap, an upper bound;
- ``ps-sync``: compute, then push and pull through ``servers`` servers;
- ``ps-async``: :func:`~.costs.ps_async_step_s`.

A gradient sent in several messages (``Profile.messages``) pays each strategy's latency once
per message (:func:`further_latency_s`).

Weak scaling (each worker keeps its batch): throughput = N x batch / step; speedup =
throughput(N) / throughput(1); efficiency = speedup / N. One worker never synchronizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlscale.contract.errors import UserError
from dlscale.contract.numbers import finite_number
from dlscale.contract.text import excerpt
from dlscale.perfmodel import costs
from dlscale.perfmodel.costs import Network

STRATEGIES = ("ring", "ring-overlap", "tree", "ps-sync", "ps-async")
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
    array; mxnet-kv: a push and pull per parameter): each pays the strategy's latency."""

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
    workers: int
    step_s: float
    comm_s: float
    """The synchronization's own time (hidden or not)."""
    throughput_samples_s: float
    speedup: float
    efficiency: float


def step_s(
    profile: Profile,
    strategy: str,
    p: int,
    net: Network,
    servers: int = 1,
    *,
    comm: float | None = None,
) -> float:
    """One step's time; ``comm``: the synchronization's time when it is known (measured),
    else the strategy's cost on ``net``."""
    n = profile.gradient_bytes
    compute = profile.compute_s
    if p <= 1:
        return compute
    if strategy == "ps-async":  # a worker's own pushes and pulls pay each message's latency
        own = compute + further_latency_s(profile, strategy, p, net)
        return costs.ps_async_step_s(own, n, p, servers, net)
    if comm is None:
        comm = comm_s(profile, strategy, p, net, servers)
    if strategy == "ring-overlap":
        backward = compute * profile.backward_share
        return compute - backward + max(backward, comm)
    return compute + comm


def comm_s(profile: Profile, strategy: str, p: int, net: Network, servers: int = 1) -> float:
    """The synchronization of one step: the gradient's, plus the latency of every message
    after the first (:func:`further_latency_s`)."""
    one = _message_s(strategy, profile.gradient_bytes, p, net, servers)
    return one + further_latency_s(profile, strategy, p, net)


def further_latency_s(profile: Profile, strategy: str, p: int, net: Network) -> float:
    """What sending the gradient in ``profile.messages`` messages adds to sending it in one:
    each further message costs what a message of no bytes costs (the strategy's latency
    terms); the bytes' terms are linear in the bytes, so the messages' sum of them is the
    whole gradient's."""
    if p <= 1 or profile.messages <= 1:
        return 0.0
    return (profile.messages - 1) * _message_s(strategy, 0.0, p, net)


def _message_s(strategy: str, n: float, p: int, net: Network, servers: int = 1) -> float:
    """One message of ``n`` bytes synchronized by ``strategy`` (:mod:`.costs`)."""
    if strategy in ("ring", "ring-overlap"):
        return costs.ring_allreduce_s(n, p, net)
    if strategy == "tree":
        return costs.tree_allreduce_s(n, p, net)
    if strategy in ("ps-sync", "ps-async"):
        return costs.ps_sync_s(n, p, servers, net)
    raise UserError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def predict(
    profile: Profile, strategy: str, workers: Sequence[int], net: Network, servers: int = 1
) -> list[Predicted]:
    if servers < 1:
        raise UserError(f"servers must be >= 1, got {servers}")
    single = profile.batch / profile.compute_s
    rows = []
    for p in workers:
        step = step_s(profile, strategy, p, net, servers)
        throughput = p * profile.batch / step
        row = Predicted(
            strategy=strategy,
            workers=p,
            step_s=step,
            comm_s=comm_s(profile, strategy, p, net, servers),
            throughput_samples_s=throughput,
            speedup=throughput / single,
            efficiency=throughput / single / p,
        )
        figures = (row.step_s, row.comm_s, row.throughput_samples_s, row.speedup, row.efficiency)
        if not all(finite_number(figure) for figure in figures) or not row.step_s > 0:
            raise UserError(
                f"{strategy} at {p} workers gives no finite prediction on this network "
                f"({net.alpha_s:g} s a message, {net.beta_s_per_byte:g} s a byte) for this "
                "profile: give a step, gradient and network a machine can have"
            )
        rows.append(row)
    return rows


def bandwidth_for(
    profile: Profile,
    strategy: str,
    p: int,
    target_efficiency: float,
    latency_s: float,
    servers: int = 1,
) -> float | None:
    """The least link bandwidth (bit/s) at which ``p`` workers reach ``target_efficiency``
    with this latency; ``None`` if no bandwidth does (the latency alone costs too much).
    Efficiency grows with bandwidth, so a bisection on its logarithm finds it (to 0.1%)."""
    if not 0 < target_efficiency <= 1:
        raise UserError(f"the target efficiency must be in (0, 1], got {target_efficiency}")

    def efficiency(bandwidth: float) -> float:
        (row,) = predict(profile, strategy, [p], Network.from_link(bandwidth, latency_s), servers)
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
