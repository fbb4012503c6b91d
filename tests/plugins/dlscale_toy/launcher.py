"""The toy launcher: one plan entry for every rank, like horovodrun, mpirun or srun."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import Launcher, LaunchPlan, PlanEntry, common_env
from dlscale.launchers.local import on_this_machine
from dlscale_toy import ToyLaunchOptions


class ToyLauncher(Launcher):
    def plan(self, config: RunConfig, spec_path: Path, python: str) -> LaunchPlan:
        here = on_this_machine(config)
        layout = here.layout
        env = {
            **common_env(config, spec_path, here.threads),
            # The tool's own rank variables, which the worker is told to read.
            "DLSCALE_RANK_VARS": "TOY_RANK,TOY_LOCAL_RANK,TOY_SIZE",
        }
        argv = (
            sys.executable,
            "-m",
            "dlscale_toy.launch",
            str(layout.size),
            str(config.typed(ToyLaunchOptions).toy_launch_delay_s),
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
        return here.plan([entry])

    def blame(self, entry: PlanEntry) -> int | None:
        try:
            text = entry.stderr.read_text(errors="replace")
        except OSError:
            return None
        found = re.search(r"^toy-launch: rank (\d+) failed", text, flags=re.MULTILINE)
        return int(found.group(1)) if found else None
