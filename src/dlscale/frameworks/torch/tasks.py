"""The tasks of the torch loop, written once: what a batch's inputs are on the device, the
training loss, and the held-out counts (:data:`dlscale.contract.workload.KINDS`).

* classification: images ``(B, C, H, W)`` in the run's dtype and memory format, class labels
  ``(B,)``; cross-entropy over the classes; correct top-1 predictions.
* next-token: token ids ``(B, T)`` (int64, never cast), targets ``(B, T)``; the mean
  cross-entropy over every position; correct next-token predictions, counted per token.

Every torch engine's loop (:class:`dlscale.frameworks.torch.loop.TorchEngine`) and the
benchmarks' bare loops call these, so a loss is defined in one place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlscale.contract.run_config import RunConfig
from dlscale.contract.workload import workload_of


class TorchTask:
    """A task's inputs, loss and held-out counts."""

    name = ""

    def inputs(
        self, x: torch.Tensor, dtype: torch.dtype, memory_format: torch.memory_format
    ) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The mean training loss of a batch (what the optimizer steps on)."""
        raise NotImplementedError

    def counts(self, output: torch.Tensor, target: torch.Tensor) -> tuple[int, int, float]:
        """``(correct, total, loss_sum)`` of a held-out batch: what is counted right, how
        many predictions were made and their summed loss (in float32 or wider)."""
        raise NotImplementedError


class Classification(TorchTask):
    name = "classification"

    def inputs(
        self, x: torch.Tensor, dtype: torch.dtype, memory_format: torch.memory_format
    ) -> torch.Tensor:
        return x.to(dtype).to(memory_format=memory_format)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

    def counts(self, output: torch.Tensor, target: torch.Tensor) -> tuple[int, int, float]:
        loss_sum = float(F.cross_entropy(output.float(), target, reduction="sum"))
        return int((output.argmax(1) == target).sum()), int(target.numel()), loss_sum


class NextToken(TorchTask):
    name = "next-token"

    def inputs(
        self, x: torch.Tensor, dtype: torch.dtype, memory_format: torch.memory_format
    ) -> torch.Tensor:
        return x

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))

    def counts(self, output: torch.Tensor, target: torch.Tensor) -> tuple[int, int, float]:
        flat = output.reshape(-1, output.shape[-1])
        loss_sum = float(F.cross_entropy(flat.float(), target.reshape(-1), reduction="sum"))
        return int((flat.argmax(1) == target.reshape(-1)).sum()), int(target.numel()), loss_sum


TASKS: dict[str, TorchTask] = {task.name: task for task in (Classification(), NextToken())}


def task_of(cfg: RunConfig) -> TorchTask:
    """The point's task (its data set's sample kind)."""
    return TASKS[workload_of(cfg).task]
