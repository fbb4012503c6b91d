"""Image data sets on local disk: the class-folder and TFRecord layouts, found, checked and read.

Framework-free (numpy, Pillow; ``protobuf`` and ``google-crc32c`` for TFRecords, imported when a
TFRecord is read). :func:`scan` lists the images of one split as :class:`Entry` rows with their
labels; :func:`verify` finds the bad ones; :func:`read_bytes` gives one image's encoded bytes
from either layout, so the decoders never care where an image lives.

Layouts (as users have them on disk):

``folder``
    ``DIR/train/<class>/<image>`` and optionally ``DIR/val/<class>/<image>``, as torchvision's
    ``ImageFolder`` reads it: classes are the sorted folder names, label = position.
``tfrecord``
    ``DIR/train-00000-of-01024`` ... and optionally ``DIR/validation-00000-of-00128`` ...: shards
    of ``tf.train.Example`` records as tf_cnn_benchmarks and the TF models write them
    (``image/encoded`` JPEG bytes, ``image/class/label`` an int64 in 1..1000, 0 being the
    background class of those scripts, so label = value - 1). Each record is framed as
    ``uint64 length, uint32 masked crc32c(length), data, uint32 masked crc32c(data)``.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.contract.errors import DataError

LAYOUTS = ("auto", "folder", "tfrecord")
VERIFY = ("headers", "decode", "none")
"""How much the parent reads before training: ``headers``: every image's first and last bytes
(a JPEG's start and end markers, a PNG's signature) and, for TFRecords, every record's framing
and checksums; ``decode``: every image decoded in full; ``none``: the layout only."""
SPLITS = {"folder": ("train", "val"), "tfrecord": ("train", "validation")}
IMAGE_SUFFIXES = frozenset({".jpeg", ".jpg", ".png"})
SHARD = re.compile(r"^(?P<split>[a-z]+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})\Z")
TFRECORD_LABEL_OFFSET = 1
"""TFRecord labels count from 1 (0 is the background class of tf_cnn_benchmarks' data)."""
JPEG_START, JPEG_END = b"\xff\xd8\xff", b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TAIL = 4096
"""Bytes at the end of a JPEG searched for its end marker (some writers pad after it)."""


@dataclass(frozen=True)
class Entry:
    """Where one image's encoded bytes are: a file, or ``length`` data bytes of a TFRecord
    record at byte ``offset`` of the shard ``path`` (``offset`` -1: the whole file)."""

    path: str
    offset: int = -1
    length: int = 0

    def where(self) -> str:
        return self.path if self.offset < 0 else f"{self.path} (record at byte {self.offset})"


@dataclass(frozen=True)
class Split:
    """The images of one split: entries, their labels (int64) and the class names."""

    entries: tuple[Entry, ...]
    labels: np.ndarray
    classes: tuple[str, ...]


def detect_layout(data_dir: Path, layout: str) -> str:
    """``folder`` or ``tfrecord``: the one asked for, or the one found under ``data_dir``."""
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: not a directory; point --data-dir at the data set")
    if layout != "auto":
        return layout
    if (data_dir / "train").is_dir():
        return "folder"
    if any(SHARD.match(p.name) and p.name.startswith("train-") for p in data_dir.iterdir()):
        return "tfrecord"
    raise DataError(
        f"{data_dir}: found neither a train/ folder of class folders nor TFRecord shards "
        "train-NNNNN-of-NNNNN; see docs/datasets.md"
    )


def scan(
    data_dir: Path, *, layout: str, split: str, classes: int = 0, per_class: int = 0
) -> Split | None:
    """The images of ``split`` (``train`` or ``eval``); ``None`` when an ``eval`` split is absent.

    ``classes`` > 0 keeps the first that many classes (sorted names; TFRecords: labels below
    it), ``per_class`` > 0 the first that many images of each (sorted names; TFRecords: the
    order of the shards). A missing train split, an empty class folder, a folder without
    classes or too few classes is a :class:`DataError` naming the path.
    """
    layout = detect_layout(data_dir, layout)
    name = SPLITS[layout][0 if split == "train" else 1]
    if layout == "folder":
        return _scan_folder(data_dir, name, required=split == "train", keep=classes, per=per_class)
    return _scan_tfrecords(data_dir, name, required=split == "train", keep=classes, per=per_class)


def _scan_folder(data_dir: Path, name: str, *, required: bool, keep: int, per: int) -> Split | None:
    root = data_dir / name
    if not root.is_dir():
        if required:
            raise DataError(f"{root}: missing; the folder layout needs {name}/<class>/<images>")
        return None
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    if not folders:
        raise DataError(f"{root}: no class folders; the layout is {name}/<class>/<images>")
    if keep:
        if len(folders) < keep:
            raise DataError(f"{root}: {len(folders)} class folders, fewer than classes = {keep}")
        folders = folders[:keep]
    entries: list[Entry] = []
    labels: list[int] = []
    for label, folder in enumerate(folders):
        files = sorted(
            f.path
            for f in os.scandir(folder)
            if f.is_file() and os.path.splitext(f.name)[1].lower() in IMAGE_SUFFIXES
        )
        if not files:
            raise DataError(f"{folder}: an empty class folder (no .JPEG, .jpg or .png files)")
        files = files[:per] if per else files
        entries += [Entry(f) for f in files]
        labels += [label] * len(files)
    return Split(tuple(entries), np.asarray(labels, np.int64), tuple(f.name for f in folders))


def shard_files(data_dir: Path, name: str) -> list[Path]:
    """The shards ``name-NNNNN-of-MMMMM`` in order; a :class:`DataError` if some are missing."""
    shards = sorted(
        p for p in data_dir.iterdir() if (m := SHARD.match(p.name)) and m["split"] == name
    )
    if shards:
        count = int(SHARD.match(shards[0].name)["count"])  # type: ignore[index]
        found = {int(SHARD.match(p.name)["index"]) for p in shards}  # type: ignore[index]
        missing = sorted(set(range(count)) - found)
        if missing:
            raise DataError(
                f"{data_dir}: {len(missing)} of {count} {name} shards missing "
                f"(first: {name}-{missing[0]:05d}-of-{count:05d})"
            )
    return shards


def _scan_tfrecords(
    data_dir: Path, name: str, *, required: bool, keep: int, per: int
) -> Split | None:
    shards = shard_files(data_dir, name)
    if not shards:
        if required:
            raise DataError(f"{data_dir}: no {name}-NNNNN-of-NNNNN TFRecord shards")
        return None
    entries: list[Entry] = []
    labels: list[int] = []
    taken: dict[int, int] = {}
    for shard in shards:
        for offset, data in records(shard, check_data=False):
            encoded, label = example_image(data, shard, offset)
            if keep and label >= keep:
                continue
            if per and taken.get(label, 0) >= per:
                continue
            taken[label] = taken.get(label, 0) + 1
            start, length = encoded
            entries.append(Entry(str(shard), offset + start, length))
            labels.append(label)
    if not entries:
        raise DataError(f"{data_dir}: the {name} shards hold no images of the classes asked for")
    top = max(labels) + 1
    return Split(tuple(entries), np.asarray(labels, np.int64), tuple(map(str, range(top))))


# --------------------------------------------------------------------------------------------
# TFRecords


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path: Path, *, check_data: bool = True) -> Iterator[tuple[int, bytes]]:
    """``(offset of the data in the file, data)`` of every record of the shard ``path``.

    The length's checksum is always checked; the data's when ``check_data``. A truncated
    record or a wrong checksum is a :class:`DataError` naming the file and the byte.
    """
    with open(path, "rb") as f:
        while header := f.read(12):
            at = f.tell() - len(header)
            if len(header) < 12:
                raise DataError(f"{path}: truncated record header at byte {at}")
            (length,) = struct.unpack("<Q", header[:8])
            if struct.unpack("<I", header[8:])[0] != masked_crc(header[:8]):
                raise DataError(f"{path}: corrupt record at byte {at} (bad length checksum)")
            body = f.read(length + 4)
            if len(body) < length + 4:
                raise DataError(f"{path}: truncated record at byte {at}")
            data = body[:length]
            if check_data and struct.unpack("<I", body[length:])[0] != masked_crc(data):
                raise DataError(f"{path}: corrupt record at byte {at} (bad data checksum)")
            yield at + 12, data


@functools.cache
def _example_class() -> Any:
    """``tf.train.Example`` as a protobuf message class, built from its definition here (the
    fields of tensorflow/core/example/{example,feature}.proto), so no TensorFlow is needed."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="dlscale/tf_example.proto", package="tensorflow", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> Any:
        kind = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            added = kind.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                added.type_name = type_name
        return kind

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    message("BytesList", ("value", 1, field.TYPE_BYTES, repeated, ""))
    message("FloatList", ("value", 1, field.TYPE_FLOAT, repeated, ""))
    message("Int64List", ("value", 1, field.TYPE_INT64, repeated, ""))
    feature = message(
        "Feature",
        ("bytes_list", 1, field.TYPE_MESSAGE, optional, ".tensorflow.BytesList"),
        ("float_list", 2, field.TYPE_MESSAGE, optional, ".tensorflow.FloatList"),
        ("int64_list", 3, field.TYPE_MESSAGE, optional, ".tensorflow.Int64List"),
    )
    feature.oneof_decl.add(name="kind")
    for f in feature.field:
        f.oneof_index = 0
    features = message(
        "Features",
        ("feature", 1, field.TYPE_MESSAGE, repeated, ".tensorflow.Features.FeatureEntry"),
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=optional)
    entry.field.add(
        name="value", number=2, type=field.TYPE_MESSAGE, label=optional,
        type_name=".tensorflow.Feature",
    )  # fmt: skip
    message("Example", ("features", 1, field.TYPE_MESSAGE, optional, ".tensorflow.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def example_image(data: bytes, path: Path, offset: int) -> tuple[tuple[int, int], int]:
    """``((start, length) of image/encoded inside ``data``, label from 0)`` of one record."""
    from google.protobuf.message import DecodeError

    try:
        example = _example_class().FromString(data)
    except DecodeError:
        raise DataError(f"{path}: record at byte {offset} is not a tf.train.Example") from None
    feature = example.features.feature
    if "image/encoded" not in feature or "image/class/label" not in feature:
        raise DataError(f"{path}: record at byte {offset} lacks image/encoded or image/class/label")
    encoded = feature["image/encoded"].bytes_list.value
    label = feature["image/class/label"].int64_list.value
    if len(encoded) != 1 or len(label) != 1 or label[0] < TFRECORD_LABEL_OFFSET:
        raise DataError(f"{path}: record at byte {offset} has no single image and label >= 1")
    image = encoded[0]
    start = data.find(image)  # the bytes field is stored verbatim in the record
    return (start, len(image)), int(label[0]) - TFRECORD_LABEL_OFFSET


def encode_example(image: bytes, label: int) -> bytes:
    """A ``tf.train.Example`` of one image and its TFRecord label (from 1), serialized."""
    example = _example_class()()
    example.features.feature["image/encoded"].bytes_list.value.append(image)
    example.features.feature["image/class/label"].int64_list.value.append(label)
    return bytes(example.SerializeToString())


def write_records(path: Path, payloads: list[bytes]) -> None:
    """A TFRecord file of ``payloads`` (what tf.io.TFRecordWriter writes)."""
    with open(path, "wb") as f:
        for data in payloads:
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_crc(length)))
            f.write(data + struct.pack("<I", masked_crc(data)))


# --------------------------------------------------------------------------------------------
# Reading and checking images


def read_bytes(entry: Entry) -> bytes:
    """The encoded image of ``entry``."""
    with open(entry.path, "rb") as f:
        if entry.offset < 0:
            return f.read()
        f.seek(entry.offset)
        data = f.read(entry.length)
    if len(data) != entry.length:
        raise DataError(f"{entry.where()}: truncated")
    return data


def header_problem(data: bytes) -> str | None:
    """Why ``data`` is not a whole JPEG or PNG judged by its first and last bytes; ``None``."""
    if data.startswith(JPEG_START):
        if JPEG_END not in data[-TAIL:]:
            return "truncated JPEG (no end marker)"
        return None
    if data.startswith(PNG_SIGNATURE):
        return None if data.endswith(b"IEND\xaeB`\x82") else "truncated PNG"
    return "not a JPEG or PNG image"


def verify(split: Split, mode: str, data_dir: Path) -> list[tuple[Entry, str]]:
    """Every bad image of ``split`` and why, reading as much as ``mode`` says (:data:`VERIFY`).

    TFRecord shards get their framing and every checksum checked under ``headers`` and
    ``decode`` (a bad checksum is a :class:`DataError` at once: the shard cannot be trusted).
    """
    if mode == "none":
        return []
    bad: list[tuple[Entry, str]] = []
    for shard in sorted({e.path for e in split.entries if e.offset >= 0}):
        for _ in records(Path(shard)):
            pass
    for entry in split.entries:
        try:
            data = read_bytes(entry)
        except OSError as error:
            bad.append((entry, f"unreadable ({error.strerror or error})"))
            continue
        problem = header_problem(data)
        if problem is None and mode == "decode":
            problem = decode_problem(data)
        if problem is not None:
            bad.append((entry, problem))
    return bad


def decode_problem(data: bytes) -> str | None:
    """Why Pillow cannot decode ``data`` in full; ``None`` if it can."""
    try:
        decode(data)
    except DataError as error:
        return str(error)
    return None


def decode(data: bytes) -> Any:
    """``data`` decoded by Pillow as an RGB image (a :class:`DataError` says why not)."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise DataError(f"cannot decode: {error}") from None


def drop_bad(split: Split, bad: list[tuple[Entry, str]]) -> Split:
    """``split`` without the entries of ``bad``."""
    gone = {entry for entry, _ in bad}
    keep = [i for i, e in enumerate(split.entries) if e not in gone]
    return Split(tuple(split.entries[i] for i in keep), split.labels[keep], split.classes)
