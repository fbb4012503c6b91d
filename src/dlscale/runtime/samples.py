"""One helper that loads a training process's samples for every engine: the run's data set
sharded over its replicas, at the model's input size (an image's side, a sequence's tokens) and
its number of outputs (classes, a vocabulary)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlscale.contract.datasets import DATASETS
from dlscale.contract.models import MODELS

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig
    from dlscale.runtime.context import WorkerContext


def model_outputs(cfg: RunConfig) -> int:
    """What the model predicts over: the data set's classes or vocabulary, else the model's
    (synthetic images, random tokens)."""
    classes = DATASETS.get(cfg.dataset).num_classes
    return classes or MODELS.get(cfg.model).input_shape(cfg.options)[1]


def load_samples(
    ctx: WorkerContext, *, replicas: int | None = None, num_classes: int | None = None
) -> Any:
    """This process's replicas' shard of the run's data set (``replicas`` of them from its
    first, by default the process's own), for ``num_classes`` outputs (by default the model's
    own: synthetic data draws labels below it): a ``dlscale.datasets.arrays.NumpyDataset``
    (runtime/ sits beside datasets/, so it is not named as a type here)."""
    cfg = ctx.config
    size, classes = MODELS.get(cfg.model).input_shape(cfg.options)
    return DATASETS.get(cfg.dataset).load(
        cfg,
        shard=ctx.layout.first_replica(ctx.rank),
        shards=cfg.workers,  # servers hold no data
        replicas=ctx.process.replicas if replicas is None else replicas,
        input_size=cfg.image_size or size,
        num_classes=classes if num_classes is None else num_classes,
    )
