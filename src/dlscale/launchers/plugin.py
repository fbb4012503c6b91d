"""dlscale's own launchers (the ``dlscale.plugins`` entry point ``launchers``): local,
horovodrun, mpirun, torchrun, Slurm and Ray, registered through the door an outside plug-in uses."""

from __future__ import annotations

from dlscale.contract.launchers import LAUNCHERS, LauncherSpec
from dlscale.contract.options import declared
from dlscale.launchers.options import HostListOptions, RayOptions, SlurmOptions, TorchrunOptions

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
        description="Horovod's horovodrun with its Gloo rendezvous: on this machine, or hosts=",
        implementation="dlscale.launchers.horovodrun:HorovodrunLauncher",
        same_machine=True,
        provides=("horovod",),
        options=declared(HostListOptions),
        elsewhere_when=("hosts", "hostfile"),
    ),
)
LAUNCHERS.register(
    "mpirun",
    LauncherSpec(
        name="mpirun",
        description="OpenMPI's mpirun: on this machine, or hosts= (scripts/install-openmpi.sh)",
        implementation="dlscale.launchers.mpirun:MpirunLauncher",
        same_machine=True,
        provides=("mpi",),
        options=declared(HostListOptions),
        elsewhere_when=("hosts", "hostfile"),
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
        options=declared(TorchrunOptions),
    ),
)
LAUNCHERS.register(
    "slurm",
    LauncherSpec(
        name="slurm",
        description="Slurm: srun inside an allocation, or sbatch a job and poll it",
        implementation="dlscale.launchers.slurm:SlurmLauncher",
        options=declared(SlurmOptions),
    ),
)
LAUNCHERS.register(
    "ray",
    LauncherSpec(
        name="ray",
        description="Ray: each rank a Ray actor in a placement group, on a local cluster or "
        "ray_address=",
        implementation="dlscale.launchers.ray_launcher:RayLauncher",
        same_machine=True,
        options=declared(RayOptions),
        elsewhere_when=("ray_address",),
    ),
)
