"""What one collective of ``n`` bytes among ``p`` ranks costs, in the alpha-beta-gamma model
(Hockney 1994; the formulas of Thakur, Rabenseifner and Gropp 2005): ``a alpha + b n beta +
g n gamma``, with ``(a, b, g)`` the collective's counts (:data:`COLLECTIVES`).

``alpha``: seconds of latency per message; ``beta``: seconds per byte on one link, one way
(1 / bandwidth); ``gamma``: seconds per byte reduced (an addition on the CPU or GPU). Links are
full duplex (a node sends and receives at the full rate at once) and the switch does not block,
as in the emulated networks of :mod:`dlscale.launchers.network`.

- **all_reduce** as a ring (reduce-scatter, then all-gather; Patarasuk and Yuan 2009:
  bandwidth-optimal): ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``.
- **all_gather** and **reduce_scatter** (each one half of the ring): ``(p-1) alpha +
  (p-1)/p n beta`` (the reduce-scatter adds ``(p-1)/p n gamma``); ``n`` the gathered output or
  the scattered input, as the microbench counts them.
- **broadcast** and **tree_reduce** down or up a binomial tree, whole messages, no pipelining:
  ``ceil(log2 p) (alpha + n beta)`` (the reduce adds ``ceil(log2 p) n gamma``). A tree
  all-reduce is the two: latency grows with log p, not p, but every level carries the whole
  gradient, so it beats the ring only while latency dominates.
- **send_recv**: one message, ``alpha + n beta``.
- **ps_pushpull** through ``k`` parameter servers, each holding 1/k of the parameters: every
  worker pushes its gradient (n/k bytes to each server), the servers reduce, every worker pulls
  the new parameters. Each phase takes as long as its busiest link: a worker node's (``r n``
  bytes, with ``r`` ranks sharing its link) or a server's (``p n / k``):
  ``2 alpha + 2 max(r, p / k) n beta + (p-1)/k n gamma``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Network:
    """The costs of one network, as the model uses them."""

    alpha_s: float
    """Latency of one message (seconds)."""
    beta_s_per_byte: float
    """Seconds per byte on one link, one way (8 / bandwidth in bit/s)."""
    gamma_s_per_byte: float = 0.0
    """Seconds per byte reduced (0: the reduction is free beside the transfer)."""

    @classmethod
    def from_link(cls, bandwidth_bit_s: float, latency_s: float, gamma: float = 0.0) -> Network:
        return cls(latency_s, 8.0 / bandwidth_bit_s, gamma)

    @property
    def bandwidth_bit_s(self) -> float:
        return 8.0 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else math.inf


Counts = Callable[[int, int, int], tuple[float, float, float]]
"""``(p, k, r) -> (a, b, g)``: a collective's latency messages, bytes factor and reduced bytes
factor on ``p`` ranks, ``k`` servers and ``r`` ranks sharing one node's link."""


@dataclass(frozen=True)
class Collective:
    """One collective as the model prices it and a microbench measures it."""

    counts: Counts
    fit: str | None = None
    """The name its own alpha-beta fit is stored under (``dlscale microbench`` fits it from
    this collective's rows); ``None``: not fitted on its own."""
    priced_by: tuple[str, ...] = ("ring",)
    """The fits that price it, the first a microbench made (else the link's main fit)."""
    through_servers: bool = False
    """Its rows went through parameter servers (a row's ``servers`` above 0; measured rows are
    kept per server count, :func:`measured_name`), and one worker alone pays it too (its push
    and pull still cross to the servers); a fit of another collective takes only rows that did
    not (MXNet's broadcast, through its servers, is no binomial tree)."""


def _ring(p: int, k: int, r: int) -> tuple[float, float, float]:
    return 2 * (p - 1), 2 * (p - 1) / p, (p - 1) / p


def _half(reduces: bool) -> Counts:
    return lambda p, k, r: (p - 1, (p - 1) / p, (p - 1) / p if reduces else 0.0)


def _tree(reduces: bool) -> Counts:
    def counts(p: int, k: int, r: int) -> tuple[float, float, float]:
        levels = math.ceil(math.log2(p)) if p > 1 else 0
        return levels, levels, levels if reduces else 0.0

    return counts


def _ps(p: int, k: int, r: int) -> tuple[float, float, float]:
    return 2.0, 2 * max(float(r), p / k), (p - 1) / k


COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective(_ring, fit="ring"),
    "all_gather": Collective(_half(False)),
    "reduce_scatter": Collective(_half(True)),
    "broadcast": Collective(_tree(False), fit="tree", priced_by=("tree", "ring")),
    "tree_reduce": Collective(_tree(True), priced_by=("tree", "ring")),
    "send_recv": Collective(lambda p, k, r: (1.0, 1.0, 0.0), fit="p2p", priced_by=("p2p",)),
    "ps_pushpull": Collective(_ps, fit="ps", priced_by=("ps", "p2p", "ring"), through_servers=True),
}
"""Every collective the model prices (:mod:`.patterns` builds each synchronization from them)
and ``dlscale microbench`` fits: one record each."""
FITS = {c.fit: name for name, c in COLLECTIVES.items() if c.fit}
"""Each stored fit's name and the collective it is fitted from (``ring``: ``all_reduce``)."""


def collective_s(
    name: str, n: float, p: int, net: Network, servers: int = 1, sharing: int = 1
) -> float:
    """One ``name`` collective of ``n`` bytes on ``p`` ranks (``servers`` parameter servers,
    ``sharing`` ranks on one node's link) on ``net``; 0 on one rank, except a push and pull
    through servers, which one worker pays too."""
    if p <= 1 and not COLLECTIVES[name].through_servers:
        return 0.0
    a, b, g = COLLECTIVES[name].counts(p, servers, sharing)
    return a * net.alpha_s + b * n * net.beta_s_per_byte + g * n * net.gamma_s_per_byte


def measured_name(name: str, servers: int) -> str:
    """Under what a microbench's rows of ``name`` are kept: through servers, per server count
    (``ps_pushpull/2``: its time depends on how many served)."""
    return f"{name}/{servers}" if COLLECTIVES[name].through_servers else name
