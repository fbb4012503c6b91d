"""Stored results of every schema, read into one shape.

A result's ``config`` is stored as ``to_dict`` writes it: the core keys and ``options``
grouped by plug-in kind (``{"backend": {...}, "dataset": {...}, "launcher": {...}}``). Readers
(tables, figures, scaling, compare) see one flat mapping per run, core keys and options side by
side, plus ``config_options`` with the grouping, so they can tell a backend's settings from the
rest. Schema 1 (before plug-in options) stored every key flat; its plug-in keys are regrouped
here by what the backend and data set declare today.
"""

from __future__ import annotations

from typing import Any

from dlscale.backends import BACKENDS
from dlscale.config.run_config import config_defaults, core_keys
from dlscale.datasets import DATASETS

SCHEMA_1_PLUGIN_KEYS = {
    "amp": "backend",
    "channels_last": "backend",
    "compile": "backend",
    "ps_mode": "backend",
    "num_servers": "backend",
    "bucket_mb": "backend",
    "compression": "backend",
    "powersgd_rank": "backend",
    "gradient_as_bucket_view": "backend",
    "static_graph": "backend",
    "samples_per_epoch": "dataset",
}
"""Keys that were core fields in schema 1 and are plug-in options now, by plug-in kind."""


def read_view(document: dict[str, Any], schema: int) -> dict[str, Any]:
    """A stored result in the current reader shape (``config`` flat, ``config_options``)."""
    config = dict(document.get("config") or {})
    if schema < 2:
        grouped = _regroup_schema_1(config)
        config = {k: v for k, v in config.items() if k in core_keys()}
        document.setdefault("framework", _framework(config.get("backend")))
    else:
        grouped = config.pop("options", None) or {}
    defaults = {k: v for k, v in config_defaults().items() if k != "options"}
    flat = {**defaults, **config}
    for group in grouped.values():
        flat.update(group)
    document["config"] = flat
    document["config_options"] = grouped
    document.setdefault("framework", _framework(flat.get("backend")))
    return document


def _regroup_schema_1(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Plug-in keys of a flat schema-1 config, by kind. Where the plug-in is registered here,
    its options are filled from their defaults first (schema 1 read a key added after a result
    was written as its default, and still does); a key it does not declare is dropped."""
    grouped: dict[str, dict[str, Any]] = {"backend": {}, "dataset": {}, "launcher": {}}
    registries: tuple[tuple[str, Any], ...] = (("backend", BACKENDS), ("dataset", DATASETS))
    for kind, registry in registries:
        name = config.get(kind)
        if isinstance(name, str) and name in registry:
            declared = {o.name: o.default for o in registry.get(name).options}
            legacy = {k: config[k] for k in declared if k in config}
            grouped[kind] = {**declared, **legacy}
        else:  # not registered here: keep what it stored under this kind
            grouped[kind] = {k: v for k, v in config.items() if SCHEMA_1_PLUGIN_KEYS.get(k) == kind}
    return grouped


def _framework(backend: Any) -> str | None:
    return BACKENDS.get(backend).framework if backend in BACKENDS else None
