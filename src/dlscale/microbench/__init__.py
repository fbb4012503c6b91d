"""Collective micro-benchmarks: all-reduce, all-gather, reduce-scatter, broadcast,
point-to-point and a parameter server's push and pull over message sizes, on an engine's own
communication library, started by any launcher like a training run (``dlscale microbench``;
docs/perfmodel.md).

A backend offers its library's kernel as ``BackendSpec.collectives`` (``module:function``
taking the worker's context and the :class:`Settings`); the worker runs it instead of training
when its spec's ``task`` is ``microbench``, in the processes that train (a parameter server's
scheduler and servers serve as they do in training). Each rank records one
:class:`~dlscale.contract.records.Collective` per collective and size, with its own time of each
iteration and whether the result was right; :mod:`.aggregate` turns them into time per size,
algorithm bandwidth and bus bandwidth (nccl-tests' definitions, docs/metrics.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt

COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "ps_pushpull"
)  # fmt: skip
"""``ps_pushpull``: every worker pushes its message to the parameter servers, which sum the
pushes, and pulls the sum (MXNet's ``kv.pushpull`` on a ``dist_sync`` kvstore): an all-reduce
by its result, but through the servers, not around a ring, so it is a collective of its own
(its rows fit the ``ps`` pattern, never the ring's; docs/metrics.md)."""
MIN_PROCESSES = {"send_recv": 2}
"""Collectives that need more than one process (send_recv: a ping-pong between ranks 0 and 1);
a kernel skips them below that."""
MAX_BYTES = 1 << 30
_SIZE = re.compile(r"^([0-9]{1,15})\s*([kmg]?)b?\Z")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass(frozen=True)
class Settings:
    collectives: tuple[str, ...] = COLLECTIVES
    sizes: tuple[int, ...] = tuple(4 * 4**k for k in range(14))  # 4 B .. 256 MiB
    max_iterations: int = 20
    """Timed iterations of a small message; fewer as messages grow (:func:`iterations`)."""

    def __post_init__(self) -> None:
        unknown = [c for c in self.collectives if c not in COLLECTIVES]
        if unknown or not self.collectives:
            raise UserError(f"unknown collective(s) {unknown}; known: {', '.join(COLLECTIVES)}")
        if not self.sizes or any(not 4 <= s <= MAX_BYTES for s in self.sizes):
            raise UserError(f"message sizes must be 4 B to 1 GiB, got {list(self.sizes)}")
        if not 1 <= self.max_iterations <= 10_000:
            raise UserError(f"max_iterations must be 1 to 10000, got {self.max_iterations}")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Settings:
        return cls(
            collectives=tuple(data["collectives"]),  # type: ignore[arg-type]
            sizes=tuple(int(s) for s in data["sizes"]),  # type: ignore[attr-defined]
            max_iterations=int(data["max_iterations"]),  # type: ignore[call-overload]
        )


def iterations(size: int, most: int) -> tuple[int, int]:
    """(warm-up, timed) iterations of a message of ``size`` bytes: as many as move about 64 MiB,
    at least 3 and at most ``most`` timed; the same on every rank (no rank decides alone)."""
    timed = max(min(3, most), min(most, (64 << 20) // size))
    return (2 if size <= 16 << 20 else 1), timed


def parse_size(text: str) -> int:
    """``4``, ``1k``, ``16M``, ``256MB`` (binary units) as bytes: whole float32 elements (a
    message of 5 or 7 bytes would be timed as one element, 4 bytes, under another name)."""
    match = _SIZE.match(text.strip().lower())
    if not match:
        raise UserError(
            f"cannot read the message size {excerpt(text)}: give bytes like 4, 64k, 256M"
        )
    size = int(match[1]) * _UNITS[match[2]]
    if size % 4:
        near = sorted({max(4, size // 4 * 4), size // 4 * 4 + 4})
        raise UserError(
            f"message size {excerpt(text)} is {size} bytes, not a whole number of float32 "
            f"elements (4 bytes each): give {' or '.join(map(str, near))}"
        )
    return size


def parse_sizes(text: str) -> tuple[int, ...]:
    """``4..256M`` (every power of 4 times 4 in between, as nccl-tests' -f 4) or a list."""
    if ".." in text:
        low, high = (parse_size(part) for part in text.split("..", 1))
        if low < 4 or high < low:
            raise UserError(f"sizes {text!r}: give LOW..HIGH with 4 <= LOW <= HIGH")
        count = int(math.log(high / low, 4) + 1e-9) + 1
        return tuple(low * 4**k for k in range(count))
    return tuple(dict.fromkeys(parse_size(part) for part in text.split(",")))  # 4,4: once


def not_measured(
    requested: tuple[str, ...], measured: set[str], processes: int, backend: str
) -> dict[str, str]:
    """The requested collectives a completed run has no row of, each with why: fewer processes
    than it needs, or else its backend's library does not offer it (a kernel records nothing
    for a collective its library lacks: Horovod has no point-to-point, torch.distributed no
    parameter server)."""
    missing = {}
    for collective in requested:
        if collective in measured:
            continue
        needs = MIN_PROCESSES.get(collective, 1)
        missing[collective] = (
            f"it needs {needs} processes" if processes < needs
            else f"{backend}'s library offers no such collective"
        )  # fmt: skip
    return missing
