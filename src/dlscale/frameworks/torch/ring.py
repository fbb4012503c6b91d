"""torch-ring: Horovod's algorithm written out on torch.distributed send/recv.

After backward, the gradients are fused into buckets of ``bucket_mb`` MB (Horovod's tensor fusion,
Sergeev & Del Balso 2018), each bucket is summed by the bandwidth-optimal ring all-reduce of
Patarasuk & Yuan (2009) (reduce-scatter then all-gather, 2(N-1) steps of point-to-point messages;
see :mod:`dlscale.frameworks.torch.ring_allreduce`), divided by the world size, and the local SGD
optimizer steps. The process group is the one every torch.* backend joins (gloo on CPU, NCCL on
CUDA); no library collective is used for the gradients. Unlike DDP, communication does not overlap
backward: it all happens after it, so exposed communication is the whole all-reduce.

``compression`` fp16/bf16 casts each fused buffer before the ring and back after it, so the sum
itself is made in that dtype (as Horovod's ``Compression.fp16`` does) and half the bytes travel.

Bytes: unlike torch-ddp, the count kept during the run is what this rank actually handed to
``isend`` (exact, compressed sizes). The model (``bytes_sent_per_step_model``) is computed from
the buckets: 2(N-1)/N × the compressed gradient bytes, exactly the count averaged over the ranks
(individual ranks differ by up to two elements per bucket when a bucket does not split evenly).

Rank 0's parameters and buffers are broadcast once when the model is wrapped (every rank builds
the model from the same seed anyway). BatchNorm running statistics are *not* synchronized
afterwards: each rank keeps its own, as with Horovod without SyncBatchNorm, and evaluates its
shard with them. The parameters stay identical, since every rank applies the same (bitwise)
averaged gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from dlscale.contract.algorithms import PATTERN_FACT
from dlscale.contract.run_config import RunConfig
from dlscale.frameworks.torch.loop import TorchStrategy, init_process_group, run_training
from dlscale.frameworks.torch.options import RingOptions
from dlscale.frameworks.torch.ring_allreduce import Fusion
from dlscale.runtime.context import WorkerContext


class RingStrategy(TorchStrategy):
    """Plain model; fused ring all-reduce of the gradients, then a local optimizer step."""

    resumable = True

    def __init__(self) -> None:
        self.rank, self.world = 0, 1
        self.cfg: RunConfig | None = None
        self.fusion: Fusion | None = None
        self._sent = 0
        self._sync = True

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        self.rank, self.world, self.cfg = ctx.rank, ctx.processes, ctx.config
        init_process_group(ctx, device)

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        assert self.cfg is not None
        _broadcast_from_rank0(model)
        params = [p for p in model.parameters() if p.requires_grad]
        options = self.cfg.typed(RingOptions)
        self.fusion = Fusion(params, options.bucket_mb, compression=options.compression)
        return model

    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        assert optimizer is not None and self.fusion is not None
        if self._sync:
            self._sent += self.fusion.allreduce_(rank=self.rank, world=self.world)
        optimizer.step()

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        return self._skipping_sync()

    @contextlib.contextmanager
    def _skipping_sync(self) -> Iterator[None]:
        """Steps inside skip the all-reduce (local updates only), like DDP's ``no_sync``."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def take_bytes_sent(self) -> int | None:
        sent, self._sent = self._sent, 0
        return sent

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        assert self.fusion is not None
        return {
            "bytes_sent_per_step_model": self.fusion.bytes_mean(self.world),
            "buckets": len(self.fusion.buckets),
            "compression": ctx.config.typed(RingOptions).compression,
            "algorithm": "ring reduce-scatter + all-gather, 2(N-1) steps",
            PATTERN_FACT: "ring",
        }

    def teardown(self, completed: bool = True) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


@torch.no_grad()
def _broadcast_from_rank0(model: torch.nn.Module) -> None:
    """Start every replica from rank 0's parameters and buffers."""
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.is_contiguous():
            dist.broadcast(tensor.data, src=0)
        else:  # e.g. channels_last weights
            flat = tensor.data.contiguous()
            dist.broadcast(flat, src=0)
            tensor.data.copy_(flat)


def run(ctx: WorkerContext) -> None:
    run_training(ctx, RingStrategy())
