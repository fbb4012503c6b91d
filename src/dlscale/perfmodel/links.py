"""A network as the model prices a collective on it (:class:`Link`): the link between nodes
(given as bandwidth and latency, or fitted by ``dlscale microbench``, with the collectives it
measured there), and, where ranks share a node, the link inside the node.

A collective over every rank (``scope`` ``all``) runs on the link between nodes once its ranks
span more than one node (a ring crosses each node's link once each way; a parameter server's
``r`` ranks on one node share that node's link), else on the link inside; a collective
``intra`` runs among one node's ranks on the link inside, ``inter`` among the nodes on the link
between (the ranks of a node sending their shards at once share it, as one message of the
whole); ``own`` is one worker's push and pull through the servers on its own (an asynchronous
worker's). Where a microbench measured the collective on this network with as many ranks, its
time is interpolated there (``measured``); else its fit prices it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dlscale.perfmodel.costs import COLLECTIVES, FITS, Network, collective_s, measured_name

Rows = tuple[tuple[float, float], ...]
SCOPES = ("all", "intra", "inter", "own")


@dataclass(frozen=True)
class Comm:
    """A synchronization's seconds and where they come from (``measured``: a microbench's
    rows; else the fit that priced it, e.g. ``ring fit``, or ``intra link``)."""

    seconds: float
    source: str


@dataclass(frozen=True)
class Link:
    """A network: between nodes, its main fit (``network``: the ring's where a microbench
    fitted one, else the fit named ``fit``) and every fit by name (``fits``), with the
    (bytes, seconds) rows of each collective a microbench measured with ``processes`` ranks
    (``ps_pushpull/<servers>`` for a parameter server's push and pull); inside a node, ``intra``
    (``None``: one level, ``network`` everywhere) for ``ranks_per_node`` ranks."""

    network: Network
    measured: Mapping[str, Rows] = field(default_factory=dict)
    processes: int = 0
    fits: Mapping[str, Network] = field(default_factory=dict)
    fit: str = "ring"
    """The fit ``network`` is, or how it was had where it is no fit (``given``)."""
    intra: Network | None = None
    ranks_per_node: int = 1

    def measured_s(self, collective: str, n: float, p: int) -> float | None:
        """The measured ``collective`` of ``n`` bytes on ``p`` ranks, interpolated between the
        two nearest sizes on log-log axes; ``None`` outside what was measured."""
        rows = self.measured.get(collective, ())
        if p != self.processes or len(rows) < 2:
            return None
        sizes, times = zip(*sorted(rows), strict=True)
        if not sizes[0] <= n <= sizes[-1]:
            return None
        return float(np.exp(np.interp(np.log(n), np.log(sizes), np.log(times))))

    def fit_for(self, collective: str) -> tuple[Network, str]:
        """The fit that prices ``collective`` between nodes (the first of its
        :attr:`~.costs.Collective.priced_by` that the microbench made, else ``network``) and
        its name."""
        for name in COLLECTIVES[collective].priced_by:
            if name in self.fits:
                return self.fits[name], name
        return self.network, self.fit

    def price(
        self, collective: str, n: float, p: int, servers: int = 1, scope: str = "all"
    ) -> Comm:
        """One ``collective`` of ``n`` bytes in a step of ``p`` ranks, over ``scope`` (see
        the module)."""
        per_node = max(1, min(self.ranks_per_node, p))
        nodes = math.ceil(p / per_node)
        ranks, inside, sharing = {
            "all": (p, nodes == 1, per_node if nodes > 1 else 1),
            "intra": (per_node, True, 1),
            "inter": (nodes, False, 1),
            "own": (1, nodes == 1, per_node if nodes > 1 else 1),
        }[scope]
        if ranks <= 1 and not COLLECTIVES[collective].through_servers:
            return Comm(0.0, "none")
        if scope == "all":
            measured = self.measured_s(measured_name(collective, servers), n, p)
            if measured is not None:
                return Comm(measured, "measured")
        if inside and self.intra is not None:
            seconds = collective_s(collective, n, ranks, self.intra, servers, sharing)
            return Comm(seconds, "intra link")
        net, fit = self.fit_for(collective)
        said = f"{fit} fit" if fit in FITS else fit
        return Comm(collective_s(collective, n, ranks, net, servers, sharing), said)
