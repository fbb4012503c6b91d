"""Horovod's entry in dlscale (the ``dlscale.plugins`` entry point ``horovod``): horovod-torch.
Horovod on TensorFlow, Keras and MXNet is registered by those frameworks' folders, whose engines
run it. Importing this imports no framework."""

from __future__ import annotations

from dlscale.backends import BACKENDS, BackendSpec
from dlscale.backends.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.frameworks.horovod.declare import HOROVOD_OPTIONS, horovod_cluster_env
from dlscale.frameworks.torch.options import TORCH_LOOP_OPTIONS
from dlscale.frameworks.torch.plugin import DEVICE_PROBE

FRAMEWORKS.register(
    "horovod",
    FrameworkSpec(name="horovod", module="horovod", packages=("horovod",), install="make horovod"),
)
BACKENDS.register(
    "horovod-torch",
    BackendSpec(
        name="horovod-torch",
        description="Horovod DistributedOptimizer on PyTorch (Gloo, or MPI under mpirun)",
        framework="torch",
        worker="dlscale.frameworks.horovod.torch_strategy:run",
        collectives="dlscale.frameworks.horovod.collectives:run",
        measures_exposed_comm=True,
        install="make horovod",
        requires=("horovod",),
        installed="dlscale.frameworks.horovod.declare:horovod_build",
        options=TORCH_LOOP_OPTIONS + HOROVOD_OPTIONS,
        cluster_env=horovod_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
