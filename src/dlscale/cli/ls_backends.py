"""``dlscale ls backends [NAME]``: one row per backend that fits 100 columns (the name one
types never cut), how to install what is missing said once under the table; ``NAME``: one
backend in full, its options with their defaults and what they do."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from dlscale.cli.listing import one_in_full, one_row_each
from dlscale.contract.frameworks import framework_module
from dlscale.contract.registry import load_object
from dlscale.contract.text import visible

if TYPE_CHECKING:
    from dlscale.contract.backends import BackendSpec


def backends(name: str | None, width: int) -> list[Table | object]:
    """The list at ``width`` columns (the console's), or backend ``name`` in full."""
    from dlscale.contract.backends import BACKENDS

    if name is not None:
        return [_one(BACKENDS.get(BACKENDS.canonical(name)), width)]
    missing: dict[str, list[str]] = {}
    rows = []
    for backend, spec in BACKENDS.listed():
        found, install = installed(spec)
        if not found:
            missing.setdefault(install or "not installed", []).append(backend)
        workers = str(spec.max_workers or "any")
        here = "yes" if found else "no"
        rows.append((backend, spec.framework, here, workers, ",".join(spec.devices),
                     spec.description))  # fmt: skip
    table = one_row_each(
        "backends (dlscale ls backends NAME: one in full, with its options)",
        ("name", "framework", "here", "workers", "devices", "description"),
        rows,
        width,
    )

    def notes(out: Console) -> None:
        for install, names in missing.items():
            out.print(visible(f"not installed here: {', '.join(names)}: {install}"),
                      markup=False, highlight=False)  # fmt: skip

    return [table, notes]


def _one(spec: BackendSpec, width: int) -> Table:
    found, install = installed(spec)
    here = (install if install.startswith("yes") else "yes") if found else f"no: {install}"
    rows = [
        ("description", spec.description),
        ("framework", spec.framework),
        ("installed here", here),
        ("workers", f"at most {spec.max_workers}" if spec.max_workers else "any"),
        ("devices", ", ".join(spec.devices)),
    ]
    rows += [(f"--set {o.name}", o.describe()) for o in spec.options]
    return one_in_full(f"backend {spec.name}", rows, width)


def installed(spec: BackendSpec) -> tuple[bool, str]:
    """Whether the workers' interpreter has what the backend needs (its own declaration, else
    the framework and the modules it requires, or its own environment), and what it says of
    that (how to install it when not; what it was built with)."""
    if spec.installed is not None:
        said = str(load_object(spec.installed)(spec.python))
        return said.startswith("yes"), said.removeprefix("no: ")
    if spec.python is None:
        found = all(
            importlib.util.find_spec(m) is not None
            for m in (framework_module(spec.framework), *spec.requires)
        )
    else:
        found = Path(spec.python).exists()  # a framework in its own environment (e.g. MXNet)
    return found, spec.install
