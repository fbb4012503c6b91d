"""What the TensorFlow and Keras backends declare: options, roles, TF_CONFIG (no TensorFlow import).

The parent reads this to plan a run and to list backends; the engines are in ``loop`` (custom
training loops: tf-single, tf-mirrored, tf-mwms, horovod-tf), ``tf_ps`` (the parameter server)
and ``keras_fit`` (``model.fit``: keras-fit, horovod-keras).

Processes and roles:

* ``tf-single``, ``horovod-tf``, ``horovod-keras``, ``tf-mwms``, ``keras-fit``: one process per
  replica, role ``worker``;
* ``tf-mirrored``: one process training every replica on its own logical CPU device
  (``replicas_per_process = workers``);
* ``tf-ps`` (``ps_mode = "async"``): a ``chief`` (the coordinator: it schedules steps and
  records the windows, so it is the training role, with every replica counted on it),
  ``worker`` tasks and ``ps`` tasks, each a ``tf.distribute.Server`` that never exits by itself
  (the launcher stops them);
* ``tf-ps`` (``ps_mode = "sync"``): one training ``worker`` per replica (worker 0 is the chief
  that applies the aggregated updates) and the ``ps`` tasks, servers as above.

TF_CONFIG is the JSON TensorFlow reads to find its cluster: every process of the roles above,
``host:port`` in rank order, and this process's task (its role and index).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlscale.contract.algorithms import async_update_setting
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.layout import Addresses, Process, ProcessLayout, Role
from dlscale.contract.options import declared, setting

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

INSTALL = "pip install 'dlscale[tensorflow]' (in a checkout: make tensorflow)"
TF_REQUIRES = ("tf_keras",)
"""Legacy Keras 2, which every TensorFlow backend uses (frameworks/tensorflow/env.py says why)."""
DEVICE_PROBE = "dlscale.frameworks.tensorflow.env:gpu_device_count"


@dataclass(frozen=True)
class TFLoopOptions:
    """Read by every TensorFlow engine."""

    weights: str = setting(
        "torch",
        "initial weights: the PyTorch twin's (same seed as the torch backends) or Keras' own",
        choices=("torch", "keras"),
    )


@dataclass(frozen=True)
class MWMSOptions:
    collective: str = setting(
        "auto",
        "MultiWorkerMirroredStrategy's all-reduce (CommunicationImplementation)",
        choices=("auto", "ring", "nccl"),
    )


@dataclass(frozen=True)
class TFPSOptions:
    ps_mode: str = setting(
        "async",
        "async: TF2's ParameterServerStrategy, a coordinator scheduling steps on free workers; "
        "sync: TF1's SyncReplicasOptimizer, every worker trains and each update is the mean of "
        "one gradient from every worker",
        choices=("async", "sync"),
        earlier=("async",),
    )
    num_ps: int = setting(1, "parameter server tasks", minimum=1)
    async_update: str = async_update_setting(applies=("ps_mode", "async"), earlier="sum")


@dataclass(frozen=True)
class FitOptions:
    steps_per_execution: int = setting(
        1, "Keras fit: steps run per call of the compiled train function", minimum=1
    )


TF_LOOP_OPTIONS = declared(TFLoopOptions)
MWMS_OPTIONS = declared(MWMSOptions)
PS_OPTIONS = declared(TFPSOptions)
FIT_OPTIONS = declared(FitOptions)


def check_cpu_collectives(config: RunConfig) -> None:
    """The microbench of TensorFlow's kernels (``BackendSpec.collectives_check``): CPU
    collectives only (tf-mwms' ``CollectiveReduceV2``, tf-ps' pushes and pulls)."""
    if config.device != "cpu":
        raise UserError(
            f"dlscale microbench --backend {config.backend} measures CPU collectives only: "
            "use --device cpu"
        )


def check_ps_optimizer(config: RunConfig) -> None:
    """tf-ps' point (``BackendSpec.check``): TF1's synchronous parameter server applies its
    updates with TF1's own SGD (frameworks/tensorflow/ps_sync.py), so ``ps_mode = sync`` takes
    no other optimizer; ``async`` steps with the engines' Keras optimizers, AdamW too. Neither
    follows a learning-rate schedule (the servers apply the updates, as torch-ps')."""
    if config.lr_schedule != "constant":
        raise UnsupportedPoint(
            f"backend tf-ps applies updates at its parameter servers with a constant learning "
            f"rate, not lr_schedule = {config.lr_schedule}; use tf-mwms, tf-mirrored, keras-fit "
            "or horovod-tf for a schedule"
        )
    if config.optimizer != "sgd" and config.typed(TFPSOptions).ps_mode == "sync":
        raise UnsupportedPoint(
            f"backend tf-ps with ps_mode = sync (TF1's SyncReplicasOptimizer) steps with SGD "
            f"only, not optimizer = {config.optimizer}: use ps_mode = async, or another "
            "TensorFlow backend (tf-mwms, tf-mirrored, keras-fit, horovod-tf)"
        )


def check_ps_collectives(config: RunConfig) -> None:
    """tf-ps' microbench: the synchronous layout (every worker its own process; the
    asynchronous one's chief drives every replica), on the CPU."""
    check_cpu_collectives(config)
    if config.typed(TFPSOptions).ps_mode != "sync":
        raise UserError(
            "dlscale microbench --backend tf-ps times the synchronous layout's push and pull "
            "(every worker its own process): leave out --set ps_mode=async, or set "
            "ps_mode=sync; its rows price ps_mode=async's predictions too"
        )


def mirrored_roles(config: RunConfig) -> tuple[Role, ...]:
    """One process training every replica, one logical device each."""
    return (Role(name="worker", count=1, replicas_per_process=config.workers),)


def ps_roles(config: RunConfig) -> tuple[Role, ...]:
    """Asynchronous: the coordinator (chief, rank 0) drives every replica; workers and ps
    tasks serve. Synchronous: every worker trains its replica; the ps tasks serve."""
    options = config.typed(TFPSOptions)
    if options.ps_mode == "sync":
        return (
            Role(name="worker", count=config.workers),
            Role(name="ps", count=options.num_ps, trains=False, exits=False),
        )
    return (
        Role(name="chief", count=1, replicas_per_process=config.workers),
        Role(name="worker", count=config.workers, trains=False, exits=False),
        Role(name="ps", count=config.typed(TFPSOptions).num_ps, trains=False, exits=False),
    )


def one_port_per_process(config: RunConfig) -> int:
    """A TensorFlow server (gRPC) in every process of the run."""
    return config.layout().size


def tf_config_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    """TF_CONFIG: the cluster by role, ``host:port`` of each process, and this task."""
    cluster: dict[str, list[str]] = {}
    for other in layout.processes:
        address = f"{addresses.hosts[other.rank]}:{addresses.ports[other.rank]}"
        cluster.setdefault(other.role, []).append(address)
    task = {"type": process.role, "index": process.index}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task}, sort_keys=True)}
