"""torch-single: the plain model in one process, no distributed wrapper (1-worker baseline)."""

from __future__ import annotations

from dlscale.frameworks.torch.loop import TorchStrategy, run_training
from dlscale.runtime.context import WorkerContext


class LocalOnly(TorchStrategy):
    """The plain model: nothing is synchronized (exposed communication is 0 by definition)."""

    synchronizes = False
    resumable = True


def run(ctx: WorkerContext) -> None:
    run_training(ctx, LocalOnly())
