"""Data set registry: light descriptors; readers and tensors are loaded inside the workers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.options import Option
from dlscale.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """What the core knows about a data set without importing a framework."""

    name: str
    description: str
    loader: str
    """``module:function`` called in a worker as
    ``load(cfg, *, shard, shards, replicas=1, input_size, num_classes)``; returns a
    :class:`dlscale.datasets.arrays.NumpyDataset` (numpy only) of the process that trains
    replicas ``shard`` to ``shard + replicas - 1`` of ``shards``;
    :func:`dlscale.datasets.torch_adapter.to_torch` puts it on a torch device."""
    needs_data_dir: bool
    has_eval: bool
    """Whether an accuracy on held-out data means anything (not for synthetic data)."""
    num_classes: int | None
    """Classes of the data set; ``None`` follows the model (synthetic data)."""
    checker: str | None = None
    """``module:function(data_dir: Path) -> None`` run by the parent before launching; raises
    :class:`dlscale.errors.DataError` naming the bad file. Needs only numpy."""

    options: tuple[Option, ...] = ()
    """The data set's own settings (study keys)."""

    def check(self, data_dir: Path | None) -> None:
        if self.checker is not None:
            load_object(self.checker)(data_dir)

    def load(self, *args: Any, **kwargs: Any) -> Any:
        return load_object(self.loader)(*args, **kwargs)


DATASETS: Registry[DatasetSpec] = Registry("dataset")

DATASETS.register(
    "synthetic",
    DatasetSpec(
        name="synthetic",
        description="one random batch, put on the training device once (no input-pipeline cost)",
        loader="dlscale.datasets.synthetic:load",
        needs_data_dir=False,
        has_eval=False,
        num_classes=None,
        options=(
            Option(
                name="samples_per_epoch",
                type="int",
                default=50000,
                minimum=1,
                help="images per epoch over all workers in epoch mode",
            ),
        ),
    ),
)
DATASETS.register(
    "cifar10",
    DatasetSpec(
        name="cifar10",
        description="CIFAR-10 from --data-dir (official python or binary format), in memory",
        loader="dlscale.datasets.cifar10:load",
        checker="dlscale.datasets.cifar10_files:check",
        needs_data_dir=True,
        has_eval=True,
        num_classes=10,
    ),
)
DATASETS.register(
    "digits",
    DatasetSpec(
        name="digits",
        description="scikit-learn's bundled 8x8 handwritten digits (1,797 images), no download",
        loader="dlscale.datasets.digits:load",
        needs_data_dir=False,
        has_eval=True,
        num_classes=10,
    ),
)
