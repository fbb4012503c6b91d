"""nccl-tests' bus bandwidth (docs/metrics.md): ``busbw = algbw x factor(p)``, with ``algbw =
bytes / time`` and bytes the message size (all_gather: the gathered output; reduce_scatter:
the input). busbw is comparable across collectives and worker counts: the rate each link runs
at in the bandwidth-optimal algorithm. As in nccl-tests, the factor is the collective's,
whatever the algorithm: ``ps_pushpull`` computes an all-reduce, so it takes the all-reduce's;
its busiest link carries ``2 max(n, p n / k)`` bytes (:mod:`dlscale.perfmodel.costs`), not the
ring's ``2(p-1)/p n``, so on a bandwidth-bound network its busbw stays below the link's rate by
that ratio (a quarter of it with 2 workers and one server)."""

from __future__ import annotations

BUS_FACTOR = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "send_recv": lambda p: 1.0,
    "ps_pushpull": lambda p: 2 * (p - 1) / p,
}


def bus_bandwidth(collective: str, bytes_: float, seconds: float, p: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second."""
    algbw = bytes_ / seconds
    return algbw, algbw * BUS_FACTOR[collective](p)
