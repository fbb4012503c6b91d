"""scikit-learn's bundled 8x8 handwritten digits (1,797 images): a real task with no download.

The images are scaled to [0, 1], resized once to the model's input size (bilinear) and
normalized with the mean and standard deviation of the training split; batches repeat the
single channel to 3. The split is fixed: a ``RandomState(0)`` permutation whose last 360 images
are the test set (1,437 training images). No augmentation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from dlscale.datasets.base import Batch, TorchDataset, checked_steps, eval_range, shard_indices

if TYPE_CHECKING:
    from dlscale.config.run_config import RunConfig

NUM_CLASSES = 10
TEST_SIZE = 360
MAX_VALUE = 16.0
"""Pixel values of the digits run 0..16."""


def load(
    cfg: RunConfig,
    *,
    device: torch.device,
    rank: int,
    world: int,
    input_size: int,
    num_classes: int,
) -> DigitsDataset:
    """The digits on ``device``, resized to ``input_size``; ``num_classes`` is ignored (10)."""
    del num_classes
    x_train, y_train, x_test, y_test = prepare(input_size, device)
    return DigitsDataset(
        x_train,
        y_train,
        x_test,
        y_test,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        rank=rank,
        world=world,
    )


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split: ``(x_train, y_train, x_test, y_test)``, images float ``(N, 8, 8)``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.target))
    train, test = order[:-TEST_SIZE], order[-TEST_SIZE:]
    images, labels = digits.images, digits.target.astype(np.int64)
    return images[train], labels[train], images[test], labels[test]


def prepare(
    input_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split, scale, resize and normalize once; images are single-channel ``(N, 1, S, S)``."""
    x_train, y_train, x_test, y_test = split()
    train = _resize(x_train, input_size, device)
    test = _resize(x_test, input_size, device)
    mean, std = train.mean(), train.std()
    return (
        (train - mean) / std,
        torch.from_numpy(y_train).to(device),
        (test - mean) / std,
        torch.from_numpy(y_test).to(device),
    )


def _resize(images: np.ndarray, size: int, device: torch.device) -> torch.Tensor:
    scaled = torch.from_numpy(images).float().div_(MAX_VALUE).unsqueeze(1).to(device)
    if size == scaled.shape[-1]:
        return scaled
    return F.interpolate(scaled, size=(size, size), mode="bilinear", align_corners=False)


class DigitsDataset(TorchDataset):
    """One rank's view of the digits; images stored with one channel, served with three."""

    num_classes = NUM_CLASSES

    def __init__(
        self,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        x_test: torch.Tensor,
        y_test: torch.Tensor,
        *,
        batch: int,
        seed: int,
        rank: int,
        world: int,
    ) -> None:
        self.x_train, self.y_train = x_train, y_train
        self.x_test, self.y_test = x_test, y_test
        self.batch, self.seed, self.rank, self.world = batch, seed, rank, world
        size = x_train.shape[-1]
        self.input_shape = (3, size, size)
        self._steps = checked_steps("digits", len(x_train), batch=batch, world=world)

    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        """``steps_per_epoch`` batches of this rank's shard for ``epoch``."""
        indices = shard_indices(
            len(self.x_train), epoch=epoch, seed=self.seed, rank=self.rank, world=self.world
        ).to(self.x_train.device)
        for step in range(self._steps):
            batch_indices = indices[step * self.batch : (step + 1) * self.batch]
            yield _rgb(self.x_train[batch_indices]), self.y_train[batch_indices]

    def eval_batches(self) -> Iterator[Batch]:
        """This rank's contiguous shard of the 360 test images (ranks partition it)."""
        start, stop = eval_range(len(self.x_test), rank=self.rank, world=self.world)
        for first in range(start, stop, self.batch):
            last = min(first + self.batch, stop)
            yield _rgb(self.x_test[first:last]), self.y_test[first:last]


def _rgb(images: torch.Tensor) -> torch.Tensor:
    return images.expand(-1, 3, -1, -1).contiguous()
