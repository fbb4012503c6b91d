"""The torch view of a numpy data set: arrays uploaded once, the transform in batched device ops.

:func:`to_torch` puts a :class:`~dlscale.datasets.arrays.NumpyDataset` on a device. The stored
uint8 images go to the device once; each epoch, the plan drawn by numpy (sample indices, crop
offsets, flips) goes to the device in one copy per array, and every step gathers, crops, flips,
normalizes and resizes its batch with a few batched tensor ops (no per-image Python loop; a
data set without augmentation is transformed once, at upload). The batches equal the numpy
reference of :meth:`ArrayDataset.train_batches` (up to float rounding).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from dlscale.contract.errors import WorkerFault
from dlscale.datasets.arrays import (
    PREPARE_CHUNK,
    ArrayDataset,
    NumpyDataset,
    SyntheticArrays,
    Transform,
)
from dlscale.datasets.imagenet import BadImage, ImageFiles
from dlscale.datasets.loader_pool import LOADER_DIED
from dlscale.datasets.tokens import TokenArrays

Batch = tuple[torch.Tensor, torch.Tensor]


class TorchDataset(ABC):
    """One process's view of a data set, on the training device.

    ``train_batches(epoch)`` yields exactly ``steps_per_epoch`` batches of float32 NCHW images of
    ``input_shape`` and int64 labels; ``eval_batches()`` yields this process's disjoint part of
    the held-out set (possibly with a smaller last batch; nothing without held-out data).
    """

    num_classes: int
    input_shape: tuple[int, ...]

    @property
    @abstractmethod
    def steps_per_epoch(self) -> int: ...

    @abstractmethod
    def train_batches(self, epoch: int) -> Iterator[Batch]: ...

    def eval_batches(self) -> Iterator[Batch]:
        return iter(())


def loader_died(error: RuntimeError) -> WorkerFault | None:
    """torch's error for a ``DataLoader`` worker that died (raised by its SIGCHLD handler
    wherever the training process is, or by the next batch) as one line; ``None`` for any
    other error."""
    if not str(error).startswith("DataLoader worker"):
        return None
    return WorkerFault(LOADER_DIED.format(detail=f" ({str(error).strip()})"))


LOADER_EXIT_WAIT_S = 2.0
"""How long a broken pipe waits for its loader process to be seen dead: a killed process
closes its pipes before it becomes a zombie that ``waitid`` sees, a window a loaded machine
widens (seen under coverage on 2 cores: the raw ``ConnectionResetError`` instead of torch's
words)."""


def loader_death_pending(wait_s: float = LOADER_EXIT_WAIT_S) -> WorkerFault | None:
    """A ``DataLoader`` process that died, asked of torch directly: its death can reach the
    training process first as a ``ConnectionResetError`` on its pipe, before torch's SIGCHLD
    handler raises its own words (which it may do while this waits: caught alike); ``None``
    when every loader process is still alive after ``wait_s``."""
    from torch.utils.data._utils.signal_handling import _error_if_any_worker_fails

    deadline = time.monotonic() + wait_s
    try:
        while True:
            _error_if_any_worker_fails()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)  # torch's SIGCHLD handler may raise in here too
    except RuntimeError as error:
        return loader_died(error)


def to_torch(
    data: NumpyDataset, device: torch.device | str, dtype: torch.dtype = torch.float32
) -> TorchDataset:
    """``data`` on ``device``: its arrays uploaded once, its transform done there per batch,
    stored images scaled, normalized and resized in ``dtype`` (float64: as TensorFlow's
    pipeline does them in float64, so two frameworks' inputs agree beyond float32's rounding;
    other sources give float32 images, which the engine casts)."""
    device = torch.device(device)
    if isinstance(data, ArrayDataset):
        return TorchArrays(data, device, dtype)
    if isinstance(data, SyntheticArrays):
        return TorchSynthetic(data, device)
    if isinstance(data, ImageFiles):
        return TorchImageFiles(data, device)
    if isinstance(data, TokenArrays):
        return TorchTokens(data, device)
    raise TypeError(f"no torch adapter for {type(data).__name__}")


class TorchArrays(TorchDataset):
    """An :class:`ArrayDataset` held whole on the device.

    The images are stored as uint8 when training augments them (the transform runs per batch,
    after the crop). Without augmentation the transform of every image is fixed, so it runs
    once here and the device keeps the float32 inputs (single channel if stored so; the
    repeat to 3 channels stays per batch): a step is then a gather, as cheap as it gets, for
    4 bytes instead of 1 per stored pixel at the input size.
    """

    def __init__(
        self, data: ArrayDataset, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> None:
        self.data = data
        self.device = device
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self.transform = DeviceTransform(data.transform, data.x_train.shape[1], device, dtype)
        arrays = (data.x_train, data.y_train, data.x_test, data.y_test)
        x_train, self.y_train, x_test, self.y_test = (
            torch.from_numpy(a).to(device) for a in arrays
        )
        self.prepared = not data.transform.augments
        if self.prepared:
            x_train = self.transform.prepare_all(x_train)
            x_test = self.transform.prepare_all(x_test)
        self.x_train, self.x_test = x_train, x_test

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        """``steps_per_epoch`` batches of ``epoch``, as planned by the numpy data set."""
        plan = self.data.train_plan(epoch)
        indices = torch.from_numpy(plan.indices).to(self.device)
        augment = None
        if plan.top is not None and plan.left is not None and plan.flip is not None:
            augment = [
                torch.from_numpy(a).to(self.device) for a in (plan.top, plan.left, plan.flip)
            ]
        for step in range(len(indices)):
            batch_indices = indices[step]
            images = self.x_train[batch_indices]
            if augment is not None:
                top, left, flip = (a[step] for a in augment)
                images = crop_flip(images, top, left, flip, self.data.transform.pad)
            yield self._inputs(images), self.y_train[batch_indices]

    def eval_batches(self) -> Iterator[Batch]:
        """This process's contiguous part of the held-out set (processes partition it)."""
        start, stop = self.data.eval_range()
        size = self.data.batch * self.data.replicas
        for first in range(start, stop, size):
            last = min(first + size, stop)
            yield self._inputs(self.x_test[first:last]), self.y_test[first:last]

    def _inputs(self, images: torch.Tensor) -> torch.Tensor:
        if self.prepared:
            return self.transform.finish(images)
        return self.transform(images)


class TorchTokens(TorchDataset):
    """A :class:`TokenArrays`: each batch's int64 token ids, made by numpy (the same tokens in
    every framework) and moved to the device."""

    def __init__(self, data: TokenArrays, device: torch.device) -> None:
        self.data, self.device = data, device
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        for x, y in self.data.train_batches(epoch):
            yield self._put(x), self._put(y)

    def eval_batches(self) -> Iterator[Batch]:
        for x, y in self.data.eval_batches():
            yield self._put(x), self._put(y)

    def _put(self, array: Any) -> torch.Tensor:
        """A batch on the device; to a GPU from pinned memory without waiting (as nanoGPT's
        loader does), so the copy does not hold the host until the device is idle."""
        tensor = torch.from_numpy(array)
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)


class TorchSynthetic(TorchDataset):
    """The fixed batch of :class:`SyntheticArrays`, uploaded once, fed at every step."""

    def __init__(self, data: SyntheticArrays, device: torch.device) -> None:
        self.images = torch.from_numpy(data.images).to(device)
        self.labels = torch.from_numpy(data.labels).to(device)
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self._steps = data.steps_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        """The fixed batch, ``steps_per_epoch`` times (``epoch`` does not matter)."""
        for _ in range(self._steps):
            yield self.images, self.labels


class DeviceTransform:
    """Steps 2-5 of a :class:`Transform` on uint8 batches on one device (no crop or flip)."""

    CHUNK = PREPARE_CHUNK
    """Images per batch of :meth:`prepare_all` (bounds its temporary memory)."""

    def __init__(
        self,
        transform: Transform,
        channels: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        mean, std = transform.channel_stats(channels)
        self.dtype = dtype
        self.mean = torch.from_numpy(mean).to(device, dtype).view(1, channels, 1, 1)
        self.std = torch.from_numpy(std).to(device, dtype).view(1, channels, 1, 1)
        self.scale = transform.scale
        self.size = transform.size
        self.channels = transform.channels

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.finish(self.prepare(images))

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        """Steps 2-4: scale, normalize, resize (float32 or the run's float64, the stored
        channels)."""
        x = images.to(self.dtype).mul_(self.scale).sub_(self.mean).div_(self.std)
        return resize(x, self.size)

    def prepare_all(self, images: torch.Tensor) -> torch.Tensor:
        """:meth:`prepare` of a whole stored set, in chunks."""
        chunks = [
            self.prepare(images[i : i + self.CHUNK]) for i in range(0, len(images), self.CHUNK)
        ]
        if not chunks:
            return self.prepare(images)
        return torch.cat(chunks)

    def finish(self, images: torch.Tensor) -> torch.Tensor:
        """Step 5: a single channel repeated to the input channels."""
        if images.shape[1] != self.channels:
            return images.expand(-1, self.channels, -1, -1).contiguous()
        return images


def crop_flip(
    images: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    flip: torch.Tensor,
    pad: int,
) -> torch.Tensor:
    """Crop each ``pad``-zero-padded image at (``top[i]``, ``left[i]``), mirrored where
    ``flip[i]``.

    ``top``/``left`` are in ``0..2*pad`` (``pad, pad`` is the unshifted image). The batch is
    padded once; one ``gather`` takes every window, and the flip is folded into the column
    indices with ``torch.where`` on the per-image mask. Same shape and dtype as ``images``.
    """
    count, channels, height, width = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))
    padded_width = width + 2 * pad
    rows = top[:, None] + torch.arange(height, device=images.device)  # (B, H)
    cols = left[:, None] + torch.arange(width, device=images.device)  # (B, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    flat = (rows[:, :, None] * padded_width + cols[:, None, :]).reshape(count, 1, height * width)
    windows = padded.reshape(count, channels, -1).gather(2, flat.expand(-1, channels, -1))
    return windows.reshape(count, channels, height, width)


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize to ``size`` x ``size`` (antialiased when shrinking); no-op at the same
    size."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    shrink = size < min(images.shape[-2:])
    return F.interpolate(
        images, size=(size, size), mode="bilinear", align_corners=False, antialias=shrink
    )


class TorchImageFiles(TorchDataset):
    """Images decoded from disk (:class:`~dlscale.datasets.imagenet.ImageFiles`) by a torch
    ``DataLoader``: ``loader_workers`` worker processes (persistent across epochs), each
    decoding whole batches of the plan, ``PREFETCH`` batches ahead per worker; the uint8
    batches are pinned when the device is a GPU, copied without blocking, and scaled and
    normalized there. An image a loader cannot read stops the run with a
    :class:`~dlscale.contract.errors.DataError` naming it (a loader returns what went wrong; it
    never raises, so no worker's traceback reaches the user)."""

    def __init__(self, data: ImageFiles, device: torch.device) -> None:
        self.data = data
        self.device = device
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self.transform = DeviceTransform(data.transform, 3, device)
        self.steps = _Steps(data)
        self.loader = self._loader(self.steps)

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    def _loader(self, steps: torch.utils.data.Sampler[Any]) -> torch.utils.data.DataLoader[Any]:
        from dlscale.datasets.loader_pool import PREFETCH

        workers = self.data.loader_workers
        return torch.utils.data.DataLoader(
            _Batches(self.data),
            batch_size=None,  # the data set gives whole batches
            sampler=steps,
            num_workers=workers,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=PREFETCH if workers else None,
            persistent_workers=workers > 0,
        )

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        self.steps.jobs = self.steps.plan(epoch)
        yield from self._inputs(self.loader)

    def eval_batches(self) -> Iterator[Batch]:
        jobs = [(i, None) for i in self.data.eval_steps()]
        if not jobs:
            return
        steps = _Steps(self.data)
        steps.jobs = jobs
        # its own loader: the training one's workers stay alive for the next epoch
        yield from self._inputs(self._loader(steps))

    def _inputs(self, loader: Any) -> Iterator[Batch]:
        for batch in loader:
            if isinstance(batch, BadImage):
                raise batch.error()
            images, labels = (t.to(self.device, non_blocking=True) for t in batch)
            yield self.transform(images), labels


class _Steps(torch.utils.data.Sampler[Any]):
    """The jobs of the current epoch (``(indices, seeds)`` per step), set before iterating; a
    ``Sampler`` runs in the training process, so persistent loader workers see each epoch."""

    def __init__(self, data: ImageFiles) -> None:
        self.data = data
        self.jobs: list[tuple[Any, Any]] = []

    def plan(self, epoch: int) -> list[tuple[Any, Any]]:
        indices, seeds = self.data.train_plan(epoch)
        return list(zip(indices, seeds, strict=True))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


class _Batches(torch.utils.data.Dataset[Any]):
    """A map-style data set whose keys are whole steps: ``(indices, seeds)`` -> the decoded
    batch as tensors, or the :class:`BadImage` that stopped it."""

    def __init__(self, data: ImageFiles) -> None:
        self.data = data

    def __getitem__(self, job: tuple[Any, Any]) -> Any:
        result = self.data.load_batch(*job)
        if isinstance(result, BadImage):
            return result
        images, labels = result
        return torch.from_numpy(images), torch.from_numpy(labels)
