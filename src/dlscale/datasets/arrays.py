"""Framework-free data sets: numpy arrays, the data order, and what turns images into inputs.

A loader returns one process's view of a data set (:class:`ArrayDataset`, or
:class:`SyntheticArrays`) holding numpy arrays and a :class:`Transform` that *describes* the input
pipeline. Everything random is drawn here from numpy generators, so every engine serves the same
samples with the same crops and flips:

* the order of an epoch is a permutation that depends only on ``(seed, epoch)``, sharded over the
  replicas with DistributedSampler semantics (:func:`shard_indices`);
* the augmentation of a replica's epoch is drawn from ``(seed, epoch, replica)``
  (:meth:`ArrayDataset.train_plan`).

An engine either applies the transform with its own ops on its device (e.g.
:func:`dlscale.frameworks.torch.data.to_torch`) or takes the numpy reference batches from
:meth:`ArrayDataset.train_batches`. This module imports numpy only.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dlscale.contract.errors import DataError

ArrayBatch = tuple[np.ndarray, np.ndarray]
"""Images float32 ``(B, C, S, S)`` and labels int64 ``(B,)``."""

PREPARE_CHUNK = 4096
"""Images per batch when an engine's adapter transforms a whole stored set once (a data set
without augmentation): bounds the temporary memory."""

PERMUTATION_STRIDE = 1_000_003
"""The epoch's permutation is drawn from ``default_rng(seed * PERMUTATION_STRIDE + epoch)``."""


@dataclass(frozen=True, kw_only=True)
class Transform:
    """What turns stored uint8 images ``(B, C, H, W)`` into float32 model inputs, in this order.

    1. training only, when ``pad > 0`` or ``flip``: an ``H x W`` window of the image zero-padded
       by ``pad`` pixels at a random offset, mirrored horizontally at random if ``flip``;
    2. ``x * scale``;
    3. per channel ``(x - mean[c]) / std[c]``;
    4. bilinear resize to ``size x size`` (``align_corners=False``; antialiased when shrinking,
       as ``torch.nn.functional.interpolate(..., antialias=True)``; none at the same size);
    5. a single stored channel repeated to ``channels``.

    ``mean``/``std`` hold one value per input channel (``channels`` values) or one value for all;
    single-channel images need all values equal (the repeat of step 5 then commutes with step 3).
    """

    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    size: int
    pad: int = 0
    flip: bool = False
    channels: int = 3

    def __post_init__(self) -> None:
        if len(self.mean) != len(self.std) or len(self.mean) not in (1, self.channels):
            raise ValueError(
                f"mean {self.mean} and std {self.std} need 1 or {self.channels} values each"
            )
        if self.size < 1 or self.pad < 0 or self.channels < 1:
            raise ValueError(f"invalid transform {self}")

    @property
    def augments(self) -> bool:
        """Whether training images get a random crop and/or flip."""
        return self.pad > 0 or self.flip

    def channel_stats(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` as float32 arrays of ``channels`` values (stored channels: 1 or
        ``self.channels``)."""
        mean = np.broadcast_to(np.asarray(self.mean, np.float32), (self.channels,))
        std = np.broadcast_to(np.asarray(self.std, np.float32), (self.channels,))
        if channels == self.channels:
            return mean.copy(), std.copy()
        if channels == 1 and len(set(self.mean)) == len(set(self.std)) == 1:
            return mean[:1].copy(), std[:1].copy()
        raise ValueError(
            f"images with {channels} channel(s) do not fit mean {self.mean}, std {self.std} "
            f"and {self.channels} input channels"
        )


@dataclass(frozen=True)
class TrainPlan:
    """One process's epoch: per step the sample indices and (if augmenting) crops and flips.

    Every array is ``(steps, batch * replicas)``: a row is one step's batch, the replicas'
    batches concatenated in replica order. ``top``/``left`` are the window offsets in the
    zero-padded image (``0..2*pad``; ``pad, pad`` is the unshifted image); all three augmentation
    arrays are ``None`` when the transform does not augment.
    """

    indices: np.ndarray
    top: np.ndarray | None = None
    left: np.ndarray | None = None
    flip: np.ndarray | None = None


class NumpyDataset(ABC):
    """One process's view of a data set as numpy arrays (no framework).

    ``train_batches(epoch)`` yields exactly ``steps_per_epoch`` batches of ``batch * replicas``
    float32 NCHW images of ``input_shape`` and int64 labels; ``eval_batches()`` yields this
    process's part of the held-out set (nothing when ``has_eval`` is false).
    """

    name: str
    num_classes: int
    input_shape: tuple[int, ...]
    """An image's ``(C, H, W)``, a token sequence's ``(T,)``."""
    steps_per_epoch: int
    has_eval: bool

    @abstractmethod
    def train_batches(self, epoch: int) -> Iterator[ArrayBatch]: ...

    @abstractmethod
    def eval_batches(self) -> Iterator[ArrayBatch]: ...


@dataclass(frozen=True, kw_only=True, eq=False)
class ArrayDataset(NumpyDataset):
    """A stored data set held whole in memory, as seen by one process.

    The run has ``shards`` replicas; this process trains ``replicas`` of them, ``shard`` to
    ``shard + replicas - 1`` (several for e.g. a MirroredStrategy process, else one), each on
    ``batch`` images per step. Its batch at a step is the concatenation of its replicas' batches
    in replica order, so it is exactly what those replicas would get as separate processes.
    """

    name: str
    x_train: np.ndarray = field(repr=False)
    """uint8 ``(N, C, H, W)``, ``C`` 1 or ``transform.channels``."""
    y_train: np.ndarray = field(repr=False)
    """int64 ``(N,)``."""
    x_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)
    transform: Transform
    num_classes: int
    batch: int
    seed: int
    shard: int
    shards: int
    replicas: int = 1
    dtype: str = "float32"
    """The float type the numpy reference makes its model inputs in: the run's ``precision``
    (float64: so that a float64 run's inputs agree with the other frameworks' beyond float32's
    rounding)."""
    steps_per_epoch: int = field(init=False)
    input_shape: tuple[int, int, int] = field(init=False)
    has_eval: bool = field(init=False)

    def __post_init__(self) -> None:
        for images, labels in ((self.x_train, self.y_train), (self.x_test, self.y_test)):
            if images.dtype != np.uint8 or images.ndim != 4:
                raise ValueError(
                    f"{self.name}: images must be uint8 (N, C, H, W), "
                    f"got {images.dtype} {images.shape}"
                )
            if labels.dtype != np.int64 or labels.shape != images.shape[:1]:
                raise ValueError(f"{self.name}: labels must be int64 (N,) matching the images")
        if self.x_test.shape[1:] != self.x_train.shape[1:]:
            raise ValueError(f"{self.name}: held-out images differ in shape from training ones")
        self.transform.channel_stats(self.x_train.shape[1])  # the channels must fit
        if self.batch < 1 or not 0 <= self.shard < self.shard + self.replicas <= self.shards:
            raise ValueError(
                f"{self.name}: invalid batch {self.batch} or replicas "
                f"{self.shard}..{self.shard + self.replicas - 1} of {self.shards}"
            )
        steps = checked_steps(self.name, len(self.x_train), batch=self.batch, world=self.shards)
        size = self.transform.size
        object.__setattr__(self, "steps_per_epoch", steps)
        object.__setattr__(self, "input_shape", (self.transform.channels, size, size))
        object.__setattr__(self, "has_eval", len(self.y_test) > 0)

    def train_plan(self, epoch: int) -> TrainPlan:
        """The indices (and crops and flips) of every step of ``epoch`` for this process."""
        count = self.steps_per_epoch * self.batch
        shape = (self.steps_per_epoch, self.batch)
        rows: list[list[np.ndarray]] = []
        for rank in range(self.shard, self.shard + self.replicas):
            indices = shard_indices(
                len(self.x_train), epoch=epoch, seed=self.seed, rank=rank, world=self.shards
            )
            row = [indices[:count].reshape(shape)]
            if self.transform.augments:
                row += augmentation(self.transform, count, seed=self.seed, epoch=epoch, rank=rank)
            rows.append([a.reshape(shape) for a in row])
        columns = [np.concatenate(parts, axis=1) for parts in zip(*rows, strict=True)]
        return TrainPlan(*columns)

    def train_batches(self, epoch: int) -> Iterator[ArrayBatch]:
        """The numpy reference: ``steps_per_epoch`` transformed batches of ``epoch``."""
        plan = self.train_plan(epoch)
        for step, indices in enumerate(plan.indices):
            images = self.x_train[indices]
            if plan.top is not None and plan.left is not None and plan.flip is not None:
                images = crop_flip(
                    images, plan.top[step], plan.left[step], plan.flip[step], self.transform.pad
                )
            yield transform_images(images, self.transform, self.dtype), self.y_train[indices]

    def eval_range(self) -> tuple[int, int]:
        """``[start, stop)`` of this process's contiguous part of the held-out set (its
        replicas' parts together)."""
        n, last = len(self.y_test), self.shard + self.replicas - 1
        start = eval_range(n, rank=self.shard, world=self.shards)[0]
        return start, eval_range(n, rank=last, world=self.shards)[1]

    def eval_batches(self) -> Iterator[ArrayBatch]:
        """This process's held-out images, in order, ``batch * replicas`` at a time (the last
        batch may be smaller), with the evaluation transform (no crop or flip)."""
        start, stop = self.eval_range()
        for first in range(start, stop, self.batch * self.replicas):
            last = min(first + self.batch * self.replicas, stop)
            images = transform_images(self.x_test[first:last], self.transform, self.dtype)
            yield images, self.y_test[first:last]


@dataclass(frozen=True, kw_only=True, eq=False)
class SyntheticArrays(NumpyDataset):
    """One fixed batch, already in model-input form, fed at every step; no held-out data."""

    images: np.ndarray = field(repr=False)
    """float32 ``(batch * replicas, C, S, S)``."""
    labels: np.ndarray = field(repr=False)
    """int64 ``(batch * replicas,)``."""
    num_classes: int
    steps_per_epoch: int
    name: str = "synthetic"
    has_eval: bool = field(default=False, init=False)
    input_shape: tuple[int, int, int] = field(init=False)

    def __post_init__(self) -> None:
        if self.images.dtype != np.float32 or self.images.ndim != 4:
            raise ValueError("synthetic images must be float32 (B, C, S, S)")
        if self.labels.dtype != np.int64 or self.labels.shape != self.images.shape[:1]:
            raise ValueError("synthetic labels must be int64 (B,) matching the images")
        channels, height, width = self.images.shape[1:]
        object.__setattr__(self, "input_shape", (channels, height, width))

    def train_batches(self, epoch: int) -> Iterator[ArrayBatch]:
        """The fixed batch, ``steps_per_epoch`` times (``epoch`` does not matter)."""
        for _ in range(self.steps_per_epoch):
            yield self.images, self.labels

    def eval_batches(self) -> Iterator[ArrayBatch]:
        return iter(())


# --------------------------------------------------------------------------------------------
# Data order and augmentation draws


def shard_indices(n: int, *, epoch: int, seed: int, rank: int, world: int) -> np.ndarray:
    """This rank's sample indices for one epoch, with DistributedSampler semantics.

    The permutation depends only on (seed, epoch), so every rank draws the same one and takes
    a disjoint, interleaved shard; the permutation is padded by repeating its head so that all
    ranks have the same count. With N ranks of batch b, step i covers exactly the samples that
    one rank of batch N*b covers at step i (the basis of the equivalence tests).
    """
    perm = np.random.default_rng(seed * PERMUTATION_STRIDE + epoch).permutation(n)
    total = -(-n // world) * world
    if total > n:
        perm = np.concatenate([perm, perm[: total - n]])
    return perm[rank::world]


def augmentation(
    transform: Transform, count: int, *, seed: int, epoch: int, rank: int
) -> list[np.ndarray]:
    """``[top, left, flip]`` for the first ``count`` training positions of a rank's epoch.

    Drawn, in this order, from ``default_rng(SeedSequence((seed, epoch, rank)))``: offsets in
    ``0..2*pad`` (int64) and flips with probability 1/2 (all false unless ``transform.flip``).
    """
    rng = np.random.default_rng(np.random.SeedSequence((seed, epoch, rank)))
    top = rng.integers(0, 2 * transform.pad + 1, count, dtype=np.int64)
    left = rng.integers(0, 2 * transform.pad + 1, count, dtype=np.int64)
    flip = rng.random(count) < 0.5
    return [top, left, flip & transform.flip]


def eval_range(n: int, *, rank: int, world: int) -> tuple[int, int]:
    """``[start, stop)`` of this rank's contiguous part of ``n`` held-out samples (no padding)."""
    return n * rank // world, n * (rank + 1) // world


def checked_steps(name: str, n: int, *, batch: int, world: int) -> int:
    """Full batches per epoch of one rank's shard of ``n`` samples; :class:`DataError` if 0."""
    shard = -(-n // world)  # shard_indices pads every rank to ceil(n / world)
    steps = shard // batch
    if steps == 0:
        raise DataError(
            f"{name}: data set too small for the batch size: {shard} training samples per "
            f"worker ({n} over {world} workers) < batch_per_worker {batch}"
        )
    return steps


# --------------------------------------------------------------------------------------------
# The numpy reference of the transform


def crop_flip(
    images: np.ndarray, top: np.ndarray, left: np.ndarray, flip: np.ndarray, pad: int
) -> np.ndarray:
    """Crop each ``pad``-zero-padded image at (``top[i]``, ``left[i]``), mirrored where
    ``flip[i]``; same shape and dtype as ``images`` ``(B, C, H, W)``."""
    count, channels, height, width = images.shape
    padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    rows = top[:, None] + np.arange(height)  # (B, H)
    cols = left[:, None] + np.arange(width)  # (B, W)
    cols = np.where(flip[:, None], cols[:, ::-1], cols)
    return padded[
        np.arange(count)[:, None, None, None],
        np.arange(channels)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]


def transform_images(
    images: np.ndarray, transform: Transform, dtype: str = "float32"
) -> np.ndarray:
    """Steps 2-5 of :class:`Transform` (no crop or flip): uint8 -> float32 (or ``dtype``)
    model inputs."""
    mean, std = (a.astype(dtype) for a in transform.channel_stats(images.shape[1]))
    x = images.astype(dtype) * np.dtype(dtype).type(transform.scale)
    x = (x - mean[:, None, None]) / std[:, None, None]
    x = resize(x, transform.size)
    if x.shape[1] != transform.channels:
        x = np.repeat(x, transform.channels, axis=1)
    return x


def resize(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of float32 ``(B, C, H, W)`` to ``size x size``, as
    ``F.interpolate(mode="bilinear", align_corners=False, antialias=size < min(H, W))``.

    Separable: one interpolation matrix per axis, with torch's weights (antialiased ones
    included) computed in float32 as torch computes them. ``scipy.ndimage.zoom(order=1,
    grid_mode=True, mode="nearest")`` agrees when enlarging but cannot antialias, hence the
    matrices. No-op at the same size.
    """
    height, width = images.shape[-2:]
    if height == width == size:
        return images
    antialias = size < min(height, width)
    rows = interpolation_matrix(height, size, antialias).astype(images.dtype)
    cols = interpolation_matrix(width, size, antialias).astype(images.dtype)
    return (rows @ images) @ cols.T


@functools.lru_cache(maxsize=16)
def interpolation_matrix(size_in: int, size_out: int, antialias: bool) -> np.ndarray:
    """``(size_out, size_in)`` float32 weights of torch's bilinear kernels
    (``align_corners=False``)."""
    f32 = np.float32
    scale = f32(size_in) / f32(size_out)
    out = np.arange(size_out)
    matrix = np.zeros((size_out, size_in), f32)
    if not antialias:  # upsample_bilinear2d: clamped half-pixel source, two taps
        source = np.maximum(scale * (out.astype(f32) + f32(0.5)) - f32(0.5), f32(0))
        low = source.astype(np.int64)
        weight = source - low.astype(f32)
        np.add.at(matrix, (out, low), f32(1) - weight)
        np.add.at(matrix, (out, np.minimum(low + 1, size_in - 1)), weight)
    else:  # _upsample_bilinear2d_aa: a triangle filter stretched by the scale, taps clipped
        # to the image and renormalized (the PIL convention)
        support, inverse = (scale, f32(1) / scale) if scale >= 1 else (f32(1), f32(1))
        for i in out:
            centre = scale * (f32(i) + f32(0.5))
            first = max(int(centre - support + f32(0.5)), 0)
            stop = min(int(centre + support + f32(0.5)), size_in)
            taps = np.arange(first, stop).astype(f32)
            weights = np.maximum(f32(0), f32(1) - np.abs((taps - centre + f32(0.5)) * inverse))
            total = weights.sum(dtype=f32)
            matrix[i, first:stop] = weights / total if total != 0 else weights
    matrix.flags.writeable = False  # cached: shared by every call
    return matrix
