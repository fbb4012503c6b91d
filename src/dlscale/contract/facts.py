"""A run's framework facts in one shape for every framework: its name, the versions its
workers had and the GPUs they saw. The frameworks record their own keys
(``torch_version`` and ``gpu_names``; ``tensorflow`` and ``gpus`` as names; ``mxnet`` and
``gpus`` as a count); this is the one reading of them the report and ``load_results`` use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.contract.frameworks import FRAMEWORKS


@dataclass(frozen=True)
class FrameworkFacts:
    name: str
    """The framework, as ``BackendSpec.framework`` names it (torch, tensorflow, mxnet...)."""
    packages: tuple[tuple[str, str], ...]
    """Every distribution of the framework the workers recorded, with its version (TensorFlow:
    tensorflow, tf-keras...), in the order its FrameworkSpec lists them."""
    gpus: tuple[str, ...]
    """The GPUs the workers saw (names where the framework gives them, else numbered)."""

    @property
    def version(self) -> str | None:
        """The framework's version (its first recorded distribution's); ``None``: none."""
        return self.packages[0][1] if self.packages else None

    @classmethod
    def of(cls, framework: str, environment: Mapping[str, Any]) -> FrameworkFacts:
        """The facts a run's workers recorded in its ``environment`` (:attr:`Result.facts
        <dlscale.contract.result.Result.facts>`)."""
        name = framework
        if not name and "torch_version" in environment:  # before results named their framework
            name = "torch"
        packages = recorded_versions(environment, name)
        return cls(name=name, packages=packages, gpus=gpu_names(environment))


def recorded_versions(env: Mapping[str, Any], framework: str) -> tuple[tuple[str, str], ...]:
    """The versions a result's workers recorded of a framework's distributions (Horovod's
    too, named as a framework); a result from before the workers' package record gives its
    ``<framework>_version`` (torch) or ``<framework>`` (TensorFlow, MXNet) fact."""
    recorded = env.get("packages")
    packages = recorded if isinstance(recorded, Mapping) else {}
    names = FRAMEWORKS.get(framework).packages if framework in FRAMEWORKS else (framework,)
    found = tuple((n, str(packages[n])) for n in names if isinstance(packages.get(n), str))
    if found:
        return found
    for key in (f"{framework}_version", framework):
        if isinstance(env.get(key), str):
            return ((names[0] if names else framework, str(env[key])),)
    return ()


def gpu_names(env: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPUs a framework's facts name (``gpu_names``, ``gpus``), numbered where it gives
    only their count."""
    for key in ("gpu_names", "gpus"):
        value = env.get(key)
        if isinstance(value, list) and value:
            return tuple(str(v) for v in value)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return tuple(f"GPU {i}" for i in range(value))
    return ()
