"""Launcher registry: how N worker processes are started (local, later torchrun, Slurm, MPI).

Each launcher has a pure ``plan()`` (commands and environments as data, shown by --dry-run
and unit-tested) and an impure ``run()`` that starts the plan and watches it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dlscale.registry import Registry


@dataclass(frozen=True, kw_only=True)
class LauncherSpec:
    name: str
    description: str
    implementation: str
    """``module:Class`` of a :class:`dlscale.launchers.base.Launcher`."""

    def create(self) -> Any:
        module, _, cls = self.implementation.partition(":")
        return getattr(importlib.import_module(module), cls)()


LAUNCHERS: Registry[LauncherSpec] = Registry("launcher")
LAUNCHERS.register(
    "local",
    LauncherSpec(
        name="local",
        description="N processes on this machine (cores split between them)",
        implementation="dlscale.launchers.local:LocalLauncher",
    ),
)
