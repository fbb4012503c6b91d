"""A user's PyTorch training script, unmodified, run in a worker and measured from its steps.

The worker has already set the rendezvous variables a script started by torchrun expects
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; Horovod's ``HOROVOD_*`` under horovod-script), so the script's own
``init_process_group`` or ``hvd.init()`` finds its peers; it runs as
:func:`dlscale.runtime.script_run.run_script` runs every script, with one global hook on
torch's optimizers: the end of every outermost ``optimizer.step()`` is a step
(:mod:`dlscale.runtime.script_steps`). A wrapper's step that calls its base class's (Horovod's
``DistributedOptimizer``) counts once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from dlscale.contract.records import Strategy
from dlscale.frameworks.torch.env import torch_environment
from dlscale.runtime.script_run import run_script
from dlscale.runtime.script_steps import StepRecorder

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    torch.set_num_threads(ctx.threads)
    device = torch.device("cuda" if ctx.config.device == "cuda" else "cpu")
    first = ctx.rank == ctx.layout.training_ranks[0]

    def hooks(recorder: StepRecorder, path: Path) -> Callable[[], None]:
        return _StepHooks(ctx, recorder, path, first).remove

    synchronize = torch.cuda.synchronize if device.type == "cuda" else None
    run_script(ctx, torch_environment(device), hooks, synchronize, DDPSync())


class DDPSync:
    """Turns every ``DistributedDataParallel`` of the script to synchronize its gradients in
    the steps that follow, or not: what its ``no_sync()`` sets. The modules are found among
    the live objects once, when the probe starts (no hook on the script's modules in its
    measured steps); ``False`` where the script has none (a Horovod script, a loop of its own
    all-reduces)."""

    def __init__(self) -> None:
        self.found: list[Any] | None = None

    def __call__(self, on: bool) -> bool:
        if self.found is None:
            import gc
            import warnings

            from torch.nn.parallel import DistributedDataParallel

            with warnings.catch_warnings():  # isinstance() reads deprecated module attributes
                warnings.simplefilter("ignore")
                self.found = [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
        for ddp in self.found:
            ddp.require_backward_grad_sync = on
        return bool(self.found)


class _StepHooks:
    """torch's global optimizer hooks: a step ends when the outermost ``step()`` returns.
    The first training rank also records the gradient bytes the first optimizer steps."""

    def __init__(self, ctx: WorkerContext, recorder: StepRecorder, path: Path, first: bool):
        self.ctx, self.recorder, self.path = ctx, recorder, path
        self.depth = 0
        self.described = not first
        self.handles = [
            register_optimizer_step_pre_hook(self.pre),
            register_optimizer_step_post_hook(self.post),
        ]

    def pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.depth += 1

    def post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.depth -= 1
        if self.depth:
            return
        if not self.described:
            self.described = True
            self._describe(optimizer)
        self.recorder.stepped()

    def _describe(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.ctx.events.write(
            Strategy(
                gradient_bytes=sum(p.numel() * p.element_size() for p in params),
                facts={
                    "algorithm": "the script's own",
                    "script": str(self.path),
                    "optimizer": type(optimizer).__name__,
                    "processes": self.ctx.processes,
                },
            )
        )

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
