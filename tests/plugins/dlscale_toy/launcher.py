"""The toy launcher: one plan entry for every rank, like horovodrun, mpirun or srun."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dlscale.backends import BACKENDS
from dlscale.config.run_config import RunConfig
from dlscale.launchers.base import Launcher, LaunchPlan, PlanEntry, common_env, thread_budget
from dlscale.launchers.local import LOOPBACK, free_ports
from dlscale.runtime.environment import usable_cores


class ToyLauncher(Launcher):
    def plan(self, config: RunConfig, spec_path: Path, python: str) -> LaunchPlan:
        layout = config.layout()
        threads, warnings = thread_budget(layout.size, config.threads_per_worker, usable_cores())
        addresses_ports = free_ports(BACKENDS.get(config.backend).ports)
        from dlscale.layout import Addresses

        addresses = Addresses(hosts=(LOOPBACK,) * layout.size, ports=addresses_ports)
        env = {
            **common_env(config, spec_path, threads),
            # The tool's own rank variables, which the worker is told to read.
            "DLSCALE_RANK_VARS": "TOY_RANK,TOY_LOCAL_RANK,TOY_SIZE",
        }
        argv = (
            sys.executable,
            "-m",
            "dlscale_toy.launch",
            str(layout.size),
            str(config.option("toy_launch_delay_s")),
            "--",
            python,
            "-m",
            "dlscale.worker",
            str(spec_path),
        )
        entry = PlanEntry(
            ranks=range(layout.size),
            argv=argv,
            env=env,
            stdout=spec_path.parent / "launcher.stdout",
            stderr=spec_path.parent / "launcher.stderr",
        )
        return LaunchPlan(
            entries=(entry,),
            layout=layout,
            addresses=addresses,
            threads_per_worker=threads,
            warnings=tuple(warnings),
        )

    def blame(self, entry: PlanEntry) -> int | None:
        try:
            text = entry.stderr.read_text(errors="replace")
        except OSError:
            return None
        found = re.search(r"^toy-launch: rank (\d+) failed", text, flags=re.MULTILINE)
        return int(found.group(1)) if found else None
