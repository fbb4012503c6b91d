"""torch-ring's collective for ``dlscale microbench``: dlscale's own ring all-reduce
(:func:`dlscale.frameworks.torch.ring_allreduce.ring_allreduce_`, sends and receives of
torch.distributed, the sums made by the ranks), the one collective that engine has, timed by
the same loop as the others (:mod:`.timing`) so that a torch-ring point is predicted on its own
engine's network and not on gloo's all-reduce (docs/perfmodel.md). The other collectives are
not this engine's: the command names them as not measured."""

from __future__ import annotations

import torch
import torch.distributed as dist

from dlscale.frameworks.torch.collectives import cuda_wait, difference, rank_device
from dlscale.frameworks.torch.loop import init_process_group
from dlscale.frameworks.torch.ring_allreduce import ring_allreduce_
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext, settings: Settings) -> None:
    device = rank_device(ctx)
    init_process_group(ctx, device)
    p, rank = ctx.processes, ctx.rank
    try:
        for record in time_offered(
            settings, ("all_reduce",), p, rank, lambda _, __, count: _ring(count, p, rank, device),
            dist.barrier, cuda_wait(device),
        ):  # fmt: skip
            ctx.events.write(record)
    finally:
        dist.destroy_process_group()


def _ring(count: int, p: int, rank: int, device: torch.device) -> Operation:
    x = torch.full((count,), float(rank + 1), device=device)
    buffer = x.clone()
    total = p * (p + 1) / 2
    return (
        lambda: buffer.copy_(x),  # each call reduces fresh inputs
        lambda: ring_allreduce_(buffer, rank=rank, world=p),
        lambda: difference(buffer, total),
    )
