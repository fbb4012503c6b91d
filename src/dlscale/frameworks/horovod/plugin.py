"""Horovod's entry in dlscale (the ``dlscale.plugins`` entry point ``horovod``): horovod-torch,
horovod-tf, horovod-keras and horovod-mxnet, each on its framework's engine (this folder imports
theirs; they never import this one). Importing this imports no framework."""

from __future__ import annotations

from typing import Any

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.frameworks.horovod.declare import (
    HOROVOD_MX_OPTIONS,
    HOROVOD_OPTIONS,
    HOROVOD_TF_OPTIONS,
    check_horovod,
    check_horovod_torch,
    horovod_cluster_env,
    horovod_script_env,
)
from dlscale.frameworks.mxnet import plugin as mxnet_plugin
from dlscale.frameworks.tensorflow import declare as tfd
from dlscale.frameworks.tensorflow import plugin as tensorflow_plugin
from dlscale.frameworks.torch import plugin as torch_plugin
from dlscale.frameworks.torch.options import TORCH_LOOP_OPTIONS
from dlscale.frameworks.torch.plugin import DEVICE_PROBE

FRAMEWORKS.register(
    "horovod",
    FrameworkSpec(
        name="horovod",
        module="horovod",
        packages=("horovod",),
        install="make horovod",
        builds_models=False,
    ),
)
BACKENDS.register(
    "horovod-torch",
    BackendSpec(
        name="horovod-torch",
        precisions=torch_plugin.FLOAT64_TOO,
        description="Horovod DistributedOptimizer on PyTorch (Gloo, or MPI under mpirun)",
        framework="torch",
        worker="dlscale.frameworks.horovod.torch_strategy:run",
        collectives="dlscale.frameworks.horovod.collectives:run",
        install="make horovod",
        requires=("horovod",),
        installed="dlscale.frameworks.horovod.declare:horovod_build",
        check=check_horovod_torch,
        options=TORCH_LOOP_OPTIONS + HOROVOD_OPTIONS,
        cluster_env=horovod_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
BACKENDS.register(
    "horovod-script",
    BackendSpec(
        name="horovod-script",
        description="your own Horovod training script (PyTorch, or TensorFlow on Keras 2), "
        "unmodified, with Horovod's variables (as horovodrun sets them); measured from its "
        "optimizer steps",
        worker="dlscale.frameworks.horovod.script:run",
        install="make horovod",
        requires=("horovod",),
        installed="dlscale.frameworks.horovod.declare:horovod_build",
        cluster_env=horovod_script_env,
        **torch_plugin.SCRIPT_COMMON,
    ),
)

_ON_TENSORFLOW: dict[str, Any] = {
    **tensorflow_plugin.COMMON,
    "install": "make tensorflow",
    "requires": (*tfd.TF_REQUIRES, "horovod"),
    "installed": "dlscale.frameworks.horovod.declare:horovod_tensorflow_build",
    "cluster_env": horovod_cluster_env,
    "ports": 1,
}
for _spec in (
    BackendSpec(
        name="horovod-tf",
        precisions=tensorflow_plugin.FLOAT64_TOO,
        description="Horovod DistributedGradientTape on TensorFlow, custom loop",
        check=check_horovod,
        worker="dlscale.frameworks.horovod.tensorflow_strategy:run",
        options=tfd.TF_LOOP_OPTIONS + HOROVOD_TF_OPTIONS,
        **_ON_TENSORFLOW,
    ),
    BackendSpec(
        name="horovod-keras",
        precisions=tensorflow_plugin.FLOAT64_TOO,
        description="Horovod DistributedOptimizer with Keras model.fit (legacy Keras 2)",
        check=check_horovod,
        worker="dlscale.frameworks.horovod.keras_fit:run",
        options=tfd.TF_LOOP_OPTIONS + HOROVOD_TF_OPTIONS + tfd.FIT_OPTIONS,
        loader_only=False,
        **_ON_TENSORFLOW,
    ),
    BackendSpec(
        name="horovod-mxnet",
        precisions=mxnet_plugin.FLOAT64_TOO,
        description="Horovod DistributedTrainer on MXNet Gluon (MKLDNN off)",
        check=check_horovod,
        worker="dlscale.frameworks.horovod.mxnet_strategy:run",
        options=HOROVOD_MX_OPTIONS,
        cluster_env=horovod_cluster_env,
        ports=1,
        requires=("horovod",),
        **{
            **mxnet_plugin.COMMON,
            "installed": "dlscale.frameworks.horovod.declare:horovod_mxnet_build",
        },
    ),
):
    BACKENDS.register(_spec.name, _spec)
