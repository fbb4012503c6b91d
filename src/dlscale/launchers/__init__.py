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

    def create(self) -> Any:
        return load_object(self.implementation)()


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
