"""A Keras model of the user's own in the TensorFlow engines (``--model mymodels:build`` whose
module imports TensorFlow or Keras): a ``tf.keras`` model (legacy Keras 2, tf-keras, as every
TensorFlow engine uses: frameworks/tensorflow/env.py says why), taking NHWC images of the
run's size, its classes read from its output as a PyTorch model of the user's are. It has no
PyTorch twin, so it starts from Keras' initializers whatever ``weights`` says, and its trained
parameters are saved under Keras' own variable names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import UserError
from dlscale.contract.models import MODELS
from dlscale.contract.run_config import RunConfig
from dlscale.contract.user_models import classes_from_output, refused_input
from dlscale.frameworks.tensorflow.declare import TFLoopOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


def is_own(cfg: RunConfig) -> bool:
    return not MODELS.get(cfg.model).builtin


def initial_weights(cfg: RunConfig) -> str:
    """Where the run's initial weights come from, as its facts say: ``weights`` for
    dlscale's models; ``keras`` for the user's own, which have no PyTorch twin."""
    return "keras" if is_own(cfg) else cfg.typed(TFLoopOptions).weights


def build_own(cfg: RunConfig) -> Any:
    """The user's model, built by their function (seeded), checked to be a tf.keras model
    that takes the run's images and gives one row of class scores for each."""
    return _built(cfg)[0]


def _built(cfg: RunConfig) -> tuple[Any, int]:
    spec = MODELS.get(cfg.model)
    tf.keras.utils.set_random_seed(cfg.seed)
    model = spec.build(DATASETS.get(cfg.dataset).num_classes or spec.default_classes, "tensorflow")
    if not isinstance(model, tf.keras.Model):
        kind = f"{type(model).__module__}.{type(model).__name__}"
        hint = (
            "a Keras 3 model (import keras): dlscale's TensorFlow engines train tf.keras "
            "models (tf-keras); build it with tf.keras"
            if kind.startswith("keras.")
            else "the TensorFlow engines need a tf.keras Model"
        )
        raise UserError(f"model {cfg.model} returned {kind}, not a tf.keras Model: {hint}")
    return model, _classes(cfg, model)


def _classes(cfg: RunConfig, model: Any) -> int:
    size = cfg.image_size or MODELS.get(cfg.model).input_size
    try:
        out = model(tf.zeros((2, size, size, 3)), training=False)
    except Exception as error:
        raise refused_input(cfg.model, size, error) from None
    shape = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
    return classes_from_output(cfg.model, shape, cfg.dataset, DATASETS.get(cfg.dataset).num_classes)


def data_classes(cfg: RunConfig) -> int:
    """The classes the run's data is made with: dlscale's model's, or the user's model's
    (built once more, eagerly, to be asked)."""
    spec = MODELS.get(cfg.model)
    return spec.default_classes if spec.builtin else _built(cfg)[1]


def own_state(model: Any, read: Any = None) -> dict[str, np.ndarray]:
    """The trained parameters by Keras' variable names (no PyTorch keys: no twin)."""
    variables = list(model.trainable_weights)
    values = read(variables) if read else [v.numpy() for v in variables]
    return {
        f"{index:03d}/{v.name}": np.asarray(value)
        for index, (v, value) in enumerate(zip(variables, values, strict=True))
    }
