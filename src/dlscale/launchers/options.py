"""The built-in launchers' options, declared once each as a dataclass: the core validates the
Options derived from it (:func:`dlscale.contract.options.declared`, registered in
:mod:`dlscale.launchers.plugin`) and the launcher reads them typed (``config.typed(...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.contract.options import setting
from dlscale.contract.role_placement import RULES


def _check_network(value: Any) -> None:
    from dlscale.launchers.links import check_network  # the launcher's code, on use only

    check_network(value)


def _check_hosts(value: Any) -> None:
    from dlscale.launchers.host_list import parse_hosts

    if value:
        parse_hosts(value, "hosts")


def _check_interface(value: Any) -> None:
    from dlscale.launchers.host_list import check_interface

    check_interface(value)


@dataclass(frozen=True)
class TorchrunOptions:
    nnodes: int = setting(
        1,
        "torchrun agents (nodes), each starting processes / nnodes ranks; a 1-worker point "
        "runs on 1",
        minimum=1,
        scale=True,
    )
    max_restarts: int = setting(
        0,
        "restarts of failed ranks (torchrun --max-restarts); above 0 the ranks checkpoint "
        "after every window and a restarted run resumes from the last",
        minimum=0,
    )
    network: str = setting(
        "",
        "emulate the nodes' network (root): each node in its own namespace, links shaped by "
        "tc, e.g. 1gbit:100us, 10gbit, unshaped; empty: the loopback; a 1-worker point has none",
        validate=_check_network,
        scale=True,
    )


@dataclass(frozen=True)
class SlurmOptions:
    slurm_mode: str = setting(
        "auto",
        "srun (a step of this allocation), sbatch (submit, poll), study (the whole study in "
        "one job, each point a step of it), auto: srun inside an allocation, else sbatch",
        choices=("auto", "srun", "sbatch", "study"),
    )
    partition: str = setting("", "Slurm partition (-p)")
    nodes: int = setting(
        0,
        "--nodes, at most one per worker (the 1-worker baseline runs on one node); 0: as many "
        "as the point needs (one GPU per rank under --device cuda; else as few as hold its "
        "threads)",
        minimum=0,
    )
    cpus_per_node: int = setting(
        0,
        "CPUs of one compute node, which threads per rank are planned from; 0: asked of Slurm "
        "(sinfo, the partition's smallest node)",
        minimum=0,
        identity=False,
    )
    gpus_per_node: int = setting(
        0,
        "GPUs of one compute node (--device cuda: one per rank); 0: asked of Slurm (sinfo's Gres)",
        minimum=0,
        identity=False,
    )
    placement: str = setting(
        "spread",
        "where each role's processes go: spread (workers evenly over the nodes, servers and "
        "schedulers one per node beside them), apart (servers and schedulers on nodes of "
        "their own), block (Slurm's order)",
        choices=RULES,
        earlier=("block",),
    )
    slurm_args: str = setting("", "more srun/sbatch options, e.g. '--account=proj --qos=short'")
    wait: bool = setting(
        True,
        "sbatch: wait for each job and show progress; false: submit every point and return, "
        "each job records its own result (dlscale ls runs shows the states)",
    )


@dataclass(frozen=True)
class HostListOptions:
    """Where mpirun and horovodrun start the ranks (:mod:`dlscale.launchers.host_list`)."""

    hosts: str = setting(
        "",
        "hosts and their slots, NAME:SLOTS,... (filled in order, as mpirun and horovodrun "
        "fill them); empty: every rank on this machine",
        validate=_check_hosts,
        whole=True,
    )
    hostfile: str = setting(
        "", "a file of hosts, one per line: NAME slots=N (OpenMPI's and Horovod's format)"
    )
    cpus_per_host: int = setting(
        0,
        "CPUs of each listed host, which threads per rank are planned from; 0: asked of "
        "every host the ranks use before the study is planned (ssh HOST nproc)",
        minimum=0,
        identity=False,
    )
    interface: str = setting(
        "",
        "the network interface the ranks talk over on every host (eth0, ib0, dls0 on emulated "
        "hosts); empty: the libraries choose",
        validate=_check_interface,
    )


def _check_ray_address(value: Any) -> None:
    from dlscale.launchers.ray_cluster import check_address

    check_address(value)


@dataclass(frozen=True)
class RayOptions:
    """Where the Ray launcher runs the ranks (:mod:`dlscale.launchers.ray_launcher`)."""

    ray_address: str = setting(
        "",
        "the Ray cluster: HOST:PORT of its head (ray start --head prints it), or auto (the one "
        "this machine belongs to); empty: a local cluster dlscale starts and stops for the run",
        validate=_check_ray_address,
    )
    ray_placement: str = setting(
        "pack",
        "Ray's placement group strategy for the ranks' bundles: pack (as few nodes as hold "
        "them, Ray Train's default), spread, strict_spread (one node each), strict_pack",
        choices=("pack", "spread", "strict_spread", "strict_pack"),
    )
