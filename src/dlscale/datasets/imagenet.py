"""ImageNet from local disk (JPEG class folders or TFRecord shards), decoded as it is read.

Unlike the in-memory sets, every step decodes its images from disk: the input pipeline is part
of what is measured. This module is framework-free (numpy, Pillow): it holds the data order and
the augmentation, and decodes whole batches (:meth:`ImageFiles.load_batch`) for any loader.

* The order of an epoch and its sharding over the replicas are those of every other data set
  (:func:`dlscale.datasets.arrays.shard_indices`); each sample of a replica's epoch gets a seed
  drawn from ``(seed, epoch, replica)``, and its crop and flip are drawn from that seed in the
  process that decodes it, so the batches do not depend on which loader process made them, nor
  on how many there are.
* Training: torchvision's ``RandomResizedCrop(size)`` (area 8-100%, aspect 3/4-4/3, ten tries,
  then a centre crop), resized bilinearly by Pillow (antialiased), then a horizontal flip with
  probability 1/2. Evaluation: the shorter side resized to ``size / 0.875``, the centre
  ``size x size`` cut out. Both give uint8 images; scaling to [0, 1] and the ImageNet mean and
  standard deviation are the engine's, on its device (:attr:`ImageFiles.transform`).
* Loaders: the torch engine's ``DataLoader`` worker processes
  (:mod:`dlscale.frameworks.torch.data`); for other engines :meth:`ImageFiles.train_batches`
  decodes in a pool of ``loader_workers`` processes of its own (numpy batches).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscale.contract.errors import DataError
from dlscale.contract.options import typed
from dlscale.datasets import image_files
from dlscale.datasets.arrays import (
    ArrayBatch,
    NumpyDataset,
    Transform,
    checked_steps,
    eval_range,
    shard_indices,
    transform_images,
)
from dlscale.datasets.image_files import Split
from dlscale.datasets.loader_pool import loader_pool
from dlscale.datasets.options import ImageOptions

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10
EVAL_CROP = 0.875
"""Evaluation resizes the shorter side to ``size / EVAL_CROP`` (256 for 224) before the crop."""


# --------------------------------------------------------------------------------------------
# The augmentation of one image


def crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """``(left, top, crop width, crop height)``: torchvision's ``RandomResizedCrop.get_params``
    with the default scale and ratio, drawing from ``rng``."""
    area = width * height
    log_low, log_high = math.log(RATIO[0]), math.log(RATIO[1])
    for _ in range(CROP_TRIES):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, w, h
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def train_image(data: bytes, size: int, seed: int) -> np.ndarray:
    """One training image: decoded, randomly cropped, resized, maybe flipped; uint8 (3, S, S)."""
    from PIL import Image

    image = image_files.decode(data)
    rng = np.random.default_rng(seed)
    left, top, w, h = crop_box(image.width, image.height, rng)
    image = image.resize(
        (size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
    )
    pixels = np.asarray(image, dtype=np.uint8)
    if rng.random() < 0.5:
        pixels = pixels[:, ::-1]
    return pixels.transpose(2, 0, 1)


def eval_image(data: bytes, size: int) -> np.ndarray:
    """One evaluation image: shorter side to ``size / EVAL_CROP``, centre crop; uint8 (3, S, S)."""
    from PIL import Image

    image = image_files.decode(data)
    short = int(size / EVAL_CROP)
    scale = short / min(image.width, image.height)
    width, height = max(short, round(image.width * scale)), max(short, round(image.height * scale))
    image = image.resize((width, height), Image.Resampling.BILINEAR)
    left, top = (width - size) // 2, (height - size) // 2
    image = image.crop((left, top, left + size, top + size))
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


# --------------------------------------------------------------------------------------------
# One process's view


@dataclass(frozen=True)
class BadImage:
    """What a loader process returns instead of a batch with an image it could not decode."""

    where: str
    reason: str

    def error(self) -> DataError:
        return DataError(
            f"{self.where}: {self.reason}; remove or replace the file, or set "
            'bad_files = "skip" (with verify = "decode" for images that only decoding finds) '
            "to leave such files out"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class ImageFiles(NumpyDataset):
    """Images decoded from disk for replicas ``shard`` to ``shard + replicas - 1`` of ``shards``,
    ``batch`` per replica per step; ``eval`` ``None`` without a held-out split."""

    name: str
    train: Split = field(repr=False)
    eval: Split | None = field(repr=False)
    num_classes: int
    size: int
    batch: int
    seed: int
    shard: int
    shards: int
    replicas: int = 1
    loader_workers: int = 2
    steps_per_epoch: int = field(init=False)
    input_shape: tuple[int, int, int] = field(init=False)
    has_eval: bool = field(init=False)

    def __post_init__(self) -> None:
        steps = checked_steps(
            self.name, len(self.train.entries), batch=self.batch, world=self.shards
        )
        object.__setattr__(self, "steps_per_epoch", steps)
        object.__setattr__(self, "input_shape", (3, self.size, self.size))
        object.__setattr__(self, "has_eval", self.eval is not None and len(self.eval.entries) > 0)

    @property
    def transform(self) -> Transform:
        """What turns the loaders' uint8 batches into model inputs (no crop, flip or resize
        left: the loaders did those)."""
        return Transform(scale=1 / 255, mean=MEAN, std=STD, size=self.size, channels=3)

    def train_plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, seeds)`` of every step of ``epoch`` for this process, each
        ``(steps, batch * replicas)``: the replicas' batches side by side in replica order."""
        count = self.steps_per_epoch * self.batch
        shape = (self.steps_per_epoch, self.batch)
        indices, seeds = [], []
        for rank in range(self.shard, self.shard + self.replicas):
            order = shard_indices(
                len(self.train.entries), epoch=epoch, seed=self.seed, rank=rank, world=self.shards
            )
            indices.append(order[:count].reshape(shape))
            rng = np.random.default_rng(np.random.SeedSequence((self.seed, epoch, rank)))
            seeds.append(rng.integers(0, 2**63 - 1, count, dtype=np.int64).reshape(shape))
        return np.concatenate(indices, axis=1), np.concatenate(seeds, axis=1)

    def load_batch(
        self, indices: np.ndarray, seeds: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray] | BadImage:
        """Decode one batch: training images with ``seeds``, evaluation images (of the
        held-out split) without; uint8 ``(B, 3, S, S)`` and int64 labels, or the first image
        that could not be read."""
        split = self.train if seeds is not None else self.eval
        assert split is not None
        images = np.empty((len(indices), 3, self.size, self.size), np.uint8)
        for slot, index in enumerate(indices):
            entry = split.entries[int(index)]
            try:
                data = image_files.read_bytes(entry)
                images[slot] = (
                    train_image(data, self.size, int(seeds[slot]))
                    if seeds is not None
                    else eval_image(data, self.size)
                )
            except DataError as error:
                return BadImage(entry.where(), str(error).removeprefix(f"{entry.where()}: "))
            except OSError as error:
                return BadImage(entry.where(), f"unreadable ({error.strerror or error})")
        return images, split.labels[np.asarray(indices, np.int64)]

    def eval_steps(self) -> list[np.ndarray]:
        """This process's contiguous part of the held-out split, ``batch * replicas`` at a
        time (the last batch may be smaller)."""
        if self.eval is None:
            return []
        n, last = len(self.eval.entries), self.shard + self.replicas - 1
        start = eval_range(n, rank=self.shard, world=self.shards)[0]
        stop = eval_range(n, rank=last, world=self.shards)[1]
        size = self.batch * self.replicas
        return [np.arange(i, min(i + size, stop)) for i in range(start, stop, size)]

    # numpy consumers (every engine but torch's): a pool of loader processes

    def train_batches(self, epoch: int) -> Iterator[ArrayBatch]:
        indices, seeds = self.train_plan(epoch)
        yield from self._pooled(list(zip(indices, seeds, strict=True)))

    def eval_batches(self) -> Iterator[ArrayBatch]:
        yield from self._pooled([(i, None) for i in self.eval_steps()])

    def _pooled(self, jobs: list[tuple[np.ndarray, np.ndarray | None]]) -> Iterator[ArrayBatch]:
        transform = self.transform
        for result in loader_pool(self).map(self, jobs):
            if isinstance(result, BadImage):
                raise result.error()
            images, labels = result
            yield transform_images(images, transform), labels


# --------------------------------------------------------------------------------------------
# The data set plug-in


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> ImageFiles:
    """This process's view of the images under ``cfg.data_dir`` (what :func:`check` passed)."""
    data_dir = Path(str(cfg.data_dir))
    train, held_out = splits(data_dir, cfg.grouped_options()["dataset"], checked=False)
    classes = len(train.classes)
    if classes > num_classes:
        raise DataError(
            f"{data_dir}: {classes} classes, more than the model's {num_classes} outputs; "
            "set classes (imagenet-subset) or pick a model with more"
        )
    return ImageFiles(
        name=cfg.dataset,
        train=train,
        eval=held_out,
        num_classes=num_classes,
        size=input_size,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        shard=shard,
        shards=shards,
        replicas=replicas,
        loader_workers=cfg.typed(ImageOptions).loader_workers,
    )


def splits(
    data_dir: Path, options: dict[str, Any], *, checked: bool, notes: list[str] | None = None
) -> tuple[Split, Split | None]:
    """The train and held-out splits as the options select them; with ``bad_files = "skip"``
    the bad images :func:`image_files.verify` finds left out (the parent and every worker
    find the same ones, and ``notes`` gets a line on them); ``checked``: the parent's check,
    which fails on them otherwise."""
    chosen = typed(ImageOptions, options)
    found = []
    for split in ("train", "eval"):
        files = image_files.scan(
            data_dir,
            layout=chosen.layout,
            split=split,
            classes=chosen.classes,
            per_class=chosen.images_per_class if split == "train" else 0,
        )
        if files is not None and (checked or chosen.bad_files == "skip"):
            bad = image_files.verify(files, chosen.verify, data_dir)
            if bad and chosen.bad_files == "fail":
                entry, reason = bad[0]
                others = len(bad) - 1
                more = f" (and {others} more bad image{'s' * (others > 1)})" if others else ""
                raise BadImage(entry.where(), reason + more).error()
            files = image_files.drop_bad(files, bad) if bad else files
            if notes is not None and bad:
                entry, reason = bad[0]
                images = f"{len(bad)} bad image{'s' * (len(bad) > 1)}"
                notes.append(f"{images} left out of {split} (first: {entry.where()}: {reason})")
        found.append(files)
    train, held_out = found
    assert train is not None
    return train, held_out


def check(data_dir: Path | None, options: dict[str, Any]) -> list[str]:
    """The parent's check before launching: the layout, every class folder or shard, and the
    images as ``verify`` says; a :class:`DataError` naming the first bad file, or under
    ``bad_files = "skip"`` a note on what is left out."""
    assert data_dir is not None
    notes: list[str] = []
    splits(data_dir, options, checked=True, notes=notes)
    return notes
