"""Study files (TOML), command-line overrides and grid expansion into resolved RunConfigs.

Precedence, lowest first: RunConfig defaults, the study file, command-line flags, ``--set``.
A list value makes a grid: every combination of the listed values is one point.
"""

from __future__ import annotations

import dataclasses
import itertools
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.config.claims import Claim, parse_claims
from dlscale.config.repeats import Repeats, coerce_study
from dlscale.config.resources import machine_points, node_facts, thread_budget
from dlscale.contract.backends import BACKENDS
from dlscale.contract.declared_options import declared_options, on_one_machine
from dlscale.contract.errors import TooManyWorkers, UnsupportedPoint, UserError
from dlscale.contract.files import read_bounded, unreadable
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.options import parse_value
from dlscale.contract.run_config import OPERATIONAL, RunConfig, core_keys, keys_of_kind
from dlscale.contract.text import did_you_mean, excerpt

_HINTS = typing.get_type_hints(RunConfig)
_REPEAT_FIELDS = {f.name: f for f in dataclasses.fields(Repeats)}
SCALE, SCALES, CLAIMS = "scale", "scales", "claims"
"""``scale = "local"`` picks a study file's ``[scales.local]`` table of overrides (paper
presets: the full study, and a reduced one that runs on a laptop)."""
STUDY_ONLY_KEYS = ("name", "description", SCALE, SCALES, CLAIMS, *_REPEAT_FIELDS)
"""Keys of a study file that are about the study, not one run's configuration."""


@dataclass(frozen=True, kw_only=True)
class Study:
    name: str
    description: str
    points: tuple[RunConfig, ...]
    skipped: tuple[str, ...]
    """Human-readable notes on grid combinations a backend cannot run (e.g. 2 x torch-single)."""
    repeats: Repeats = dataclasses.field(default_factory=Repeats)
    claims: tuple[Claim, ...] = ()
    """The published claims the study checks (:mod:`dlscale.config.claims`)."""


STUDY_FILE_LIMIT = 4 * 2**20
"""A study file's most bytes (the papers' studies are under 4 KB)."""


def load_study_file(path: Path) -> dict[str, Any]:
    try:
        raw = read_bounded(path, STUDY_FILE_LIMIT)
    except FileNotFoundError:
        raise UserError(
            f"study file {path} does not exist (a study shipped with dlscale: --preset NAME; "
            "dlscale ls presets lists them)"
        ) from None
    except OSError as error:
        raise UserError(
            f"cannot read study file {path} ({unreadable(error)}); give a TOML file"
        ) from None
    return study_settings(raw, str(path))


def study_settings(raw: bytes, path: str) -> dict[str, Any]:
    """A study file's settings from its bytes (``path`` names it in errors: a file, or a
    preset), each key checked and in its type."""
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise UserError(f"study file {path} is not UTF-8 text (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"study file {path} is not valid TOML: {error}") from None
    except ValueError:  # past TOMLDecodeError: an integer of more than 4300 digits
        raise UserError(f"study file {path} holds a number of more than 4300 digits") from None
    except RecursionError:
        raise UserError(f"study file {path} nests tables or arrays too deeply") from None
    scales = data.pop(SCALES, {})
    claims = data.pop(CLAIMS, [])
    if not isinstance(scales, dict) or not all(isinstance(v, dict) for v in scales.values()):
        raise UserError(
            f"{path}: {SCALES} must be tables of keys, e.g. [{SCALES}.local] with steps = 4"
        )
    if not any(key not in STUDY_ONLY_KEYS for key in data):
        raise UserError(
            f"study file {path} sets no study key (only {', '.join(STUDY_ONLY_KEYS)} or "
            'nothing); add keys such as model = "resnet44" (dlscale run --keys lists them), '
            "or run without a file for the default study"
        )
    for key, value in data.items():
        if key in ("name", "description"):
            if not isinstance(value, str):
                raise UserError(f"{path}: {key} must be a string, got {excerpt(value)}")
            continue
        if key in _REPEAT_FIELDS:
            data[key] = coerce_study(key, value, origin=str(path))
            continue
        if key == SCALE:
            data[key] = _scale_name(value, str(path))
            continue
        data[key] = _checked(key, value, str(path))
    for name, overrides in scales.items():
        origin = f"{path} [{SCALES}.{name}]"
        data.setdefault(SCALES, {})[name] = {
            key: coerce_study(key, value, origin)
            if key in _REPEAT_FIELDS
            else _checked(key, value, origin)
            for key, value in overrides.items()
        }
    if claims:
        data[CLAIMS] = parse_claims(claims, str(path), coerce=_selector_value)
    return data


def _selector_value(key: str, value: Any) -> Any:
    """A claim's selector value in its key's type (an unknown key refused)."""
    if key not in valid_keys():
        raise UserError(f"unknown key {excerpt(key)} (dlscale run --keys lists the study keys)")
    value = coerce(key, value)
    _check_accepted(key, [value])
    return value


def _checked(key: str, value: Any, origin: str) -> Any:
    """A study key's value (one, or a list: a grid axis) in the key's type."""
    check_key(key, origin=origin)
    values = value if isinstance(value, list) else [value]
    if not values:
        raise UserError(f"{origin}: key {excerpt(key)} has an empty list")
    if key in keys_of_kind(OPERATIONAL) and len(values) > 1:  # not in the run id: one point
        raise UserError(
            f"{origin}: {key} takes one value, not a list: it changes how a run is carried out "
            "or read, not what is measured, so every value would be the same point; run again "
            "with the other"
        )
    return [coerce(key, item) for item in values] if isinstance(value, list) else coerce(key, value)


def apply_scale(settings: dict[str, Any], chosen: str | None, origin: str) -> dict[str, Any]:
    """The study's settings at the scale ``chosen`` (``--set scale=local``; else the file's
    own ``scale`` key; else none): its ``[scales.NAME]`` table overrides the file's keys.
    ``full`` with no table of that name is the file's keys as they are."""
    settings = dict(settings)
    scales: dict[str, dict[str, Any]] = settings.pop(SCALES, {})
    name = chosen or settings.pop(SCALE, None)
    settings.pop(SCALE, None)
    if name is None or (name == "full" and "full" not in scales):
        return settings
    if name not in scales:
        have = ", ".join(["full", *sorted(scales)])
        raise UserError(f"{origin}: the study has no scale {excerpt(name)}; it has: {have}")
    return {**settings, **scales[name]}


def _scale_name(value: Any, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{origin}: {SCALE} must be the name of one of the study's [{SCALES}]")
    return value.strip()


def valid_keys() -> list[str]:
    """Core keys, every option a registered plug-in declares, and the study's own keys."""
    return sorted({*core_keys(), *declared_options(), *_REPEAT_FIELDS, SCALE})


def check_key(key: str, origin: str) -> None:
    if key not in valid_keys():
        hint = did_you_mean(str(key), valid_keys())
        raise UserError(
            f"{origin}: unknown key {excerpt(key)};{hint} dlscale run --keys lists and explains "
            "every key"
        )


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` (a comma-separated value makes a grid)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise UserError(f"--set {excerpt(item)}: write key=value")
        if key == SCALE:
            out[key] = _scale_name(text, "--set")
            continue
        check_key(key, origin="--set")
        if key in _REPEAT_FIELDS:
            out[key] = coerce_study(key, text, origin="--set")
            continue
        if key not in core_keys() and any(o.whole for _, o in declared_options()[key]):
            out[key] = coerce(key, text)  # a host list: its commas are its own
            continue
        parts = [part.strip() for part in text.split(",")]
        out[key] = _checked(key, parts if len(parts) > 1 else parts[0], "--set")
    return out


def coerce(key: str, value: Any) -> Any:
    """Turn a TOML or command-line value into the key's type, or say what was expected."""
    if key not in core_keys():
        return declared_options()[key][0][1].parse(value)
    hint = _HINTS[key]
    optional = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
    base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if isinstance(value, str) and base is str:
        text = value.strip()
        return None if optional and text.lower() in ("none", "null", "") else text
    return parse_value(value, base, key, optional=optional)


def expand(
    settings: dict[str, Any],
    name: str = "default",
    description: str = "",
    *,
    cores: int | None = None,
) -> Study:
    """Every combination of list-valued settings, as validated RunConfigs, 1-worker points first.

    Unless the study sets ``threads_per_worker``, every point gets the same threads per process:
    the least over the points of a node's CPUs over the processes on the point's fullest node
    (:func:`thread_budget`), at least 1, so that the ideal line N means N times the same
    resources. The nodes are those the point's launcher runs it on (:func:`node_facts`): this
    machine (``cores``: its usable cores by default) for a launcher that runs every process
    here, the compute nodes for Slurm, never the login node's own cores.
    """
    repeats = Repeats(**{k: settings[k] for k in _REPEAT_FIELDS if k in settings})
    claims = tuple(settings.get(CLAIMS, ()))
    settings = {k: v for k, v in settings.items() if k not in (*_REPEAT_FIELDS, CLAIMS)}
    if "threads_per_worker" not in settings:
        probe = _expand(settings)
        facts = [node_facts(p, cores) for p in probe.points]
        budget = thread_budget(probe.points, facts)
        settings["threads_per_worker"] = budget
        if repeats.machine_reference and budget < max(f.cpus for f in facts):
            extra = machine_points(probe.points, facts)
            study = _expand(settings)
            points = (*study.points, *(p for p in extra if p not in study.points))
            return Study(
                name=name,
                description=description,
                points=_sorted(points),
                skipped=study.skipped,
                repeats=repeats,
                claims=claims,
            )
    study = _expand(settings)
    return Study(
        name=name,
        description=description,
        points=study.points,
        skipped=study.skipped,
        repeats=repeats,
        claims=claims,
    )


def _sorted(points: Any) -> tuple[RunConfig, ...]:
    # Stable sort: smaller worker counts (the speedup baselines) and reference backends first.
    return tuple(sorted(points, key=lambda p: (p.workers, not BACKENDS.get(p.backend).reference)))


def _expand(settings: dict[str, Any]) -> Study:
    keys = [k for k in settings if k not in STUDY_ONLY_KEYS]
    axes = [settings[k] if isinstance(settings[k], list) else [settings[k]] for k in keys]
    for key, axis in zip(keys, axes, strict=True):
        _check_accepted(key, axis)
    points: list[RunConfig] = []
    skipped: list[tuple[str, int | None]] = []  # (note, workers when a worker limit)
    reasons: list[str] = []  # each once, for a study that has no point left
    is_grid = any(len(axis) > 1 for axis in axes)
    spanned = _declared_in_grid(dict(zip(keys, axes, strict=True))) if is_grid else set()
    for combo in itertools.product(*axes):
        values = dict(zip(keys, combo, strict=True))
        # an option axis spans the points whose plug-ins declare it, where some do
        values = _declared_only(values, spanned)
        try:
            point = on_one_machine(RunConfig.make(**values))  # 1 worker: 1 node
        except UnsupportedPoint as reason:
            if not is_grid:
                raise
            note = f"{_describe(values)}: {reason}"
            limit = values.get("workers") if isinstance(reason, TooManyWorkers) else None
            if (note, limit) not in skipped:
                skipped.append((note, limit))
            if str(reason) not in reasons:
                reasons.append(str(reason))
            continue
        unfit = LAUNCHERS.get(point.launcher).create().unfit(point)
        if unfit is not None:  # its nodes cannot hold it (more GPUs a process than a node has)
            if not is_grid:
                raise UserError(unfit)
            note = f"{_describe(values)}: {unfit}"
            if (note, None) not in skipped:
                skipped.append((note, None))
            if unfit not in reasons:
                reasons.append(unfit)
            continue
        if point not in points:  # the same point from an axis that does not apply to it
            points.append(point)
    if not points:
        raise UserError("the study has no point that can run: " + "; ".join(reasons))
    # a 1-process backend beside DDP at 2 workers is the grid's shape, not news: said only
    # where no point of the study runs that many workers
    run = {point.workers for point in points}
    said = tuple(note for note, limit in skipped if limit is None or limit not in run)
    return Study(name="", description="", points=_sorted(points), skipped=said)


def _check_accepted(key: str, values: list[Any]) -> None:
    """A plug-in option's value that no declarer accepts is a mistake, not a point to skip
    (a grid skips a value only where another plug-in of the study would take it)."""
    declarations = declared_options().get(key) if key not in core_keys() else None
    if not declarations:
        return
    for value in values:
        accepted = []
        for owner, option in declarations:
            parsed = option.parse(value)
            if option.choices is None or parsed in option.choices:
                break
            accepted.append(f"{owner} accepts {key} = {', '.join(map(str, option.choices))}")
        else:
            raise UserError(f"no plug-in accepts {key} = {excerpt(value)}: " + "; ".join(accepted))


def _plugin_options(backend: str, dataset: str, launcher: str) -> set[str]:
    """The options a point with these plug-ins accepts."""
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.launchers import LAUNCHERS

    plugins = (BACKENDS.get(backend), DATASETS.get(dataset), LAUNCHERS.get(launcher))
    return {option.name for plugin in plugins for option in plugin.options}


def _declared_in_grid(axes: dict[str, list[Any]]) -> set[str]:
    """The options some point of the grid's plug-ins declares."""
    plugins = [
        axes.get(kind, [getattr(RunConfig, kind)]) for kind in ("backend", "dataset", "launcher")
    ]
    return {name for combo in itertools.product(*plugins) for name in _plugin_options(*combo)}


def without_unused_options(settings: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """``settings`` less those of ``keys`` (options a study file set, not the command line)
    that no plug-in of the grid declares: a preset narrowed to backends without a parameter
    server (``--backend tf-single``) leaves its ``ps_mode`` out instead of refusing it. An
    option the command line sets is still refused where nothing declares it."""
    axes = {
        kind: value if isinstance(value, list) else [value]
        for kind, value in settings.items()
        if kind in ("backend", "dataset", "launcher")
    }
    declared = _declared_in_grid(axes)
    options = declared_options()
    unused = {k for k in keys if k in options and k not in core_keys() and k not in declared}
    return {k: v for k, v in settings.items() if k not in unused}


def _declared_only(values: dict[str, Any], spanned: set[str]) -> dict[str, Any]:
    """``values`` less the grid's options (``spanned``: declared by some point's plug-ins)
    that this point's plug-ins do not declare: in a grid over backends, ``ps_mode = ["sync",
    "async"]`` makes two torch-ps points and leaves torch-ddp's one point alone. A key that no
    point of the grid declares stays, and is refused (a mistake, not an axis)."""
    if not spanned:
        return values
    declared = _plugin_options(
        values.get("backend", RunConfig.backend),
        values.get("dataset", RunConfig.dataset),
        values.get("launcher", RunConfig.launcher),
    )
    return {k: v for k, v in values.items() if k not in spanned or k in declared}


def _describe(values: dict[str, Any]) -> str:
    backend = values.get("backend", RunConfig.backend)
    workers = values.get("workers", RunConfig.workers)
    return f"{backend} at {workers} worker(s)"
