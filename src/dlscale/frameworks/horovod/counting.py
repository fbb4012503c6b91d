"""Bytes a Horovod binding hands to its all-reduce, counted from the tensors themselves.

Horovod compresses each gradient through its ``Compression`` interface (``compress`` returns
the tensor that is all-reduced and a context, ``decompress`` undoes it), the one extension point
its ``DistributedOptimizer`` and ``DistributedTrainer`` offer for this. :class:`CountingCompression`
wraps the compressor a run chose (``none`` or ``fp16``) and adds up the bytes of every tensor
``compress`` returns: what the all-reduce moves, before the ring factor, so a compressor that
did not compress would show in the count rather than be assumed by the model. Horovod fuses
the tensors into larger buffers, which changes the number of operations, not the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlscale.contract.comm_bytes import ring_bytes_mean


class CountingCompression:
    """A Horovod compressor (``hvd.Compression.none`` or ``.fp16``) that counts what it sends."""

    def __init__(
        self, inner: Any, nbytes: Callable[[Any], int], clock: Callable[[], float] | None = None
    ) -> None:
        self.inner = inner
        self.nbytes = nbytes
        """The bytes of one of the binding's tensors (torch: numel x element size)."""
        self.sent = 0
        self.clock = clock
        """Where given, each tensor's ready time is kept with its bytes (``ready``): where a
        binding compresses each gradient as backward produces it (horovod.torch's hooks)."""
        self.ready: list[tuple[float, int]] = []

    def compress(self, tensor: Any) -> tuple[Any, Any]:
        compressed, context = self.inner.compress(tensor)
        nbytes = self.nbytes(compressed)
        self.sent += nbytes
        if self.clock is not None:
            self.ready.append((self.clock(), nbytes))
        return compressed, context

    def decompress(self, tensor: Any, context: Any) -> Any:
        return self.inner.decompress(tensor, context)

    def __eq__(self, other: object) -> bool:
        """Equal to the compressor it wraps: a binding that asks which compressor it has
        (horovod.mxnet skips decompressing after ``Compression.none``) sees that one."""
        return other is self or other is self.inner

    def __hash__(self) -> int:
        return hash(self.inner)

    def take(self) -> int:
        """The bytes sent since the last call."""
        sent, self.sent = self.sent, 0
        return sent

    def take_ready(self) -> list[tuple[float, int]]:
        """The ``(seconds, bytes)`` of each tensor compressed since the last call."""
        ready, self.ready = self.ready, []
        return ready

    def take_sent(self, world: int) -> int:
        """The bytes one rank of a ring of ``world`` sent for what was compressed since the
        last call: ``2(N-1)/N`` of it (Horovod's own wire traffic is not visible here)."""
        return round(ring_bytes_mean(self.take(), world))
