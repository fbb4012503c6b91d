"""Horovod's collectives on PyTorch tensors (Gloo, or MPI under mpirun), for ``dlscale
microbench --backend horovod-torch``: the same sizes, iterations, untimed preparation, check and
records as :mod:`dlscale.frameworks.torch.collectives` (the loop is
:mod:`dlscale.microbench.timing`'s), with Horovod's calls, each synchronous, ``hvd.barrier()``
before each:

* all_reduce: ``hvd.allreduce_`` (``op=hvd.Sum``) and broadcast: ``hvd.broadcast_`` from rank
  0, in place on a buffer refilled before the barrier, as torch's kernel and Horovod's own
  training calls (``DistributedOptimizer``, ``broadcast_parameters``) do. The out-of-place
  ``hvd.allreduce``/``hvd.broadcast`` would time a new output's allocation, first touch and
  the copy of the input into it with the call: about 1.2x the in-place time at 16 MiB and
  1.6-1.7x at 64 MiB on a 2-core machine (medians of 4-5 runs each);
* all_gather: ``hvd.allgather``; reduce_scatter: ``hvd.reducescatter`` (``op=hvd.Sum``).
  Horovod 0.28 has no in-place form of either: the output is Horovod's to allocate, inside the
  call; ``prepare`` drops the previous one, so the check reads the timed call's own result.
  Horovod splits a reduce-scatter's first dimension with the remainder to the lowest ranks (5
  elements on 2 ranks: 3 and 2; 1 element: 1 and none); the input here is ``p x count``
  elements, so every rank keeps ``count``, as torch's ``reduce_scatter_single``.

On Gloo's operations, Horovod 0.28.1's reduce-scatter as released is itself wrong now and then
from 16 MiB up: a race in the Gloo it bundles, not in this kernel (whose buffers Horovod never
shares: its input is copied and left as it was, its output is Horovod's own).
``GlooReducescatter::Execute`` (horovod/common/ops/gloo_operations.cc) copies the input into a
buffer of its own and runs ``gloo::ReduceScatterHalvingDoubling::run()`` on it
(third_party/gloo/gloo/reduce_scatter.h): each rank sends the half the other keeps from that
buffer, and Gloo's TCP pair writes what the socket takes at once and leaves the rest to its
event loop; then every rank but 0 copies its reduced half to the buffer's start (the
distribution phase's ``memcpy``, "Data already in-place for rank 0") without waiting for that
send, so the tail still queued goes out overwritten. Seen on 2 ranks of a 2-core machine
(horovodrun and dlscale alike): elements toward the end of rank 0's part held its own input
plus rank 1's reduced result instead of rank 1's input (18,079 of 2,097,152 at 16 MiB, the last
ones; 431,149 of 4,194,304 at 32 MiB through dlscale), in about one call of 10 to 40 at 16, 32
and 64 MiB, at every fusion threshold tried (one tensor never goes through the fusion buffer),
in none at 4 MiB, whose half the socket's buffer takes whole (net.core.wmem_max: 4 MiB there);
jax-ml/jax#40830 traces JAX's wrong ``psum_scatter`` on CPU to the same Gloo code. No argument
of the call avoids it, and what would (an all-reduce; pieces small enough for the socket) times
another call than a training's ``hvd.reducescatter``. dlscale's build mends Gloo instead
(scripts/patch-gloo-reduce-scatter.py: each send waited for before the buffer is written), and
``tests/distributed/test_microbench_horovod.py`` checks 100 calls whole; a Horovod built
elsewhere may still have it, and the check then names the rank and elements that differ.

Horovod is started as its training backend starts it (:class:`HorovodSession`: the run's
fusion threshold and cycle time, rank 0 serving the Gloo rendezvous under a launcher that does
not), so ``--set cycle_ms=...`` applies: a call waits for the background thread's next cycle,
which is in the time of a small message. Each call names its operation (the same name on every
rank, one per collective and size): Horovod keys its requests and its response cache by name,
and an unnamed call gets a new generated name every time.

Not offered: send_recv (Horovod has no point-to-point operation); the kernel records nothing
for it and ``dlscale microbench`` says it was not measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.torch.collectives import cuda_wait, difference, rank_device
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def run(ctx: WorkerContext, settings: Settings) -> None:
    device = rank_device(ctx)
    session = HorovodSession()
    hvd = session.start(ctx, "horovod.torch")
    synchronize = cuda_wait(device)
    p, rank = ctx.processes, ctx.rank
    try:
        for record in time_offered(
            settings, OFFERED, p, rank,
            lambda collective, size, count: _operation(
                hvd, collective, p, rank, device, f"dlscale.microbench.{collective}.{size}", count
            ),
            hvd.barrier, synchronize,
        ):  # fmt: skip
            ctx.events.write(record)
        hvd.barrier()  # no rank shuts Horovod down while another still waits on a call
    finally:
        session.shutdown()


class _Output:
    """The result of the last call (Horovod returns a new tensor each call)."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None

    def reset(self) -> None:
        self.tensor = None

    def set(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def error(self, expected: torch.Tensor) -> np.ndarray:
        """Each element's difference from ``expected``; a missing or misshapen result counts
        as zeros (never exact: every expected value is at least 1)."""
        if self.tensor is None or self.tensor.shape != expected.shape:
            return expected.abs().cpu().numpy()
        return difference(self.tensor, expected)


def _operation(
    hvd: Any, collective: str, p: int, rank: int, device: torch.device, name: str, count: int
) -> Operation:
    """all_reduce and broadcast in place, their buffer refilled before each call, as torch's
    kernel does; all_gather and reduce_scatter (no in-place form) leave their input alone and
    return a new output, dropped before each call."""
    mine = float(rank + 1)
    total = p * (p + 1) / 2
    if collective == "all_reduce":
        x = torch.full((count,), mine, device=device)
        buffer = x.clone()
        return (
            lambda: buffer.copy_(x),  # each call reduces fresh inputs
            lambda: hvd.allreduce_(buffer, name=name, op=hvd.Sum),
            lambda: difference(buffer, total),
        )
    if collective == "broadcast":
        buffer = torch.zeros(count, device=device)
        return (
            lambda: buffer.fill_(1.0 if rank == 0 else 0.0),
            lambda: hvd.broadcast_(buffer, 0, name=name),
            lambda: difference(buffer, 1.0),
        )
    out = _Output()
    if collective == "all_gather":
        x = torch.full((count,), mine, device=device)
        expected = torch.arange(1, p + 1, device=device, dtype=torch.float32).repeat_interleave(
            count
        )
        call = lambda: out.set(hvd.allgather(x, name=name))  # noqa: E731
    elif collective == "reduce_scatter":
        x = torch.full((count * p,), mine, device=device)
        expected = torch.full((count,), total, device=device)
        call = lambda: out.set(hvd.reducescatter(x, name=name, op=hvd.Sum))  # noqa: E731
    else:
        raise ValueError(f"Horovod offers no {collective}")
    return out.reset, call, lambda: out.error(expected)
