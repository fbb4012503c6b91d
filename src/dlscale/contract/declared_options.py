"""The options the registered plug-ins declare, seen together: which plug-ins declare a key,
which keys spread a run over machines, and a 1-worker point put back on one machine."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dlscale.contract.backends import BACKENDS
from dlscale.contract.datasets import DATASETS
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.models import MODELS
from dlscale.contract.options import Option

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig


def declared_options() -> dict[str, list[tuple[str, Option]]]:
    """Every option any registered plug-in declares: name -> [(owner, declaration)]."""
    out: dict[str, list[tuple[str, Option]]] = {}
    registries: tuple[tuple[str, Any], ...] = (
        ("backend", BACKENDS), ("dataset", DATASETS), ("launcher", LAUNCHERS), ("model", MODELS)
    )  # fmt: skip
    for kind, registry in registries:
        for name, spec in registry:
            for option in spec.options:
                out.setdefault(option.name, []).append((f"{kind} {name}", option))
    return out


def scale_keys() -> tuple[str, ...]:
    """The options any registered plug-in declares as spreading processes over machines
    (:attr:`Option.scale`), which tell no point apart from its 1-worker baseline."""
    return tuple(
        name for name, owners in declared_options().items() if any(o.scale for _, o in owners)
    )


def on_one_machine(config: RunConfig) -> RunConfig:
    """A 1-worker point with its scale options (:func:`scale_keys`) at their defaults: one
    worker runs on one machine; any other point as it is."""
    if config.workers != 1:
        return config
    defaults = {
        o.name: o.default for _, declared in config._option_owners().values() for o in declared
    }
    reset = {
        k: defaults[k] for k in scale_keys() if k in defaults and config.options[k] != defaults[k]
    }
    return dataclasses.replace(config, options={**config.options, **reset}) if reset else config
