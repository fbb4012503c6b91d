"""Real data through the whole path: CIFAR-10 files in the official formats, and digits."""

import json
from pathlib import Path

import numpy as np
import pytest

from dlscale.datasets.cifar10_files import write_binary_format, write_python_format

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check


def _images(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n)


def test_cifar10_epochs_give_accuracy_and_epoch_time(tmp_path: Path, cli):
    """Epochs of CIFAR-10's python version (its binary version reads to the same arrays:
    tests/unit/test_datasets.py::test_read_round_trips)."""
    data = tmp_path / "cifar"
    write_python_format(data, *_images(640, 0), *_images(100, 1))
    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "torch-ddp",
        "--model",
        "tiny",
        "--dataset",
        "cifar10",
        "--data-dir",
        str(data),
        "--workers",
        "2",
        "--batch-size",
        "32",
        "--epochs",
        "2",
        "--warmup-steps",
        "1",
        "--json",
        "--target-accuracy",
        "0.01",
        "--results",
        str(tmp_path / "r"),
    )
    assert result.returncode == 0, result.stderr
    (record,) = [r for r in map(json.loads, result.stdout.splitlines()) if r["kind"] == "point"]
    assert record["status"] == "completed"
    assert 0 <= record["eval_accuracy"] <= 1
    assert record["epoch_time_s"] > 0
    assert record["time_to_accuracy_s"] > 0  # any accuracy reaches 1%
    assert record["final_train_loss"] > 0


def test_corrupt_cifar10_file_is_named_before_launch(tmp_path: Path, cli):
    data = tmp_path / "cifar"
    write_binary_format(data, *_images(50, 0), *_images(10, 1))
    bad = data / "data_batch_3.bin"
    bad.write_bytes(bad.read_bytes()[:-100])
    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--model",
        "tiny",
        "--dataset",
        "cifar10",
        "--data-dir",
        str(data),
        "--results",
        str(tmp_path / "r"),
    )
    assert result.returncode == 2
    assert "data_batch_3.bin" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()


def test_digits_reach_a_target_accuracy(tmp_path: Path, cli):
    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "torch-ddp",
        "--model",
        "tiny",
        "--dataset",
        "digits",
        "--workers",
        "2",
        "--batch-size",
        "16",
        "--epochs",
        "8",
        "--lr",
        "0.05",
        "--target-accuracy",
        "0.8",
        "--json",
        "--results",
        str(tmp_path / "r"),
    )
    assert result.returncode == 0, result.stderr
    (record,) = [r for r in map(json.loads, result.stdout.splitlines()) if r["kind"] == "point"]
    assert record["eval_accuracy"] >= 0.8, record
    assert record["time_to_accuracy_s"] > 0
