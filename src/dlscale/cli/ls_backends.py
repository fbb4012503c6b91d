"""``dlscale ls backends [NAME]``: one row per backend that fits 100 columns (the name one
types never cut), how to install what is missing said once under the table; ``NAME``: one
backend in full, its options with their defaults and what they do."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from dlscale.cli.tables import cell, markup
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
    table = Table(title="backends (dlscale ls backends NAME: one in full, with its options)")
    listed = BACKENDS.listed()
    widest = {  # every column but the description keeps its width: only that one is cut
        "name": max(len(name) for name, _ in listed),
        "framework": max(len("framework"), *(len(spec.framework) for _, spec in listed)),
        "here": len("here"),
        "workers": len("workers"),
        "devices": len("cpu,cuda"),
    }
    for column, least in widest.items():
        table.add_column(column, no_wrap=True, min_width=least)
    rest = width - sum(widest.values()) - 3 * (len(widest) + 1) - 1  # borders and padding
    table.add_column("description", no_wrap=True, overflow="ellipsis", max_width=max(rest, 10))
    missing: dict[str, list[str]] = {}
    for backend, spec in listed:
        found, install = installed(spec)
        if not found:
            missing.setdefault(install or "not installed", []).append(backend)
        workers = str(spec.max_workers or "any")
        here = "yes" if found else "no"
        cells = (backend, spec.framework, here, workers, ",".join(spec.devices), spec.description)
        table.add_row(*map(cell, cells))

    def notes(out: Console) -> None:
        for install, names in missing.items():
            out.print(visible(f"not installed here: {', '.join(names)}: {install}"),
                      markup=False, highlight=False)  # fmt: skip

    return [table, notes]


def _one(spec: BackendSpec, width: int) -> Table:
    found, install = installed(spec)
    here = (install if install.startswith("yes") else "yes") if found else f"no: {install}"
    table = Table(title=markup(f"backend {spec.name}"), show_header=False)
    rows = [
        ("description", spec.description),
        ("framework", spec.framework),
        ("installed here", here),
        ("workers", f"at most {spec.max_workers}" if spec.max_workers else "any"),
        ("devices", ", ".join(spec.devices)),
    ]
    rows += [(f"--set {o.name}", o.describe()) for o in spec.options]
    field_width = max(len(field) for field, _ in rows)
    table.add_column("", no_wrap=True, style="bold")
    table.add_column("", max_width=max(width - field_width - 7, 20))  # wrapped at words
    for field, value in rows:
        table.add_row(cell(field), cell(value))
    return table


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
