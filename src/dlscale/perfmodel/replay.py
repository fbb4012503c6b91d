"""A synchronization that goes out once a cycle, replayed on a step's own messages: how much of
it is left after backward's end.

Horovod's background thread wakes every ``cycle``; each time it fuses what is ready into
messages of up to its fusion threshold and sends them one after another, then sleeps until the
cycle after the one it woke in (or wakes at once, where the sending took longer). A step's
messages become ready as backward produces their gradients (``sync_message_ready_ms``: each one
that long before backward's end, seen by the engine), so on a slow link the thread is still
sending when the next ones are ready and fuses more of them, and what it sends before
backward's end is hidden behind it. :func:`cycle_exposed_s` replays that, each fused message
priced as the model prices one (its microbench's time at that size, else the fit), and gives
the synchronization left after backward's end: the step is its compute plus that
(:meth:`dlscale.perfmodel.patterns.Pattern.replayed_s`).

It is an overlap bound, as the ideal overlap is (docs/perfmodel.md): the sending is taken to
cost the compute nothing. Where it does cost it (loopback on a machine whose cores the ranks
fill: the all-reduce is the CPU's work), the step is nearer compute plus every message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def fused(ready: Sequence[float], threshold: float) -> list[float]:
    """``ready``'s messages fused in order into messages of up to ``threshold`` bytes (a
    larger one alone; 0: each alone)."""
    out: list[float] = []
    for size in ready:
        if out and 0 < out[-1] + size <= threshold:
            out[-1] += size
        else:
            out.append(size)
    return out


def cycle_exposed_s(
    messages: Sequence[float],
    ready_s: Sequence[float],
    cycle_s: float,
    threshold: float,
    price: Callable[[float], float],
) -> float:
    """Seconds of synchronization after backward's end (at 0) for ``messages`` (bytes) ready
    ``ready_s`` seconds before it, sent by a thread waking every ``cycle_s`` that fuses what is
    ready up to ``threshold`` bytes; ``price``: one message's seconds. The first cycle finds
    the first message ready."""
    if not cycle_s > 0:
        raise ValueError(f"a cycle of {cycle_s} s")
    pending = sorted(zip((-r for r in ready_s), messages, strict=True))
    if not pending:
        return 0.0
    wake, done, i = pending[0][0], -math.inf, 0
    while i < len(pending):
        if pending[i][0] > wake:  # nothing ready: the first cycle that finds the next one
            cycles = (pending[i][0] - wake) / cycle_s  # inf for a cycle of 1e-320 s
            wake = wake + math.ceil(cycles) * cycle_s if math.isfinite(cycles) else pending[i][0]
            continue
        batch = []
        while i < len(pending) and pending[i][0] <= wake:
            batch.append(pending[i][1])
            i += 1
        work = sum(price(m) for m in fused(batch, threshold))
        done = wake + work
        wake += max(cycle_s, work)
    return max(0.0, done)
