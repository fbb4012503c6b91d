"""CIFAR-10 in memory as uint8 arrays, with the standard augmentation described (numpy only).

The transform equals torchvision's ``ToTensor -> RandomCrop(32, padding=4) ->
RandomHorizontalFlip -> Normalize(mean, std)``: the crop and flip act on the uint8 images (a
zero pixel is 0.0 after ``ToTensor``, so zero padding commutes with the scaling), then the images
are scaled to [0, 1], normalized and, for other input sizes, resized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlscale.datasets import cifar10_files
from dlscale.datasets.arrays import ArrayDataset, Transform

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
PAD = 4
"""Zero padding of the random crop (as in ``RandomCrop(32, padding=4)``)."""


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> ArrayDataset:
    """Read CIFAR-10 from ``cfg.data_dir`` once: this process's view, replicas ``shard`` to
    ``shard + replicas - 1`` of ``shards``.

    ``num_classes`` (the model's default) is ignored: CIFAR-10 has 10 classes.
    """
    del num_classes
    x_train, y_train, x_test, y_test = cifar10_files.read(cfg.data_dir)
    return ArrayDataset(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        transform=transform(input_size),
        num_classes=cifar10_files.NUM_CLASSES,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        shard=shard,
        shards=shards,
        replicas=replicas,
        dtype=cfg.precision,
    )


def transform(input_size: int) -> Transform:
    """Scale to [0, 1], CIFAR-10 statistics, 4-pixel crop and flip, resize to ``input_size``."""
    return Transform(
        scale=1 / 255, mean=MEAN, std=STD, size=input_size, pad=PAD, flip=True, channels=3
    )
