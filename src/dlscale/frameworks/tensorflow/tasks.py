"""The tasks of the TensorFlow loops, written once (as :mod:`dlscale.frameworks.torch.tasks` for
torch): the training loss, the held-out counts and what a batch's inputs are.

* classification: images NHWC in the run's precision, class labels ``(B,)``; the mean
  cross-entropy over the classes; correct top-1 predictions, one per image.
* next-token: token ids ``(B, T)`` int64 (never cast to a float), targets ``(B, T)``; the mean
  cross-entropy over every position; correct next-token predictions, counted per token.

Every TensorFlow engine calls these: the custom loop (tf-single, tf-mirrored, tf-mwms,
horovod-tf), Keras ``fit`` (keras-fit, horovod-keras, through :meth:`TFTask.keras_loss`) and
both parameter servers (tf-ps).
"""

from __future__ import annotations

from typing import Any

from dlscale.contract.run_config import RunConfig
from dlscale.contract.workload import workload_of
from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


def _cross_entropy(labels: Any, logits: Any) -> Any:
    """Each prediction's cross-entropy (``logits`` ``(..., classes)``, ``labels`` ``(...)``)."""
    return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


class TFTask:
    """A task's loss and held-out counts, as TensorFlow ops."""

    name = ""

    def loss(self, labels: Any, logits: Any) -> Any:
        """The mean training loss of a batch (what the optimizer steps on), as
        ``torch.nn.functional.cross_entropy``."""
        return tf.reduce_mean(_cross_entropy(labels, logits))

    def keras_loss(self) -> Any:
        """The same loss for ``model.compile`` (a mean over every prediction of the batch)."""
        return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def counts(self, labels: Any, logits: Any) -> tuple[Any, Any, Any]:
        """``(correct, total, loss_sum)`` of a held-out batch: int64 predictions counted right
        and made, and their summed loss in float64."""
        losses = _cross_entropy(labels, logits)
        predicted = tf.argmax(logits, axis=-1)
        hits = tf.cast(tf.equal(predicted, tf.cast(labels, tf.int64)), tf.int64)
        total = tf.size(labels, out_type=tf.int64)
        return tf.reduce_sum(hits), total, tf.reduce_sum(tf.cast(losses, tf.float64))

    def input_spec(self, input_shape: tuple[int, ...], precision: str) -> tuple[Any, Any, Any]:
        """``(dtype, shape, target_shape)`` of a batch's inputs and of its int64 targets (a TF1
        graph's placeholders), the batch's size left open."""
        raise NotImplementedError


class Classification(TFTask):
    name = "classification"

    def input_spec(self, input_shape: tuple[int, ...], precision: str) -> tuple[Any, Any, Any]:
        channels, height, width = input_shape  # the images as the pipeline made them: NHWC
        return tf.as_dtype(precision), (None, height, width, channels), (None,)


class NextToken(TFTask):
    name = "next-token"

    def input_spec(self, input_shape: tuple[int, ...], precision: str) -> tuple[Any, Any, Any]:
        return tf.int64, (None, input_shape[0]), (None, input_shape[0])


TASKS: dict[str, TFTask] = {task.name: task for task in (Classification(), NextToken())}


def task_of(cfg: RunConfig) -> TFTask:
    """The point's task (its data set's sample kind)."""
    return TASKS[workload_of(cfg).task]
