"""Stored results of every schema, read into one typed :class:`~dlscale.contract.result.Result`
of the current schema.

A result's ``config`` is stored as ``to_dict`` writes it: the core keys and ``options``
grouped by plug-in kind (``{"backend": {...}, "dataset": {...}, "launcher": {...}}``); core
keys added since a result was written read as their defaults. Schema 3 renamed the windows of
one run from ``repeats`` to ``windows`` (``repeats`` are independent runs now). Schema 4
stores throughput in samples per second (``throughput_samples_s``, ``throughput_ci95_samples_s``,
``throughput_windows_samples_s``) with the sample's ``sample_unit`` and ``units_per_sample``: a
result stored before (``throughput_img_s``...) counted images, and reads as ``image``, 1
(:data:`RENAMED_METRICS`). Schema 1
(before plug-in options) stored every key flat; its plug-in keys are regrouped here by what the
backend and data set declare today. Readers (tables, figures, scaling, compare) see
:meth:`Result.row`: the config flat, core keys and options side by side, with
``config_options`` keeping the grouping, so they can tell a backend's settings from the rest.
"""

from __future__ import annotations

from typing import Any

from dlscale.contract.backends import BACKENDS
from dlscale.contract.datasets import DATASETS
from dlscale.contract.files import schema_version
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.numbers import finite_number
from dlscale.contract.result import Result
from dlscale.contract.run_checks import STORED_CONFIG, WHOLE_KEYS
from dlscale.contract.run_config import config_defaults, core_keys
from dlscale.contract.shapes import MAX_QUANTITY, RENAMED_METRICS
from dlscale.contract.text import excerpt
from dlscale.store.validate import ShapeError, check, check_result  # readers catch ShapeError

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


def result_view(document: dict[str, Any]) -> Result:
    """A result ``read_json`` accepted, checked and read into the current schema.

    Raises :class:`ShapeError` for a result that readers (tables, figures, scaling, compare,
    ``load_results``) cannot use: no run id, status or config, a config without its backend,
    model, data set or worker count, keys of the wrong type, or a value outside its declared
    shape (:mod:`dlscale.store.validate`: a number that is not finite or out of its range, a
    nested metric of the wrong type). ``metrics`` and ``environment`` left out read as empty.
    """
    check_stored(document)  # under the names it holds: a message names what the file says
    try:
        result = Result.from_document(current(document, schema_version(document)))
        settings = result.settings
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise ShapeError(f"unexpected contents ({type(error).__name__}: {error})") from None
    for key, value in settings.items():
        if not _scalar(value):
            raise ShapeError(f"config key {key} is a {type(value).__name__}, not a value")
        if _number(value) and not finite_number(value):
            raise ShapeError(f"config key {key} is {excerpt(value)}, not a finite number")
    _check_type("config key scaling", settings.get("scaling"), (str,))
    for key in WHOLE_KEYS:  # an integer where one is meant: 3.0 is no batch size either
        if settings.get(key) is not None:
            _check_type(f"config key {key}", settings[key], (int,))
    check({k: settings.get(k) for k in STORED_CONFIG}, STORED_CONFIG, "config key")
    return result


def check_stored(document: dict[str, Any]) -> None:
    """The checks of :func:`result_view` on the stored document (before defaults are filled
    in: a config without ``backend`` must not read as the default backend)."""
    for key in ("run_id", "status"):
        if key not in document:
            raise ShapeError(f"no {key}")
        if not isinstance(document[key], str) or not document[key]:
            raise ShapeError(f"{key} is {excerpt(document[key])}, not a name")
    config = document.get("config")
    if config is None:
        raise ShapeError("no config")
    if not isinstance(config, dict):
        raise ShapeError(f"config is a {type(config).__name__}, not an object")
    for key in ("backend", "model", "dataset", "workers"):
        if key not in config:
            raise ShapeError(f"config has no {key}")
    for key in ("backend", "model", "dataset"):
        if not isinstance(config[key], str) or not config[key]:
            raise ShapeError(f"config key {key} is {excerpt(config[key])}, not a name")
    workers = config["workers"]
    if (
        isinstance(workers, bool)
        or not isinstance(workers, int)
        or not 1 <= workers <= MAX_QUANTITY
    ):
        raise ShapeError(f"config key workers is {excerpt(workers)}, not a count")
    options = config.get("options")
    if options is not None and (
        not isinstance(options, dict) or not all(isinstance(g, dict) for g in options.values())
    ):
        raise ShapeError("config key options is not an object of objects")
    for key in ("metrics", "environment"):
        if document.get(key) is None:
            document[key] = {}
        elif not isinstance(document[key], dict):
            raise ShapeError(f"{key} is a {type(document[key]).__name__}, not an object")
    check_result(document)


def _check_type(name: str, value: Any, kinds: tuple[type, ...]) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise ShapeError(f"{name} is {excerpt(value)}, not a {kinds[0].__name__}")
    if not isinstance(value, kinds):
        raise ShapeError(f"{name} is {excerpt(value)}, not a {kinds[0].__name__}")
    if isinstance(value, int | float) and not finite_number(value):
        raise ShapeError(f"{name} is {excerpt(value)}, not a finite number")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def current(document: dict[str, Any], schema: int) -> dict[str, Any]:
    """A stored result in the current schema: core keys the result predates filled with their
    defaults, the options grouped by plug-in kind, and its framework named."""
    config = dict(document.get("config") or {})
    if schema < 2:
        grouped = _regroup_schema_1(config)
        config = {k: v for k, v in config.items() if k in core_keys()}
    else:
        grouped = config.pop("options", None) or {}
    if schema < 3:
        if "repeats" in config:  # schema 3 renamed a run's windows
            config.setdefault("windows", config.pop("repeats"))
        config.setdefault("allocator", "system")  # before the key: glibc as is
    in_samples(document, schema)
    defaults = {k: v for k, v in config_defaults().items() if k != "options"}
    document["config"] = {**defaults, **config, "options": _with_later_options(config, grouped)}
    if document.get("framework") is None:
        document["framework"] = _framework(config.get("backend"))
    _no_loss_not_diverged(document, config.get("backend"))
    return document


def in_samples(document: dict[str, Any], schema: int) -> None:
    """A result stored before schema 4 with its throughput under the names of samples per
    second (:data:`RENAMED_METRICS`) and its unit said: ``image``, 1 a sample (what every run
    measured then). A name stored under both is left as the newer one holds it."""
    metrics = document.get("metrics")
    if schema >= 4 or not isinstance(metrics, dict):
        return
    for old, new in RENAMED_METRICS.items():
        if old in metrics:
            value = metrics.pop(old)
            metrics.setdefault(new, value)
    metrics.setdefault("sample_unit", "image")
    metrics.setdefault("units_per_sample", 1)


def _no_loss_not_diverged(document: dict[str, Any], backend: Any) -> None:
    """A run of a user's own script records no loss, yet one stored before 2026-12-02 says
    its loss diverged (each window without a loss was counted as not finite): with no loss
    in any window and a backend that runs scripts, its ``loss_diverged`` reads as not
    measured (``None``)."""
    metrics = document.get("metrics") or {}
    if (
        metrics.get("loss_diverged") is True
        and backend in BACKENDS
        and BACKENDS.get(backend).runs_scripts
        and not metrics.get("train_loss_by_window")
        and metrics.get("final_train_loss") is None
    ):
        metrics["loss_diverged"] = None


def _with_later_options(
    config: dict[str, Any], grouped: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The stored options, with each option added since the run was stored (one that declares
    :attr:`~dlscale.contract.options.Option.earlier`) at the value the run had."""
    filled = {kind: dict(group) for kind, group in grouped.items()}
    registries: tuple[tuple[str, Any], ...] = (
        ("backend", BACKENDS),
        ("dataset", DATASETS),
        ("launcher", LAUNCHERS),
    )  # every kind whose options are in the run id (RunConfig.identity)
    for kind, registry in registries:
        name, group = config.get(kind), filled.get(kind)
        if not isinstance(name, str) or name not in registry or not isinstance(group, dict):
            continue
        for option in registry.get(name).options:
            if option.earlier and option.name not in group:
                group[option.name] = option.stored_value(group)
    return filled


def _regroup_schema_1(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Plug-in keys of a flat schema-1 config, by kind. Where the plug-in is registered here,
    its options are filled from their defaults first (schema 1 read a key added after a result
    was written as its default, and still does); a key it does not declare is dropped."""
    grouped: dict[str, dict[str, Any]] = {"backend": {}, "dataset": {}, "launcher": {}}
    registries: tuple[tuple[str, Any], ...] = (("backend", BACKENDS), ("dataset", DATASETS))
    for kind, registry in registries:
        name = config.get(kind)
        if isinstance(name, str) and name in registry:
            declared = {o.name: o.default for o in registry.get(name).options if not o.earlier}
            legacy = {k: config[k] for k in declared if k in config}
            grouped[kind] = {**declared, **legacy}
        else:  # not registered here: keep what it stored under this kind
            grouped[kind] = {k: v for k, v in config.items() if SCHEMA_1_PLUGIN_KEYS.get(k) == kind}
    return grouped


def _framework(backend: Any) -> str | None:
    return BACKENDS.get(backend).framework if backend in BACKENDS else None
