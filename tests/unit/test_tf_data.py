"""The tf.data adapter gives the numpy reference's batches: same shards, order, crops, flips,
normalization and resize (PyTorch's interpolation weights), transposed to NHWC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlscale.datasets import cifar10_files, digits
from dlscale.datasets.arrays import NumpyDataset
from tests.unit.test_datasets import Cfg, _assert_same_batches, _cifar, _synthetic


def to_tf(data: Any) -> Any:
    """The adapter under test, imported with TensorFlow by the first test (7 s), not when
    pytest collects this file."""
    from dlscale.frameworks.tensorflow.data import to_tf as adapter

    return adapter(data)


def _nchw(pipeline: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    if pipeline is None:
        return []
    return [(x.numpy().transpose(0, 3, 1, 2), y.numpy()) for x, y in pipeline]


@pytest.mark.parametrize(
    ("size", "shard", "shards", "replicas"),
    [(32, 0, 1, 1), (32, 1, 3, 2), (40, 1, 2, 1), (20, 0, 2, 1)],
)
def test_tf_matches_numpy_for_random_cifar_images(
    tmp_path: Path, size: int, shard: int, shards: int, replicas: int
) -> None:
    """Random pixels, so crops, flips and the interpolation (up and down) all count."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (96, 3, 32, 32), dtype=np.uint8)
    cifar10_files.write_binary_format(tmp_path, x, rng.integers(0, 10, 96), x[:13], np.zeros(13))
    data = _cifar(tmp_path, size=size, shard=shard, shards=shards, replicas=replicas, batch=8)
    on_tf = to_tf(data)
    assert on_tf.steps_per_epoch == data.steps_per_epoch
    assert on_tf.input_shape == data.input_shape and on_tf.num_classes == 10
    for epoch in (0, 3):
        _assert_same_batches(list(data.train_batches(epoch)), _nchw(on_tf.train_batches(epoch)))
    _assert_same_batches(list(data.eval_batches()), _nchw(on_tf.eval_batches()))


def test_tf_matches_numpy_for_digits() -> None:
    """Single-channel 8x8 images, enlarged to 32 and repeated to 3 channels."""
    for shard in (0, 1):
        data = digits.load(
            Cfg(batch_per_worker=64), shard=shard, shards=2, input_size=32, num_classes=1000
        )
        on_tf = to_tf(data)
        _assert_same_batches(list(data.train_batches(1)), _nchw(on_tf.train_batches(1)))
        _assert_same_batches(list(data.eval_batches()), _nchw(on_tf.eval_batches()))


def test_tf_matches_numpy_for_synthetic() -> None:
    data = _synthetic(shard=1, shards=3, replicas=2)
    on_tf = to_tf(data)
    assert on_tf.steps_per_epoch == data.steps_per_epoch
    _assert_same_batches(list(data.train_batches(0)), _nchw(on_tf.train_batches(0)), atol=0)
    assert on_tf.eval_batches() is None


def test_to_tf_refuses_unknown_data() -> None:
    class Other(NumpyDataset):
        def train_batches(self, epoch: int) -> Any:
            return iter(())

        def eval_batches(self) -> Any:
            return iter(())

    with pytest.raises(TypeError, match="no TensorFlow adapter for Other"):
        to_tf(Other())
