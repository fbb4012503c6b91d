"""Synthetic data, as in tf_cnn_benchmarks: one random batch made once, fed at every step.

Every step feeds the same arrays, so the measurement has no input-pipeline cost. An "epoch" is
the ``samples_per_epoch`` option (images over all replicas; at least one step). The batch is
already in model-input form (standard normal float32), so no transform applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dlscale.datasets.arrays import SyntheticArrays
from dlscale.datasets.options import SyntheticOptions

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

SEED_STRIDE = 7919
"""Generator seed = ``seed * SEED_STRIDE + replica``: a different batch on every replica."""
CHANNELS = 3


def load(
    cfg: RunConfig,
    *,
    shard: int,
    shards: int,
    replicas: int = 1,
    input_size: int,
    num_classes: int,
) -> SyntheticArrays:
    """One fixed random batch of ``cfg.batch_per_worker`` images per replica, for replicas
    ``shard`` to ``shard + replicas - 1`` of ``shards`` (concatenated in that order)."""
    batch = cfg.batch_per_worker
    images, labels = [], []
    for replica in range(shard, shard + replicas):
        rng = np.random.default_rng(cfg.seed * SEED_STRIDE + replica)
        shape = (batch, CHANNELS, input_size, input_size)
        images.append(rng.standard_normal(shape, dtype=np.float32))
        labels.append(rng.integers(0, num_classes, batch, dtype=np.int64))
    steps = max(1, cfg.typed(SyntheticOptions).samples_per_epoch // (batch * shards))
    return SyntheticArrays(
        images=np.concatenate(images),
        labels=np.concatenate(labels),
        num_classes=num_classes,
        steps_per_epoch=steps,
    )
