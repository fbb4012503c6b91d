"""Local launcher: one process per rank on this machine, cores split between them.

Each rank's command gets the backend's cluster variables (MASTER_*, TF_CONFIG, DMLC_*...) from
the backend's pure hook, the ports it needs reserved here, and DLSCALE_RANK. Starting and
stopping the processes is :mod:`dlscale.launchers.processes`; watching is
:mod:`dlscale.launchers.watch`.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from dlscale.contract.backends import BACKENDS
from dlscale.contract.layout import Addresses, ProcessLayout, usable_cores
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import (
    Launcher,
    LaunchPlan,
    PlanEntry,
    common_env,
    thread_budget,
    worker_command,
)

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> tuple[int, ...]:
    """``count`` distinct ports free on the loopback now (the OS picks them)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            ports.append(int(sock.getsockname()[1]))
    return tuple(ports)


def reserved_ports(
    config: RunConfig, ports: tuple[int, ...] | None = None, *, extra: int = 0
) -> tuple[int, ...]:
    """The ports a run of ``config`` needs (its backend's count, plus ``extra`` for the
    launcher's own use, last): ``ports`` when a test gives them, else free ones here."""
    if ports is not None:
        return ports
    return free_ports(BACKENDS.get(config.backend).port_count(config) + extra)


@dataclass(frozen=True)
class OnThisMachine:
    """What every launcher that runs all ranks on this machine starts from."""

    layout: ProcessLayout
    addresses: Addresses
    """Every rank on the loopback; the backend's ports reserved here."""
    threads: int
    warnings: list[str]

    def plan(self, entries: list[PlanEntry]) -> LaunchPlan:
        return LaunchPlan(
            entries=tuple(entries),
            layout=self.layout,
            addresses=self.addresses,
            threads_per_worker=self.threads,
            warnings=tuple(self.warnings),
        )


def on_this_machine(
    config: RunConfig, *, ports: tuple[int, ...] | None = None, cores: int | None = None
) -> OnThisMachine:
    layout = config.layout()
    threads, warnings = thread_budget(
        layout.size, config.threads_per_worker, cores or usable_cores()
    )
    addresses = Addresses(hosts=(LOOPBACK,) * layout.size, ports=reserved_ports(config, ports))
    return OnThisMachine(layout, addresses, threads, warnings)


class LocalLauncher(Launcher):
    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        ports: tuple[int, ...] | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        backend = BACKENDS.get(config.backend)
        here = on_this_machine(config, ports=ports, cores=cores)
        layout, addresses = here.layout, here.addresses
        base = common_env(config, spec_path, here.threads)
        entries = []
        for process in layout.processes:
            rank = process.rank
            env = {
                **base,
                "DLSCALE_RANK": str(rank),
                "DLSCALE_LOCAL_RANK": str(rank),
                "DLSCALE_WORLD_SIZE": str(layout.size),
                **backend.cluster_env(process, layout, addresses, config),
            }
            entries.append(
                PlanEntry(
                    ranks=range(rank, rank + 1),
                    argv=worker_command(python, spec_path),
                    env=env,
                    stdout=spec_path.parent / f"rank{rank}.stdout",
                    stderr=spec_path.parent / f"rank{rank}.stderr",
                )
            )
        return here.plan(entries)
