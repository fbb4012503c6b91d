"""Worker-side data set contract (imports torch: used only inside workers)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

import torch

from dlscale.errors import DataError

Batch = tuple[torch.Tensor, torch.Tensor]


class TorchDataset(ABC):
    """One rank's view of a data set, already on the training device.

    ``train_batches(epoch)`` yields exactly ``steps_per_epoch`` batches of ``batch_per_worker``
    images (float32, NCHW, normalized) and int64 labels; ``eval_batches()`` yields this rank's
    disjoint shard of the held-out set (possibly with a smaller last batch).
    """

    num_classes: int
    input_shape: tuple[int, int, int]

    @property
    @abstractmethod
    def steps_per_epoch(self) -> int: ...

    @abstractmethod
    def train_batches(self, epoch: int) -> Iterator[Batch]: ...

    def eval_batches(self) -> Iterator[Batch]:
        return iter(())


class InMemoryDataset(TorchDataset):
    """A data set held whole on the device: per-epoch shards, full batches, eval shards.

    Subclasses set ``name`` and may override ``train_transform`` (e.g. augmentation, drawn per
    epoch) and ``eval_transform`` (e.g. normalization), which turn stored images into inputs.
    """

    name: str

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
        input_size: int,
    ) -> None:
        self.x_train, self.y_train = x_train, y_train
        self.x_test, self.y_test = x_test, y_test
        self.batch, self.seed, self.rank, self.world = batch, seed, rank, world
        self.input_size = input_size
        self.input_shape = (3, input_size, input_size)
        self._steps = checked_steps(self.name, len(x_train), batch=batch, world=world)

    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def train_batches(self, epoch: int) -> Iterator[Batch]:
        """``steps_per_epoch`` batches of this rank's shard for ``epoch``."""
        indices = shard_indices(
            len(self.x_train), epoch=epoch, seed=self.seed, rank=self.rank, world=self.world
        ).to(self.x_train.device)
        transform = self.train_transform(epoch)
        for step in range(self._steps):
            batch_indices = indices[step * self.batch : (step + 1) * self.batch]
            yield transform(self.x_train[batch_indices]), self.y_train[batch_indices]

    def eval_batches(self) -> Iterator[Batch]:
        """This rank's contiguous shard of the held-out set (ranks partition it)."""
        start, stop = eval_range(len(self.x_test), rank=self.rank, world=self.world)
        for first in range(start, stop, self.batch):
            last = min(first + self.batch, stop)
            yield self.eval_transform(self.x_test[first:last]), self.y_test[first:last]

    def train_transform(self, epoch: int) -> Callable[[torch.Tensor], torch.Tensor]:
        return self.eval_transform

    def eval_transform(self, images: torch.Tensor) -> torch.Tensor:
        return images


def shard_indices(n: int, *, epoch: int, seed: int, rank: int, world: int) -> torch.Tensor:
    """This rank's sample indices for one epoch, with DistributedSampler semantics.

    The permutation depends only on (seed, epoch), so every rank draws the same one and takes
    a disjoint, interleaved shard; the permutation is padded by repeating its head so that all
    ranks have the same count. With N ranks of batch b, step i covers exactly the samples that
    one rank of batch N*b covers at step i (the basis of the equivalence tests).
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=generator)
    total = -(-n // world) * world
    if total > n:
        perm = torch.cat([perm, perm[: total - n]])
    return perm[rank::world]


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
