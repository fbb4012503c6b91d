"""Backend registry. A backend is one framework + distribution strategy.

The core reads only these descriptors and what they declare (options, roles, cluster
environment); it never branches on a backend's name. The worker-side code named by ``worker``
runs inside ``python -m dlscale.worker``, possibly under another interpreter (``python``), and
talks to the parent only through files. Registering a backend from another package (see
:mod:`dlscale.plugins`) needs no edit here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlscale.frameworks.horovod.declare import HOROVOD_OPTIONS, horovod_cluster_env
from dlscale.frameworks.mxnet import declare as mxd
from dlscale.frameworks.tensorflow import declare as tfd
from dlscale.frameworks.torch.cluster import torch_cluster_env
from dlscale.frameworks.torch.options import (
    DDP_OPTIONS,
    PS_OPTIONS,
    RING_OPTIONS,
    TORCH_LOOP_OPTIONS,
    ps_roles,
)
from dlscale.layout import Addresses, Process, ProcessLayout, Role
from dlscale.options import Option
from dlscale.registry import Registry

if TYPE_CHECKING:
    from dlscale.config.run_config import RunConfig


def one_worker_role(config: RunConfig) -> tuple[Role, ...]:
    """The default: one training process per data-parallel replica, nothing else."""
    return (Role(name="worker", count=config.workers),)


def no_cluster_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    return {}


ClusterEnv = Callable[[Process, ProcessLayout, Addresses, "RunConfig"], dict[str, str]]


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    name: str
    description: str
    framework: str
    """Distribution name of the framework (availability, version checks, model builders)."""
    worker: str
    """``module:function`` called in each process as ``function(ctx: WorkerContext)``."""
    max_workers: int | None = None
    """Largest number of replicas the backend supports (``None``: unlimited)."""
    devices: tuple[str, ...] = ("cpu", "cuda")
    python: str | None = None
    """Interpreter for the workers (a path); ``None`` uses the parent's interpreter. A study may
    override it with the ``python`` key (e.g. an MXNet virtual environment)."""
    install: str = ""
    """The command that installs the framework, shown when it is missing."""
    reference: bool = False
    """A plain single-process baseline of its framework: preferred as the 1-worker point."""
    measures_exposed_comm: bool = False
    """Whether the worker measures steps without gradient synchronization (exposed comm)."""
    options: tuple[Option, ...] = ()
    """The backend's own settings; setting another backend's is refused (skipped in grids)."""
    roles: Callable[[RunConfig], tuple[Role, ...]] = one_worker_role
    """The processes a run needs, in rank order (pure; must import no framework)."""
    cluster_env: ClusterEnv = no_cluster_env
    """Each process's variables from the layout and the allocated addresses (pure)."""
    ports: int | Callable[[RunConfig], int] = 0
    """Ports the launcher reserves for a run (``Addresses.ports``): a number, or a function of
    the config (TensorFlow: a gRPC server in every process)."""
    requires: tuple[str, ...] = ()
    """Modules the workers import beyond the framework (e.g. ``horovod``): checked under the
    workers' interpreter before launch, and by ``dlscale ls backends``."""
    installed: str | None = None
    """``module:function(python) -> str`` saying what ``dlscale ls backends`` shows in its
    installed column (e.g. what a build was built with); ``None``: whether the framework and
    ``requires`` can be imported."""
    resumable: bool = False
    """Its replicas hold one training state that its engine checkpoints and restores, so a run
    whose ranks a launcher restarts resumes from the last saved window (``max_restarts``);
    the engine says the same (``Engine.resumable``)."""
    collectives: str | None = None
    """``module:function(ctx, settings)`` running ``dlscale microbench``'s collectives on this
    engine's communication library (:mod:`dlscale.microbench`); ``None``: none to measure."""
    loader_only: bool = True
    """Its engine takes each step's batch itself, so ``loader_only`` can time the input
    pipeline alone; ``False``: the framework reads its own batches (Keras ``fit``, the
    parameter-server coordinator), and such a point is skipped."""
    device_probe: str | None = None
    """``module:function`` run under the workers' interpreter before launch, returning the
    number of CUDA devices the framework sees (so ``--device cuda`` without a GPU is refused
    before anything starts); ``None``: not checked."""

    def port_count(self, config: RunConfig) -> int:
        """How many ports a run of ``config`` needs."""
        return self.ports(config) if callable(self.ports) else self.ports


BACKENDS: Registry[BackendSpec] = Registry("backend")

_TORCH_INSTALL = "pip install 'dlscale[torch]' -c constraints.txt"
_TORCH_PROBE = "dlscale.frameworks.torch.env:cuda_device_count"
BACKENDS.register(
    "torch-single",
    BackendSpec(
        name="torch-single",
        resumable=True,
        description="plain PyTorch model, one process, no wrapper (the 1-worker baseline)",
        framework="torch",
        worker="dlscale.frameworks.torch.single:run",
        max_workers=1,
        reference=True,
        install=_TORCH_INSTALL,
        options=TORCH_LOOP_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=_TORCH_PROBE,
    ),
)
BACKENDS.register(
    "torch-ddp",
    BackendSpec(
        name="torch-ddp",
        resumable=True,
        description="PyTorch DistributedDataParallel (gloo on CPU, NCCL on CUDA)",
        framework="torch",
        worker="dlscale.frameworks.torch.ddp:run",
        collectives="dlscale.frameworks.torch.collectives:run",
        measures_exposed_comm=True,
        install=_TORCH_INSTALL,
        options=TORCH_LOOP_OPTIONS + DDP_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=_TORCH_PROBE,
    ),
)
BACKENDS.register(
    "torch-ring",
    BackendSpec(
        name="torch-ring",
        resumable=True,
        description="explicit ring all-reduce on send/recv, tensor fusion (Horovod's algorithm)",
        framework="torch",
        worker="dlscale.frameworks.torch.ring:run",
        collectives="dlscale.frameworks.torch.ring_collectives:run",
        measures_exposed_comm=True,
        install=_TORCH_INSTALL,
        options=TORCH_LOOP_OPTIONS + RING_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=_TORCH_PROBE,
    ),
)
BACKENDS.register(
    "torch-ps",
    BackendSpec(
        name="torch-ps",
        description="parameter server: num_servers server ranks, sync or async (ps_mode)",
        framework="torch",
        worker="dlscale.frameworks.torch.ps:run",
        measures_exposed_comm=True,
        install=_TORCH_INSTALL,
        options=TORCH_LOOP_OPTIONS + PS_OPTIONS,
        roles=ps_roles,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=_TORCH_PROBE,
    ),
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
        device_probe=_TORCH_PROBE,
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

_MX: dict[str, Any] = {
    "framework": "mxnet",
    "python": mxd.mxnet_python(),
    "install": mxd.INSTALL,
    "devices": ("cpu",),  # the mxnet 1.9.1 wheel is CPU-only (CUDA builds were other wheels)
    "installed": "dlscale.frameworks.mxnet.declare:mxnet_installed",
}
for _spec in (
    BackendSpec(
        name="mxnet-single",
        description="MXNet Gluon training loop, one process (the MXNet baseline)",
        worker="dlscale.frameworks.mxnet.loop:run_single",
        max_workers=1,
        reference=True,
        options=mxd.MX_LOOP_OPTIONS,
        **_MX,
    ),
    BackendSpec(
        name="mxnet-kv",
        description="MXNet Gluon Trainer on a kvstore: local, or ps-lite's parameter server "
        "(dist_sync, dist_async, dist_device_sync)",
        worker="dlscale.frameworks.mxnet.kv:run",
        collectives="dlscale.frameworks.mxnet.collectives:run",
        measures_exposed_comm=True,
        options=mxd.MX_LOOP_OPTIONS + mxd.KV_OPTIONS,
        roles=mxd.kv_roles,
        cluster_env=mxd.dmlc_env,
        ports=mxd.kv_ports,
        **_MX,
    ),
    BackendSpec(
        name="horovod-mxnet",
        description="Horovod DistributedTrainer on MXNet Gluon (MKLDNN off)",
        worker="dlscale.frameworks.mxnet.loop:run_horovod",
        measures_exposed_comm=True,
        options=mxd.HOROVOD_MX_OPTIONS,
        cluster_env=horovod_cluster_env,
        ports=1,
        requires=("horovod",),
        **{**_MX, "installed": "dlscale.frameworks.mxnet.declare:horovod_mxnet_build"},
    ),
):
    BACKENDS.register(_spec.name, _spec)
