"""The tasks of the JAX loop, written once (:data:`dlscale.contract.workload.KINDS`; PyTorch's
are :mod:`dlscale.frameworks.torch.tasks`): what a batch's inputs are, the training loss and
the held-out counts, for :class:`~dlscale.frameworks.jax.loop.JaxEngine` and its compiled
steps (:mod:`~dlscale.frameworks.jax.steps`).

* classification: images ``(B, 3, S, S)`` in the run's dtype (NCHW, as every data set makes
  them), class labels ``(B,)``; the mean cross-entropy over the classes; correct top-1
  predictions, one per image;
* next-token: token ids ``(B, T)``, targets ``(B, T)``, both integers (never cast to a float);
  the mean cross-entropy over every position; correct next-token predictions, counted per
  token.

Integers are int64 where the run is float64 (``jax_enable_x64``: :mod:`~.env`), else int32 (JAX
holds no int64 then). The loss and counts take traced arrays (inside ``jax.jit``); JAX is
imported where they run, after :func:`~.env.import_jax` configured it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.contract.run_config import RunConfig
from dlscale.contract.workload import workload_of


def integer_dtype(precision: str) -> str:
    """The dtype of labels and token ids: int64 under float64 (x64 on), else int32."""
    return "int64" if precision == "float64" else "int32"


class JaxTask:
    """A task's inputs, loss and held-out counts."""

    name = ""

    def input_shape(self, batch: int, size: int) -> tuple[int, ...]:
        """The shape of ``batch`` inputs at the model's ``size`` (an image's side, a
        sequence's tokens)."""
        raise NotImplementedError

    def label_shape(self, batch: int, size: int) -> tuple[int, ...]:
        raise NotImplementedError

    def input_dtype(self, precision: str) -> str:
        raise NotImplementedError

    def host_batch(self, x: Any, y: Any, precision: str) -> tuple[np.ndarray, np.ndarray]:
        """A batch of the data set as numpy arrays of the step's dtypes."""
        return np.asarray(x, self.input_dtype(precision)), np.asarray(y, integer_dtype(precision))

    def loss(self, logits: Any, y: Any) -> Any:
        """The batch's mean training loss (what the optimizer steps on)."""
        import jax
        import jax.numpy as jnp

        flat, labels = self._flat(logits, y)
        logp = jax.nn.log_softmax(flat)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def sums(self, logits: Any, y: Any) -> tuple[Any, Any]:
        """``(correct, loss_sum)`` of a held-out batch, summed on the device."""
        import jax
        import jax.numpy as jnp

        flat, labels = self._flat(logits, y)
        logp = jax.nn.log_softmax(flat)
        loss = -jnp.sum(jnp.take_along_axis(logp, labels[:, None], axis=1))
        return jnp.sum(jnp.argmax(flat, axis=1) == labels), loss

    def count(self, y: np.ndarray) -> int:
        """How many predictions a held-out batch of targets ``y`` makes."""
        return int(np.size(y))

    def _flat(self, logits: Any, y: Any) -> tuple[Any, Any]:
        """Logits ``(N, outputs)`` and their targets ``(N,)``."""
        return logits.reshape(-1, logits.shape[-1]), y.reshape(-1)


class Classification(JaxTask):
    name = "classification"

    def input_shape(self, batch: int, size: int) -> tuple[int, ...]:
        return (batch, 3, size, size)

    def label_shape(self, batch: int, size: int) -> tuple[int, ...]:
        return (batch,)

    def input_dtype(self, precision: str) -> str:
        return precision


class NextToken(JaxTask):
    name = "next-token"

    def input_shape(self, batch: int, size: int) -> tuple[int, ...]:
        return (batch, size)

    def label_shape(self, batch: int, size: int) -> tuple[int, ...]:
        return (batch, size)

    def input_dtype(self, precision: str) -> str:
        return integer_dtype(precision)


TASKS: dict[str, JaxTask] = {task.name: task for task in (Classification(), NextToken())}


def task_of(cfg: RunConfig) -> JaxTask:
    """The point's task (its data set's sample kind)."""
    return TASKS[workload_of(cfg).task]
