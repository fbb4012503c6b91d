"""ImageNet-style data from disk as tf.data (:class:`TFImageFiles`): the numpy plan's samples read
and decoded by TensorFlow's ops, for every TensorFlow engine (:func:`dlscale.frameworks.tensorflow.
data.to_tf` picks it)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.contract.errors import DataError
from dlscale.datasets.image_files import Split, decode_problem, read_bytes
from dlscale.datasets.imagenet import (
    CROP_TRIES,
    EVAL_CROP,
    MEAN,
    RATIO,
    SCALE,
    STD,
    BadImage,
    ImageFiles,
)
from dlscale.frameworks.tensorflow.data import TFDataset, replica_part
from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


class TFImageFiles(TFDataset):
    """Images decoded from disk (:class:`~dlscale.datasets.imagenet.ImageFiles`) by tf.data:
    the numpy plan's samples (the same images per step as every other engine) read and decoded
    by TensorFlow's ops in a parallel ``map`` (AUTOTUNE), batched, normalized and prefetched.

    A file is read with ``tf.io.read_file``; a TFRecord image (``offset`` bytes into its shard)
    by dlscale's seek-and-read in a ``tf.numpy_function`` (TensorFlow has no op that reads a
    byte range; its record readers read a shard from its start). Decoding is
    ``tf.io.decode_image`` (libjpeg-turbo, PNG too); the crop is TensorFlow's own random
    resized crop, ``stateless_sample_distorted_bounding_box`` with torchvision's area and
    aspect ranges and ten tries, seeded with the sample's seed from the plan, so the crops
    are reproducible but not the same pixels as the Pillow loaders'; then an antialiased
    bilinear resize and a seeded flip. Evaluation: the shorter side to ``size / 0.875``, the
    centre crop."""

    def __init__(self, data: ImageFiles) -> None:
        self.data = data
        self.num_classes = data.num_classes
        self.input_shape = data.input_shape
        self.steps_per_epoch = data.steps_per_epoch
        self._size = data.size
        self._mean = tf.constant(np.asarray(MEAN, np.float32) * 255)
        self._std = tf.constant(np.asarray(STD, np.float32) * 255)
        self._train = _Sources(data.train)
        self._eval = _Sources(data.eval) if data.eval is not None else None

    def train_batches(self, epoch: int, part: tuple[Any, int] | None = None) -> Any:
        indices, seeds = self.data.train_plan(epoch)
        steps = tf.data.Dataset.from_tensor_slices((indices, seeds))
        width = self.data.batch * self.data.replicas
        if part is not None:
            steps = steps.map(lambda *cols: replica_part(cols, part))
            width = part[1]
        return self._batches(steps, width)

    def train_stream(self, epoch: int, start: int) -> Any:
        def rows() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for e in itertools.count(epoch):
                indices, seeds = self.data.train_plan(e)
                for step in range(start if e == epoch else 0, self.steps_per_epoch):
                    yield indices[step], seeds[step]

        width = self.data.batch * self.data.replicas
        spec = (tf.TensorSpec((width,), tf.int64), tf.TensorSpec((width,), tf.int64))
        return self._batches(tf.data.Dataset.from_generator(rows, output_signature=spec), width)

    def _batches(self, steps: Any, width: int) -> Any:
        samples = steps.unbatch().map(
            self._train_sample, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        batches = samples.batch(width, drop_remainder=True).map(self._normalize)
        return batches.prefetch(tf.data.AUTOTUNE)

    def eval_batches(self) -> Any:
        steps = self.data.eval_steps()
        if self._eval is None or not steps:
            return None
        first, last = int(steps[0][0]), int(steps[-1][-1]) + 1
        samples = tf.data.Dataset.range(first, last).map(
            self._eval_sample, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        size = self.data.batch * self.data.replicas
        return samples.batch(size).map(self._normalize).prefetch(tf.data.AUTOTUNE)

    def explain(self, error: Exception, epoch: int, steps: range) -> Exception:
        """A decoding error names the first image of those steps that Pillow cannot decode
        either (TensorFlow's message names no file); else it says which steps failed."""
        if not isinstance(error, tf.errors.InvalidArgumentError):
            return error
        plans: dict[int, np.ndarray] = {}
        for step in steps:  # a window of a stream may run into the next epochs
            at = epoch + step // self.steps_per_epoch
            if at not in plans:
                plans[at] = self.data.train_plan(at)[0]
            for index in plans[at][step % self.steps_per_epoch]:
                entry = self.data.train.entries[int(index)]
                try:
                    problem = decode_problem(read_bytes(entry))
                except OSError as failure:
                    problem = f"unreadable ({failure.strerror or failure})"
                if problem is not None:
                    return BadImage(entry.where(), problem).error()
        first = str(error.message).splitlines()[0] if error.message else type(error).__name__
        return DataError(
            f"TensorFlow could not read an image of steps {steps.start}-{steps.stop - 1} of "
            f'epoch {epoch} ({first}); Pillow reads them all; run with verify = "decode" '
            "or convert the images to baseline JPEG"
        )

    def _train_sample(self, index: Any, seed: Any) -> tuple[Any, Any]:
        image = self._train.image(index)
        pair = tf.stack([seed, tf.constant(0, tf.int64)])
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            seed=pair,
            min_object_covered=0.0,
            aspect_ratio_range=RATIO,
            area_range=SCALE,
            max_attempts=CROP_TRIES,
            use_image_if_no_bounding_boxes=True,
        )
        crop = tf.slice(image, begin, size)
        resized = tf.image.resize(crop, (self._size, self._size), antialias=True)
        flip = tf.random.stateless_uniform((), seed=pair + tf.constant([0, 1], tf.int64)) < 0.5
        resized = tf.cond(flip, lambda: tf.reverse(resized, axis=[1]), lambda: resized)
        return resized, self._train.labels[index]

    def _eval_sample(self, index: Any) -> tuple[Any, Any]:
        assert self._eval is not None
        image = self._eval.image(index)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        short = float(int(self._size / EVAL_CROP))
        scaled = tf.cast(tf.round(shape * short / tf.reduce_min(shape)), tf.int32)
        scaled = tf.maximum(scaled, int(short))
        resized = tf.image.resize(image, scaled, antialias=True)
        top, left = (scaled[0] - self._size) // 2, (scaled[1] - self._size) // 2
        return resized[top : top + self._size, left : left + self._size], self._eval.labels[index]

    def _normalize(self, images: Any, labels: Any) -> tuple[Any, Any]:
        """uint8-valued float32 NHWC to model inputs (scale, ImageNet mean and std)."""
        return (images - self._mean) / self._std, labels


class _Sources:
    """A split's images as TensorFlow reads them: files, or records of TFRecord shards."""

    def __init__(self, split: Split) -> None:
        self.entries = split.entries
        self.labels = tf.constant(split.labels)
        self.records = any(e.offset >= 0 for e in split.entries)
        self.paths = tf.constant([e.path for e in split.entries])

    def image(self, index: Any) -> Any:
        if self.records:
            data = tf.numpy_function(self._record, [index], tf.string, stateful=False)
            data = tf.ensure_shape(data, ())
        else:
            data = tf.io.read_file(self.paths[index])
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        return tf.ensure_shape(image, (None, None, 3))

    def _record(self, index: np.ndarray) -> bytes:
        return read_bytes(self.entries[int(index)])
