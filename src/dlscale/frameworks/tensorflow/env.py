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

from dlscale.contract.errors import UserError
from dlscale.frameworks.tensorflow.declare import INSTALL

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
            f"TensorFlow or tf-keras is missing ({error}); install them: {INSTALL}"
        ) from error
    if not keras_module.startswith("tf_keras"):
        raise UserError(
            f"tf.keras is {keras_module}, not tf-keras: dlscale's TensorFlow backends need legacy "
            "Keras; remove TF_USE_LEGACY_KERAS=0 from the environment, or import dlscale's "
            "TensorFlow code before anything uses tf.keras"
        )
    return tf


def gpu_device_count() -> int:
    """GPUs TensorFlow sees (the CUDA probe run before launch)."""
    return len(import_tensorflow().config.list_physical_devices("GPU"))


def set_threads(intra: int, inter: int) -> None:
    """TensorFlow's thread pools, before its first op: ``intra`` threads inside one op (as
    ``torch.set_num_threads``), ``inter`` ops at once."""
    tf = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)


def tensorflow_environment() -> dict[str, Any]:
    """What TensorFlow says about itself and its devices (the run's framework facts)."""
    tf = import_tensorflow()
    import tf_keras

    devices = tf.config.list_physical_devices("GPU")
    return {
        "tensorflow": tf.__version__,
        "keras": tf_keras.__version__,
        "built_with_cuda": tf.test.is_built_with_cuda(),
        "gpus": [d.name for d in devices],
        "gpu_names": gpu_names(tf, devices),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    }


def gpu_names(tf: Any, devices: list[Any]) -> list[str]:
    """The GPUs' own names (``NVIDIA H100 80GB HBM3``), as a GPU datasheet knows them: TensorFlow
    names its devices ``/physical_device:GPU:0``. A device whose details lack a name, or
    cannot be read (details are read on GPUs only), is left out."""
    names = []
    for device in devices:
        try:
            details = tf.config.experimental.get_device_details(device)
        except Exception:  # TensorFlow's own errors, a build without the call: no name
            continue
        name = details.get("device_name") if isinstance(details, dict) else None
        if isinstance(name, str) and name.strip():
            names.append(name)
    return names
