"""Launcher registry: how N worker processes are started (local, later torchrun, Slurm, MPI).

Each launcher has a pure ``plan()`` (commands and environments as data, shown by --dry-run
and unit-tested) and an impure ``run()`` that starts the plan and watches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.options import Option
from dlscale.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class LauncherSpec:
    name: str
    description: str
    implementation: str
    """``module:Class`` of a :class:`dlscale.launchers.base.Launcher`."""
    options: tuple[Option, ...] = ()
    """The launcher's own settings (study keys), validated like a backend's."""
    same_machine: bool = False
    """Every process runs on this machine: the resource guard compares a point with it."""
    provides: tuple[str, ...] = ()
    """Runtimes the launcher's tool sets up for its ranks itself (``horovod``: Horovod's
    rendezvous and HOROVOD_* variables; ``mpi``: an MPI world), which a backend's cluster hook
    then leaves to it."""

    def create(self) -> Any:
        return load_object(self.implementation)()


def _check_network(value: Any) -> None:
    from dlscale.launchers.network import check_network

    check_network(value)


LAUNCHERS: Registry[LauncherSpec] = Registry("launcher")
LAUNCHERS.register(
    "local",
    LauncherSpec(
        name="local",
        description="N processes on this machine (cores split between them)",
        implementation="dlscale.launchers.local:LocalLauncher",
        same_machine=True,
    ),
)
LAUNCHERS.register(
    "horovodrun",
    LauncherSpec(
        name="horovodrun",
        description="Horovod's horovodrun with its Gloo rendezvous, all ranks on this machine",
        implementation="dlscale.launchers.horovodrun:HorovodrunLauncher",
        same_machine=True,
        provides=("horovod",),
    ),
)
LAUNCHERS.register(
    "mpirun",
    LauncherSpec(
        name="mpirun",
        description="OpenMPI's mpirun, all ranks on this machine (scripts/install-openmpi.sh)",
        implementation="dlscale.launchers.mpirun:MpirunLauncher",
        same_machine=True,
        provides=("mpi",),
    ),
)
LAUNCHERS.register(
    "torchrun",
    LauncherSpec(
        name="torchrun",
        description="PyTorch's torchrun (elastic agent): c10d rendezvous, nnodes agents here",
        implementation="dlscale.launchers.torchrun:TorchrunLauncher",
        same_machine=True,
        provides=("torch",),
        options=(
            Option(
                name="nnodes",
                type="int",
                default=1,
                minimum=1,
                help="torchrun agents (nodes), each starting processes / nnodes ranks",
            ),
            Option(
                name="max_restarts",
                type="int",
                default=0,
                minimum=0,
                help="restarts of failed ranks (torchrun --max-restarts); above 0 the ranks "
                "checkpoint after every window and a restarted run resumes from the last",
            ),
            Option(
                name="network",
                type="str",
                default="",
                validate=_check_network,
                help="emulate the nodes' network (root): each node in its own namespace, links "
                "shaped by tc, e.g. 1gbit:100us, 10gbit, unshaped; empty: the loopback",
            ),
        ),
    ),
)
LAUNCHERS.register(
    "slurm",
    LauncherSpec(
        name="slurm",
        description="Slurm: srun inside an allocation, or sbatch a job and poll it",
        implementation="dlscale.launchers.slurm:SlurmLauncher",
        options=(
            Option(
                name="slurm_mode",
                type="str",
                default="auto",
                choices=("auto", "srun", "sbatch"),
                help="srun (a step of this allocation), sbatch (submit, poll), auto: srun "
                "inside an allocation, else sbatch",
            ),
            Option(name="partition", type="str", default="", help="Slurm partition (-p)"),
            Option(name="nodes", type="int", default=0, minimum=0, help="--nodes; 0: Slurm picks"),
            Option(
                name="slurm_args",
                type="str",
                default="",
                help="more srun/sbatch options, e.g. '--account=proj --qos=short'",
            ),
            Option(
                name="wait",
                type="bool",
                default=True,
                help="sbatch: wait for each job and show progress; false: submit every point "
                "and return, each job records its own result (dlscale ls runs shows the states)",
            ),
        ),
    ),
)
