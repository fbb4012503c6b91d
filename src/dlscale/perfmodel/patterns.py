"""Every synchronization algorithm the model knows, one record each (:data:`PATTERNS`): the
collectives a step issues, how they join the compute, and what stored facts refine it.
``dlscale predict`` and ``dlscale predict --validate`` price every pattern through these
records alone; an engine names its pattern in its strategy facts (the run's ``sync_pattern``).

A pattern's synchronization of ``n`` payload bytes among ``p`` workers is the sum of its steps,
each a collective priced on the :class:`~.links.Link` (measured there, else fitted, on the link
inside or between nodes: :meth:`~.links.Link.price`). Where the engine lists the messages a step
sends (``sync_message_bytes``: DDP's buckets, FSDP's units, jax-dp's operands, mxnet-kv's
parameters; a forward prediction's ``--messages``), each message is one synchronization of its
size and the step pays their sum (on a 2-core machine a small message costs 0.15-3 ms whatever
its size). A step is compute + synchronization, or with ``overlap``:

- ``overlap`` (collectives that run while backward computes: DDP's and Horovod's buckets,
  FSDP's prefetch): ``forward + max(backward, synchronization)``, the ideal overlap; where the
  engine sends once a cycle and saw when each message was ready (Horovod), the cycle replayed
  (:func:`~.replay.cycle_exposed_s`) instead;
- ``pipelined`` (a parameter server that pushes and pulls each parameter as backward produces
  it: MXNet's kvstore): pushes and pulls of different parameters take the link's two directions
  at once, so the push and pull take half as long, and that half overlaps backward;
- ``async``: a worker's own compute, push and pull, unless the servers' links, which carry every
  worker's (p n / k bytes each way a round), are slower.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt
from dlscale.perfmodel.costs import COLLECTIVES
from dlscale.perfmodel.links import Comm, Link
from dlscale.perfmodel.replay import cycle_exposed_s

Messages = Sequence[tuple[float, int]]
"""A step's messages as (bytes, how many of that size)."""


@dataclass(frozen=True)
class Step:
    collective: str
    """A collective of :data:`~.costs.COLLECTIVES`."""
    times: int = 1
    scope: str = "all"
    """Which ranks, on which link (:data:`~.links.SCOPES`)."""


@dataclass(frozen=True)
class Pattern:
    name: str
    words: str
    steps: tuple[Step, ...]
    joins: str = "overlap"
    """With overlap on: ``overlap``, ``pipelined``; ``async`` always (see the module)."""
    messaged: bool = True
    """Priced message by message where the messages are known (not ``ps-async``: its points
    were validated with a worker's pushes and pulls priced as one; each priced alone is not
    measured yet)."""
    alone_free: bool = True
    """One worker synchronizes nothing (its step is the compute at N workers)."""
    sent_per_byte: Callable[[int], float] | None = None
    """The bytes one worker sends per payload byte, where the engine's model of the bytes it
    sends gives the payload (a compressed gradient's copy counts as sent)."""

    @property
    def overlaps(self) -> bool:
        return self.joins in ("overlap", "pipelined")

    @property
    def served(self) -> bool:
        """Its messages go through parameter servers (their count matters)."""
        return any(COLLECTIVES[step.collective].through_servers for step in self.steps)

    def comm(self, n: float, p: int, servers: int, link: Link, messages: Messages = ()) -> Comm:
        """One step's synchronization of ``n`` payload bytes: its ``messages`` (scaled to sum
        to ``n``), each priced as one, where it has them, else one message of ``n``."""
        total = sum(size * count for size, count in messages)
        if not (messages and self.messaged) or p <= 1:
            return self._one(n, p, servers, link)
        scale = n / total if total else 0.0
        priced = [(self._one(size * scale, p, servers, link), count) for size, count in messages]
        count = sum(c for _, c in messages)
        fitted = [(c.source, k) for c, k in priced if c.source != "measured"]
        said = f"{count} messages" if count > 1 else "1 message"
        off = sum(k for _, k in fitted)
        if not fitted:
            source = f"measured, {said}"
        elif off == count:
            source = f"{fitted[0][0]}, {said}"
        else:
            source = f"measured, {said} ({off} on the {fitted[0][0]})"
        return Comm(sum(c.seconds * k for c, k in priced), source)

    def _one(self, n: float, p: int, servers: int, link: Link) -> Comm:
        parts = [(link.price(s.collective, n, p, servers, s.scope), s.times) for s in self.steps]
        seconds = sum(c.seconds * times for c, times in parts)
        sources = [c.source for c, _ in parts if c.source not in ("measured", "none")]
        return Comm(seconds, sources[0] if sources else "measured" if seconds else "none")

    def step_s(
        self,
        compute_s: float,
        backward_share: float,
        comm_s: float,
        n: float,
        p: int,
        servers: int,
        link: Link,
        overlap: bool = False,
    ) -> float:
        """One step's seconds: ``compute_s`` and ``comm_s`` (:meth:`comm`) joined as the
        pattern joins them."""
        if p <= 1:
            return compute_s
        if self.joins == "async":  # the servers' links carry every worker's push and pull
            inside = p <= link.ranks_per_node  # every worker and server on one node
            net = link.intra if link.intra and inside else link.fit_for("ps_pushpull")[0]
            return max(compute_s + comm_s, p * n / servers * net.beta_s_per_byte)
        if not (overlap and self.overlaps):
            return compute_s + comm_s
        hidden = comm_s / 2 if self.joins == "pipelined" else comm_s
        backward = compute_s * backward_share
        return compute_s - backward + max(backward, hidden)

    def replayed_s(
        self, n: float, p: int, servers: int, link: Link, sent: SentOnCycle, backward_s: float
    ) -> float:
        """The synchronization left after backward's end where the engine sends its messages
        once a cycle (Horovod): the cycle replayed on the messages it saw (scaled to sum to
        ``n``), each fused message priced as :meth:`comm` prices one. The ready times were seen
        in synchronized steps, whose backward the sending slows where it shares the cores;
        where they span more than ``backward_s`` they are shrunk to it, in proportion: the
        replay's sending costs the compute nothing."""
        scale = n / sum(sent.message_bytes)
        span = max(sent.ready_ms) / 1e3
        squeeze = backward_s / span if span > backward_s else 1.0
        return cycle_exposed_s(
            [m * scale for m in sent.message_bytes],
            [r / 1e3 * squeeze for r in sent.ready_ms],
            sent.cycle_ms / 1e3,
            sent.fusion_bytes * scale,
            lambda m: self._one(m, p, servers, link).seconds,
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


def grouped(messages: Sequence[float]) -> list[tuple[float, int]]:
    """A step's listed message sizes as (bytes, count), in their first order."""
    return list(Counter(messages).items())


PATTERNS = {p.name: p for p in (
    Pattern("ring", "an all-reduce of the gradients, as a ring: each worker sends 2(N-1)/N x "
            "the payload (DDP, Horovod, TensorFlow's collectives, JAX's pmean, DeepSpeed)",
            (Step("all_reduce"),), sent_per_byte=lambda p: 2 * (p - 1) / p),
    Pattern("hierarchical", "a reduce-scatter inside each node, an all-reduce of each shard "
            "between the nodes, an all-gather inside each node (Horovod's hierarchical "
            "all-reduce; NCCL across nodes)", (Step("reduce_scatter", scope="intra"),
            Step("all_reduce", scope="inter"), Step("all_gather", scope="intra"))),
    Pattern("tree", "a binomial tree's reduce, then its broadcast, whole messages: latency "
            "log N, every level the whole gradient", (Step("tree_reduce"), Step("broadcast"))),
    Pattern("fsdp", "FSDP with the parameters resharded after forward: two all-gathers of the "
            "parameters (forward, backward) and a reduce-scatter of the gradients a step",
            (Step("all_gather", times=2), Step("reduce_scatter"))),
    Pattern("fsdp-no-reshard", "FSDP keeping the gathered parameters from forward to "
            "backward: one all-gather of the parameters and a reduce-scatter of the gradients",
            (Step("all_gather"), Step("reduce_scatter"))),
    Pattern("ps-sync", "synchronous parameter servers: every worker pushes its gradient and "
            "pulls the parameters through the servers, each round waiting for every worker",
            (Step("ps_pushpull"),), joins="pipelined", alone_free=False),
    Pattern("ps-async", "asynchronous parameter servers: each worker pushes and pulls on its "
            "own, the servers' links shared by every worker", (Step("ps_pushpull", scope="own"),),
            joins="async", messaged=False, alone_free=False),
)}  # fmt: skip
"""Every synchronization pattern, by name: an engine's ``sync_pattern`` is one of them."""
OVERLAP = "-overlap"
"""A forward prediction's name for a pattern with its overlap on (``ring-overlap``)."""


def variants() -> list[str]:
    """Every pattern a forward prediction can show: each one, and each that overlaps with
    :data:`OVERLAP`."""
    return [p.name + s for p in PATTERNS.values() for s in ("", OVERLAP) if not s or p.overlaps]


def variant(name: str) -> tuple[Pattern, bool]:
    """The pattern ``name`` says and whether its overlap is on (``ring-overlap``)."""
    base = name.removesuffix(OVERLAP)
    found = PATTERNS.get(base)
    if found is None or (base != name and not found.overlaps):
        raise UserError(f"unknown pattern {excerpt(name)}; known: {', '.join(variants())}")
    return found, base != name
