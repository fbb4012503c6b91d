"""dlscale's own data sets (the ``dlscale.plugins`` entry point ``datasets``): synthetic,
CIFAR-10, image folders (ImageNet and its subsets) and digits, registered through the door an
outside plug-in uses."""

from __future__ import annotations

from typing import Any

from dlscale.contract.datasets import DATASETS, DatasetSpec
from dlscale.contract.errors import UserError
from dlscale.contract.options import declared
from dlscale.datasets.options import (
    ImageOptions,
    ImageSubsetOptions,
    RandomTokenOptions,
    SyntheticOptions,
)
from dlscale.datasets.python_source import VOCABULARY, PythonSourceOptions
from dlscale.datasets.token_files import TokenFileOptions

DATASETS.register(
    "synthetic",
    DatasetSpec(
        name="synthetic",
        description="one random batch, put on the training device once (no input-pipeline cost)",
        loader="dlscale.datasets.synthetic:load",
        needs_data_dir=False,
        has_eval=False,
        num_classes=None,
        generated=True,
        options=declared(SyntheticOptions),
    ),
)
DATASETS.register(
    "own",
    DatasetSpec(
        name="own",
        description="what a training script reads itself (dlscale run --script): dlscale "
        "loads nothing",
        loader="dlscale.datasets.plugin:no_loader",
        needs_data_dir=False,
        has_eval=False,
        num_classes=None,
        script_data=True,
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
        options=declared(ImageOptions),
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
        options=declared(ImageSubsetOptions),
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
DATASETS.register(
    "tokens",
    DatasetSpec(
        name="tokens",
        description="seeded random tokens below the model's vocabulary, each worker its own "
        "(throughput; nothing held out)",
        loader="dlscale.datasets.tokens:load_random",
        needs_data_dir=False,
        has_eval=False,
        num_classes=None,
        sample="tokens",
        generated=True,
        options=declared(RandomTokenOptions),
    ),
)
DATASETS.register(
    "python-source",
    DatasetSpec(
        name="python-source",
        description="the bytes of the running Python's standard library .py files (about "
        "10 MB, every 10th file held out), a byte vocabulary of 256; no download",
        loader="dlscale.datasets.python_source:load",
        needs_data_dir=False,
        has_eval=True,
        num_classes=VOCABULARY,
        sample="tokens",
        options=declared(PythonSourceOptions),
    ),
)
DATASETS.register(
    "token-file",
    DatasetSpec(
        name="token-file",
        description="your corpus: train.bin and val.bin of flat uint16/uint32 token ids in "
        "--data-dir (nanoGPT's prepare.py format)",
        loader="dlscale.datasets.token_files:load",
        checker="dlscale.datasets.token_files:check",
        needs_data_dir=True,
        has_eval=True,
        num_classes=None,
        sample="tokens",
        options=declared(TokenFileOptions),
    ),
)


def no_loader(*args: Any, **kwargs: Any) -> Any:
    """Data set ``own`` has no loader: its points are scripts, which read their own data
    (``RunConfig`` gives it to no other point)."""
    raise UserError("dataset own is read by the training script itself; dlscale loads none")
