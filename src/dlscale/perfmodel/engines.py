"""A step of an engine predicted on its own algorithm (its ``sync_pattern``,
:data:`dlscale.contract.algorithms.SYNC_PATTERNS`) on a network as validation sees it (a
:class:`~.validate.Link`: the collectives a microbench measured there, else their fitted
costs), with ``n`` payload bytes, ``p`` workers and ``k`` servers:

- ``ring``: the all-reduce of ``n`` (measured ``all_reduce``, else the ring's cost);
- ``fsdp``: two all-gathers and a reduce-scatter of ``n`` (measured, else each half a ring);
  ``fsdp-no-reshard``: one all-gather and a reduce-scatter;
- ``ps-sync``: push and pull through ``k`` servers (measured ``ps_pushpull`` with ``k``
  servers, else :func:`~.costs.ps_sync_s`);
- ``ps-async``: a worker's own push and pull, unless the servers' links carry more
  (:func:`~.costs.ps_async_step_s`).

Where the engine lists the messages a step really sends (``sync_message_bytes``: jax-dp's
all-reduce per gradient array, mxnet-kv's push and pull per parameter, DDP's buckets, FSDP's
units), a ``ring``, ``ps-sync`` or FSDP step sends them one after another, each costing its
own time (on a 2-core machine a small message costs 0.15-3 ms whatever its size): the sum of
each one's measured (else fitted) time, :func:`messages_comm`.

A step is compute + synchronization; with ``overlap`` (the patterns of :data:`OVERLAPS`, whose
collectives run while backward computes: DDP's and Horovod's buckets, FSDP's prefetch) it is
``forward + max(backward, synchronization)``, the ideal overlap (:func:`~.predict.step_s`). A
synchronous parameter server that pushes and pulls each parameter as backward produces it
(:data:`PIPELINED`: MXNet's kvstore) has its ideal too: pushes (worker to server) and pulls
(server to worker) of different parameters take the two directions of a full-duplex link at
once, so its push and pull, measured one after the other, take half as long, and that half
overlaps backward: ``forward + max(backward, synchronization / 2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlscale.perfmodel import costs
from dlscale.perfmodel.predict import Profile, step_s
from dlscale.perfmodel.replay import cycle_exposed_s

if TYPE_CHECKING:
    from dlscale.perfmodel.validate import Link

OVERLAPS = ("ring", "fsdp", "fsdp-no-reshard")
"""The patterns whose collectives can run while backward computes."""
PIPELINED = ("ps-sync",)
"""The patterns whose pushes and pulls can run while backward computes, each in its own
direction of the link (their ideal: half the synchronization, overlapped)."""
_GATHERS = {"fsdp": 2, "fsdp-no-reshard": 1}
MESSAGED = ("ring", "ps-sync", "fsdp", "fsdp-no-reshard")
"""The patterns whose steps are priced message by message where the engine lists its messages
(``sync_message_bytes``: an FSDP unit's parameters for its all-gathers and reduce-scatter)."""


@dataclass(frozen=True)
class Comm:
    """One step's synchronization: its seconds and where they come from (``measured``: a
    microbench's rows; else the fit that priced it, e.g. ``ring fit``)."""

    seconds: float
    source: str


def pattern_comm(
    pattern: str,
    n: float,
    p: int,
    servers: int,
    link: Link,
    messages: Sequence[float] = (),
) -> Comm:
    """The synchronization of one step of ``pattern`` (see the module's table). ``messages``:
    the bytes of each collective the engine issues in a step (:data:`MESSAGED`' patterns), each
    priced on its own and summed (:func:`messages_comm`); else one message of ``n``."""
    if messages and pattern in MESSAGED:
        return messages_comm(pattern, n, p, servers, link, messages)
    if pattern == "ring":
        measured = link.measured_s("all_reduce", n, p)
        if measured is not None:
            return Comm(measured, "measured")
        net, fit = link.fit_for("ring")
        return Comm(costs.ring_allreduce_s(n, p, net), f"{fit} fit")
    if pattern in _GATHERS:
        gathers = _GATHERS[pattern]
        gather = link.measured_s("all_gather", n, p)
        scatter = link.measured_s("reduce_scatter", n, p)
        if gather is not None and scatter is not None:
            return Comm(gathers * gather + scatter, "measured")
        net, fit = link.fit_for("ring")
        halves = gathers * costs.ring_half_s(n, p, net, reduces=False)
        return Comm(halves + costs.ring_half_s(n, p, net, reduces=True), f"{fit} fit")
    if pattern == "ps-sync":
        measured = link.measured_s(f"ps_pushpull/{servers}", n, p)
        if measured is not None:
            return Comm(measured, "measured")
        net, fit = link.fit_for("ps-sync")
        return Comm(costs.ps_sync_s(n, p, servers, net), f"{fit} fit")
    if pattern == "ps-async":
        net, fit = link.fit_for("ps-async")
        return Comm(2 * net.alpha_s + 2 * n * net.beta_s_per_byte, f"{fit} fit")
    raise ValueError(f"no prediction for the pattern {pattern!r}")


def messages_comm(
    pattern: str, n: float, p: int, servers: int, link: Link, messages: Sequence[float]
) -> Comm:
    """A step that sends ``messages`` one after another (an FSDP unit's all-gathers and
    reduce-scatter count as one): the sum of each one's time as :func:`pattern_comm` prices one
    message, measured where the microbench measured sizes around it, else on the pattern's fit
    (so every message pays its latency). The messages are scaled to sum to ``n`` (a
    compressed payload's copies)."""
    scale = n / sum(messages)
    priced = [pattern_comm(pattern, m * scale, p, servers, link) for m in messages]
    count = f"{len(priced)} messages" if len(priced) > 1 else "1 message"
    fitted = [c.source for c in priced if c.source != "measured"]
    if not fitted:
        source = f"measured, {count}"
    elif len(fitted) == len(priced):
        source = f"{fitted[0]}, {count}"
    else:
        source = f"measured, {count} ({len(fitted)} on the {fitted[0]})"
    return Comm(sum(c.seconds for c in priced), source)


def replayed_comm(
    pattern: str,
    n: float,
    p: int,
    servers: int,
    link: Link,
    sent: SentOnCycle,
    backward_s: float,
) -> float:
    """The synchronization of one step left after backward's end (seconds) where the engine
    sends its messages once a cycle (Horovod): :func:`~.replay.cycle_exposed_s` on the messages
    it saw (scaled to sum to ``n``, as :func:`messages_comm` scales them), each fused message
    priced as :func:`pattern_comm` prices one. The ready times were seen in synchronized
    steps, whose backward the sending slows where it shares the cores; where they span more
    than ``backward_s`` (backward without synchronization) they are shrunk to it, in
    proportion: the replay's sending costs the compute nothing."""
    scale = n / sum(sent.message_bytes)
    span = max(sent.ready_ms) / 1e3
    squeeze = backward_s / span if span > backward_s else 1.0
    return cycle_exposed_s(
        [m * scale for m in sent.message_bytes],
        [r / 1e3 * squeeze for r in sent.ready_ms],
        sent.cycle_ms / 1e3,
        sent.fusion_bytes * scale,
        lambda m: pattern_comm(pattern, m, p, servers, link).seconds,
    )


@dataclass(frozen=True)
class SentOnCycle:
    """A step's messages as an engine that sends once a cycle saw them (the metrics
    ``sync_message_bytes``, ``sync_message_ready_ms``, ``sync_cycle_ms``,
    ``sync_fusion_bytes``)."""

    message_bytes: Sequence[float]
    ready_ms: Sequence[float]
    cycle_ms: float
    fusion_bytes: float


def pattern_step(
    pattern: str,
    profile: Profile,
    comm: float,
    p: int,
    servers: int,
    link: Link,
    overlap: bool = False,
) -> float:
    """One step's seconds: compute and ``comm`` (:func:`pattern_comm`) as ``pattern`` joins
    them; ``overlap`` for the ideal overlap of :data:`OVERLAPS`' collectives with backward, or
    of :data:`PIPELINED`'s pushes and pulls."""
    if pattern == "ps-async":
        net, _ = link.fit_for("ps-async")
        return costs.ps_async_step_s(profile.compute_s, profile.gradient_bytes, p, servers, net)
    if overlap and pattern in PIPELINED:
        return step_s(profile, "ring-overlap", p, link.network, comm=comm / 2)
    joined = "ring-overlap" if overlap and pattern in OVERLAPS else "ring"
    return step_s(profile, joined, p, link.network, comm=comm)
