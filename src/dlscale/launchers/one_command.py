"""What launchers that start every rank from one command share (horovodrun, mpirun).

The tool's command wraps the worker's (``python -P -m dlscale.worker spec.json``); every rank runs
on this machine, or on the hosts of ``hosts``/``hostfile`` (:mod:`dlscale.launchers.host_list`),
the tool names ranks its own way (``rank_vars``), and when a rank fails the tool prints which
one, which :meth:`OneCommandLauncher.blame` reads from its output.
"""

from __future__ import annotations

import re
import shutil
from abc import abstractmethod
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.layout import Addresses
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import (
    Launcher,
    LaunchPlan,
    PlanEntry,
    common_env,
    output_text,
    thread_budget,
    worker_command,
)
from dlscale.launchers.host_list import (
    Placement,
    host_facts,
    interface_env,
    one_rank_each,
    placement,
)
from dlscale.launchers.local import on_this_machine
from dlscale.launchers.watch import quietest_rank


class OneCommandLauncher(Launcher):
    rank_vars: str
    """``RANK_VAR,LOCAL_VAR,SIZE_VAR`` as the tool sets them."""
    failed_rank: tuple[re.Pattern[str], ...]
    """Where the tool's output names the first rank that failed (group 1), in order of trust."""

    install: str
    """How to install the tool, for the message when it is missing."""
    lost_host: re.Pattern[str] | None = None
    """Where the tool's output says it lost a host (not which rank): the rank to blame is then
    the one that fell silent first, on that host."""

    @abstractmethod
    def tool(
        self, size: int, python: str, env: dict[str, str], where: Placement | None = None
    ) -> tuple[str, ...]:
        """The tool's command up to (not including) the worker's; ``where``: the hosts, when
        the ranks do not all run on this machine."""

    def check(self, python: str) -> None:
        program = self.tool(1, python, {})[0]
        if shutil.which(program) is None:
            raise UserError(f"--launcher needs {program}, which is not installed: {self.install}")

    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        ports: tuple[int, ...] | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        here = on_this_machine(config, ports=ports, cores=cores)
        where = placement(config, here.layout.size)
        threads, warnings = here.threads, here.warnings
        hosts = host_facts(config, here.layout.size)
        if hosts is not None:  # the hosts' CPUs, given or asked of them
            threads, warnings = thread_budget(
                hosts.per_node(here.layout.size), config.threads_per_worker, hosts.cpus
            )
        env = {
            **common_env(config, spec_path, threads),
            "DLSCALE_RANK_VARS": self.rank_vars,
            **interface_env(where.interface if where else ""),
        }
        worker = worker_command(python, spec_path.absolute())  # the same path on every host
        entry = PlanEntry(
            ranks=range(here.layout.size),
            argv=(*self.tool(here.layout.size, python, env, where), *worker),
            env=env,
            stdout=spec_path.parent / "launcher.stdout",
            stderr=spec_path.parent / "launcher.stderr",
        )
        if where is None:
            return here.plan([entry])
        return LaunchPlan(
            entries=(entry,),
            layout=here.layout,
            addresses=Addresses(hosts=where.addresses, ports=here.addresses.ports),
            threads_per_worker=threads,
            warnings=tuple(warnings),
            nodes=hosts.describe(here.layout.size) if hosts else "",
        )

    def node_facts(self, config: RunConfig, cores: int | None = None) -> NodeFacts:
        """The listed hosts the ranks use (their CPUs given or asked of them by ssh), else
        this machine."""
        hosts = host_facts(config, config.layout().size)
        return hosts if hosts is not None else super().node_facts(config, cores)

    def on_each_node(self, config: RunConfig, argv: tuple[str, ...]) -> tuple[str, ...]:
        """``argv`` once on each listed host, by the launcher's own tool (one slot a host, its
        output tagged with the rank, which is the host's place in the list); here without
        hosts."""
        where = one_rank_each(config)
        if where is None:
            return argv
        return (*self.tool(len(where.rank_hosts), argv[0], {}, where), *argv)

    def blame(self, entry: PlanEntry) -> int | None:
        text = output_text(entry)
        for pattern in self.failed_rank:
            if found := pattern.search(text):
                return int(found.group(1))
        if self.lost_host is not None and self.lost_host.search(text):
            return quietest_rank(list(entry.ranks), entry.stdout.parent)
        return None
