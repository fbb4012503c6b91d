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
from dlscale.runtime.script_run import ScriptOptions, run_script
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
    run_script(ctx, torch_environment(device), hooks, synchronize, DDPSync(), counts_input=True)


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
        self.input = ModelInput() if ctx.config.typed(ScriptOptions).batch_from == "input" else None

    def pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.depth += 1

    def post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.depth -= 1
        if self.depth:
            return
        if not self.described:
            self.described = True
            self._describe(optimizer)
        if self.input is None:
            self.recorder.stepped()
        else:  # the images its model took since the last step (none known in the first)
            self.recorder.stepped(self.input.taken(optimizer))

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
        if self.input is not None:
            self.input.remove()


class ModelInput:
    """The images a script's model takes in training, read from its calls: the batch
    dimension of the first tensor given to the outermost module that holds the optimizer's
    parameters (the DDP wrapper, else the model), summed over its calls with gradients on
    and in training mode between two optimizer steps. The module is found at the first
    step's end (one scan of the live objects), so the first step's images are not known:
    warm-up, never timed. Only that module's calls are hooked, not its layers'."""

    def __init__(self) -> None:
        self.count = 0
        self.hook: Any = None
        self.found = False

    def taken(self, optimizer: torch.optim.Optimizer) -> int | None:
        """The images since the last call; ``None`` before the model is hooked."""
        if not self.found:
            self.found = True
            root = _outermost_holding(optimizer)
            if root is not None:
                self.hook = root.register_forward_pre_hook(self._called, with_kwargs=True)
            return 1  # the first step (warm-up): its images are not counted anywhere
        count, self.count = self.count, 0
        return count or None

    def _called(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return  # an evaluation's batch is not a training step's
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is not None and first.dim() > 0:
            self.count += int(first.shape[0])

    def remove(self) -> None:
        if self.hook is not None:
            self.hook.remove()


def _outermost_holding(optimizer: torch.optim.Optimizer) -> torch.nn.Module | None:
    """The module holding every parameter the optimizer updates that no other such module
    holds (the DDP wrapper over the model); ``None`` when none does."""
    import gc
    import warnings

    wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
    with warnings.catch_warnings():  # isinstance() reads deprecated module attributes
        warnings.simplefilter("ignore")
        modules = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
    holding = [m for m in modules if wanted <= {id(p) for p in m.parameters()}]
    inner = {id(child) for m in holding for child in m.modules() if child is not m}
    outer = [m for m in holding if id(m) not in inner]
    return outer[0] if len(outer) == 1 else None
