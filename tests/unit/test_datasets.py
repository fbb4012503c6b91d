"""Data sets: CIFAR-10 file formats, the numpy data sets (order, shards, augmentation, transform)
and their torch adapter."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import pickle
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import DataError
from dlscale.contract.options import typed
from dlscale.datasets import cifar10, cifar10_files, digits, synthetic
from dlscale.datasets.arrays import (
    ArrayDataset,
    NumpyDataset,
    SyntheticArrays,
    Transform,
    augmentation,
    crop_flip,
    resize,
    shard_indices,
    transform_images,
)
from dlscale.frameworks.torch import data as torch_adapter
from dlscale.frameworks.torch.data import to_torch
from dlscale.runtime.allocator import allocator_env, loaded_allocator

T = TypeVar("T")

CPU = torch.device("cpu")
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Reader = Callable[[Path | None], object]
N_TRAIN, N_TEST = 200, 60
WRITERS = {
    "python": cifar10_files.write_python_format,
    "binary": cifar10_files.write_binary_format,
}
SUFFIX = {"python": "", "binary": ".bin"}
MEAN, STD = np.array(cifar10.MEAN, np.float32), np.array(cifar10.STD, np.float32)


# --------------------------------------------------------------------------------------------
# Helpers and fixtures


@dataclass
class Cfg:
    """The part of a RunConfig that the loaders read."""

    batch_per_worker: int = 20
    seed: int = 0
    data_dir: str | None = None
    precision: str = "float32"
    options: dict[str, Any] = field(default_factory=lambda: {"samples_per_epoch": 50000})

    def typed(self, options: type[T]) -> T:
        return typed(options, self.options)


@pytest.fixture(scope="module")
def arrays() -> Arrays:
    """Small CIFAR-shaped data: every training image is constant and equal to its index.

    The centre pixel survives any crop, so a served (augmented, normalized) image tells which
    sample it was.
    """
    rng = np.random.default_rng(0)
    x_train = np.broadcast_to(
        np.arange(N_TRAIN, dtype=np.uint8)[:, None, None, None], (N_TRAIN, 3, 32, 32)
    ).copy()
    y_train = rng.integers(0, 10, N_TRAIN)
    x_test = rng.integers(0, 256, (N_TEST, 3, 32, 32), dtype=np.uint8)
    y_test = rng.integers(0, 10, N_TEST)
    return x_train, y_train, x_test, y_test


@pytest.fixture(params=["python", "binary"])
def fmt(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def data_dir(tmp_path: Path, fmt: str, arrays: Arrays) -> Path:
    WRITERS[fmt](tmp_path, *arrays)
    return tmp_path


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory, arrays: Arrays) -> Path:
    """One directory of CIFAR files for the loader tests (the format does not matter there)."""
    path = tmp_path_factory.mktemp("cifar")
    cifar10_files.write_binary_format(path, *arrays)
    return path


def _cifar(
    data_dir: Path,
    *,
    shard: int = 0,
    shards: int = 1,
    replicas: int = 1,
    size: int = 32,
    batch: int = 20,
    seed: int = 0,
) -> ArrayDataset:
    cfg = Cfg(batch_per_worker=batch, seed=seed, data_dir=str(data_dir))
    return cifar10.load(
        cfg, shard=shard, shards=shards, replicas=replicas, input_size=size, num_classes=1000
    )


def _sample_ids(images: np.ndarray) -> list[int]:
    """Undo the normalization of the centre pixel of channel 0: the sample's index."""
    centre = images[:, 0, 16, 16] * cifar10.STD[0] + cifar10.MEAN[0]
    return np.round(centre * 255).astype(int).tolist()


def _step_ids(data: ArrayDataset, epoch: int) -> list[list[int]]:
    return [_sample_ids(images) for images, _ in data.train_batches(epoch)]


def _epoch_ids(data: ArrayDataset, epoch: int) -> list[int]:
    return [i for ids in _step_ids(data, epoch) for i in ids]


def _numpy(batches: Iterator[tuple[Any, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.asarray(x.cpu()), np.asarray(y.cpu())) for x, y in batches]


def _assert_same_batches(expected: list[Any], actual: list[Any], atol: float = 1e-5) -> None:
    assert len(expected) == len(actual)
    for (x, y), (x2, y2) in zip(expected, actual, strict=True):
        assert x.dtype == x2.dtype == np.float32 and x.shape == x2.shape
        np.testing.assert_allclose(x2, x, rtol=1e-5, atol=atol)
        assert y.dtype == y2.dtype == np.int64
        np.testing.assert_array_equal(y2, y)


def _error(function: Reader, path: Path | None) -> str:
    with pytest.raises(DataError) as info:
        function(path)
    message = str(info.value)
    assert "\n" not in message
    return message


CHECK_AND_READ = pytest.mark.parametrize(
    "function", [cifar10_files.check, cifar10_files.read], ids=["check", "read"]
)


# --------------------------------------------------------------------------------------------
# File formats


def test_read_round_trips(data_dir: Path, arrays: Arrays) -> None:
    cifar10_files.check(data_dir)
    got = cifar10_files.read(data_dir)
    for expected, actual in zip(arrays, got, strict=True):
        np.testing.assert_array_equal(actual, expected)
    assert got[0].dtype == np.uint8 and got[1].dtype == np.int64
    assert got[0].shape == (N_TRAIN, 3, 32, 32) and got[3].shape == (N_TEST,)


@pytest.mark.parametrize("subdir", ["cifar-10-batches-py", "cifar-10-batches-bin"])
def test_archive_subdirectory_is_found(tmp_path: Path, subdir: str, arrays: Arrays) -> None:
    fmt = "python" if subdir.endswith("py") else "binary"
    WRITERS[fmt](tmp_path / subdir, *arrays)
    assert cifar10_files.locate(tmp_path) == (fmt, tmp_path / subdir)
    np.testing.assert_array_equal(cifar10_files.read(tmp_path)[2], arrays[2])


def test_python_files_look_official(tmp_path: Path, arrays: Arrays) -> None:
    cifar10_files.write_python_format(tmp_path, *arrays)
    raw = (tmp_path / "data_batch_2").read_bytes()
    assert raw[:2] == b"\x80\x02"  # pickle protocol 2
    batch = pickle.loads(raw, encoding="bytes")
    assert set(batch) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert batch[b"batch_label"] == b"training batch 2 of 5"
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (N_TRAIN // 5, 3072)
    assert isinstance(batch[b"labels"], list) and len(batch[b"filenames"]) == N_TRAIN // 5
    np.testing.assert_array_equal(batch[b"data"][0].reshape(3, 32, 32), arrays[0][40])


def test_binary_files_look_official(tmp_path: Path, arrays: Arrays) -> None:
    cifar10_files.write_binary_format(tmp_path, *arrays)
    raw = (tmp_path / "test_batch.bin").read_bytes()
    assert len(raw) == N_TEST * 3073
    assert raw[0] == arrays[3][0] and raw[3073] == arrays[3][1]
    assert raw[1:3073] == arrays[2][0].tobytes()


@CHECK_AND_READ
def test_missing_directory(tmp_path: Path, function: Reader) -> None:
    assert "does not exist" in _error(function, tmp_path / "nowhere")
    assert "data directory" in _error(function, None)


@CHECK_AND_READ
def test_empty_directory(tmp_path: Path, function: Reader) -> None:
    message = _error(function, tmp_path)
    assert f"no CIFAR-10 files in {tmp_path}" in message
    assert "data_batch_1..5.bin and test_batch.bin" in message


@CHECK_AND_READ
def test_missing_file(data_dir: Path, fmt: str, function: Reader) -> None:
    path = data_dir / f"data_batch_3{SUFFIX[fmt]}"
    path.unlink()
    message = _error(function, data_dir)
    assert f"{path} is missing" in message


@CHECK_AND_READ
def test_truncated_binary(tmp_path: Path, arrays: Arrays, function: Reader) -> None:
    cifar10_files.write_binary_format(tmp_path, *arrays)
    path = tmp_path / "data_batch_3.bin"
    path.write_bytes(path.read_bytes()[:-100])
    size = N_TRAIN // 5 * 3073 - 100
    message = _error(function, tmp_path)
    assert message == (
        f"cifar10: {path} is {size} bytes; expected a multiple of 3073 "
        "(1 label + 3072 pixel bytes per image)"
    )
    path.write_bytes(b"")
    assert f"{path} is empty" in _error(function, tmp_path)


@CHECK_AND_READ
@pytest.mark.parametrize("damage", ["truncated", "garbage", "hostile"])
def test_corrupt_pickle(tmp_path: Path, arrays: Arrays, function: Reader, damage: str) -> None:
    cifar10_files.write_python_format(tmp_path, *arrays)
    path = tmp_path / "test_batch"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
    elif damage == "garbage":
        path.write_bytes(b"this is not a pickle at all")
    else:  # a pickle that would call a function when loaded
        path.write_bytes(pickle.dumps({b"data": os.getcwd}, protocol=2))
    message = _error(function, tmp_path)
    assert f"{path} is not a readable CIFAR-10 pickle" in message
    if damage == "hostile":
        assert "refusing" in message


@CHECK_AND_READ
def test_wrong_shape_in_pickle(tmp_path: Path, arrays: Arrays, function: Reader) -> None:
    cifar10_files.write_python_format(tmp_path, *arrays)
    path = tmp_path / "data_batch_4"
    batch = {b"data": np.zeros((40, 1024), np.uint8), b"labels": [0] * 40}
    path.write_bytes(pickle.dumps(batch, protocol=2))
    message = _error(function, tmp_path)
    assert f"b'data' in {path} is a uint8 array of shape (40, 1024)" in message
    assert "(N, 3072)" in message
    batch = {b"data": np.zeros((40, 3072), np.uint8), b"labels": [0] * 39}
    path.write_bytes(pickle.dumps(batch, protocol=2))
    assert f"b'labels' in {path}" in _error(function, tmp_path)
    path.write_bytes(pickle.dumps({b"labels": [0]}, protocol=2))
    assert f"{path} has no b'data' entry" in _error(function, tmp_path)


@CHECK_AND_READ
def test_label_out_of_range(tmp_path: Path, fmt: str, arrays: Arrays, function: Reader) -> None:
    x_train, y_train, x_test, y_test = arrays
    y_test = y_test.copy()
    y_test[7] = 12
    WRITERS[fmt](tmp_path, x_train, y_train, x_test, y_test)
    path = tmp_path / f"test_batch{SUFFIX[fmt]}"
    assert _error(function, tmp_path) == (
        f"cifar10: {path} has label 12 at image 7; expected labels 0..9"
    )


def test_registry_check_uses_the_checker(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no CIFAR-10 files"):
        DATASETS.get("cifar10").check(tmp_path)


# --------------------------------------------------------------------------------------------
# Data order: shards of the epoch


def test_shard_indices_are_a_padded_interleaved_permutation() -> None:
    perm = np.random.default_rng(3 * 1_000_003 + 2).permutation(10)
    shards = [shard_indices(10, epoch=2, seed=3, rank=rank, world=4) for rank in range(4)]
    padded = np.concatenate([perm, perm[:2]])  # 10 -> 12: the head repeats
    for rank, indices in enumerate(shards):
        np.testing.assert_array_equal(indices, padded[rank::4])
    assert sorted(np.concatenate(shards).tolist()) == sorted([*range(10), *perm[:2].tolist()])


def test_train_shards_are_disjoint_and_cover_the_epoch(cifar_dir: Path) -> None:
    shards = [_epoch_ids(_cifar(cifar_dir, shard=k, shards=2), 0) for k in range(2)]
    assert len(shards[0]) == len(shards[1]) == N_TRAIN // 2
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(N_TRAIN))


def test_n_shards_of_b_cover_one_shard_of_n_b_at_every_step(cifar_dir: Path) -> None:
    """The basis of the equivalence tests: 2 workers x batch 8 == 1 worker x batch 16."""
    one = _step_ids(_cifar(cifar_dir, batch=16), 1)
    two = [_step_ids(_cifar(cifar_dir, shard=k, shards=2, batch=8), 1) for k in range(2)]
    assert len(one) == len(two[0]) == len(two[1]) == N_TRAIN // 16
    for step, ids in enumerate(one):
        assert sorted(ids) == sorted(two[0][step] + two[1][step])


def test_labels_follow_their_images(cifar_dir: Path, arrays: Arrays) -> None:
    for images, labels in _cifar(cifar_dir, shard=1, shards=2).train_batches(3):
        assert labels.dtype == np.int64
        assert labels.tolist() == arrays[1][_sample_ids(images)].tolist()


def test_order_depends_only_on_seed_and_epoch(cifar_dir: Path) -> None:
    epoch0 = _epoch_ids(_cifar(cifar_dir, shards=2), 0)
    assert epoch0 != _epoch_ids(_cifar(cifar_dir, shards=2), 1)
    assert epoch0 == _epoch_ids(_cifar(cifar_dir, shards=2), 0)
    assert epoch0 != _epoch_ids(_cifar(cifar_dir, shards=2, seed=1), 0)
    first = next(_cifar(cifar_dir, seed=3).train_batches(2))[0]
    again = next(_cifar(cifar_dir, seed=3).train_batches(2))[0]
    np.testing.assert_array_equal(first, again)  # augmentation too
    # the permutation is the same whatever the batch size or the process layout
    whole = _cifar(cifar_dir, batch=10).train_plan(4).indices.ravel()
    np.testing.assert_array_equal(whole, _cifar(cifar_dir, batch=40).train_plan(4).indices.ravel())


def test_replicas_of_a_process_are_consecutive_shards_concatenated(cifar_dir: Path) -> None:
    both = _cifar(cifar_dir, shard=1, shards=4, replicas=2, batch=8)
    parts = [_cifar(cifar_dir, shard=k, shards=4, batch=8) for k in (1, 2)]
    assert both.steps_per_epoch == parts[0].steps_per_epoch == 50 // 8
    plan, plans = both.train_plan(5), [p.train_plan(5) for p in parts]
    for name in ("indices", "top", "left", "flip"):
        joined = np.concatenate([getattr(p, name) for p in plans], axis=1)
        np.testing.assert_array_equal(getattr(plan, name), joined)
    for (x, y), (x1, y1), (x2, y2) in zip(
        both.train_batches(5), parts[0].train_batches(5), parts[1].train_batches(5), strict=True
    ):
        assert x.shape == (16, 3, 32, 32)
        np.testing.assert_array_equal(x, np.concatenate([x1, x2]))
        np.testing.assert_array_equal(y, np.concatenate([y1, y2]))
    evals = [np.concatenate([x for x, _ in d.eval_batches()]) for d in (both, *parts)]
    np.testing.assert_array_equal(evals[0], np.concatenate(evals[1:]))
    assert max(len(y) for _, y in both.eval_batches()) <= 16


def test_batches_shape_dtype_and_steps(cifar_dir: Path) -> None:
    dataset = _cifar(cifar_dir, shards=2, batch=16)
    assert dataset.steps_per_epoch == 100 // 16
    assert dataset.num_classes == 10 and dataset.input_shape == (3, 32, 32)
    assert dataset.has_eval and dataset.name == "cifar10"
    batches = list(dataset.train_batches(0))
    assert len(batches) == dataset.steps_per_epoch
    for images, labels in batches:
        assert images.shape == (16, 3, 32, 32) and images.dtype == np.float32
        assert labels.shape == (16,)


@pytest.mark.parametrize("size", [48, 24])
def test_resized_batches(cifar_dir: Path, size: int) -> None:
    dataset = _cifar(cifar_dir, size=size)
    assert dataset.input_shape == (3, size, size)
    assert next(dataset.train_batches(0))[0].shape == (20, 3, size, size)
    assert next(dataset.eval_batches())[0].shape == (20, 3, size, size)


def test_too_small_for_the_batch(cifar_dir: Path) -> None:
    with pytest.raises(DataError, match="too small for the batch size") as info:
        _cifar(cifar_dir, shards=2, batch=128)
    assert "100" in str(info.value) and "128" in str(info.value)


@pytest.mark.parametrize("shards", [2, 3])
def test_eval_shards_partition_the_test_set(cifar_dir: Path, arrays: Arrays, shards: int) -> None:
    images, labels = [], []
    for shard in range(shards):
        for x, y in _cifar(cifar_dir, shard=shard, shards=shards, batch=8).eval_batches():
            assert len(x) <= 8
            images.append(x)
            labels.append(y)
    expected = (arrays[2] / np.float32(255) - MEAN[:, None, None]) / STD[:, None, None]
    np.testing.assert_allclose(np.concatenate(images), expected, rtol=1e-5, atol=1e-5)
    assert np.concatenate(labels).tolist() == arrays[3].tolist()


# --------------------------------------------------------------------------------------------
# Augmentation


def _pattern(count: int = 2) -> np.ndarray:
    return np.arange(count * 3 * 32 * 32, dtype=np.float32).reshape(count, 3, 32, 32) + 1


def _window(image: np.ndarray, top: int, left: int, flip: bool) -> np.ndarray:
    """Reference: zero-pad by 4 by hand, slice, mirror."""
    padded = np.zeros((3, 40, 40), dtype=image.dtype)
    padded[:, 4:36, 4:36] = image
    window = padded[:, top : top + 32, left : left + 32]
    return window[:, :, ::-1] if flip else window


def _torch_crop_flip(images: np.ndarray, *args: np.ndarray, pad: int = 4) -> np.ndarray:
    tensors = [torch.from_numpy(np.asarray(a)) for a in args]
    return torch_adapter.crop_flip(torch.from_numpy(images), *tensors, pad).numpy()


def _numpy_crop_flip(images: np.ndarray, *args: np.ndarray, pad: int = 4) -> np.ndarray:
    top, left, flip = (np.asarray(a) for a in args)
    return crop_flip(images, top, left, flip, pad)


CROP_FLIP = pytest.mark.parametrize(
    "crop", [_numpy_crop_flip, _torch_crop_flip], ids=["numpy", "torch"]
)


@CROP_FLIP
def test_crop_is_the_shifted_window(crop: Callable[..., np.ndarray]) -> None:
    images = _pattern(3)
    top, left, flip = np.array([0, 8, 4]), np.array([3, 4, 4]), np.array([False, True, False])
    out = crop(images, top, left, flip)
    for i in range(3):
        np.testing.assert_array_equal(out[i], _window(images[i], top[i], left[i], flip[i]))
    np.testing.assert_array_equal(out[2], images[2])  # offset (4, 4) without flip: the image
    assert (out[0, :, :4, :] == 0).all() and (out[0, :, :, 0] == 0).all()
    np.testing.assert_array_equal(out[0, :, 4:, 1:], images[0, :, :28, :31])
    assert (out[1, :, 28:, :] == 0).all()  # shifted up by 4: bottom rows come from the padding
    np.testing.assert_array_equal(out[1, :, :28, :], images[1, :, 4:, ::-1])


@CROP_FLIP
def test_flip_really_flips(crop: Callable[..., np.ndarray]) -> None:
    images = _pattern(2)
    out = crop(images, np.array([4, 4]), np.array([4, 4]), np.array([True, False]))
    np.testing.assert_array_equal(out[0], images[0, :, :, ::-1])
    assert out[0, 1, 5, 0] == images[0, 1, 5, 31]
    np.testing.assert_array_equal(out[1], images[1])


def _identity_transform(**kw: Any) -> Transform:
    return Transform(scale=1.0, mean=(0.0,), std=(1.0,), size=32, **kw)


def _pattern_dataset(transform: Transform, **kw: Any) -> ArrayDataset:
    images = (_pattern(64) % 251).astype(np.uint8)
    labels = np.arange(64, dtype=np.int64)
    settings: dict[str, Any] = dict(batch=16, seed=0, shard=0, shards=1) | kw
    return ArrayDataset(
        name="pattern",
        x_train=images,
        y_train=labels,
        x_test=images[:0],
        y_test=labels[:0],
        transform=transform,
        num_classes=64,
        **settings,
    )


def test_served_crops_and_flips_are_the_planned_ones() -> None:
    data = _pattern_dataset(_identity_transform(pad=4, flip=True), seed=5)
    plan = data.train_plan(2)
    assert plan.top is not None and plan.left is not None and plan.flip is not None
    found = []
    for step, (out, labels) in enumerate(data.train_batches(2)):
        for i, label in enumerate(labels):
            source = data.x_train[label].astype(np.float32)
            matches = [
                (top, left, flip)
                for top in range(9)
                for left in range(9)
                for flip in (False, True)
                if np.array_equal(out[i], _window(source, top, left, flip))
            ]
            planned = (plan.top[step, i], plan.left[step, i], plan.flip[step, i])
            assert matches == [planned]
            found.append(planned)
    assert {flip for *_, flip in found} == {False, True}
    assert len({(top, left) for top, left, _ in found}) > 10
    drawn = augmentation(data.transform, 64, seed=5, epoch=2, rank=0)
    for name, expected in zip(("top", "left", "flip"), drawn, strict=True):
        np.testing.assert_array_equal(getattr(plan, name).ravel(), expected)


def test_augmentation_follows_the_transform() -> None:
    assert _pattern_dataset(_identity_transform()).train_plan(0).top is None
    no_flip = _pattern_dataset(_identity_transform(pad=4)).train_plan(0)
    assert no_flip.flip is not None and not no_flip.flip.any()
    assert no_flip.top is not None and len(set(no_flip.top.ravel().tolist())) == 9
    flip_only = _pattern_dataset(_identity_transform(flip=True)).train_plan(0)
    assert flip_only.top is not None and not flip_only.top.any() and flip_only.flip.any()


def test_padding_is_zero_before_normalization() -> None:
    """As torchvision: ToTensor -> RandomCrop(padding=4, fill 0) -> Normalize."""
    images = np.full((1, 3, 32, 32), 200, dtype=np.uint8)
    window = crop_flip(images, np.array([0]), np.array([0]), np.array([False]), cifar10.PAD)
    out = transform_images(window, cifar10.transform(32))
    np.testing.assert_allclose(out[0, :, 0, 0], -MEAN / STD, rtol=1e-6)
    np.testing.assert_allclose(out[0, :, 31, 31], (200 / 255 - MEAN) / STD, rtol=1e-6)


def test_transform_checks_its_statistics() -> None:
    with pytest.raises(ValueError, match="1 or 3 values"):
        Transform(scale=1.0, mean=(0.0, 0.0), std=(1.0, 1.0), size=8)
    mean, std = Transform(scale=1.0, mean=(0.5,) * 3, std=(2.0,) * 3, size=8).channel_stats(1)
    assert mean.tolist() == [0.5] and std.tolist() == [2.0]
    with pytest.raises(ValueError, match="do not fit"):
        cifar10.transform(32).channel_stats(1)  # three different means for one channel


# --------------------------------------------------------------------------------------------
# Resize: the numpy reference against torch


@pytest.mark.parametrize("source", [8, 32])
@pytest.mark.parametrize("size", [4, 7, 8, 16, 24, 32, 33, 48, 64, 224])
def test_resize_matches_torch(source: int, size: int) -> None:
    images = np.random.default_rng(size).standard_normal((3, 2, source, source), np.float32)
    shrink = size < source
    expected = F.interpolate(
        torch.from_numpy(images),
        size=(size, size),
        mode="bilinear",
        align_corners=False,
        antialias=shrink,
    ).numpy()
    got = resize(images, size)
    assert got.dtype == np.float32 and got.shape == (3, 2, size, size)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(torch_adapter.resize(torch.from_numpy(images), size), expected)


# --------------------------------------------------------------------------------------------
# The torch adapter gives the numpy reference's batches


@pytest.mark.parametrize(
    ("size", "shard", "shards", "replicas"),
    [(32, 0, 1, 1), (32, 1, 3, 2), (48, 1, 2, 1), (24, 0, 2, 1)],
)
def test_torch_matches_numpy_for_cifar(
    cifar_dir: Path, size: int, shard: int, shards: int, replicas: int
) -> None:
    data = _cifar(cifar_dir, size=size, shard=shard, shards=shards, replicas=replicas, batch=8)
    on_torch = to_torch(data, CPU)
    assert on_torch.steps_per_epoch == data.steps_per_epoch
    assert on_torch.input_shape == data.input_shape and on_torch.num_classes == 10
    for epoch in (0, 1):
        _assert_same_batches(list(data.train_batches(epoch)), _numpy(on_torch.train_batches(epoch)))
    _assert_same_batches(list(data.eval_batches()), _numpy(on_torch.eval_batches()))


def test_torch_matches_numpy_for_random_cifar_images(tmp_path: Path) -> None:
    """Real pixel variety (not constant images): crops, flips and interpolation all count."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (64, 3, 32, 32), dtype=np.uint8)
    cifar10_files.write_binary_format(tmp_path, x, rng.integers(0, 10, 64), x[:10], np.zeros(10))
    for size in (32, 40, 20):
        data = _cifar(tmp_path, size=size, batch=16)
        on_torch = to_torch(data, CPU)
        _assert_same_batches(list(data.train_batches(3)), _numpy(on_torch.train_batches(3)))
        _assert_same_batches(list(data.eval_batches()), _numpy(on_torch.eval_batches()))


def test_torch_matches_numpy_for_digits(digit_sets: list[ArrayDataset]) -> None:
    for data in digit_sets:
        on_torch = to_torch(data, CPU)
        _assert_same_batches(list(data.train_batches(1)), _numpy(on_torch.train_batches(1)))
        _assert_same_batches(list(data.eval_batches()), _numpy(on_torch.eval_batches()))


def test_torch_matches_numpy_for_synthetic() -> None:
    data = _synthetic(shard=1, shards=3, replicas=2)
    on_torch = to_torch(data, CPU)
    assert on_torch.steps_per_epoch == data.steps_per_epoch
    assert on_torch.input_shape == (3, 24, 24) and on_torch.num_classes == 7
    _assert_same_batches(list(data.train_batches(0)), _numpy(on_torch.train_batches(0)), atol=0)
    assert list(on_torch.eval_batches()) == []


def test_to_torch_refuses_unknown_data() -> None:
    class Other(NumpyDataset):
        def train_batches(self, epoch: int) -> Iterator[Any]:
            return iter(())

        def eval_batches(self) -> Iterator[Any]:
            return iter(())

    with pytest.raises(TypeError, match="no torch adapter for Other"):
        to_torch(Other(), CPU)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torch_on_cuda_matches_numpy(cifar_dir: Path) -> None:
    device = torch.device("cuda")
    data = _cifar(cifar_dir, size=48, shards=2, batch=16)
    on_cuda = to_torch(data, device)
    images, labels = next(on_cuda.train_batches(0))
    assert images.device.type == labels.device.type == "cuda"
    _assert_same_batches(list(data.train_batches(0)), _numpy(on_cuda.train_batches(0)))
    _assert_same_batches(list(data.eval_batches()), _numpy(on_cuda.eval_batches()))
    synthetic_batch = next(to_torch(_synthetic(), device).train_batches(0))
    assert synthetic_batch[0].device.type == synthetic_batch[1].device.type == "cuda"


# --------------------------------------------------------------------------------------------
# Digits


@pytest.fixture(scope="module")
def digit_sets() -> list[ArrayDataset]:
    cfg = Cfg(batch_per_worker=64)
    return [digits.load(cfg, shard=k, shards=2, input_size=32, num_classes=1000) for k in range(2)]


def test_digits_split() -> None:
    x_train, y_train, x_test, y_test = digits.split()
    assert (len(x_train), len(x_test)) == (1437, 360)
    assert x_train.shape[1:] == (1, 8, 8) and x_train.dtype == np.uint8
    assert x_train.max() == 16 and y_train.dtype == np.int64
    assert len(y_train) == 1437 and len(y_test) == 360
    np.testing.assert_array_equal(digits.split()[3], y_test)  # deterministic


def test_the_digits_read_from_scikit_learns_file_are_its_load_digits(monkeypatch) -> None:
    """The file read without importing scikit-learn holds what ``load_digits`` returns, and
    the fallback (no file found: ``load_digits`` itself) gives the same split."""
    from sklearn.datasets import load_digits

    assert digits.bundled_file() is not None  # the fast path is the one taken here
    theirs = load_digits()
    order = np.random.RandomState(0).permutation(len(theirs.target))
    ours = digits.split()
    np.testing.assert_array_equal(ours[0], theirs.images.astype(np.uint8)[order[:-360], None])
    np.testing.assert_array_equal(ours[3], theirs.target[order[-360:]])
    monkeypatch.setattr(digits, "bundled_file", lambda: None)
    for mine, fallback in zip(ours, digits.split(), strict=True):
        np.testing.assert_array_equal(mine, fallback)


def test_no_bundled_digits_file_without_scikit_learn_or_where_it_keeps_none(
    monkeypatch, tmp_path: Path
) -> None:
    """``bundled_file`` says ``None`` (so ``load_digits`` is asked) when scikit-learn is not
    installed, and when its folders hold no digits.csv.gz (another version's layout)."""
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    assert digits.bundled_file() is None
    (tmp_path / "datasets" / "data").mkdir(parents=True)
    elsewhere = SimpleNamespace(submodule_search_locations=[str(tmp_path), str(tmp_path)])
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: elsewhere)
    assert digits.bundled_file() is None


def test_digits_batches(digit_sets: list[ArrayDataset]) -> None:
    dataset = digit_sets[0]
    assert dataset.num_classes == 10 and dataset.input_shape == (3, 32, 32)
    assert dataset.steps_per_epoch == 719 // 64
    assert dataset.train_plan(0).top is None  # no augmentation
    batches = list(dataset.train_batches(0))
    assert len(batches) == dataset.steps_per_epoch
    for images, labels in batches:
        assert images.shape == (64, 3, 32, 32) and images.dtype == np.float32
        assert np.isfinite(images).all()
        np.testing.assert_array_equal(images[:, 0], images[:, 2])
        assert labels.dtype == np.int64 and labels.min() >= 0 and labels.max() <= 9


def test_digits_are_normalized_by_the_training_split() -> None:
    data = digits.load(Cfg(), shard=0, shards=1, input_size=8, num_classes=10)
    served = transform_images(data.x_train, data.transform)
    assert abs(float(served.mean())) < 1e-5 and abs(float(served.std()) - 1) < 1e-5


def test_digits_shards(digit_sets: list[ArrayDataset]) -> None:
    train = [np.concatenate([y for _, y in d.train_batches(1)]) for d in digit_sets]
    assert len(train[0]) == len(train[1]) == 11 * 64
    evals = [list(d.eval_batches()) for d in digit_sets]
    assert sum(len(y) for batches in evals for _, y in batches) == 360
    labels = np.concatenate([y for batches in evals for _, y in batches])
    assert labels.tolist() == digits.split()[3].tolist()
    assert set(labels.tolist()) == set(range(10))


# --------------------------------------------------------------------------------------------
# Synthetic


def _synthetic(
    shard: int = 0, shards: int = 1, seed: int = 0, samples: int = 1000, replicas: int = 1
) -> SyntheticArrays:
    cfg = Cfg(batch_per_worker=16, seed=seed, options={"samples_per_epoch": samples})
    return synthetic.load(
        cfg, shard=shard, shards=shards, replicas=replicas, input_size=24, num_classes=7
    )


def test_synthetic_same_batch_every_step() -> None:
    dataset = _synthetic()
    batches = list(dataset.train_batches(0)) + list(dataset.train_batches(1))
    first_images, first_labels = batches[0]
    assert first_images.shape == (16, 3, 24, 24) and first_images.dtype == np.float32
    assert first_labels.dtype == np.int64 and 0 <= first_labels.min() <= first_labels.max() < 7
    for images, labels in batches:
        assert images is first_images and labels is first_labels
    assert list(dataset.eval_batches()) == [] and not dataset.has_eval
    assert dataset.num_classes == 7 and dataset.input_shape == (3, 24, 24)


def test_synthetic_differs_per_shard_and_seed() -> None:
    base = _synthetic(shard=0, shards=2).images
    assert not np.array_equal(base, _synthetic(shard=1, shards=2).images)
    assert not np.array_equal(base, _synthetic(shard=0, shards=2, seed=1).images)
    np.testing.assert_array_equal(base, _synthetic(shard=0, shards=2).images)
    expected = np.random.default_rng(7919 * 2 + 1).standard_normal((16, 3, 24, 24), np.float32)
    np.testing.assert_array_equal(_synthetic(shard=1, shards=2, seed=2).images, expected)


def test_synthetic_replicas_concatenate_their_shards() -> None:
    both = _synthetic(shard=1, shards=4, replicas=2)
    parts = [_synthetic(shard=k, shards=4) for k in (1, 2)]
    np.testing.assert_array_equal(both.images, np.concatenate([p.images for p in parts]))
    np.testing.assert_array_equal(both.labels, np.concatenate([p.labels for p in parts]))
    assert both.steps_per_epoch == parts[0].steps_per_epoch == 1000 // 64


def test_synthetic_steps_per_epoch() -> None:
    assert _synthetic(shards=2, samples=1000).steps_per_epoch == 1000 // 32
    assert _synthetic(shards=1, samples=1000).steps_per_epoch == 1000 // 16
    assert _synthetic(shards=4, samples=10).steps_per_epoch == 1
    assert len(list(_synthetic(shards=2, samples=100).train_batches(0))) == 3


# --------------------------------------------------------------------------------------------
# Framework independence and the registry

NO_TORCH = """
import hashlib, sys
from dlscale.datasets import arrays, cifar10, digits, synthetic

class Cfg:
    batch_per_worker, seed, data_dir, precision = 16, 1, sys.argv[1], "float32"
    def typed(self, options):
        return options(samples_per_epoch=100)

assert "sklearn" not in sys.modules, "sklearn imported before the digits are loaded"
print(_digest(Cfg(), digits, cifar10, synthetic))
assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
assert "sklearn" not in sys.modules, "the digits were read through scikit-learn's import"
"""


def _digest(cfg: Any, *modules: Any) -> str:
    """A hash of an epoch of each data set (both held-out sets too)."""
    digest = hashlib.sha256()
    for module in modules:
        data = module.load(cfg, shard=1, shards=2, input_size=20, num_classes=10)
        for images, labels in [*data.train_batches(1), *data.eval_batches()]:
            digest.update(images.tobytes() + labels.tobytes())
    return digest.hexdigest()


def test_numpy_path_needs_no_torch_and_gives_the_same_batches(cifar_dir: Path) -> None:
    code = "from typing import Any\n" + inspect.getsource(_digest) + NO_TORCH
    env = {**os.environ, "PYTHONPATH": str(Path(digits.__file__).parents[2])}
    result = subprocess.run(
        [sys.executable, "-c", code, str(cifar_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    cfg = Cfg(batch_per_worker=16, seed=1, data_dir=str(cifar_dir))
    cfg.options["samples_per_epoch"] = 100
    assert result.stdout.strip() == _digest(cfg, digits, cifar10, synthetic)  # torch imported


def test_registry_loads_each_dataset(cifar_dir: Path) -> None:
    cfg = Cfg(data_dir=str(cifar_dir))
    for name in ("synthetic", "cifar10", "digits"):
        data = DATASETS.get(name).load(cfg, shard=0, shards=1, input_size=32, num_classes=10)
        assert isinstance(data, NumpyDataset) and data.has_eval == DATASETS.get(name).has_eval
        images, labels = next(to_torch(data, CPU).train_batches(0))
        assert images.shape == (20, 3, 32, 32) and labels.shape == (20,)


def test_loaders_read_a_real_run_config(cifar_dir: Path) -> None:
    from dlscale.contract.run_config import RunConfig

    cfg = RunConfig.make(dataset="synthetic", batch_size=8, samples_per_epoch=80, seed=2)
    data = DATASETS.get("synthetic").load(cfg, shard=0, shards=1, input_size=8, num_classes=3)
    assert data.steps_per_epoch == 10 and data.images.shape == (8, 3, 8, 8)
    cfg = RunConfig.make(dataset="cifar10", data_dir=str(cifar_dir), batch_size=8, seed=2)
    data = DATASETS.get("cifar10").load(cfg, shard=0, shards=2, input_size=32, num_classes=10)
    assert data.steps_per_epoch == 100 // 8 and data.seed == 2


# --------------------------------------------------------------------------------------------
# Real data against synthetic data: the same inputs, and steps that do not depend on the loader

STEP_FAULTS = """
import json, resource, sys
import numpy as np
from dlscale.contract.datasets import DATASETS

class Cfg:
    batch_per_worker, seed, data_dir, precision = 64, 0, sys.argv[2], "float32"
    def typed(self, options):
        return options(samples_per_epoch=640)

data = DATASETS.get(sys.argv[1]).load(Cfg(), shard=0, shards=1, input_size=32, num_classes=10)
faults = []
for _ in range(8):  # a step's buffers: taken, written and given back together
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffers = [np.ones(1 << 20, np.uint8) for _ in range(4)]
    del buffers
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults[2:]))
"""
STEP_PAGES = 4 << 20 >> 12
"""Pages of one step's buffers (4 MiB). A step whose memory was given back faults most of them in
again (glibc keeps 128 KiB of padding at the top of its heap)."""


@pytest.fixture(scope="module")
def cifar_files_3mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CIFAR-10 binary files of 1,000 images (3 MB) each: file buffers larger than a step's."""
    path = tmp_path_factory.mktemp("cifar-3mb")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (6000, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, 6000)
    cifar10_files.write_binary_format(path, x[:5000], y[:5000], x[5000:], y[5000:])
    return path


def _step_faults(dataset: str, data_dir: Path, env: dict[str, str]) -> list[int]:
    """Minor page faults of steps 3-8 of a step-like loop in a fresh process that loaded
    ``dataset`` first, under ``env``."""
    result = subprocess.run(
        [sys.executable, "-c", STEP_FAULTS, dataset, str(data_dir)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(Path(digits.__file__).parents[2])},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    faults: list[int] = json.loads(result.stdout)
    return faults


def _benchmark_pair_allocator() -> str:
    """The allocator both sides of ``benchmarks/run_all.py``'s cifar10 pair run under."""
    path = Path(__file__).parents[2] / "benchmarks" / "run_all.py"
    spec = importlib.util.spec_from_file_location("dlscale_run_all", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    allocator: str = module.CIFAR10_PAIR_ALLOCATOR
    return allocator


def test_real_and_synthetic_batches_have_the_same_form(tmp_path: Path) -> None:
    """Both paths feed the model the same kind of tensor: float32 NCHW, contiguous (not
    channels_last), owning its memory (no view of a larger array), standardized values, int64
    labels in range. (Ruled out as the cause of CIFAR-10 measuring faster than synthetic data:
    docs/benchmarks.md.)"""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (160, 3, 32, 32), dtype=np.uint8)
    cifar10_files.write_binary_format(
        tmp_path, x[:128], rng.integers(0, 10, 128), x[128:], [0] * 32
    )
    real = to_torch(_cifar(tmp_path, batch=32), CPU)
    cfg = Cfg(batch_per_worker=32)
    fake = to_torch(synthetic.load(cfg, shard=0, shards=1, input_size=32, num_classes=10), CPU)
    for data in (real, fake):
        for step, (images, labels) in enumerate(data.train_batches(0)):
            assert images.dtype == torch.float32 and images.shape == (32, 3, 32, 32)
            assert images.is_contiguous()
            assert not images.is_contiguous(memory_format=torch.channels_last)
            assert images.storage_offset() == 0
            assert images.untyped_storage().nbytes() == images.numel() * 4
            assert abs(float(images.mean())) < 0.3 and 0.8 < float(images.std()) < 1.4
            assert labels.dtype == torch.int64 and labels.shape == (32,)
            assert 0 <= int(labels.min()) <= int(labels.max()) < 10
            if step == 2:
                break


def test_a_step_does_not_depend_on_the_loader_under_the_benchmarks_allocator(
    cifar_files_3mb: Path,
) -> None:
    """The cause of CIFAR-10 measuring 1.26x faster than synthetic data (docs/benchmarks.md).

    glibc's malloc moves its mmap and trim thresholds up to the largest mapped block freed so
    far. Reading CIFAR-10 frees file-sized buffers, so afterwards a step's buffers stay in the
    heap; after the synthetic loader they are given back to the system and faulted in again at
    every step (under glibc's defaults, asserted where this process runs them). The benchmark
    pair runs both paths under an allocator whose behaviour does not depend on that history:
    there, no step faults, whichever loader ran first.
    """
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD"))
    }
    if platform.libc_ver()[0] == "glibc" and loaded_allocator() == "system":  # the cause
        after_files = _step_faults("cifar10", cifar_files_3mb, clean)
        after_synthetic = _step_faults("synthetic", cifar_files_3mb, clean)
        assert max(after_files) <= 16, after_files
        assert min(after_synthetic) >= STEP_PAGES * 3 // 4, after_synthetic
    allocator = _benchmark_pair_allocator()  # the fix
    assert allocator != "system"
    env = {**clean, **allocator_env(allocator)}
    for dataset in ("cifar10", "synthetic"):
        faults = _step_faults(dataset, cifar_files_3mb, env)
        assert max(faults) <= 16, (dataset, allocator, faults)
