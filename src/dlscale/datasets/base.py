"""Worker-side data set contract (imports torch: used only inside workers)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

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
