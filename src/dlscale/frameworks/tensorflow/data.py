"""The TensorFlow view of a numpy data set: tf.data pipelines giving the numpy reference's batches.

:func:`to_tf` wraps a :class:`~dlscale.datasets.arrays.NumpyDataset`. The stored uint8 images
become one constant; each epoch, the numpy plan (sample indices, crop offsets, flips: the same
shards and order as every other engine for a given seed) becomes a ``tf.data.Dataset`` of steps,
and a ``map`` (parallel, deterministic, prefetched with AUTOTUNE) gathers, crops, flips,
normalizes and resizes each batch with TensorFlow ops (a data set without augmentation is
transformed once, when wrapped, as the torch adapter does: neither engine pays more per step).
The resize multiplies by the numpy reference's own interpolation matrices, so every engine
interpolates with PyTorch's weights.
Batches come out NHWC (TensorFlow's CPU convolutions want channels last) and equal
:meth:`ArrayDataset.train_batches` transposed (up to float rounding).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from dlscale.datasets.arrays import (
    PREPARE_CHUNK,
    ArrayDataset,
    NumpyDataset,
    SyntheticArrays,
    TrainPlan,
    interpolation_matrix,
)
from dlscale.datasets.imagenet import (
    ImageFiles,
)
from dlscale.datasets.tokens import TokenArrays
from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


class TFDataset:
    """One process's view of a data set as tf.data pipelines of ``(images NHWC float32,
    labels int64)``: ``train_batches(epoch)`` has exactly ``steps_per_epoch`` elements,
    ``eval_batches()`` this process's part of the held-out set (none without one)."""

    num_classes: int
    input_shape: tuple[int, int, int]
    """``(C, H, W)``, as the numpy data set says it (the batches are NHWC)."""
    steps_per_epoch: int
    same_every_epoch = False
    """Every epoch gives the same batches (synthetic data): a long run repeats one epoch."""
    facts: Mapping[str, Any] = MappingProxyType({})
    """What the numpy data set says of its samples (a corpus' source and hash), for the run."""

    def train_batches(self, epoch: int, part: tuple[Any, int] | None = None) -> Any:
        """The epoch's batches of this process; ``part = (replica, batch)``: only that
        replica's ``batch`` images of each step (``replica`` an int or a scalar tensor, such as
        a parameter-server worker's index)."""
        raise NotImplementedError

    def train_stream(self, epoch: int, start: int) -> Any:
        """Every batch from step ``start`` of ``epoch`` on, epoch after epoch with no end (for a
        consumer that reads across epochs, such as one Keras ``fit`` call). In this process
        only: the plans come from Python as they are reached."""
        raise NotImplementedError

    def eval_batches(self) -> Any:
        return None

    def explain(self, error: Exception, epoch: int, steps: range) -> Exception:
        """What to raise for ``error`` from reading ``steps`` of ``epoch`` (data read from disk
        names the image that failed); by default ``error`` itself."""
        return error


def checked_batches(data: TFDataset, pipeline: Any, epoch: int) -> Iterator[Any]:
    """The elements of ``pipeline`` (the batches of ``epoch`` from step 0); an op error from
    reading them is raised as ``data.explain`` says (e.g. the image it could not decode)."""
    batches = iter(pipeline)
    for step in itertools.count():
        try:
            batch = next(batches)
        except StopIteration:
            return
        except tf.errors.OpError as error:
            raise data.explain(error, epoch, range(step, step + 1)) from None
        yield batch


def to_tf(data: NumpyDataset, dtype: str = "float32") -> TFDataset:
    """``data`` as tf.data pipelines; stored images scaled, normalized and resized in
    ``dtype`` (float64: as the PyTorch pipeline does them then; other sources give float32
    images, which the model's first layer casts); token ids stay int64 whatever ``dtype``."""
    if isinstance(data, ArrayDataset):
        return TFArrays(data, dtype)
    if isinstance(data, SyntheticArrays):
        return TFSynthetic(data)
    if isinstance(data, ImageFiles):
        from dlscale.frameworks.tensorflow.image_data import TFImageFiles  # it builds on TFDataset

        return TFImageFiles(data)
    if isinstance(data, TokenArrays):
        return TFTokens(data)
    raise TypeError(f"no TensorFlow adapter for {type(data).__name__}")


class TFArrays(TFDataset):
    """An :class:`ArrayDataset` held whole as one constant: uint8, transformed per batch after
    the crop when training augments; else transformed once here (float32, the stored channels;
    the repeat to the input channels stays per batch)."""

    def __init__(self, data: ArrayDataset, dtype: str = "float32") -> None:
        self.data = data
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self.steps_per_epoch = data.steps_per_epoch
        transform = data.transform
        channels, height, width = data.x_train.shape[1:]
        mean, std = transform.channel_stats(channels)
        self._dtype = dtype
        self._mean = tf.constant(mean.reshape(1, channels, 1, 1).astype(dtype))
        self._std = tf.constant(std.reshape(1, channels, 1, 1).astype(dtype))
        self._scale = np.dtype(dtype).type(transform.scale)
        self._pad, self._channels = transform.pad, transform.channels
        self._rows = self._cols = None
        if (height, width) != (transform.size, transform.size):
            antialias = transform.size < min(height, width)
            rows = interpolation_matrix(height, transform.size, antialias).astype(dtype)
            cols = interpolation_matrix(width, transform.size, antialias).astype(dtype)
            self._rows, self._cols = tf.constant(rows), tf.constant(cols)
        self._prepared = not transform.augments
        x_train, x_test = data.x_train, data.x_test
        if self._prepared:
            x_train, x_test = self._prepare_all(x_train), self._prepare_all(x_test)
        self._x_train, self._x_test = tf.constant(x_train), tf.constant(x_test)
        self._y_train, self._y_test = tf.constant(data.y_train), tf.constant(data.y_test)

    def train_batches(self, epoch: int, part: tuple[Any, int] | None = None) -> Any:
        columns = self._columns(self.data.train_plan(epoch))
        steps = tf.data.Dataset.from_tensor_slices(columns)
        if part is not None:  # the replica's columns of the plan, before any image work
            steps = steps.map(_plain(lambda *cols: replica_part(cols, part)))
        return self._batches(steps, len(columns))

    def train_stream(self, epoch: int, start: int) -> Any:
        def rows() -> Iterator[tuple[np.ndarray, ...]]:
            for e in itertools.count(epoch):
                columns = self._columns(self.data.train_plan(e))
                for step in range(start if e == epoch else 0, self.steps_per_epoch):
                    yield tuple(column[step] for column in columns)

        width = self.data.batch * self.data.replicas
        kinds = [tf.int64, tf.int64, tf.int64, tf.bool][: 1 if self._prepared else 4]
        spec = tuple(tf.TensorSpec((width,), kind) for kind in kinds)
        return self._batches(tf.data.Dataset.from_generator(rows, output_signature=spec), len(spec))

    def _columns(self, plan: TrainPlan) -> tuple[np.ndarray, ...]:
        """A plan's arrays, one row a step: indices, then crop offsets and flips if it augments."""
        if plan.top is None or plan.left is None or plan.flip is None:
            return (plan.indices.astype(np.int64),)
        return (
            plan.indices.astype(np.int64),
            plan.top.astype(np.int64),
            plan.left.astype(np.int64),
            plan.flip.astype(bool),
        )

    def _batches(self, steps: Any, columns: int) -> Any:
        batch: Callable[..., tuple[Any, Any]] = (
            self._gather if columns == 1 else self._gather_crop_flip
        )
        mapped = steps.map(_plain(batch), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return mapped.prefetch(tf.data.AUTOTUNE)

    def eval_batches(self) -> Any:
        start, stop = self.data.eval_range()
        if start >= stop:
            return None
        size = self.data.batch * self.data.replicas
        pipeline = tf.data.Dataset.from_tensor_slices(
            (self._x_test[start:stop], self._y_test[start:stop])
        ).batch(size)
        return pipeline.map(_plain(lambda x, y: (self._inputs(x), y))).prefetch(tf.data.AUTOTUNE)

    def _gather(self, indices: Any) -> tuple[Any, Any]:
        return self._inputs(tf.gather(self._x_train, indices)), tf.gather(self._y_train, indices)

    def _gather_crop_flip(self, indices: Any, top: Any, left: Any, flip: Any) -> tuple[Any, Any]:
        images = _crop_flip(tf.gather(self._x_train, indices), top, left, flip, self._pad)
        return self._inputs(images), tf.gather(self._y_train, indices)

    def _inputs(self, images: Any) -> Any:
        """Model inputs, NHWC, from stored images (or prepared ones)."""
        return self._finish(images if self._prepared else self._prepare(images))

    def _prepare(self, images: Any) -> Any:
        """Steps 2-4 of the :class:`~dlscale.datasets.arrays.Transform`: uint8 NCHW to
        float32 NCHW at the input size, the stored channels."""
        x = (tf.cast(images, self._dtype) * self._scale - self._mean) / self._std
        if self._rows is not None:
            # einsum, not tf.matmul of the (S, H) matrix by (B, 1, H, W): that broadcast
            # segfaulted inside tf.data's graph on TensorFlow 2.21's CPU build (seen here).
            x = tf.einsum("sh,bchw,tw->bcst", self._rows, x, self._cols)
        return x

    def _prepare_all(self, images: np.ndarray) -> np.ndarray:
        """:meth:`_prepare` of a whole stored set, in chunks."""
        chunks = [
            self._prepare(images[i : i + PREPARE_CHUNK]).numpy()
            for i in range(0, len(images), PREPARE_CHUNK)
        ]
        return np.concatenate(chunks) if chunks else self._prepare(images).numpy()

    def _finish(self, x: Any) -> Any:
        """Step 5 (a single channel repeated) and NCHW to NHWC."""
        if x.shape[1] != self._channels:
            x = tf.repeat(x, self._channels, axis=1)
        return tf.transpose(x, (0, 2, 3, 1))


_plain = tf.autograph.experimental.do_not_convert
"""A tf.data function traced as written, without AutoGraph's rewrite: these hold no branch or
loop on a tensor (the steps' reason: frameworks/tensorflow/loop.py)."""


def replica_part(columns: tuple[Any, ...], part: tuple[Any, int]) -> tuple[Any, ...]:
    """One replica's slice of each step's columns (a step's batch is its replicas' batches in
    replica order)."""
    replica, size = part
    return tuple(column[replica * size : (replica + 1) * size] for column in columns)


def _crop_flip(images: Any, top: Any, left: Any, flip: Any, pad: int) -> Any:
    """:func:`dlscale.datasets.arrays.crop_flip` in TensorFlow ops, on uint8 NCHW."""
    height, width = images.shape[2], images.shape[3]
    padded = tf.pad(images, [[0, 0], [0, 0], [pad, pad], [pad, pad]])
    rows = tf.cast(top, tf.int32)[:, None] + tf.range(height)  # (B, H)
    cols = tf.cast(left, tf.int32)[:, None] + tf.range(width)  # (B, W)
    cols = tf.where(flip[:, None], tf.reverse(cols, axis=[1]), cols)
    picked = tf.gather(padded, rows, axis=2, batch_dims=1)  # (B, C, H, W + 2 pad)
    return tf.gather(picked, cols, axis=3, batch_dims=1)


class TFSynthetic(TFDataset):
    """The fixed batch of :class:`SyntheticArrays`, one constant, fed at every step."""

    same_every_epoch = True

    def __init__(self, data: SyntheticArrays) -> None:
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self.steps_per_epoch = data.steps_per_epoch
        self._batch = (
            tf.constant(np.ascontiguousarray(data.images.transpose(0, 2, 3, 1))),
            tf.constant(data.labels),
        )

    def train_batches(self, epoch: int, part: tuple[Any, int] | None = None) -> Any:
        batch = self._batch if part is None else replica_part(self._batch, part)
        return tf.data.Dataset.from_tensors(batch).repeat(self.steps_per_epoch)

    def train_stream(self, epoch: int, start: int) -> Any:
        return tf.data.Dataset.from_tensors(self._batch).repeat()


class TFTokens(TFDataset):
    """A :class:`TokenArrays`: int64 ``(B, T)`` token ids and next-token targets, never cast
    to a float. The replicas' training parts are one constant (their own integer type); each
    epoch the numpy order of sequences (the same in every framework) becomes a tf.data
    pipeline of steps, and a ``map`` gathers each step's windows of ``T + 1`` tokens, so the
    batches equal :meth:`TokenArrays.train_batches` and a parameter-server worker can build
    them from a graph (``part``)."""

    def __init__(self, data: TokenArrays) -> None:
        self.data = data
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape  # type: ignore[assignment]  # (T,)
        self.steps_per_epoch = data.steps_per_epoch
        size = min(len(part) for part in data.train)  # equal parts, by construction
        self._parts = tf.constant(np.stack([part[:size] for part in data.train]))
        self._offsets = tf.range(data.block_size + 1, dtype=tf.int64)

    def train_batches(self, epoch: int, part: tuple[Any, int] | None = None) -> Any:
        order = self.data.order(epoch).reshape(self.steps_per_epoch, self.data.batch)
        steps = tf.data.Dataset.from_tensor_slices(order.astype(np.int64))
        return self._batches(steps, part)

    def train_stream(self, epoch: int, start: int) -> Any:
        def rows() -> Iterator[np.ndarray]:
            for e in itertools.count(epoch):
                order = self.data.order(e).reshape(self.steps_per_epoch, self.data.batch)
                yield from order[start if e == epoch else 0 :].astype(np.int64)

        spec = tf.TensorSpec((self.data.batch,), tf.int64)
        return self._batches(tf.data.Dataset.from_generator(rows, output_signature=spec), None)

    def _batches(self, steps: Any, part: tuple[Any, int] | None) -> Any:
        def gather(sequences: Any) -> tuple[Any, Any]:
            starts = sequences * self.data.block_size
            windows = starts[:, None] + self._offsets  # (B, T + 1)
            parts = self._parts if part is None else self._parts[part[0]][None]
            tokens = tf.cast(tf.gather(parts, windows, axis=1), tf.int64)  # (R, B, T + 1)
            tokens = tf.reshape(tokens, (-1, self.data.block_size + 1))  # replica order
            return tokens[:, :-1], tokens[:, 1:]

        mapped = steps.map(_plain(gather), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return mapped.prefetch(tf.data.AUTOTUNE)

    def eval_batches(self) -> Any:
        batches = list(self.data.eval_batches())
        if not batches:
            return None
        width = self.data.block_size

        def rows() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            yield from batches

        spec = (tf.TensorSpec((None, width), tf.int64), tf.TensorSpec((None, width), tf.int64))
        return tf.data.Dataset.from_generator(rows, output_signature=spec)
