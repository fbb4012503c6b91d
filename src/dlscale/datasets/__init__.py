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
    :func:`dlscale.frameworks.torch.data.to_torch` puts it on a torch device."""
    needs_data_dir: bool
    has_eval: bool
    """Whether an accuracy on held-out data means anything (not for synthetic data)."""
    num_classes: int | None
    """Classes of the data set; ``None`` follows the model (synthetic data)."""
    checker: str | None = None
    """``module:function(data_dir: Path | None, options: dict) -> list[str] | None`` run by the
    parent before launching, with the data set's resolved options; raises
    :class:`dlscale.errors.DataError` naming the bad file, or returns notes for the user (what
    it left out). Needs no framework."""

    options: tuple[Option, ...] = ()
    """The data set's own settings (study keys)."""
    loader_processes: str | None = None
    """The option whose value is how many processes each training process starts to load
    data (the resource guard counts them); ``None``: none."""

    def helper_processes(self, options: dict[str, Any]) -> int:
        """Loader processes per training process under ``options``."""
        return int(options[self.loader_processes]) if self.loader_processes else 0

    def check(self, data_dir: Path | None, options: dict[str, Any] | None = None) -> list[str]:
        """The checker's notes (none without a checker)."""
        if self.checker is None:
            return []
        return list(load_object(self.checker)(data_dir, options or {}) or [])

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


def _image_options(classes: int, per_class: int) -> tuple[Option, ...]:
    """The settings of the data sets read from image files (:mod:`dlscale.datasets.imagenet`)."""
    return (
        Option(
            name="layout",
            type="str",
            default="auto",
            choices=("auto", "folder", "tfrecord"),
            help="folder: train/<class>/*.JPEG (and val/); tfrecord: train-NNNNN-of-NNNNN "
            "shards (and validation-); auto: whichever is there",
        ),
        Option(
            name="classes",
            type="int",
            default=classes,
            minimum=0,
            help="train on the first N classes (sorted folder names, or labels below N); 0: all",
        ),
        Option(
            name="images_per_class",
            type="int",
            default=per_class,
            minimum=0,
            help="training images per class (the first by name or shard order); 0: all",
        ),
        Option(
            name="loader_workers",
            type="int",
            default=2,
            minimum=0,
            help="decoding processes per training process (0: decode in the training process)",
        ),
        Option(
            name="verify",
            type="str",
            default="headers",
            choices=("headers", "decode", "none"),
            help="what the parent reads before training: every image's start and end bytes "
            "and every TFRecord checksum (headers), every image decoded (decode), or nothing",
        ),
        Option(
            name="bad_files",
            type="str",
            default="fail",
            choices=("fail", "skip"),
            help="fail: a bad image stops the run before training, naming the file; skip: "
            "leave bad images out and say how many",
        ),
    )


DATASETS.register(
    "imagenet",
    DatasetSpec(
        name="imagenet",
        description="ImageNet from --data-dir (JPEG class folders or TFRecord shards), "
        "decoded and augmented at every step by loader processes",
        loader="dlscale.datasets.imagenet:load",
        checker="dlscale.datasets.imagenet:check",
        needs_data_dir=True,
        has_eval=True,
        num_classes=1000,
        options=_image_options(classes=0, per_class=0),
        loader_processes="loader_workers",
    ),
)
DATASETS.register(
    "imagenet-subset",
    DatasetSpec(
        name="imagenet-subset",
        description="a slice of an ImageNet directory (first `classes` classes, "
        "`images_per_class` each) to time the input pipeline on less data",
        loader="dlscale.datasets.imagenet:load",
        checker="dlscale.datasets.imagenet:check",
        needs_data_dir=True,
        has_eval=True,
        num_classes=None,
        options=_image_options(classes=10, per_class=100),
        loader_processes="loader_workers",
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
