"""Framework registry: what the core knows of a deep-learning framework without importing it.

A framework's folder registers one :class:`FrameworkSpec` (``dlscale.frameworks.*.plugin``), as
an outside plug-in would: the packages whose versions every run records, and the functions that
tell this interpreter's facts and count a model, named as ``module:function`` and imported only
when called. The core asks this registry instead of naming a framework.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from dlscale.contract.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class FrameworkSpec:
    name: str
    """As in ``BackendSpec.framework`` (and ``ModelSpec.builders``); Horovod registers one too,
    for its version, though its backends name the framework they run on."""
    module: str
    """The module a worker imports (``import torch``): whether it is installed here."""
    packages: tuple[str, ...]
    """Distributions whose versions a run records, the parent's and the worker's own."""
    install: str = ""
    """The command that installs it, shown when it is missing."""
    imports: tuple[str, ...] = ()
    """Top-level modules besides :attr:`module` whose import says a user's model is this
    framework's (TensorFlow: ``keras``, ``tf_keras``): :func:`frameworks_imported`."""
    builds_models: bool = True
    """Whether a user's own model is built for it (``ModelSpec.builders`` of a
    ``--model mymodels:build``); Horovod's is ``False``: its backends train the model of the
    framework they run on; JAX's too: its engines train the Flax twins only (which its
    plug-in registers with ``register_builder`` either way)."""
    facts: str | None = None
    """``module:function() -> dict`` of this interpreter's facts for ``dlscale env`` (imports
    the framework); ``None``: only the versions are shown."""
    profile: str | None = None
    """``module:function(model: str)`` returning the model's trainable parameters
    (``params``), forward FLOPs per image (``forward_flops_per_sample``), ``input_shape`` and
    ``num_classes``, counted on this framework's builder; ``None``: it counts none."""
    initial_state: str | None = None
    """``module:function(config)`` returning the run's model as its ranks build it (the run's
    seed), as float32 numpy arrays by this framework's parameter names: what another
    framework's twin starts from when its ``weights`` option names this framework (TensorFlow
    and MXNet: ``weights = "torch"``). ``None``: no other twin can start from it."""

    tasks: tuple[str, ...] = ("classification",)
    """The tasks its engines' loops have (:data:`dlscale.contract.workload.KINDS`), each
    written once in the framework's folder (``tasks.py``): a point of another task is refused
    before launch."""

    optimizers: tuple[str, ...] = ("sgd",)
    """The ``optimizer`` values its engines implement (:mod:`dlscale.contract.optimizers`)."""
    schedules: tuple[str, ...] = ("constant",)
    """The ``lr_schedule`` values its engines implement."""

    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def environment(self) -> dict[str, Any]:
        return dict(load_object(self.facts)()) if self.facts else {}

    def initial_weights(self, config: Any) -> dict[str, Any]:
        """The run's initial weights from this framework (:attr:`initial_state`), kept
        between runs in the user's cache (:mod:`dlscale.contract.weights_cache`: a worker
        of another framework that finds them there never imports this one)."""
        if self.initial_state is None:
            raise ValueError(f"no other framework can start from {self.name}'s weights")
        from dlscale.contract.weights_cache import kept  # numpy, imported where it is used

        reference = self.initial_state
        return kept(self, config, lambda: dict(load_object(reference)(config)))


FRAMEWORKS: Registry[FrameworkSpec] = Registry("framework")


def framework_module(name: str) -> str:
    """The module a framework's workers import (whether it is installed): its
    :class:`FrameworkSpec`'s ``module``, else the name itself (a plug-in that registers none)."""
    return FRAMEWORKS.get(name).module if name in FRAMEWORKS else name


def recorded_packages() -> tuple[str, ...]:
    """numpy and every registered framework's packages, in name order: the versions a run
    records (read from package metadata, importing nothing)."""
    names = {"numpy"}
    for _, spec in FRAMEWORKS:
        names.update(spec.packages)
    return tuple(sorted(names))


def frameworks_imported(modules: set[str]) -> list[str]:
    """The frameworks that build models among those whose modules are in ``modules`` (a
    user's source's imports); every such framework when none is (the model is made somewhere
    dlscale does not look, and its engine checks what it gets)."""
    candidates = [(name, spec) for name, spec in FRAMEWORKS if spec.builds_models]
    named = [name for name, spec in candidates if modules & {spec.module, *spec.imports}]
    return named or [name for name, _ in candidates]


def profiler_for(model_builders: dict[str, str]) -> FrameworkSpec | None:
    """The first installed framework (by name) that can count a model with these builders."""
    for name, spec in FRAMEWORKS:
        if spec.profile and name in model_builders and spec.installed():
            return spec
    return None


def missing_profiler() -> str:
    """Why no model can be counted here, and how to fix it."""
    ways = [f"{name} ({spec.install})" for name, spec in FRAMEWORKS if spec.profile]
    return "counting a model's parameters needs one of " + (", ".join(ways) or "no framework")
