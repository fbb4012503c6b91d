"""TensorFlow's entry in dlscale (the ``dlscale.plugins`` entry point ``tensorflow``): the tf-*,
keras-fit, horovod-tf and horovod-keras backends and the Keras twin of every built-in model.
Importing it imports no framework."""

from __future__ import annotations

from typing import Any

from dlscale.backends import BACKENDS, BackendSpec
from dlscale.backends.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.frameworks.horovod.declare import horovod_cluster_env
from dlscale.frameworks.tensorflow import declare as tfd
from dlscale.models import register_builder

FRAMEWORKS.register(
    "tensorflow",
    FrameworkSpec(
        name="tensorflow",
        module="tensorflow",
        packages=("tensorflow", "tensorflow-cpu", "tf-keras", "keras"),
        install=tfd.INSTALL,
    ),
)
_TF: dict[str, Any] = {
    "framework": "tensorflow",
    "install": tfd.INSTALL,
    "requires": tfd.TF_REQUIRES,
    "device_probe": tfd.DEVICE_PROBE,
}
_HOROVOD_TF: dict[str, Any] = {
    **_TF,
    "install": "make tensorflow",
    "requires": (*tfd.TF_REQUIRES, "horovod"),
    "installed": "dlscale.frameworks.horovod.declare:horovod_tensorflow_build",
    "cluster_env": horovod_cluster_env,
    "ports": 1,
}
for _spec in (
    BackendSpec(
        name="tf-single",
        description="TensorFlow custom training loop, one process (the TensorFlow baseline)",
        worker="dlscale.frameworks.tensorflow.strategies:run_single",
        max_workers=1,
        reference=True,
        options=tfd.TF_LOOP_OPTIONS,
        **_TF,
    ),
    BackendSpec(
        name="tf-mirrored",
        description="TensorFlow MirroredStrategy: every replica in one process (logical CPU "
        "devices on a CPU)",
        worker="dlscale.frameworks.tensorflow.strategies:run_mirrored",
        measures_exposed_comm=True,
        options=tfd.TF_LOOP_OPTIONS,
        roles=tfd.mirrored_roles,
        **_TF,
    ),
    BackendSpec(
        name="tf-mwms",
        description="TensorFlow MultiWorkerMirroredStrategy: collective all-reduce, custom loop",
        worker="dlscale.frameworks.tensorflow.strategies:run_mwms",
        collectives="dlscale.frameworks.tensorflow.collectives:run",
        measures_exposed_comm=True,
        options=tfd.TF_LOOP_OPTIONS + tfd.MWMS_OPTIONS,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        **_TF,
    ),
    BackendSpec(
        name="tf-ps",
        description="TensorFlow ParameterServerStrategy: a coordinator, num_ps ps tasks, "
        "asynchronous workers",
        worker="dlscale.frameworks.tensorflow.ps:run",
        options=tfd.TF_LOOP_OPTIONS + tfd.PS_OPTIONS,
        roles=tfd.ps_roles,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        loader_only=False,
        **_TF,
    ),
    BackendSpec(
        name="keras-fit",
        description="Keras model.fit under MultiWorkerMirroredStrategy (legacy Keras 2)",
        worker="dlscale.frameworks.tensorflow.keras_fit:run_mwms",
        options=tfd.TF_LOOP_OPTIONS + tfd.MWMS_OPTIONS + tfd.FIT_OPTIONS,
        cluster_env=tfd.tf_config_env,
        ports=tfd.one_port_per_process,
        loader_only=False,
        **_TF,
    ),
    BackendSpec(
        name="horovod-tf",
        description="Horovod DistributedGradientTape on TensorFlow, custom loop",
        worker="dlscale.frameworks.tensorflow.strategies:run_horovod",
        measures_exposed_comm=True,
        options=tfd.TF_LOOP_OPTIONS + tfd.HOROVOD_TF_OPTIONS,
        **_HOROVOD_TF,
    ),
    BackendSpec(
        name="horovod-keras",
        description="Horovod DistributedOptimizer with Keras model.fit (legacy Keras 2)",
        worker="dlscale.frameworks.tensorflow.keras_fit:run_horovod",
        options=tfd.TF_LOOP_OPTIONS + tfd.HOROVOD_TF_OPTIONS + tfd.FIT_OPTIONS,
        loader_only=False,
        **_HOROVOD_TF,
    ),
):
    BACKENDS.register(_spec.name, _spec)

for _model in (
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
    "resnet110",
    "resnet50",
    "alexnet",
    "googlenet",
    "tiny",
):
    register_builder(_model, "tensorflow", f"dlscale.frameworks.tensorflow.models:{_model}")
