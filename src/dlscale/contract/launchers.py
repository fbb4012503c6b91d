"""The launcher contract: what a launcher declares, and the registry of launchers.

Each launcher has a pure ``plan()`` (commands and environments as data, shown by --dry-run
and unit-tested) and an impure ``run()`` that starts the plan and watches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.contract.options import Option
from dlscale.contract.registry import Registry, load_object


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
    elsewhere_when: tuple[str, ...] = ()
    """Options that, when set, put the processes on other hosts (``hosts``): the resource
    guard then leaves the point alone, as for a launcher that is not ``same_machine``."""
    provides: tuple[str, ...] = ()
    """Runtimes the launcher's tool sets up for its ranks itself (``horovod``: Horovod's
    rendezvous and HOROVOD_* variables; ``mpi``: an MPI world), which a backend's cluster hook
    then leaves to it."""

    def on_this_machine(self, options: dict[str, Any]) -> bool:
        """Whether every process of a point with these options runs on this machine."""
        return self.same_machine and not any(options.get(name) for name in self.elsewhere_when)

    def create(self) -> Any:
        return load_object(self.implementation)()


LAUNCHERS: Registry[LauncherSpec] = Registry("launcher")
"""Filled by the ``launchers`` entry point (:mod:`dlscale.launchers.plugin`) and by plug-ins."""
