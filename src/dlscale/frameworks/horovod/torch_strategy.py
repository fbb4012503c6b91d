"""horovod-torch: Horovod's DistributedOptimizer on PyTorch (Sergeev and Del Balso, 2018).

Each parameter's gradient accumulator has a hook that starts an asynchronous all-reduce once
backward has produced that gradient ``backward_passes_per_step`` times; Horovod's background
thread fuses the ready tensors into buffers of up to ``fusion_mb`` MB every ``cycle_ms`` and
all-reduces them (Gloo or MPI on CPU); ``optimizer.step()`` waits for every handle, then
applies SGD. So, as with DDP, communication overlaps backward. Rank 0's parameters are
broadcast once at the start (not the fresh optimizer's state: see make_optimizer).

``backward_passes_per_step = k``: each step's batch is split into k micro-batches whose
gradients accumulate locally (each loss divided by k, so the sum is the batch's mean gradient)
and are all-reduced once, as Horovod's documentation has users accumulate gradients. The batch
per step, and so the images a step counts, are unchanged.

The no-sync probe (exposed communication): inside :meth:`HorovodStrategy.no_sync` every
parameter's countdown is set out of reach, so the hooks start no all-reduce, and the step runs
under ``skip_synchronize()``: backward and the local SGD step only. On leaving, the handles are
dropped and the countdowns reset as ``step()`` leaves them.

Messages (``sync_message_bytes``): each synchronized step's, from the instants its gradients
were handed to the all-reduce, fused within Horovod's cycle
(:mod:`~dlscale.frameworks.horovod.fusion`), or Horovod's own timeline where the run records it.

Bytes: counted from every tensor Horovod's compressor hands to the all-reduce
(:class:`~dlscale.frameworks.horovod.counting.CountingCompression`: fp16 copies under
``compression=fp16``), scaled by the ring factor 2(N-1)/N, as for torch-ddp: dlscale cannot see
Gloo's or MPI's wire traffic. The model is the gradient bytes (halved by fp16) with that factor.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

import torch

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.contract.run_config import RunConfig
from dlscale.frameworks.horovod.counting import CountingCompression
from dlscale.frameworks.horovod.declare import HorovodOptions
from dlscale.frameworks.horovod.fusion import StepMessages
from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.torch.loop import (
    LossOf,
    TorchStrategy,
    gradient_bytes,
    run_training,
    sgd,
)
from dlscale.runtime.context import WorkerContext

NEVER = 1 << 30
"""A countdown the hooks do not reach within a probe."""


class HorovodStrategy(TorchStrategy):
    def __init__(self) -> None:
        self.world = 1
        self.micro_batches = 1
        self._scale = 1.0
        self._step_payload = 0.0
        """Bytes handed to the all-reduce per synchronized step (after compression), modelled."""
        self._counter: CountingCompression | None = None
        self._sync = True
        self._optimizer: Any = None
        self._session = HorovodSession()
        self._messages: StepMessages | None = None
        """Each synchronized step's messages, from its gradients' ready times."""

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        options = ctx.config.typed(HorovodOptions)
        self.micro_batches = options.backward_passes_per_step  # divides the batch: declare.py
        self._scale = 0.5 if options.compression == "fp16" else 1.0
        hvd = self._session.start(ctx, "horovod.torch")
        self.world = hvd.size()
        self._messages = StepMessages(options.cycle_ms / 1e3, int(options.fusion_mb * 2**20))

    def make_optimizer(self, model: torch.nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
        import horovod.torch as hvd

        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self._step_payload = gradient_bytes(model) * self._scale
        compression = hvd.Compression.fp16 if self._scale < 1 else hvd.Compression.none
        self._counter = CountingCompression(
            compression, attrgetter("nbytes"), clock=time.perf_counter
        )
        self._optimizer = hvd.DistributedOptimizer(
            sgd(model.parameters(), cfg),
            named_parameters=model.named_parameters(),
            compression=self._counter,
            backward_passes_per_step=self.micro_batches,
        )
        # No hvd.broadcast_optimizer_state: on a fresh optimizer (every rank's state is the
        # same, empty one) it sets every gradient to zero and takes an SGD step, which applies
        # weight decay once and seeds each momentum buffer with weight_decay x weight before
        # the first real step: a start torch-ddp does not take (ResNet-20's step-1 loss moved
        # by 2.2e-6). Nothing restores this optimizer (horovod-torch is not resumable).
        return self._optimizer

    def backward(self, loss_of: LossOf, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.micro_batches == 1:
            return super().backward(loss_of, x, y)
        total = torch.zeros((), device=x.device)
        for xs, ys in zip(x.chunk(self.micro_batches), y.chunk(self.micro_batches), strict=True):
            loss = loss_of(xs, ys) / self.micro_batches
            loss.backward()
            total += loss.detach()
        return total

    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        assert optimizer is not None
        if self._sync:
            optimizer.step()
            assert self._counter is not None and self._messages is not None
            self._messages.add(self._counter.take_ready())
            return
        with optimizer.skip_synchronize():  # type: ignore[attr-defined]
            optimizer.step()

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        return self._skipping_sync()

    @contextlib.contextmanager
    def _skipping_sync(self) -> Iterator[None]:
        optimizer = self._optimizer
        delays = optimizer._allreduce_delay
        for param in delays:
            delays[param] = NEVER
        self._sync = False
        try:
            yield
        finally:
            self._sync = True
            optimizer._handles.clear()
            for param in delays:
                delays[param] = optimizer.backward_passes_per_step

    def take_bytes_sent(self) -> int | None:
        return None if self._counter is None else self._counter.take_sent(self.world)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        facts = self._session.facts(ctx.config)
        return {
            "bytes_sent_per_step_model": round(
                ring_bytes_mean(round(self._step_payload), self.world)
            ),
            "algorithm": f"Horovod all-reduce ({facts['horovod_controller']}), modelled as a "
            "ring: 2(N-1)/N x payload",
            **facts,
        }

    def finish(self) -> None:
        """The messages a step sent (:meth:`HorovodSession.write_messages`), then every rank
        done with every collective before any leaves (as torch-ddp)."""
        import horovod.torch as hvd

        assert self._messages is not None
        self._session.write_messages(self._messages)
        hvd.join()

    def teardown(self, completed: bool = True) -> None:
        self._session.shutdown()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, HorovodStrategy())
