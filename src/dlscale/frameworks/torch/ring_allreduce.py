"""Bandwidth-optimal ring all-reduce on torch.distributed point-to-point messages.

The algorithm is the one of Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations" (J. Parallel Distrib. Comput. 69(2), 2009), which Horovod (Sergeev &
Del Balso, "Horovod: fast and easy distributed deep learning in TensorFlow", arXiv:1802.05799,
2018) made the standard for data-parallel training. The N ranks form a ring; rank r sends only
to rank r+1 and receives only from rank r-1. The flat tensor is split into N chunks:

* reduce-scatter, N-1 steps: at step s rank r sends chunk (r-s) mod N and adds the received
  chunk (r-s-1) mod N into its own copy; afterwards rank r holds the full sum of chunk
  (r+1) mod N;
* all-gather, N-1 steps: the same ring, copying instead of adding, until every rank holds every
  reduced chunk. Every rank ends with bitwise identical values (each chunk is summed once, by one
  rank, and then copied).

Each rank sends 2(N-1) chunks, ≈ 2(N-1)/N × the tensor's bytes, independent of N for large N:
this is the lower bound for all-reduce (Patarasuk & Yuan 2009). The chunks come from
``torch.tensor_split`` and may differ by one element, so the exact count differs slightly between
ranks; averaged over the ranks it is exactly 2(N-1)/N × the tensor's bytes
(:func:`ring_bytes_per_rank`, :func:`ring_bytes_mean`).

Each step posts its receive and its send together (``dist.batch_isend_irecv``: plain
``irecv``/``isend`` on gloo, one NCCL group on CUDA) and waits for both, so no rank blocks in a
send while its neighbour blocks in another send. The receive is posted first: with the send
first, on a 20 Mbit/s emulated link (gloo over TCP, 2 ranks, 1 MiB) the two directions of a
step often did not overlap and the all-reduce took 658 or 875 ms (three or four times a 512 KiB
transfer, never two); with the receive first it takes 456-528 ms, as gloo's own all-reduce
does (447-570 ms), the full-duplex time (docs/benchmarks.md).

:class:`Fusion` is Horovod's tensor fusion (as DDP's gradient buckets): gradients are packed, in
reverse parameter order (the order backward produces them), into buffers of at most ``bucket_mb``
MB, and each buffer goes through the ring as one message, so small tensors do not each pay the
per-message latency 2(N-1) times.

This module uses torch only (no dlscale configuration), and no collective of the library: the
sums are made here, from sends and receives.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.contract.text import excerpt

__all__ = [
    "COMPRESSIONS",
    "Fusion",
    "ring_allreduce_",
    "ring_bytes_mean",
    "ring_bytes_per_rank",
    "ring_chunk_sizes",
]

COMPRESSIONS: dict[str, torch.dtype | None] = {
    "none": None,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
"""Gradient compression name -> dtype the fused buffer is cast to for the ring (None: as is)."""

MB = 1024 * 1024
"""A bucket MB, as DDP's ``bucket_cap_mb`` and Horovod's fusion threshold count it."""


def ring_chunk_sizes(numel: int, world: int) -> list[int]:
    """Element counts of the ``world`` chunks, as ``torch.tensor_split(t, world)`` makes them:
    the first ``numel % world`` chunks hold one element more."""
    base, extra = divmod(numel, world)
    return [base + 1 if i < extra else base for i in range(world)]


def ring_bytes_per_rank(nbytes: int, world: int, *, rank: int = 0, itemsize: int = 1) -> int:
    """Exact bytes rank ``rank`` sends in :func:`ring_allreduce_` of a flat tensor of ``nbytes``
    bytes whose elements have ``itemsize`` bytes (chunks are split by elements).

    In the reduce-scatter rank r sends every chunk but (r+1) mod N, in the all-gather every chunk
    but (r+2) mod N: 2(N-1) chunk sends, ≈ 2(N-1)/N × ``nbytes``. With ``nbytes`` not a multiple
    of N × ``itemsize`` the ranks differ by at most two elements; their mean is exactly
    :func:`ring_bytes_mean`. ``world`` 1 sends nothing.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"need 0 <= rank < world, got rank={rank}, world={world}")
    if nbytes % itemsize:
        raise ValueError(f"{nbytes} bytes is not a whole number of {itemsize}-byte elements")
    if world == 1:
        return 0
    chunks = ring_chunk_sizes(nbytes // itemsize, world)
    kept = chunks[(rank + 1) % world] + chunks[(rank + 2) % world]
    return (2 * sum(chunks) - kept) * itemsize


def ring_allreduce_(
    tensor: torch.Tensor,
    *,
    rank: int,
    world: int,
    group: dist.ProcessGroup | None = None,
) -> int:
    """Sum ``tensor`` (flat, contiguous) over the ``world`` ranks of ``group`` in place, by the
    ring algorithm of Patarasuk & Yuan (2009); returns the bytes this rank sent.

    ``rank`` and ``world`` are this process's rank and the size of ``group`` (the default group
    when ``None``); every rank must call with a tensor of the same length and dtype. The sum
    happens in the tensor's dtype. ``world`` 1 is a no-op and returns 0.
    """
    if world == 1:
        return 0
    if tensor.dim() != 1 or not tensor.is_contiguous():
        raise ValueError(
            f"ring_allreduce_ needs a flat contiguous tensor, got {tuple(tensor.shape)}"
        )
    if not 0 <= rank < world:
        raise ValueError(f"need 0 <= rank < world, got rank={rank}, world={world}")
    chunks = torch.tensor_split(tensor, world)
    right = _global_rank(group, (rank + 1) % world)
    left = _global_rank(group, (rank - 1) % world)
    scratch = torch.empty_like(chunks[0])  # the largest chunk (tensor_split puts them first)
    sent = 0

    def exchange(send: torch.Tensor, recv: torch.Tensor) -> None:
        nonlocal sent
        # An empty chunk (tensor shorter than world) is skipped by both of its ends alike.
        ops = []
        if recv.numel():  # the receive first: see the module's note
            ops.append(dist.P2POp(dist.irecv, recv, left, group))
        if send.numel():
            ops.append(dist.P2POp(dist.isend, send, right, group))
            sent += send.numel() * send.element_size()
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    for step in range(world - 1):  # reduce-scatter
        target = chunks[(rank - step - 1) % world]
        incoming = scratch[: target.numel()]
        exchange(chunks[(rank - step) % world], incoming)
        target.add_(incoming)
    for step in range(world - 1):  # all-gather
        exchange(chunks[(rank - step + 1) % world], chunks[(rank - step) % world])
    return sent


def _global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    """P2POp takes the peer's rank in the default group (``group_peer`` is torch >= 2.6 only)."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


class Fusion:
    """Horovod's tensor fusion (Sergeev & Del Balso 2018) for a model's gradients, reduced with
    :func:`ring_allreduce_`.

    Parameters are taken in reverse order (the order backward finishes their gradients, as DDP
    buckets and Horovod's fusion buffer see them) and packed into buckets of at most
    ``bucket_mb`` MB of gradient (their own dtype, before compression); a parameter larger than
    that is a bucket of its own, and a bucket holds one dtype. Each step, a bucket's gradients are
    concatenated into one flat buffer, cast to the compression dtype if any (the ring then sums in
    that dtype, as Horovod's fp16 compression does), all-reduced, cast back, divided by the world
    size when averaging, and copied back into the ``.grad`` tensors.
    """

    def __init__(
        self, params: Sequence[torch.Tensor], bucket_mb: float, *, compression: str = "none"
    ) -> None:
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
        if compression not in COMPRESSIONS:
            raise ValueError(
                f"compression must be one of {', '.join(COMPRESSIONS)}; got {excerpt(compression)}"
            )
        self.compression = compression
        self.dtype = COMPRESSIONS[compression]
        self.buckets: list[list[torch.Tensor]] = _buckets(list(params), bucket_mb * MB)

    @property
    def bucket_numels(self) -> list[int]:
        return [sum(p.numel() for p in bucket) for bucket in self.buckets]

    def _itemsize(self, bucket: list[torch.Tensor]) -> int:
        return (self.dtype or bucket[0].dtype).itemsize

    def bucket_bytes(self) -> list[int]:
        """Bytes of each flat buffer handed to the ring (after compression)."""
        return [
            n * self._itemsize(b) for n, b in zip(self.bucket_numels, self.buckets, strict=True)
        ]

    def bytes_per_rank(self, rank: int, world: int) -> int:
        """Exact bytes ``rank`` sends in one :meth:`allreduce_`."""
        return sum(
            ring_bytes_per_rank(n * self._itemsize(b), world, rank=rank, itemsize=self._itemsize(b))
            for n, b in zip(self.bucket_numels, self.buckets, strict=True)
        )

    def bytes_mean(self, world: int) -> float:
        """Bytes per rank in one :meth:`allreduce_`, averaged over the ranks: exactly
        2(N-1)/N × the compressed gradient bytes."""
        return ring_bytes_mean(sum(self.bucket_bytes()), world)

    @torch.no_grad()
    def allreduce_(
        self,
        *,
        rank: int,
        world: int,
        group: dist.ProcessGroup | None = None,
        average: bool = True,
    ) -> int:
        """All-reduce every gradient in place (the mean over ranks if ``average``, else the sum);
        returns the bytes this rank sent. A parameter without a gradient contributes zeros and
        receives the result (as Horovod does for gradients that were not produced)."""
        sent = 0
        for bucket in self.buckets:
            grads = []
            for p in bucket:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
            flat = torch.cat([g.reshape(-1) for g in grads])
            wire = flat if self.dtype is None else flat.to(self.dtype)
            sent += ring_allreduce_(wire, rank=rank, world=world, group=group)
            if wire is not flat:
                flat.copy_(wire)
            if average and world > 1:
                flat.div_(world)
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        return sent


def _buckets(params: list[torch.Tensor], cap_bytes: float) -> list[list[torch.Tensor]]:
    buckets: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and (size + nbytes > cap_bytes or p.dtype != current[0].dtype):
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets
