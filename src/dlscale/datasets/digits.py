"""scikit-learn's bundled 8x8 handwritten digits (1,797 images): a real task with no download.

Stored as uint8 ``(N, 1, 8, 8)`` (values 0..16); the transform scales them to [0, 1], normalizes
with the mean and standard deviation of the scaled training split, resizes to the model's input
size (bilinear) and repeats the single channel to 3. The split is fixed: a ``RandomState(0)``
permutation whose last 360 images are the test set (1,437 training images). No augmentation.

The images are read from the file scikit-learn ships them in (``sklearn/datasets/data/
digits.csv.gz``, what ``load_digits`` reads) without importing scikit-learn, whose import (SciPy
and joblib with it) cost each worker about 2 s of CPU here, more than the rest of a short run's
set-up; ``load_digits`` itself is the fallback where that file is not found.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path
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
        dtype=cfg.precision,
    )


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split: ``(x_train, y_train, x_test, y_test)``, images uint8 ``(N, 1, 8, 8)``,
    labels int64."""
    images, labels = _digits()
    order = np.random.RandomState(0).permutation(len(labels))
    train, test = order[:-TEST_SIZE], order[-TEST_SIZE:]
    return images[train], labels[train], images[test], labels[test]


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 images, uint8 ``(N, 1, 8, 8)`` (whole numbers 0..16), and their labels, int64,
    in scikit-learn's order."""
    table = _bundled_table(bundled_file())
    if table is None or table.shape != (1797, 65):  # scikit-learn's own reader then
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.images.astype(np.uint8)[:, None], digits.target.astype(np.int64)
    return table[:, :-1].astype(np.uint8).reshape(-1, 1, 8, 8), table[:, -1].astype(np.int64)


def _bundled_table(path: Path | None) -> np.ndarray | None:
    """The rows of scikit-learn's digits file (64 pixels, then the label); ``None`` when there
    is no file or it cannot be read."""
    if path is None:
        return None
    try:
        with gzip.open(path, "rt") as text:
            return np.loadtxt(text, delimiter=",", ndmin=2)
    except (OSError, EOFError, ValueError):
        return None


def bundled_file() -> Path | None:
    """scikit-learn's copy of the digits, found without importing scikit-learn; ``None`` if
    it is not installed or keeps them elsewhere."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None
