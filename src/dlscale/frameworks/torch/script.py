"""A user's PyTorch training script, unmodified, run in a worker and measured from its steps.

The worker has already set the rendezvous variables a script started by torchrun expects
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; Horovod's ``HOROVOD_*`` under horovod-script), so the script's own
``init_process_group`` or ``hvd.init()`` finds its peers. The script then runs as ``python
FILE.py ARGS`` would run it (``__main__``, ``sys.argv``, its directory first on the import
path), with one global hook on torch's optimizers: the end of every outermost
``optimizer.step()`` is a step (:mod:`dlscale.runtime.script_steps`). A wrapper's step that
calls its base class's (Horovod's ``DistributedOptimizer``) counts once.
"""

from __future__ import annotations

import runpy
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from dlscale.contract.errors import UserError
from dlscale.contract.models import MODELS
from dlscale.contract.records import Strategy
from dlscale.contract.user_models import ScriptModelSpec
from dlscale.frameworks.torch.env import torch_environment
from dlscale.frameworks.torch.options import ScriptOptions
from dlscale.runtime.engine import worker_environment
from dlscale.runtime.script_steps import MeasuredEnough, StepRecorder

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    cfg = ctx.config
    options = cfg.typed(ScriptOptions)
    spec = MODELS.get(cfg.model)
    assert isinstance(spec, ScriptModelSpec)  # RunConfig gives a script backend nothing else
    path = Path(spec.path)
    args = shlex.split(options.script_args)
    recorder = StepRecorder(ctx, cfg.batch_per_worker, run_to_end=options.run_to_end)
    torch.set_num_threads(ctx.threads)
    first = ctx.rank == ctx.layout.training_ranks[0]
    if first:
        device = torch.device("cuda" if cfg.device == "cuda" else "cpu")
        ctx.events.write(
            worker_environment(torch_environment(device), synchronizes=cfg.workers > 1)
        )
    hooks = _StepHooks(ctx, recorder, path, first)
    recorder.install()
    try:
        _run_as_main(path, args)
    except MeasuredEnough:
        pass
    finally:
        recorder.uninstall()
        hooks.remove()
    recorder.finish(path.name)


def _run_as_main(path: Path, args: list[str]) -> None:
    """``python FILE.py ARGS``: its exit status is the run's; its exception is the user's,
    printed to the rank's stderr and named in one line."""
    argv, sys_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            raise UserError(f"{path.name} exited with status {done.code}") from None
    except (MeasuredEnough, UserError):
        raise
    except Exception as error:
        traceback.print_exc()
        raise UserError(
            f"{path.name} raised {type(error).__name__}: {error} (its traceback: the rank's "
            "stderr file in the run's directory)"
        ) from None
    finally:
        sys.argv, sys.path[:] = argv, sys_path


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
        self.recorder.optimizer_stepped()

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
