"""scikit-learn's bundled 8x8 handwritten digits (1,797 images): a real task with no download.

The images are scaled to [0, 1], resized once to the model's input size (bilinear) and
normalized with the mean and standard deviation of the training split; batches repeat the
single channel to 3. The split is fixed: a ``RandomState(0)`` permutation whose last 360 images
are the test set (1,437 training images). No augmentation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from dlscale.datasets.base import InMemoryDataset

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
        input_size=input_size,
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


class DigitsDataset(InMemoryDataset):
    """One rank's view of the digits; images stored with one channel, served with three."""

    name = "digits"
    num_classes = NUM_CLASSES

    def eval_transform(self, images: torch.Tensor) -> torch.Tensor:
        return _rgb(images)


def _rgb(images: torch.Tensor) -> torch.Tensor:
    return images.expand(-1, 3, -1, -1).contiguous()
