"""torch-single: the plain model in one process, no distributed wrapper (1-worker baseline)."""

from __future__ import annotations

from dlscale.backends.torch_loop import TorchStrategy, run_training
from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    run_training(ctx, TorchStrategy())
