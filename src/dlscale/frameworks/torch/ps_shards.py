"""Parameter-server sharding and message layout (no framework import: unit-testable anywhere).

The model's parameters, in ``named_parameters`` order, are split over ``k`` servers balanced by
bytes, as the key ranges of Li et al. (OSDI 2014) are split over server nodes: greedy, the
largest parameter first onto the least-loaded server, ties broken by the lower index, so every
rank computes the same assignment. Within a shard, parameters keep their model order and are laid
out back to back in one flat buffer of the run's precision (float32, or float64 under
``precision = float64``).

Every message (a push of a gradient shard, a pull of a parameter shard, a worker's ``done``) is
that flat buffer plus :data:`FRAME` trailing element(s) carrying a version: the number of updates
the server had applied to the parameters (a pull), or the version the gradient was computed on
(a push; :data:`DONE` marks a worker that has finished, :data:`TRAINED` one that has trained).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FRAME = 1
"""Extra elements appended to each message: the version."""
DONE = -1.0
"""Version value of the marker a finished worker sends to every server."""
TRAINED = -2.0
"""Version value of the marker an asynchronous worker sends once it has trained; each server
replies with its parameters once every worker has (``PSStrategy.settle``)."""
MAX_VERSION = 2**24
"""Versions travel as one element of the message: integers are exact below 2**24 (16.7 M
updates) in float32, the narrower of the two precisions."""
FLOAT32_ITEMSIZE = 4
"""Bytes per element on the wire in float32 (float64: 8)."""


@dataclass(frozen=True)
class Shard:
    """The parameters one server holds: indices into the parameter list and their sizes."""

    server: int
    params: tuple[int, ...]
    numels: tuple[int, ...]
    itemsize: int = FLOAT32_ITEMSIZE
    """Bytes of one element: 4 (float32) or 8 (float64)."""

    @property
    def numel(self) -> int:
        return sum(self.numels)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each parameter in the shard's flat buffer."""
        out, start = [], 0
        for n in self.numels:
            out.append(start)
            start += n
        return tuple(out)

    @property
    def nbytes(self) -> int:
        """Bytes of the shard's parameters (without the framing)."""
        return self.numel * self.itemsize

    @property
    def message_bytes(self) -> int:
        """Bytes of one push or pull of this shard, framing included."""
        return (self.numel + FRAME) * self.itemsize


def assign(sizes: Sequence[int], servers: int) -> list[list[int]]:
    """Parameter indices per server, balanced by ``sizes`` (bytes); deterministic.

    Greedy longest-processing-time: the largest parameter first (equal sizes: lower index
    first) goes to the server with the fewest bytes so far (equal loads: lower server). Each
    server's indices are returned in ascending (model) order; a server may get none when there
    are more servers than parameters.
    """
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    loads = [0] * servers
    owned: list[list[int]] = [[] for _ in range(servers)]
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        server = min(range(servers), key=lambda s: (loads[s], s))
        loads[server] += sizes[index]
        owned[server].append(index)
    return [sorted(indices) for indices in owned]


def plan(numels: Sequence[int], servers: int, itemsize: int = FLOAT32_ITEMSIZE) -> list[Shard]:
    """The shards of parameters with ``numels`` elements each, of ``itemsize`` bytes, over
    ``servers`` servers (the assignment is the same in either precision)."""
    owned = assign([n * itemsize for n in numels], servers)
    return [
        Shard(
            server=s,
            params=tuple(indices),
            numels=tuple(numels[i] for i in indices),
            itemsize=itemsize,
        )
        for s, indices in enumerate(owned)
    ]


def bytes_per_step(shards: Sequence[Shard]) -> int:
    """Bytes one worker moves per step: a push and a pull of every shard (framing included)."""
    return 2 * sum(shard.message_bytes for shard in shards)
