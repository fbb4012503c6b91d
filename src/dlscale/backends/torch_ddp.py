"""torch-ddp: DistributedDataParallel; gloo on CPU, NCCL on CUDA.

DDP all-reduces gradient buckets during the backward pass (Li et al., VLDB 2020); its
``no_sync()`` context skips that, which is how exposed communication is measured.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dlscale.backends.torch_loop import TorchStrategy, run_training
from dlscale.runtime.context import WorkerContext


class DDPStrategy(TorchStrategy):
    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        backend = "nccl" if device.type == "cuda" else "gloo"
        # A peer that died makes collectives fail rather than wait forever; the launcher's
        # run timeout is the outer bound.
        timeout = timedelta(seconds=max(60.0, min(ctx.config.timeout_s, 1800.0)))
        dist.init_process_group(
            backend,
            rank=ctx.rank,
            world_size=ctx.world_size,
            timeout=timeout,
            device_id=device if device.type == "cuda" else None,
        )

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        assert isinstance(model, DistributedDataParallel)
        return model.no_sync()

    def teardown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, DDPStrategy())
