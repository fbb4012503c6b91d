"""The built-in data sets' options, declared once each as a dataclass: the core validates the
Options derived from it (:func:`dlscale.contract.options.declared`, registered in
:mod:`dlscale.datasets.plugin`) and the readers use them typed."""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.contract.options import setting

_CLASSES = "train on the first N classes (sorted folder names, or labels below N); 0: all"
_PER_CLASS = "training images per class (the first by name or shard order); 0: all"


@dataclass(frozen=True)
class SyntheticOptions:
    samples_per_epoch: int = setting(
        50000, "images per epoch over all workers in epoch mode", minimum=1
    )


@dataclass(frozen=True)
class RandomTokenOptions:
    samples_per_epoch: int = setting(
        4096, "sequences per epoch over all workers (at least a batch per worker)", minimum=1
    )


@dataclass(frozen=True)
class ImageOptions:
    """The settings of the data sets read from image files (:mod:`dlscale.datasets.imagenet`)."""

    layout: str = setting(
        "auto",
        "folder: train/<class>/*.JPEG (and val/); tfrecord: train-NNNNN-of-NNNNN shards (and "
        "validation-); auto: whichever is there",
        choices=("auto", "folder", "tfrecord"),
    )
    classes: int = setting(0, _CLASSES, minimum=0)
    images_per_class: int = setting(0, _PER_CLASS, minimum=0)
    loader_workers: int = setting(
        2,
        "decoding processes per training process (0: decode in the training process)",
        minimum=0,
    )
    verify: str = setting(
        "headers",
        "what the parent reads before training: every image's start and end bytes and every "
        "TFRecord checksum (headers), every image decoded (decode), or nothing",
        choices=("headers", "decode", "none"),
    )
    bad_files: str = setting(
        "fail",
        "fail: a bad image stops the run before training, naming the file; skip: leave bad "
        "images out and say how many",
        choices=("fail", "skip"),
    )


@dataclass(frozen=True)
class ImageSubsetOptions(ImageOptions):
    """imagenet-subset: the same settings, a slice by default."""

    classes: int = setting(10, _CLASSES, minimum=0)
    images_per_class: int = setting(100, _PER_CLASS, minimum=0)
