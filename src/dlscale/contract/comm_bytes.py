"""Bytes a collective sends, by its algorithm (framework-free: every engine counts the same way)."""

from __future__ import annotations


def ring_bytes_mean(nbytes: int, world: int) -> float:
    """Bytes per rank of a ring all-reduce of ``nbytes``, averaged over the ranks: exactly
    2(N-1)/N x ``nbytes`` (Patarasuk and Yuan 2009), the sum of
    :func:`~dlscale.frameworks.torch.ring_allreduce.ring_bytes_per_rank` over all ranks divided by N
    (an int when it divides)."""
    total = 2 * (world - 1) * nbytes
    return total // world if total % world == 0 else total / world
