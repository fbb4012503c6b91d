"""Token data sets: sequences of ``block_size`` tokens with their next-token targets.

A token data set is a flat array of token ids (training) and another (held-out). The training
array is cut into ``shards`` equal contiguous parts, one per data-parallel replica, so no two
replicas ever read the same sequence; a part holds ``(len - 1) // block_size`` sequences
side by side (sequence ``k``: tokens ``k*T .. k*T+T`` as inputs, the next ``T`` as targets),
visited in an order drawn from ``(seed, epoch)``. The held-out array is cut the same way, in
order. Everything is numpy, so every framework trains on the same tokens.

* ``tokens``: seeded random tokens per replica, below the model's vocabulary (throughput; no
  file, nothing held out);
* ``python-source``: the bytes of the running Python's standard library ``.py`` files
  (:mod:`dlscale.datasets.python_source`), a byte vocabulary;
* ``token-file``: a user's ``train.bin`` and ``val.bin`` of flat ``uint16`` or ``uint32``
  token ids, as nanoGPT's ``prepare.py`` writes them (:mod:`dlscale.datasets.token_files`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscale.contract.errors import DataError
from dlscale.datasets.arrays import PERMUTATION_STRIDE, NumpyDataset, eval_range

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

TokenBatch = tuple[np.ndarray, np.ndarray]
"""Inputs and targets, each int64 ``(B, T)``: targets are the inputs shifted by one token."""


@dataclass(frozen=True, kw_only=True, eq=False)
class TokenArrays(NumpyDataset):
    """One process's view of a token data set: replicas ``shard`` to
    ``shard + replicas - 1`` of ``shards``, each ``batch`` sequences per step."""

    name: str
    train: tuple[np.ndarray, ...] = field(repr=False)
    """Each of this process's replicas' own part of the training tokens (1-D, any integer
    type), in replica order."""
    held_out: np.ndarray = field(repr=False)
    """The whole held-out token array (1-D); this process evaluates its replicas' part."""
    block_size: int
    num_classes: int
    """The vocabulary: every token id is below it."""
    batch: int
    seed: int
    shard: int
    shards: int
    replicas: int = 1
    facts: dict[str, Any] = field(default_factory=dict)
    """What the run records about the data (a corpus' hash and where it came from)."""
    steps_per_epoch: int = field(init=False)
    input_shape: tuple[int, ...] = field(init=False)
    has_eval: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.batch < 1 or len(self.train) != self.replicas:
            raise ValueError(f"{self.name}: invalid block size, batch or replica parts")
        sequences = min(self.sequences(part) for part in self.train)
        if sequences // self.batch == 0:
            raise DataError(
                f"{self.name}: too few tokens for the batch: {len(self.train[0]):,} training "
                f"tokens per worker make {sequences} sequence(s) of {self.block_size} "
                f"(block_size), fewer than batch_per_worker {self.batch}; use a smaller "
                "batch_size or block_size, or more data"
            )
        object.__setattr__(self, "steps_per_epoch", sequences // self.batch)
        object.__setattr__(self, "input_shape", (self.block_size,))
        held = eval_range(len(self.held_out), rank=self.shard, world=self.shards)
        object.__setattr__(self, "has_eval", (held[1] - held[0]) > self.block_size)

    def sequences(self, part: np.ndarray) -> int:
        """Whole sequences (with their next token) in a part of ``len(part)`` tokens."""
        return max(0, (len(part) - 1) // self.block_size)

    def order(self, epoch: int) -> np.ndarray:
        """The sequences of each part visited in ``epoch``: one permutation for every part,
        drawn from ``(seed, epoch)``."""
        rng = np.random.default_rng(self.seed * PERMUTATION_STRIDE + epoch)
        count = self.steps_per_epoch * self.batch
        return rng.permutation(self.sequences(self.train[0]))[:count]

    def train_batches(self, epoch: int) -> Iterator[TokenBatch]:
        """``steps_per_epoch`` batches of ``batch * replicas`` sequences, the replicas'
        batches concatenated in replica order."""
        order = self.order(epoch).reshape(self.steps_per_epoch, self.batch)
        offsets = np.arange(self.block_size + 1)
        for step in order:
            windows = [part[(step * self.block_size)[:, None] + offsets] for part in self.train]
            tokens = np.concatenate(windows).astype(np.int64)
            yield tokens[:, :-1], tokens[:, 1:]

    def eval_batches(self) -> Iterator[TokenBatch]:
        """This process's contiguous part of the held-out tokens, as whole sequences in order,
        ``batch * replicas`` at a time (the last batch may be smaller)."""
        start = eval_range(len(self.held_out), rank=self.shard, world=self.shards)[0]
        last = self.shard + self.replicas - 1
        stop = eval_range(len(self.held_out), rank=last, world=self.shards)[1]
        count = max(0, (stop - start - 1) // self.block_size)
        offsets = np.arange(self.block_size + 1)
        size = self.batch * self.replicas
        for first in range(0, count, size):
            ks = np.arange(first, min(first + size, count))
            tokens = self.held_out[start + (ks * self.block_size)[:, None] + offsets]
            tokens = tokens.astype(np.int64)
            yield tokens[:, :-1], tokens[:, 1:]


def parts(tokens: np.ndarray, *, shard: int, replicas: int, shards: int) -> tuple[np.ndarray, ...]:
    """Replicas ``shard..shard+replicas-1``'s equal contiguous parts of ``tokens`` (the tail
    that does not divide is left out, so every replica has as many sequences)."""
    size = len(tokens) // shards
    return tuple(tokens[r * size : (r + 1) * size] for r in range(shard, shard + replicas))


def from_corpus(
    name: str,
    cfg: RunConfig,
    train: np.ndarray,
    held_out: np.ndarray,
    *,
    shard: int,
    shards: int,
    replicas: int,
    block_size: int,
    vocab: int,
    facts: dict[str, Any],
) -> TokenArrays:
    """A process's view of a corpus of one training and one held-out token array: its
    replicas' contiguous parts of the training tokens (:func:`parts`), the whole held-out
    array, the run's batch and seed."""
    return TokenArrays(
        name=name,
        train=parts(train, shard=shard, replicas=replicas, shards=shards),
        held_out=held_out,
        block_size=block_size,
        num_classes=vocab,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        shard=shard,
        shards=shards,
        replicas=replicas,
        facts=facts,
    )


def check_vocabulary(name: str, tokens: np.ndarray, vocab: int, where: str) -> None:
    """:class:`DataError` naming the first token id at or above ``vocab``."""
    if len(tokens) and int(tokens.max()) >= vocab:
        bad = int(np.argmax(tokens >= vocab))
        raise DataError(
            f"{name}: {where} holds token id {int(tokens[bad])} at position {bad:,}, not "
            f"below the model's vocabulary {vocab}; set vocab_size above it (--set "
            f"vocab_size={int(tokens.max()) + 1}) or use a model with a larger vocabulary"
        )


def load_random(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> TokenArrays:
    """``tokens``: for each replica its own seeded random tokens below the vocabulary
    (``num_classes``), ``samples_per_epoch / shards`` sequences of ``input_size`` (at least a
    batch); nothing held out."""
    from dlscale.datasets.options import RandomTokenOptions

    per_epoch = cfg.typed(RandomTokenOptions).samples_per_epoch
    per_replica = max(cfg.batch_per_worker, per_epoch // shards)
    length = per_replica * input_size + 1
    dtype = np.uint16 if num_classes <= 1 << 16 else np.uint32
    train = tuple(
        np.random.default_rng(np.random.SeedSequence((cfg.seed, replica))).integers(
            0, num_classes, length, dtype=dtype
        )
        for replica in range(shard, shard + replicas)
    )
    return TokenArrays(
        name="tokens",
        train=train,
        held_out=np.zeros(0, dtype),
        block_size=input_size,
        num_classes=num_classes,
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        shard=shard,
        shards=shards,
        replicas=replicas,
    )
