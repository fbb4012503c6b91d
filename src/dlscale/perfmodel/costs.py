"""What one synchronization of ``n`` gradient bytes among ``p`` workers costs, in the
alpha-beta-gamma model (Hockney 1994; the formulas of Thakur, Rabenseifner and Gropp 2005).

``alpha``: seconds of latency per message; ``beta``: seconds per byte on one link, one way
(1 / bandwidth); ``gamma``: seconds per byte reduced (an addition on the CPU or GPU). Links are
full duplex (a node sends and receives at the full rate at once) and the switch does not block,
as in the emulated networks of :mod:`dlscale.launchers.network`.

- **ring all-reduce** (reduce-scatter, then all-gather, around a ring; Patarasuk and Yuan 2009:
  bandwidth-optimal): ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``.
- **all-gather** and **reduce-scatter** (each one half of the ring): ``(p-1) alpha +
  (p-1)/p n beta`` (the reduce-scatter adds ``(p-1)/p n gamma``); ``n`` the gathered output or
  the scattered input, as the microbench counts them.
- **tree all-reduce** (a binomial tree's reduce, then its broadcast, whole messages, no
  pipelining): ``2 ceil(log2 p) (alpha + n beta) + ceil(log2 p) n gamma``. Latency grows with
  log p, not p, but every level carries the whole gradient: it beats the ring only while
  latency dominates (small messages, many workers).
- **parameter server** with ``k`` servers, each holding 1/k of the parameters: every worker
  pushes its gradient (n/k bytes to each server), the servers reduce, every worker pulls the
  new parameters. Each phase takes as long as its busiest link: a worker's (n bytes) or a
  server's (p n / k bytes): ``2 alpha + 2 max(n, p n / k) beta + (p-1) n / k gamma``.
  Asynchronous training does not wait for the other workers, but the servers' links still
  carry every worker's traffic: see :func:`ps_async_step_s`.
"""

from __future__ import annotations

import math
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


def ring_allreduce_s(n: float, p: int, net: Network) -> float:
    if p <= 1:
        return 0.0
    share = (p - 1) / p
    return (
        2 * (p - 1) * net.alpha_s
        + 2 * share * n * net.beta_s_per_byte
        + share * n * net.gamma_s_per_byte
    )


def ring_half_s(n: float, p: int, net: Network, *, reduces: bool) -> float:
    """One half of a ring all-reduce on its own: an all-gather of an ``n``-byte output, or a
    reduce-scatter of an ``n``-byte input (``reduces``): ``(p-1) alpha + (p-1)/p n beta``
    (``+ (p-1)/p n gamma`` for the reduce-scatter). FSDP's collectives."""
    if p <= 1:
        return 0.0
    share = (p - 1) / p
    reduced = share * n * net.gamma_s_per_byte if reduces else 0.0
    return (p - 1) * net.alpha_s + share * n * net.beta_s_per_byte + reduced


def tree_allreduce_s(n: float, p: int, net: Network) -> float:
    if p <= 1:
        return 0.0
    levels = math.ceil(math.log2(p))
    return 2 * levels * (net.alpha_s + n * net.beta_s_per_byte) + levels * n * net.gamma_s_per_byte


def ps_sync_s(n: float, p: int, servers: int, net: Network) -> float:
    """Push and pull through ``servers`` parameter servers (synchronous)."""
    if p <= 1:
        return 0.0
    busiest = max(n, p * n / servers)
    return (
        2 * net.alpha_s
        + 2 * busiest * net.beta_s_per_byte
        + (p - 1) * n / servers * net.gamma_s_per_byte
    )


def ps_async_step_s(compute_s: float, n: float, p: int, servers: int, net: Network) -> float:
    """A worker's mean step time with asynchronous parameter servers: its own compute, push
    and pull one after the other, unless the servers' links, which carry all ``p`` workers'
    pushes and pulls (p n / k bytes each way per round), are slower than that."""
    if p <= 1:
        return compute_s
    own = compute_s + 2 * net.alpha_s + 2 * n * net.beta_s_per_byte
    server_bound = p * n / servers * net.beta_s_per_byte
    return max(own, server_bound)


BUS_FACTOR = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "send_recv": lambda p: 1.0,
    "ps_pushpull": lambda p: 2 * (p - 1) / p,
}
"""nccl-tests' bus bandwidth factors (docs/metrics.md): ``busbw = algbw x factor(p)``, with
``algbw = bytes / time`` and bytes the message size (all_gather: the gathered output;
reduce_scatter: the input). busbw is comparable across collectives and worker counts: the
rate each link runs at in the bandwidth-optimal algorithm. As in nccl-tests, the factor is the
collective's, whatever the algorithm: ``ps_pushpull`` computes an all-reduce, so it takes the
all-reduce's; its busiest link carries ``2 max(n, p n / k)`` bytes (:func:`ps_sync_s`), not
the ring's ``2(p-1)/p n``, so on a bandwidth-bound network its busbw stays below the link's
rate by that ratio (a quarter of it with 2 workers and one server)."""


def bus_bandwidth(collective: str, bytes_: float, seconds: float, p: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second."""
    algbw = bytes_ / seconds
    return algbw, algbw * BUS_FACTOR[collective](p)
