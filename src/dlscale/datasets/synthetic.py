"""Synthetic data, as in tf_cnn_benchmarks: one random batch made once on the device.

Every step feeds the same tensors, so the measurement has no input-pipeline cost. An "epoch" is
``samples_per_epoch`` images over all workers (at least one step).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from dlscale.datasets.base import Batch, TorchDataset

if TYPE_CHECKING:
    from dlscale.config.run_config import RunConfig

SEED_STRIDE = 7919
"""Generator seed = ``seed * SEED_STRIDE + rank``: a different batch on every rank."""


def load(
    cfg: RunConfig,
    *,
    device: torch.device,
    rank: int,
    world: int,
    input_size: int,
    num_classes: int,
) -> SyntheticDataset:
    """One fixed random batch of ``cfg.batch_per_worker`` images on ``device``."""
    batch = cfg.batch_per_worker
    generator = torch.Generator(device=device).manual_seed(cfg.seed * SEED_STRIDE + rank)
    images = torch.randn((batch, 3, input_size, input_size), generator=generator, device=device)
    labels = torch.randint(0, num_classes, (batch,), generator=generator, device=device)
    steps = max(1, cfg.samples_per_epoch // (batch * world))
    return SyntheticDataset(images, labels, num_classes=num_classes, steps_per_epoch=steps)


class SyntheticDataset(TorchDataset):
    """The same ``(images, labels)`` pair every step; no held-out data."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        num_classes: int,
        steps_per_epoch: int,
    ) -> None:
        self.images, self.labels = images, labels
        self.num_classes = num_classes
        channels, height, width = images.shape[1:]
        self.input_shape = (channels, height, width)
        self._steps = steps_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        """The fixed batch, ``steps_per_epoch`` times (``epoch`` does not matter)."""
        for _ in range(self._steps):
            yield self.images, self.labels
