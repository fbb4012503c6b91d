"""The collectives of torch.distributed (gloo on CPU, NCCL on CUDA), for ``dlscale
microbench``: each size of each collective run ``iterations`` times after a barrier (the loop is
:mod:`dlscale.microbench.timing`'s, shared with :mod:`dlscale.frameworks.horovod.collectives`), each
rank timing its own call (on CUDA, to the end of the kernel); the first timed result is checked
against the exact answer (small integers in float32: exact whatever the order of the sum). Every
call's output is reset before the barrier, outside the clock (so the check cannot pass on what a
warm-up call left there), and its inputs refilled; on CUDA the device is synchronized before the
clock starts and again before it stops.

Sizes follow nccl-tests: all_reduce and broadcast move a tensor of ``size`` bytes; all_gather's
``size`` is the gathered output (each rank gives size/p); reduce_scatter's is the input (each
rank keeps size/p); send_recv is a ping-pong of ``size`` bytes between ranks 0 and 1, its time
half the round trip (the other ranks sit it out). Not offered: ps_pushpull (no parameter
server in torch.distributed); ``dlscale microbench`` says it was not measured.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from dlscale.frameworks.torch.loop import init_process_group
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
"""Not ps_pushpull: torch.distributed has no parameter server."""


def run(ctx: WorkerContext, settings: Settings) -> None:
    device = rank_device(ctx)
    init_process_group(ctx, device)
    p, rank = ctx.processes, ctx.rank
    try:
        for record in time_offered(
            settings, OFFERED, p, rank,
            lambda collective, _, count: _operation(collective, count, p, rank, device),
            dist.barrier, cuda_wait(device),
        ):  # fmt: skip
            ctx.events.write(record)
    finally:
        dist.destroy_process_group()


def rank_device(ctx: WorkerContext) -> torch.device:
    """This rank's device (its local GPU under ``--device cuda``, made current) with the
    run's intra-op threads set: how every PyTorch kernel starts."""
    device = torch.device("cpu")
    if ctx.config.device == "cuda":
        from dlscale.runtime.gpus import gpu_index

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device = torch.device("cuda", gpu_index(ctx.local_rank, visible))
        torch.cuda.set_device(device)
    torch.set_num_threads(ctx.threads)
    return device


def cuda_wait(device: torch.device) -> Callable[[], object] | None:
    """What the timing loop calls around each call on CUDA (the device's work done); ``None``
    on a CPU."""
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def difference(got: torch.Tensor, expected: torch.Tensor | float) -> np.ndarray:
    """What a PyTorch kernel's check gives the timing loop (:data:`~dlscale.microbench.timing.
    Operation`): ``|got - expected|`` element by element, as a NumPy array on the host: one
    buffer the size of ``got`` (the difference, made absolute in place; on CUDA it is then
    copied to the host)."""
    return (got - expected).abs_().cpu().numpy()


def _operation(collective: str, count: int, p: int, rank: int, device: torch.device) -> Operation:
    """What to do before each call (untimed), the call to time, and a check of its result
    after a call: each element's difference from the exact result."""
    mine = float(rank + 1)
    total = p * (p + 1) / 2
    x = torch.full((count,), mine, device=device)
    if collective == "all_reduce":
        buffer = x.clone()
        return (
            lambda: buffer.copy_(x),  # each call reduces fresh inputs
            lambda: dist.all_reduce(buffer),
            lambda: difference(buffer, total),
        )
    if collective == "all_gather":
        out = torch.zeros(count * p, device=device)
        expected = torch.arange(1, p + 1, device=device, dtype=torch.float32).repeat_interleave(
            count
        )
        check = lambda: difference(out, expected)  # noqa: E731
        return out.zero_, (lambda: dist.all_gather_single(out, x)), check
    if collective == "reduce_scatter":
        source = torch.full((count * p,), mine, device=device)
        out = torch.zeros(count, device=device)
        check = lambda: difference(out, total)  # noqa: E731
        return out.zero_, (lambda: dist.reduce_scatter_single(out, source)), check
    if collective == "broadcast":
        buffer = torch.zeros(count, device=device)
        return (
            lambda: buffer.fill_(1.0 if rank == 0 else 0.0),
            lambda: dist.broadcast(buffer, src=0),
            lambda: difference(buffer, 1.0),
        )
    if collective != "send_recv":
        raise ValueError(f"torch.distributed offers no {collective}")
    # send_recv: a ping-pong between ranks 0 and 1; rank 1 holds 1.0 only once it received
    buffer = torch.zeros(count, device=device)

    def ping() -> None:
        if rank == 0:
            dist.send(buffer, dst=1)
            dist.recv(buffer, src=1)
        elif rank == 1:
            dist.recv(buffer, src=0)
            dist.send(buffer, dst=0)

    return (
        lambda: buffer.fill_(1.0 if rank == 0 else 0.0),
        ping,
        lambda: difference(buffer, 1.0) if rank < 2 else np.empty(0),  # the others sat it out
    )
