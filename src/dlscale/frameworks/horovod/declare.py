"""What the horovod-* backends declare: options, cluster variables, how the build is reported.

Pure (no Horovod or framework import): the parent reads it to plan a run and to list backends.

Who starts Horovod's world depends on the launcher (``LauncherSpec.provides``):

* ``horovodrun`` (provides ``horovod``) starts its own Gloo rendezvous server and gives every
  rank its HOROVOD_* variables: nothing is added here;
* ``mpirun`` (provides ``mpi``) starts an MPI world: Horovod's MPI controller and MPI
  operations (Horovod must have been built with MPI: ``make horovod`` after OpenMPI);
* any other launcher (``local``): the Gloo controller, with the rendezvous server started by
  rank 0 inside its own process on the run's reserved port (Horovod's own
  ``RendezvousServer``, given the same host plan horovodrun would give it), and each rank's
  HOROVOD_* variables set as horovodrun sets them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.contract.errors import UnsupportedPoint
from dlscale.contract.layout import Addresses, Process, ProcessLayout
from dlscale.contract.options import declared, setting
from dlscale.contract.run_checks import refuse_float64_with
from dlscale.frameworks.mxnet.declare import INSTALL as MXNET_INSTALL
from dlscale.frameworks.mxnet.declare import WEIGHTS as MXNET_WEIGHTS
from dlscale.frameworks.mxnet.declare import mxnet_python
from dlscale.frameworks.torch.options import check_torch_loop

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

INSTALL = "make horovod"
BUILD_RECORD = "horovod-build.json"
"""Written into the virtual environment by scripts/build-horovod.sh: what was built."""
RENDEZVOUS_ENV = "DLSCALE_HOROVOD_RENDEZVOUS"
"""Set for rank 0 when it must start the Gloo rendezvous server itself."""


@dataclass(frozen=True)
class HorovodCommon:
    """Horovod's options on every binding."""

    compression: str = setting(
        "none", "Horovod gradient compression (hvd.Compression)", choices=("none", "fp16")
    )
    fusion_mb: float = setting(
        64.0,
        "tensor fusion buffer in MB (HOROVOD_FUSION_THRESHOLD; 0 turns fusion off)",
        minimum=0.0,
    )
    cycle_ms: float = setting(
        1.0,
        "background thread cycle time in ms (HOROVOD_CYCLE_TIME)",
        minimum=0.0,
        exclusive_minimum=True,
    )
    horovod_timeline: bool = setting(
        False,
        "record Horovod's timeline (Chrome trace) into the run's directory; its writer thread "
        "spins all run (Horovod 0.28.1)",
    )


@dataclass(frozen=True)
class HorovodOptions(HorovodCommon):
    """horovod-torch's: the common ones and micro-batching (DistributedOptimizer's
    ``backward_passes_per_step``; DistributedGradientTape and DistributedTrainer have none)."""

    backward_passes_per_step: int = setting(
        1, "k: each step's batch runs as k micro-batches, gradients all-reduced once", minimum=1
    )


@dataclass(frozen=True)
class HorovodMXNet:
    mkldnn: bool = setting(
        False, "off: Horovod's MXNet ops fail on MKLDNN-layout arrays", choices=(False,)
    )


HOROVOD_OPTIONS = declared(HorovodOptions)


def check_horovod(config: RunConfig) -> None:
    """Every Horovod engine's contradictions (``BackendSpec.check``): fp16 compression beside
    float64."""
    refuse_float64_with(config, "compression", config.typed(HorovodCommon).compression, "none")


def check_horovod_torch(config: RunConfig) -> None:
    """horovod-torch's: Horovod's, the torch loop's, and micro-batches that split the batch."""
    check_horovod(config)
    check_torch_loop(config)
    passes = config.typed(HorovodOptions).backward_passes_per_step
    if config.batch_per_worker % passes:
        raise UnsupportedPoint(
            f"backward_passes_per_step = {passes} does not divide the batch per worker "
            f"({config.batch_per_worker}); choose a divisor of it"
        )


def horovod_cluster_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    """Each rank's Horovod variables, unless the launcher's tool sets up Horovod or MPI."""
    from dlscale.contract.launchers import LAUNCHERS

    provides = LAUNCHERS.get(config.launcher).provides
    if "horovod" in provides:
        return {}
    if "mpi" in provides:
        return {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"}
    host = addresses.hosts[process.rank]
    slots = Counter(addresses.hosts)  # processes per host, hosts in rank order
    hosts = list(slots)
    local = addresses.same_host(process.rank)
    env = {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addresses.hosts[0],
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(addresses.ports[0]),
        "HOROVOD_HOSTNAME": host,
        "HOROVOD_RANK": str(process.rank),
        "HOROVOD_SIZE": str(layout.size),
        "HOROVOD_LOCAL_RANK": str(local.index(process.rank)),
        "HOROVOD_LOCAL_SIZE": str(len(local)),
        "HOROVOD_CROSS_RANK": str(hosts.index(host)),
        "HOROVOD_CROSS_SIZE": str(len(hosts)),
    }
    if host.startswith("127."):
        env["HOROVOD_GLOO_IFACE"] = "lo"
    if process.rank == 0:  # horovodrun's host plan, host:slots
        env[RENDEZVOUS_ENV] = ",".join(f"{h}:{n}" for h, n in slots.items())
    return env


TENSORFLOW_APIS = ("horovod.tensorflow", "horovod.keras")
"""Horovod's TensorFlow bindings (``horovod.tensorflow.keras`` is under the first)."""


def uses_horovod_tensorflow(script: Path) -> bool:
    """Whether a script imports Horovod's TensorFlow API (which needs Keras 2: its code calls
    ``Variable.ref()``, which Keras 3 variables lack)."""
    from dlscale.contract.user_models import imported_names

    return any(
        name == api or name.startswith(f"{api}.")
        for name in imported_names([script])
        for api in TENSORFLOW_APIS
    )


def horovod_script_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    """horovod-script's variables: Horovod's, and legacy Keras 2 (``TF_USE_LEGACY_KERAS=1``,
    as the horovod-tf engine runs) for a script using Horovod's TensorFlow API."""
    from dlscale.contract.models import MODELS
    from dlscale.contract.user_models import ScriptModelSpec

    env = horovod_cluster_env(process, layout, addresses, config)
    spec = MODELS.get(config.model)
    if isinstance(spec, ScriptModelSpec) and uses_horovod_tensorflow(Path(spec.path)):
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def horovod_build(python: str | None) -> str:
    """What ``dlscale ls backends`` says: the build's frameworks, controllers and GPU
    operations from the record scripts/build-horovod.sh left, or how to install it."""
    if python is None and importlib.util.find_spec("horovod") is None:
        return f"no: {INSTALL}"
    prefix = Path(sys.prefix) if python is None else Path(python).absolute().parent.parent
    try:
        record = json.loads((prefix / BUILD_RECORD).read_text())
        return (
            f"yes: horovod {record['horovod']} built for {record['frameworks']}; "
            f"controllers {record['controllers']}; GPU operations {record['gpu_operations']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return f"no: {INSTALL}"


def horovod_tensorflow_build(python: str | None) -> str:
    """:func:`horovod_build` for the TensorFlow binding: a build made before TensorFlow was
    installed has none."""
    built = horovod_build(python)
    if built.startswith("yes") and "tensorflow" not in built.split(";")[0]:
        return "no: this Horovod has no TensorFlow binding; make tensorflow rebuilds it"
    return built if built.startswith("yes") else "no: make tensorflow"


HOROVOD_TF_OPTIONS = declared(HorovodCommon)
HOROVOD_MX_OPTIONS = (MXNET_WEIGHTS, *declared(HorovodMXNet), *HOROVOD_TF_OPTIONS)
"""horovod-mxnet's: MXNet's ``weights``, MKLDNN off and Horovod's common options."""


def horovod_mxnet_build(python: str | None) -> str:
    """:func:`horovod_build` of the MXNet environment's Horovod (built with ``make mxnet``)."""
    built = horovod_build(python or mxnet_python())
    if built.startswith("yes") and "mxnet" not in built.split(";")[0]:
        return "no: this Horovod has no MXNet binding; make mxnet rebuilds it"
    return built if built.startswith("yes") else f"no: {MXNET_INSTALL}"
