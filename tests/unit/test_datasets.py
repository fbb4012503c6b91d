"""Data sets: CIFAR-10 file formats and validation, the in-memory loaders, augmentation."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlscale.config.run_config import RunConfig
from dlscale.datasets import DATASETS, cifar10, cifar10_files, digits, synthetic
from dlscale.errors import DataError

CPU = torch.device("cpu")
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Reader = Callable[[Path | None], object]
N_TRAIN, N_TEST = 200, 60
WRITERS = {
    "python": cifar10_files.write_python_format,
    "binary": cifar10_files.write_binary_format,
}
SUFFIX = {"python": "", "binary": ".bin"}


# --------------------------------------------------------------------------------------------
# Helpers and fixtures


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


def _cfg(data_dir: Path | None = None, *, batch: int = 20, seed: int = 0, **kw: Any) -> RunConfig:
    """A config for the cifar10 files in ``data_dir``, else for ``kw['dataset']`` (synthetic)."""
    kw.setdefault("dataset", "cifar10" if data_dir is not None else "synthetic")
    data = str(data_dir) if data_dir is not None else None
    return RunConfig(data_dir=data, batch_size=batch, seed=seed, **kw)


def _cifar(
    data_dir: Path, *, rank: int = 0, world: int = 1, size: int = 32, **kw: Any
) -> cifar10.Cifar10Dataset:
    return cifar10.load(
        _cfg(data_dir, **kw), device=CPU, rank=rank, world=world, input_size=size, num_classes=10
    )


def _sample_ids(images: torch.Tensor) -> list[int]:
    """Undo the normalization of the centre pixel of channel 0: the sample's index."""
    centre = images[:, 0, 16, 16] * cifar10.STD[0] + cifar10.MEAN[0]
    return torch.round(centre * 255).long().tolist()


def _epoch_ids(data_dir: Path, epoch: int, **kw: object) -> list[int]:
    ids: list[int] = []
    for images, _ in _cifar(data_dir, **kw).train_batches(epoch):
        ids += _sample_ids(images)
    return ids


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
# CIFAR-10 loader


def test_train_shards_are_disjoint_and_cover_the_epoch(data_dir: Path) -> None:
    shards = [_epoch_ids(data_dir, 0, rank=rank, world=2) for rank in range(2)]
    assert len(shards[0]) == len(shards[1]) == N_TRAIN // 2
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(N_TRAIN))


def test_labels_follow_their_images(data_dir: Path, arrays: Arrays) -> None:
    for images, labels in _cifar(data_dir, world=2, rank=1).train_batches(3):
        assert labels.dtype == torch.int64
        assert labels.tolist() == arrays[1][_sample_ids(images)].tolist()


def test_order_changes_per_epoch_and_repeats_per_seed(data_dir: Path) -> None:
    epoch0 = _epoch_ids(data_dir, 0, world=2)
    assert epoch0 != _epoch_ids(data_dir, 1, world=2)
    assert epoch0 == _epoch_ids(data_dir, 0, world=2)
    assert epoch0 != _epoch_ids(data_dir, 0, world=2, seed=1)
    first = next(_cifar(data_dir, seed=3).train_batches(2))[0]
    again = next(_cifar(data_dir, seed=3).train_batches(2))[0]
    assert torch.equal(first, again)  # augmentation too


def test_batches_shape_dtype_and_steps(data_dir: Path) -> None:
    dataset = _cifar(data_dir, world=2, batch=16)
    assert dataset.steps_per_epoch == 100 // 16
    assert dataset.num_classes == 10 and dataset.input_shape == (3, 32, 32)
    batches = list(dataset.train_batches(0))
    assert len(batches) == dataset.steps_per_epoch
    for images, labels in batches:
        assert images.shape == (16, 3, 32, 32) and images.dtype == torch.float32
        assert labels.shape == (16,)


def test_resized_batches(data_dir: Path) -> None:
    dataset = _cifar(data_dir, size=48)
    assert dataset.input_shape == (3, 48, 48)
    assert next(dataset.train_batches(0))[0].shape == (20, 3, 48, 48)
    assert next(dataset.eval_batches())[0].shape == (20, 3, 48, 48)


def test_too_small_for_the_batch(data_dir: Path) -> None:
    with pytest.raises(DataError, match="too small for the batch size") as info:
        _cifar(data_dir, world=2, batch=128)
    assert "100" in str(info.value) and "128" in str(info.value)


@pytest.mark.parametrize("world", [2, 3])
def test_eval_shards_partition_the_test_set(data_dir: Path, arrays: Arrays, world: int) -> None:
    images, labels = [], []
    for rank in range(world):
        for x, y in _cifar(data_dir, rank=rank, world=world, batch=8).eval_batches():
            assert len(x) <= 8
            images.append(x)
            labels.append(y)
    expected = cifar10.normalize(torch.from_numpy(arrays[2]))
    torch.testing.assert_close(torch.cat(images), expected)
    assert torch.cat(labels).tolist() == arrays[3].tolist()


# --------------------------------------------------------------------------------------------
# Augmentation


def _pattern(count: int = 2) -> torch.Tensor:
    return torch.arange(count * 3 * 32 * 32, dtype=torch.float32).reshape(count, 3, 32, 32) + 1


def _window(image: torch.Tensor, top: int, left: int, flip: bool) -> torch.Tensor:
    """Reference: zero-pad by 4 by hand, slice, mirror."""
    padded = torch.zeros(3, 40, 40, dtype=image.dtype)
    padded[:, 4:36, 4:36] = image
    window = padded[:, top : top + 32, left : left + 32]
    return window.flip(-1) if flip else window


def test_crop_is_the_shifted_window() -> None:
    images = _pattern(3)
    top, left = torch.tensor([0, 8, 4]), torch.tensor([3, 4, 4])
    flip = torch.tensor([False, True, False])
    out = cifar10.crop_flip(images, top, left, flip)
    for i in range(3):
        torch.testing.assert_close(
            out[i], _window(images[i], int(top[i]), int(left[i]), bool(flip[i]))
        )
    torch.testing.assert_close(out[2], images[2])  # offset (4, 4) without flip: the image
    assert (out[0, :, :4, :] == 0).all() and (out[0, :, :, 0] == 0).all()
    torch.testing.assert_close(out[0, :, 4:, 1:], images[0, :, :28, :31])
    assert (out[1, :, 28:, :] == 0).all()  # shifted up by 4: bottom rows come from the padding
    torch.testing.assert_close(out[1, :, :28, :], images[1, :, 4:, :].flip(-1))


def test_flip_really_flips() -> None:
    images = _pattern(2)
    out = cifar10.crop_flip(
        images, torch.tensor([4, 4]), torch.tensor([4, 4]), torch.tensor([True, False])
    )
    torch.testing.assert_close(out[0], images[0].flip(-1))
    torch.testing.assert_close(out[0, 1, 5, 0], images[0, 1, 5, 31])
    torch.testing.assert_close(out[1], images[1])


def test_augment_draws_windows_and_flips() -> None:
    images = _pattern(64).remainder(251).to(torch.uint8)
    out = cifar10.augment(images, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    found = []
    for i in range(64):
        matches = [
            (top, left, flip)
            for top in range(9)
            for left in range(9)
            for flip in (False, True)
            if torch.equal(out[i], _window(images[i], top, left, flip))
        ]
        assert len(matches) == 1
        found.append(matches[0])
    assert {flip for *_, flip in found} == {False, True}
    assert len({(top, left) for top, left, _ in found}) > 10
    again = cifar10.augment(images, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_padding_is_zero_before_normalization() -> None:
    """As torchvision: ToTensor -> RandomCrop(padding=4, fill 0) -> Normalize."""
    images = torch.full((1, 3, 32, 32), 200, dtype=torch.uint8)
    out = cifar10.normalize(
        cifar10.crop_flip(images, torch.tensor([0]), torch.tensor([0]), torch.tensor([False]))
    )
    pad_value = -torch.tensor(cifar10.MEAN) / torch.tensor(cifar10.STD)
    torch.testing.assert_close(out[0, :, 0, 0], pad_value)
    inside = (200 / 255 - torch.tensor(cifar10.MEAN)) / torch.tensor(cifar10.STD)
    torch.testing.assert_close(out[0, :, 31, 31], inside)


# --------------------------------------------------------------------------------------------
# Digits


@pytest.fixture(scope="module")
def digit_sets() -> list[digits.DigitsDataset]:
    cfg = _cfg(dataset="digits", batch=64)
    return [
        digits.load(cfg, device=CPU, rank=rank, world=2, input_size=32, num_classes=1000)
        for rank in range(2)
    ]


def test_digits_split() -> None:
    x_train, y_train, x_test, y_test = digits.split()
    assert (len(x_train), len(x_test)) == (1437, 360)
    assert x_train.shape[1:] == (8, 8) and len(y_train) == 1437 and len(y_test) == 360
    np.testing.assert_array_equal(digits.split()[3], y_test)  # deterministic


def test_digits_batches(digit_sets: list[digits.DigitsDataset]) -> None:
    dataset = digit_sets[0]
    assert dataset.num_classes == 10 and dataset.input_shape == (3, 32, 32)
    assert dataset.steps_per_epoch == 719 // 64
    batches = list(dataset.train_batches(0))
    assert len(batches) == dataset.steps_per_epoch
    for images, labels in batches:
        assert images.shape == (64, 3, 32, 32) and images.dtype == torch.float32
        assert torch.isfinite(images).all()
        assert torch.equal(images[:, 0], images[:, 2])
        assert labels.dtype == torch.int64 and labels.min() >= 0 and labels.max() <= 9
    assert abs(float(dataset.x_train.mean())) < 1e-4
    assert abs(float(dataset.x_train.std()) - 1) < 1e-4


def test_digits_shards(digit_sets: list[digits.DigitsDataset]) -> None:
    train = [torch.cat([y for _, y in d.train_batches(1)]) for d in digit_sets]
    assert len(train[0]) == len(train[1]) == 11 * 64
    evals = [list(d.eval_batches()) for d in digit_sets]
    assert sum(len(y) for batches in evals for _, y in batches) == 360
    labels = torch.cat([y for batches in evals for _, y in batches])
    assert labels.tolist() == digits.split()[3].tolist()
    assert set(labels.tolist()) == set(range(10))


# --------------------------------------------------------------------------------------------
# Synthetic


def _synthetic(rank: int = 0, world: int = 1, seed: int = 0, samples: int = 1000):
    cfg = _cfg(batch=16, seed=seed, samples_per_epoch=samples)
    return synthetic.load(cfg, device=CPU, rank=rank, world=world, input_size=24, num_classes=7)


def test_synthetic_same_batch_every_step() -> None:
    dataset = _synthetic()
    batches = list(dataset.train_batches(0)) + list(dataset.train_batches(1))
    first_images, first_labels = batches[0]
    assert first_images.shape == (16, 3, 24, 24) and first_images.device == CPU
    assert first_labels.dtype == torch.int64 and 0 <= first_labels.min() <= first_labels.max() < 7
    for images, labels in batches:
        assert torch.equal(images, first_images) and torch.equal(labels, first_labels)
    assert list(dataset.eval_batches()) == []
    assert dataset.num_classes == 7 and dataset.input_shape == (3, 24, 24)


def test_synthetic_differs_per_rank_and_seed() -> None:
    base = next(_synthetic(rank=0, world=2).train_batches(0))[0]
    assert not torch.equal(base, next(_synthetic(rank=1, world=2).train_batches(0))[0])
    assert not torch.equal(base, next(_synthetic(rank=0, world=2, seed=1).train_batches(0))[0])
    assert torch.equal(base, next(_synthetic(rank=0, world=2).train_batches(0))[0])


def test_synthetic_steps_per_epoch() -> None:
    assert _synthetic(world=2, samples=1000).steps_per_epoch == 1000 // 32
    assert _synthetic(world=1, samples=1000).steps_per_epoch == 1000 // 16
    assert _synthetic(world=4, samples=10).steps_per_epoch == 1
    assert len(list(_synthetic(world=2, samples=100).train_batches(0))) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_synthetic_on_cuda() -> None:
    device = torch.device("cuda")
    dataset = synthetic.load(
        _cfg(batch=4), device=device, rank=0, world=1, input_size=8, num_classes=3
    )
    images, labels = next(dataset.train_batches(0))
    assert images.device.type == labels.device.type == "cuda"


def test_registry_loads_each_dataset(tmp_path: Path, arrays: Arrays) -> None:
    cifar10_files.write_binary_format(tmp_path, *arrays)
    for name, cfg in [("synthetic", _cfg()), ("cifar10", _cfg(tmp_path))]:
        dataset = DATASETS.get(name).load(
            cfg, device=CPU, rank=0, world=1, input_size=32, num_classes=10
        )
        images, labels = next(dataset.train_batches(0))
        assert images.shape == (20, 3, 32, 32) and labels.shape == (20,)
