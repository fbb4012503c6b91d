"""Small real image data sets written by the tests themselves: JPEG class folders and TFRecord
shards of ``tf.train.Example`` records (Pillow encodes; dlscale's writer frames the records)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from dlscale.datasets.image_files import encode_example, write_records

SIZES = ((40, 30), (24, 36), (32, 32), (50, 20))
"""Width x height of the images in turn: landscape, portrait, square, very wide."""


def jpeg_bytes(index: int, label: int) -> bytes:
    """A small JPEG whose colour depends on its class (so a model can learn something)."""
    width, height = SIZES[index % len(SIZES)]
    rng = np.random.default_rng(index * 131 + label)
    pixels = rng.integers(0, 60, (height, width, 3), dtype=np.uint8)
    pixels[..., label % 3] += np.uint8(120 + 20 * (label // 3))
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_folder(root: Path, classes: int = 3, per_class: int = 8, val_per_class: int = 2) -> Path:
    """``root/train/n0000000c/*.JPEG`` and ``root/val/...``: the folder layout."""
    for split, count in (("train", per_class), ("val", val_per_class)):
        for label in range(classes):
            folder = root / split / f"n{label:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                name = f"n{label:08d}_{i}.JPEG"
                (folder / name).write_bytes(
                    jpeg_bytes(i + (0 if split == "train" else 1000), label)
                )
    return root


def write_tfrecords(
    root: Path, classes: int = 3, per_class: int = 8, shards: int = 2, val_per_class: int = 2
) -> Path:
    """``root/train-0000i-of-0000n`` and ``root/validation-00000-of-00001``: labels from 1."""
    root.mkdir(parents=True, exist_ok=True)
    for split, count, parts in (("train", per_class, shards), ("validation", val_per_class, 1)):
        payloads = [
            encode_example(jpeg_bytes(i + (0 if split == "train" else 1000), label), label + 1)
            for i in range(count)
            for label in range(classes)
        ]
        for part in range(parts):
            write_records(root / f"{split}-{part:05d}-of-{parts:05d}", payloads[part::parts])
    return root
