"""Study files (TOML), command-line overrides and grid expansion into resolved RunConfigs.

Precedence, lowest first: RunConfig defaults, the study file, command-line flags, ``--set``.
A list value makes a grid: every combination of the listed values is one point.
"""

from __future__ import annotations

import itertools
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.backends import BACKENDS
from dlscale.config.run_config import RunConfig, core_keys, declared_options
from dlscale.errors import UnsupportedPoint, UserError

_HINTS = typing.get_type_hints(RunConfig)
STUDY_ONLY_KEYS = ("name", "description")


@dataclass(frozen=True, kw_only=True)
class Study:
    name: str
    description: str
    points: tuple[RunConfig, ...]
    skipped: tuple[str, ...]
    """Human-readable notes on grid combinations a backend cannot run (e.g. 2 x torch-single)."""


def load_study_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UserError(f"study file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read study file {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"study file {path} is not valid TOML: {error}") from None
    if not any(key not in STUDY_ONLY_KEYS for key in data):
        raise UserError(
            f"study file {path} sets no study key (only {', '.join(STUDY_ONLY_KEYS)} or "
            'nothing); add keys such as model = "resnet44" (dlscale run --keys lists them), '
            "or run without a file for the default study"
        )
    for key, value in data.items():
        if key in STUDY_ONLY_KEYS:
            if not isinstance(value, str):
                raise UserError(f"{path}: {key} must be a string, got {value!r}")
            continue
        check_key(key, origin=str(path))
        values = value if isinstance(value, list) else [value]
        if not values:
            raise UserError(f"{path}: key {key!r} has an empty list")
        data[key] = (
            [coerce(key, item) for item in values]
            if isinstance(value, list)
            else (coerce(key, value))
        )
    return data


def valid_keys() -> list[str]:
    """Core keys and every option a registered plug-in declares."""
    return sorted({*core_keys(), *declared_options()})


def check_key(key: str, origin: str) -> None:
    if key not in valid_keys():
        raise UserError(
            f"{origin}: unknown key {key!r}; valid keys: {', '.join(valid_keys())} "
            "(dlscale run --keys explains each)"
        )


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` (a comma-separated value makes a grid)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise UserError(f"--set {item!r}: write key=value")
        check_key(key, origin="--set")
        parts = [part.strip() for part in text.split(",")]
        values = [coerce(key, part) for part in parts]
        out[key] = values if len(values) > 1 else values[0]
    return out


def coerce(key: str, value: Any) -> Any:
    """Turn a TOML or command-line value into the key's type, or say what was expected."""
    if key not in core_keys():
        return declared_options()[key][0][1].parse(value)
    hint = _HINTS[key]
    optional = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
    base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if isinstance(value, str):
        text = value.strip()
        if optional and text.lower() in ("none", "null", ""):
            return None
        try:
            if base is bool:
                if text.lower() in ("true", "1", "yes", "on"):
                    return True
                if text.lower() in ("false", "0", "no", "off"):
                    return False
                raise ValueError(text)
            if base is int:
                return int(text)
            if base is float:
                return float(text)
        except ValueError:
            raise UserError(f"{key} must be {base.__name__}, got {value!r}") from None
        return text
    if value is None and optional:
        return None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, base) or (base is int and isinstance(value, bool)):
        raise UserError(f"{key} must be {base.__name__}, got {value!r}")
    return value


def expand(settings: dict[str, Any], name: str = "default", description: str = "") -> Study:
    """Every combination of list-valued settings, as validated RunConfigs, 1-worker points first."""
    keys = [k for k in settings if k not in STUDY_ONLY_KEYS]
    axes = [settings[k] if isinstance(settings[k], list) else [settings[k]] for k in keys]
    points: list[RunConfig] = []
    skipped: list[str] = []
    is_grid = any(len(axis) > 1 for axis in axes)
    for combo in itertools.product(*axes):
        values = dict(zip(keys, combo, strict=True))
        try:
            points.append(RunConfig.make(**values))
        except UnsupportedPoint as reason:
            if not is_grid:
                raise
            skipped.append(f"{_describe(values)}: {reason}")
    if not points:
        raise UserError("the study has no point that can run: " + "; ".join(skipped))
    # Stable sort: smaller worker counts (the speedup baselines) and reference backends first.
    points.sort(key=lambda p: (p.workers, not BACKENDS.get(p.backend).reference))
    return Study(name=name, description=description, points=tuple(points), skipped=tuple(skipped))


def _describe(values: dict[str, Any]) -> str:
    backend = values.get("backend", RunConfig.backend)
    workers = values.get("workers", RunConfig.workers)
    return f"{backend} at {workers} worker(s)"
