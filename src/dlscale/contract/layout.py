"""Process roles and the layout of one run's processes (pure data, no framework).

A backend declares its roles from the config: a PyTorch DDP run has ``worker`` processes only; a
parameter-server run adds ``server`` processes that never train; a TensorFlow parameter-server
run has a chief, workers and ps tasks that never exit by themselves; MXNet adds a scheduler;
MirroredStrategy trains several replicas in one process. Ranks are given to the roles in the
order they are declared, so the layout is the same on every host and in every process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError

MAX_PROCESSES = 65536
"""The most processes one run may have (a bound on the plan, far above any machine's cores)."""


def node_cpus(node: int, width: int) -> tuple[int, ...]:
    """The CPUs of this machine that emulated node ``node`` gets when each node's processes
    use ``width`` of them (its ranks times their threads): the node's share of the CPUs this
    process may run on, in order, wrapping around when the nodes need more than there are; empty
    where the share would be all of them, or affinity cannot be set (not Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return ()
    allowed = sorted(os.sched_getaffinity(0))
    if width >= len(allowed):
        return ()
    start = node * width % len(allowed)
    return tuple(allowed[(start + k) % len(allowed)] for k in range(width))


def usable_cores() -> int:
    """Cores this process may run on, which a layout on this machine is spread over
    (affinity-aware, so containers and Slurm are right)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class Role:
    name: str
    count: int
    """Processes of this role."""
    trains: bool = True
    """Whether its processes train a replica and record measurement windows."""
    exits: bool = True
    """Whether its processes end by themselves; the launcher stops the others once every
    training process has ended, and that is not a failure."""
    replicas_per_process: int = 1
    """Data-parallel replicas one process trains (MirroredStrategy: the devices it drives)."""

    def __post_init__(self) -> None:
        if self.count < 0 or self.replicas_per_process < 1:
            raise ValueError(f"role {self.name}: count >= 0 and replicas_per_process >= 1")


@dataclass(frozen=True, kw_only=True)
class Process:
    rank: int
    role: str
    index: int
    """Position within its role (task index, server number)."""
    trains: bool
    exits: bool
    replicas: int
    """Data-parallel replicas this process trains (0 for a role that does not train)."""


@dataclass(frozen=True)
class ProcessLayout:
    """Every process of a run, rank order; built from the backend's roles."""

    processes: tuple[Process, ...]

    @staticmethod
    def from_roles(roles: tuple[Role, ...]) -> ProcessLayout:
        total = sum(role.count for role in roles)
        if total > MAX_PROCESSES:
            raise UserError(
                f"the run would start {total:,} processes; dlscale plans at most "
                f"{MAX_PROCESSES:,} per run"
            )
        processes: list[Process] = []
        for role in roles:
            for index in range(role.count):
                processes.append(
                    Process(
                        rank=len(processes),
                        role=role.name,
                        index=index,
                        trains=role.trains,
                        exits=role.exits,
                        replicas=role.replicas_per_process if role.trains else 0,
                    )
                )
        if not any(p.trains for p in processes):
            raise UserError("the backend's roles start no training process")
        return ProcessLayout(tuple(processes))

    @property
    def size(self) -> int:
        return len(self.processes)

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: what "workers" counts in every table and formula."""
        return sum(p.replicas for p in self.processes)

    @property
    def training_ranks(self) -> list[int]:
        return [p.rank for p in self.processes if p.trains]

    def of_role(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    def first_replica(self, rank: int) -> int:
        """Index of this process's first replica among all replicas (its data shard)."""
        return sum(p.replicas for p in self.processes[:rank])

    def to_dict(self) -> list[dict[str, Any]]:
        return [p.__dict__ for p in self.processes]


@dataclass(frozen=True, kw_only=True)
class Addresses:
    """Where each process listens: allocated by the launcher, read by the backend's env hook."""

    hosts: tuple[str, ...]
    """Host of each rank."""
    ports: tuple[int, ...]
    """Ports the launcher reserved for this run (``BackendSpec.port_count`` of them)."""

    def same_host(self, rank: int) -> list[int]:
        """The ranks on ``rank``'s host, in rank order (its local rank is its index here)."""
        return [r for r, host in enumerate(self.hosts) if host == self.hosts[rank]]

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "ports": list(self.ports)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Addresses:
        return Addresses(hosts=tuple(data["hosts"]), ports=tuple(data["ports"]))
