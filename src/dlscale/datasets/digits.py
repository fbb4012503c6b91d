"""scikit-learn's bundled 8x8 handwritten digits (1,797 images): a real task with no download.

Stored as uint8 ``(N, 1, 8, 8)`` (values 0..16); the transform scales them to [0, 1], normalizes
with the mean and standard deviation of the scaled training split, resizes to the model's input
size (bilinear) and repeats the single channel to 3. The split is fixed: a ``RandomState(0)``
permutation whose last 360 images are the test set (1,437 training images). No augmentation.
scikit-learn is imported only when the digits are loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dlscale.datasets.arrays import ArrayDataset, Transform

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

NUM_CLASSES = 10
TEST_SIZE = 360
MAX_VALUE = 16
"""Pixel values of the digits run 0..16."""
CHANNELS = 3
"""Channels of the model input (the single stored channel, repeated)."""


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> ArrayDataset:
    """This process's view of the digits (replicas ``shard`` to ``shard + replicas - 1`` of
    ``shards``), served at ``input_size``; ``num_classes`` is ignored (10)."""
    del num_classes
    x_train, y_train, x_test, y_test = split()
    scaled = x_train / MAX_VALUE
    mean, std = float(scaled.mean()), float(scaled.std())
    return ArrayDataset(
        name="digits",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        transform=Transform(
            scale=1 / MAX_VALUE,
            mean=(mean,) * CHANNELS,
            std=(std,) * CHANNELS,
            size=input_size,
            channels=CHANNELS,
        ),
        num_classes=NUM_CLASSES,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        shard=shard,
        shards=shards,
        replicas=replicas,
    )


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split: ``(x_train, y_train, x_test, y_test)``, images uint8 ``(N, 1, 8, 8)``,
    labels int64."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.target))
    train, test = order[:-TEST_SIZE], order[-TEST_SIZE:]
    images = digits.images.astype(np.uint8)[:, None]  # whole numbers 0..16
    labels = digits.target.astype(np.int64)
    return images[train], labels[train], images[test], labels[test]
