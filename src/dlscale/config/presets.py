"""The studies shipped with dlscale (``dlscale run --preset NAME``, ``dlscale ls presets``).

They are the TOML files of ``src/dlscale/presets/``, package data (``pyproject.toml``,
``[tool.setuptools.package-data]``), read through :mod:`importlib.resources`, so they are there
wherever dlscale is installed, whatever the current directory. A name is only ever looked up
among the files listed there, never joined to a path: ``../../etc/passwd`` is an unknown
preset like any other.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from dlscale.config.study import study_settings
from dlscale.contract.errors import UserError
from dlscale.contract.text import did_you_mean, excerpt

SUFFIX = ".toml"


def _folder() -> Traversable:
    return resources.files("dlscale").joinpath("presets")


def _files() -> dict[str, Traversable]:
    """Each preset's name (its file's name less ``.toml``) and its file, sorted by name."""
    folder = _folder()
    if not folder.is_dir():
        return {}
    found = {
        entry.name.removesuffix(SUFFIX): entry
        for entry in folder.iterdir()
        if entry.name.endswith(SUFFIX) and entry.is_file()
    }
    return dict(sorted(found.items()))


def preset_names() -> list[str]:
    return list(_files())


def preset_name(name: str) -> str:
    """The preset ``name`` names (any case; ``.toml`` may follow it); an unknown one (a path,
    markup, a typo) is refused in one line naming the known ones."""
    files = _files()
    wanted = name.removesuffix(SUFFIX).lower()
    for known in files:
        if known.lower() == wanted:
            return known
    if not files:
        raise UserError("this copy of dlscale has no presets (reinstall it)")
    hint = did_you_mean(wanted, files)
    raise UserError(
        f"unknown preset {excerpt(name)};{hint} the presets are: {', '.join(files)} "
        "(dlscale ls presets)"
    )


def load_preset(name: str) -> tuple[dict[str, Any], str, str]:
    """Preset ``name``'s settings as a study file's (:func:`study_settings`), what errors call
    it, and its name."""
    known = preset_name(name)
    origin = f"preset {known}"
    return study_settings(_files()[known].read_bytes(), origin), origin, known


def preset_descriptions() -> list[tuple[str, str]]:
    """Each preset and one line on it: its ``description``, else its first comment line."""
    listed = []
    for name, file in _files().items():
        text = file.read_bytes().decode("utf-8", errors="replace")
        listed.append((name, _description(text)))
    return listed


def _description(text: str) -> str:
    try:
        described = tomllib.loads(text).get("description")
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        described = None
    if isinstance(described, str) and described.strip():
        return described.strip().splitlines()[0]
    comments = (line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#"))
    return next((line for line in comments if line), "-")
