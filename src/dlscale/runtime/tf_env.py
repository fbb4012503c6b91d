"""TensorFlow in a dlscale process: one Keras for every TensorFlow backend, quiet C++ logs.

dlscale's Keras code runs on legacy Keras 2 (the ``tf-keras`` package, which TensorFlow uses as
``tf.keras`` when ``TF_USE_LEGACY_KERAS=1``), not on Keras 3 (TensorFlow 2.16+'s default):
Keras 3's ``model.fit`` failed under MultiWorkerMirroredStrategy on this kind of machine
("unsupported type (PerReplica) to a Tensor"), and Horovod 0.28.1's TensorFlow code calls
``Variable.ref()``, which Keras 3 variables lack (../docs/architecture.md, "TensorFlow"). Every
TensorFlow backend using the same Keras keeps their comparison like for like. ``tf.keras`` is
resolved at its first use, so setting the variable here works even after ``import tensorflow``,
as long as nothing touched ``tf.keras`` before.
"""

from __future__ import annotations

import os
from typing import Any

from dlscale.errors import UserError

TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
"""Set in every TensorFlow process (a value the user set is kept)."""


def import_tensorflow() -> Any:
    """``tensorflow``, with ``tf.keras`` checked to be legacy Keras 2 (tf-keras)."""
    for key, value in TF_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import tensorflow as tf

        keras_module = tf.keras.__name__
    except ImportError as error:
        raise UserError(
            f"TensorFlow or tf-keras is missing ({error}); install them: make tensorflow"
        ) from error
    if not keras_module.startswith("tf_keras"):
        raise UserError(
            f"tf.keras is {keras_module}, not tf-keras: dlscale's TensorFlow backends need legacy "
            "Keras; remove TF_USE_LEGACY_KERAS=0 from the environment, or import dlscale's "
            "TensorFlow code before anything uses tf.keras"
        )
    return tf
